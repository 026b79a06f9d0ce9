package awsspot

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"strconv"
	"strings"
	"time"

	"github.com/spotsafe/spotsafe/internal/metaclient"
	"github.com/spotsafe/spotsafe/notice"
)

// IMDSv2 wire names.
const (
	tokenPath      = "/latest/api/token"
	headerTTL      = "X-aws-ec2-metadata-token-ttl-seconds"
	headerToken    = "X-aws-ec2-metadata-token"
	metaPrefix     = "/latest/meta-data/"
	pathInstanceID = metaPrefix + "instance-id"
)

// v2Retry is how long IMDSv1 is used after a token PUT timed out before the
// PUT is tried again: a hop limit does not fix itself between two polls, and
// each attempt costs TokenTimeout.
const v2Retry = time.Minute

// HopLimitFix is the remedy named in the error for a token PUT that times
// out while IMDSv1 is disabled.
const HopLimitFix = "run the watcher with host networking (Kubernetes hostNetwork: true), " +
	"or raise the instance's IMDS hop limit to 2: aws ec2 modify-instance-metadata-options " +
	"--instance-id <id> --http-put-response-hop-limit 2 --http-endpoint enabled"

// tokenState is the IMDSv2 session, after PROTOCOLS.md 1.4: a token with a
// local expiry, a sticky IMDSv1 mode when the token endpoint is missing, and a
// temporary one after a token PUT timed out.
type tokenState struct {
	token     string
	refreshAt time.Time // local: issue time + TTL − margin
	// v1Only: the token PUT answered 403/404/405 (tokens unsupported).
	v1Only bool
	// v1Refused: a token-less GET got 401, so IMDSv1 is disabled
	// (HttpTokens=required): never fall back again.
	v1Refused bool
	// v1Until: the token PUT timed out; use IMDSv1 until then.
	v1Until time.Time
	warned  bool
}

// get sends a GET for path with the current session, renewing the token and
// retrying exactly once on 401. The response may have any status.
func (s *Source) get(ctx context.Context, path string) (*metaclient.Response, *http.Request, error) {
	tok, err := s.token(ctx)
	if err != nil {
		return nil, nil, tokenError{err}
	}
	resp, req, err := s.send(ctx, path, tok)
	if err != nil || resp.Code != http.StatusUnauthorized {
		return resp, req, err
	}

	// 401: the token is stale or unknown, or IMDSv1 is disabled.
	s.tokMu.Lock()
	st := &s.tok
	if tok == "" {
		st.v1Refused = true
		st.v1Only = false
		s.log.Info("IMDSv1 refused (HttpTokens=required); using IMDSv2 only")
	}
	timedOut := !st.v1Until.IsZero()
	tok, err = s.fetchTokenLocked(ctx)
	s.tokMu.Unlock()
	if err != nil {
		return nil, nil, tokenError{err}
	}
	resp, req, err = s.send(ctx, path, tok)
	if err != nil || resp.Code != http.StatusUnauthorized {
		return resp, req, err
	}
	what := "a fresh session token"
	if timedOut {
		what += " (after an earlier token timeout)"
	}
	return nil, nil, fmt.Errorf("GET %s: IMDS rejected %s with HTTP 401: %w", path, what, notice.ErrUnavailable)
}

// tokenError marks a failure to get a session token: every other path of
// the poll would fail the same way.
type tokenError struct{ error }

func (e tokenError) Unwrap() error { return e.error }

// send makes one GET with tok ("" for IMDSv1).
func (s *Source) send(ctx context.Context, path, tok string) (*metaclient.Response, *http.Request, error) {
	var hdr map[string]string
	if tok != "" {
		hdr = map[string]string{headerToken: tok}
	}
	return s.do(ctx, http.MethodGet, path, hdr, s.opts.Timeout)
}

// token returns the session token to send, or "" to use IMDSv1 for this
// call.
func (s *Source) token(ctx context.Context) (string, error) {
	s.tokMu.Lock()
	defer s.tokMu.Unlock()
	st := &s.tok
	now := time.Now()
	switch {
	case st.token != "" && now.Before(st.refreshAt):
		return st.token, nil
	case s.v1Allowed() && st.v1Only:
		return "", nil
	case s.v1Allowed() && now.Before(st.v1Until):
		return "", nil
	}
	return s.fetchTokenLocked(ctx)
}

func (s *Source) v1Allowed() bool { return !s.opts.DisableV1 && !s.tok.v1Refused }

// fetchTokenLocked PUTs for a new token. It returns "" with a nil error
// when this call should use IMDSv1. Must be called with s.tokMu held.
func (s *Source) fetchTokenLocked(ctx context.Context) (string, error) {
	st := &s.tok
	st.token = ""
	ttl := s.opts.TokenTTL.Truncate(time.Second)
	start := time.Now()
	hdr := map[string]string{headerTTL: strconv.Itoa(int(ttl / time.Second))}
	resp, req, err := s.do(ctx, http.MethodPut, tokenPath, hdr, s.opts.TokenTimeout)
	if err != nil {
		if ctx.Err() != nil {
			return "", err
		}
		timeout := metaclient.IsTimeout(err)
		if timeout {
			st.v1Until = time.Now().Add(v2Retry)
			if !st.warned {
				st.warned = true
				s.log.Warn("IMDSv2 token request timed out: in a container this is the IMDS hop limit (HttpPutResponseHopLimit 1) dropping the reply; "+
					"falling back to IMDSv1 if allowed. Fix: "+HopLimitFix, "timeout", s.opts.TokenTimeout, "err", err)
			}
		}
		if s.v1Allowed() {
			// PROTOCOLS 1.4: IMDSv1 for this call, IMDSv2 again later.
			return "", nil
		}
		if timeout {
			return "", fmt.Errorf("IMDSv2 token request timed out after %v and IMDSv1 is disabled (HttpTokens=required): "+
				"no way to read instance metadata. This is the IMDS hop limit dropping the token reply; fix: %s: %w: %w",
				s.opts.TokenTimeout, HopLimitFix, notice.ErrUnavailable, err)
		}
		return "", fmt.Errorf("IMDSv2 token: %w", err)
	}

	switch resp.Code {
	case http.StatusOK:
		tok := strings.TrimSpace(string(resp.Body))
		if !validToken(tok) {
			return "", fmt.Errorf("IMDSv2 token response (%d bytes) is not a token: %w", len(resp.Body), notice.ErrMalformed)
		}
		granted := ttl
		if v, err := strconv.Atoi(strings.TrimSpace(resp.Header.Get(headerTTL))); err == nil && v > 0 && time.Duration(v)*time.Second < granted {
			granted = time.Duration(v) * time.Second
		}
		st.token = tok
		// Counted from before the PUT, so the local expiry is never late.
		st.refreshAt = start.Add(granted - refreshMargin(granted))
		st.v1Until = time.Time{}
		return tok, nil
	case http.StatusBadRequest:
		return "", fmt.Errorf("IMDSv2 token request rejected as invalid (TTL header %s): %w: %w",
			hdr[headerTTL], notice.ErrUnavailable, statusErr(resp, req))
	case http.StatusForbidden, http.StatusNotFound, http.StatusMethodNotAllowed:
		if s.v1Allowed() {
			st.v1Only = true
			s.log.Warn("IMDSv2 token endpoint unavailable; using IMDSv1 from now on", "status", resp.Code)
			return "", nil
		}
		return "", fmt.Errorf("IMDSv2 token endpoint answered HTTP %d and IMDSv1 is disabled: %w: %w",
			resp.Code, notice.ErrUnavailable, statusErr(resp, req))
	}
	return "", fmt.Errorf("IMDSv2 token: %w", statusErr(resp, req))
}

// refreshMargin is how long before its expiry a token is replaced: 15 s (as
// NTH does), or a quarter of a short TTL.
func refreshMargin(ttl time.Duration) time.Duration {
	return min(15*time.Second, ttl/4)
}

// validToken accepts what can travel in a header: printable ASCII.
func validToken(t string) bool {
	if t == "" || len(t) > 4096 {
		return false
	}
	for i := range len(t) {
		if t[i] <= ' ' || t[i] > '~' {
			return false
		}
	}
	return true
}

// do sends one request bounded by timeout. A request that runs out of its
// own time (not the caller's) is a transient error.
func (s *Source) do(ctx context.Context, method, path string, hdr map[string]string, timeout time.Duration) (*metaclient.Response, *http.Request, error) {
	rctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	req, err := metaclient.NewRequest(rctx, method, s.endpoint+path, hdr)
	if err != nil {
		return nil, nil, fmt.Errorf("%w", err)
	}
	resp, err := metaclient.Do(s.client, req)
	if err != nil && ctx.Err() == nil && errors.Is(rctx.Err(), context.DeadlineExceeded) {
		err = &metaclient.TransientError{
			Op:  method + " " + s.endpoint + path,
			Err: fmt.Errorf("no answer within %v: %w", timeout, context.DeadlineExceeded),
		}
	}
	return resp, req, err
}

// statusErr maps a non-2xx answer to an error: 403 (IMDS disabled, or a
// request IMDS refuses) wraps notice.ErrUnavailable; 429 and 5xx wrap
// notice.ErrTransient.
func statusErr(resp *metaclient.Response, req *http.Request) error {
	err := resp.Err(req)
	if err != nil && resp.Code == http.StatusForbidden {
		return fmt.Errorf("%w: %w", err, notice.ErrUnavailable)
	}
	return err
}
