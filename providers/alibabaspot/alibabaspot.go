// Package alibabaspot is the Alibaba Cloud ECS interruption source: it reads
// the spot reclamation time from the instance metadata server
// (GET /latest/meta-data/instance/spot/termination-time, 404 while none is
// scheduled) and speaks the "security hardening" token mode, Alibaba's
// analogue of AWS IMDSv2.
//
// A reclaimed spot instance is released about five minutes after the notice
// appears; the notice carries that time, so the Deadline comes from the wire.
package alibabaspot

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/spotsafe/spotsafe/internal/metaclient"
	"github.com/spotsafe/spotsafe/internal/termtime"
	"github.com/spotsafe/spotsafe/notice"
)

// Protocol constants (PROTOCOLS.md section 4).
const (
	// DefaultEndpoint is the ECS metadata server. It is an IP literal so that
	// no DNS is needed.
	DefaultEndpoint = "http://100.100.100.200"
	// TerminationPath answers 404 while no reclamation is scheduled and the
	// UTC release time (2006-01-02T15:04:05Z) once one is.
	TerminationPath = "/latest/meta-data/instance/spot/termination-time"
	// RegionPath is an Alibaba-only key ("cn-hangzhou"); Probe reads it.
	RegionPath = "/latest/meta-data/region-id"
	// TokenPath issues hardened-mode tokens (PUT).
	TokenPath = "/latest/api/token"
	// TokenHeader carries a token on every GET.
	TokenHeader = "X-aliyun-ecs-metadata-token"
	// TokenTTLHeader asks for (and may report) a token lifetime in seconds.
	TokenTTLHeader = "X-aliyun-ecs-metadata-token-ttl-seconds"
	// MaxTokenTTL is the longest token lifetime the server grants.
	MaxTokenTTL = 21600 * time.Second
	// NominalNotice is the documented lead time between the notice and the
	// release of the instance. The notice carries its own time; this is
	// only for planning.
	NominalNotice = 5 * time.Minute
)

// TimeLayout is the documented format of the termination time (UTC).
const TimeLayout = "2006-01-02T15:04:05Z"

// tokenRetryAfter is how long the source stays tokenless after a token PUT
// timed out: the symptom of a network path that drops the reply, which would
// otherwise cost a full timeout on every poll.
const tokenRetryAfter = time.Minute

// Options configures a [Source]. The zero value talks to the real metadata
// server.
type Options struct {
	// Endpoint is the metadata server's base URL (scheme://host[:port]).
	// Default [DefaultEndpoint].
	Endpoint string
	// HTTPClient sends the requests. Default: a client from the shared
	// metadata transport (no proxy, 250 ms dial, 2 s per request).
	HTTPClient *http.Client
	// Logger receives token-mode changes. Nil discards.
	Logger *slog.Logger
	// PollInterval is what the source asks a Watcher for; 0 leaves the
	// Watcher's default (1 s).
	PollInterval time.Duration
	// TokenTTL is the lifetime asked for hardened-mode tokens, rounded down
	// to whole seconds and clamped to [1 s, 6 h]. Default 6 h.
	TokenTTL time.Duration
	// DisableTokens never asks for a token (plain, non-hardened mode). A
	// server that requires tokens then answers 403 and Poll fails with
	// notice.ErrUnavailable.
	DisableTokens bool
}

// Source polls the Alibaba termination time. It implements notice.Source
// and notice.Intervaler. It is safe for concurrent use, though a Watcher
// uses it from one goroutine.
type Source struct {
	endpoint string
	client   *http.Client
	log      *slog.Logger
	interval time.Duration
	ttl      time.Duration
	noTokens bool

	mu         sync.Mutex
	mode       tokenMode
	token      string
	expires    time.Time
	retryPutAt time.Time

	term termtime.Poller
}

var _ interface {
	notice.Source
	notice.Intervaler
} = (*Source)(nil)

// tokenMode follows the AWS SDK's IMDSv2 fallback: try a token first, fall
// back to plain requests for good when the server has no token API, and try
// a token again when a plain request is refused.
type tokenMode int

const (
	modeProbe     tokenMode = iota // ask for a token before the next request
	modeToken                      // a token is cached (until expires)
	modeTokenless                  // the token API is absent (PUT 403/404/405)
)

// New returns a Source. opts may be nil.
func New(opts *Options) *Source {
	var o Options
	if opts != nil {
		o = *opts
	}
	s := &Source{
		endpoint: strings.TrimRight(o.Endpoint, "/"),
		client:   o.HTTPClient,
		log:      o.Logger,
		interval: o.PollInterval,
		ttl:      o.TokenTTL.Truncate(time.Second),
		noTokens: o.DisableTokens,
		term:     termtime.Poller{Package: "alibabaspot", Provider: "alibaba", Path: TerminationPath, Parse: ParseTime},
	}
	if s.endpoint == "" {
		s.endpoint = DefaultEndpoint
	}
	if s.client == nil {
		s.client = metaclient.NewHTTPClient(metaclient.DefaultTimeout)
	}
	if s.log == nil {
		s.log = slog.New(slog.DiscardHandler)
	}
	switch {
	case s.ttl <= 0:
		s.ttl = MaxTokenTTL
	case s.ttl < time.Second:
		s.ttl = time.Second
	case s.ttl > MaxTokenTTL:
		s.ttl = MaxTokenTTL
	}
	if s.noTokens {
		s.mode = modeTokenless
	}
	return s
}

// Name returns "alibaba".
func (s *Source) Name() string { return "alibaba" }

// PollInterval returns Options.PollInterval (0: the Watcher's default).
func (s *Source) PollInterval() time.Duration { return s.interval }

// Poll reads the termination time once. It returns nil while no reclamation
// is scheduled, and one KindTerminate notice whose Deadline is the announced
// time (identity: that time) once one is. A body that is not a time is an
// error wrapping notice.ErrMalformed and makes no notice.
func (s *Source) Poll(ctx context.Context) ([]notice.Notice, error) {
	resp, req, err := s.get(ctx, TerminationPath)
	if err != nil {
		return nil, fmt.Errorf("alibabaspot: %w", err)
	}
	if resp.Code == http.StatusUnauthorized || resp.Code == http.StatusForbidden {
		return nil, fmt.Errorf("alibabaspot: metadata server refuses the request even after a token attempt (hardened mode without a working token API?): %w: %w", notice.ErrUnavailable, resp.Err(req))
	}
	return s.term.Handle(resp, req)
}

// Probe reports whether an Alibaba Cloud metadata server answers at the
// endpoint: it reads region-id, a key only Alibaba serves, and wants a
// region name back. It asks for a token first like every request (hardened
// mode refuses plain ones); a server without the token API costs one extra
// request. ctx should carry a short deadline.
func (s *Source) Probe(ctx context.Context) error {
	resp, req, err := s.get(ctx, RegionPath)
	if err != nil {
		return fmt.Errorf("alibabaspot: probe: %w", err)
	}
	if err := resp.Err(req); err != nil {
		return fmt.Errorf("alibabaspot: probe: %w", err)
	}
	region := strings.TrimSpace(string(resp.Body))
	if !isRegionID(region) {
		return fmt.Errorf("alibabaspot: probe: region-id %.40q is not an Alibaba region: %w", region, notice.ErrMalformed)
	}
	return nil
}

// get sends GET path with a token when one is to be had. A 401 or 403 (a
// stale token, or hardened mode refusing a plain request) drops the token,
// asks for a new one and retries once.
func (s *Source) get(ctx context.Context, path string) (*metaclient.Response, *http.Request, error) {
	tok, err := s.currentToken(ctx, false)
	if err != nil {
		return nil, nil, err
	}
	resp, req, err := s.send(ctx, path, tok)
	if err != nil {
		return nil, nil, err
	}
	if resp.Code != http.StatusUnauthorized && resp.Code != http.StatusForbidden {
		return resp, req, nil
	}
	if s.noTokens {
		return resp, req, nil
	}
	s.log.Debug("metadata request refused; acquiring a new token", "provider", "alibaba", "status", resp.Code, "had_token", tok != "")
	s.invalidate()
	tok2, err := s.currentToken(ctx, true)
	if err != nil {
		return nil, nil, err
	}
	if tok2 == "" && tok == "" {
		return resp, req, nil // no token to be had: the same request would be refused again
	}
	return s.send(ctx, path, tok2)
}

func (s *Source) send(ctx context.Context, path, token string) (*metaclient.Response, *http.Request, error) {
	var hdr map[string]string
	if token != "" {
		hdr = map[string]string{TokenHeader: token}
	}
	return metaclient.Get(ctx, s.client, s.endpoint+path, hdr)
}

// currentToken returns the token to send, "" for a plain request. force
// asks the server even in tokenless mode or during the retry pause.
func (s *Source) currentToken(ctx context.Context, force bool) (string, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.noTokens {
		return "", nil
	}
	now := time.Now()
	if !force {
		switch s.mode {
		case modeTokenless:
			return "", nil
		case modeToken:
			if now.Before(s.expires.Add(-s.refreshEarly())) {
				return s.token, nil
			}
		}
		if now.Before(s.retryPutAt) {
			return "", nil
		}
	}
	return s.fetchTokenLocked(ctx, now)
}

// refreshEarly is how long before expiry a token is replaced, so that a
// request never carries one that expires in flight.
func (s *Source) refreshEarly() time.Duration { return min(15*time.Second, s.ttl/10) }

// invalidate drops the token after a refusal; the next request asks again.
func (s *Source) invalidate() {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.mode, s.token, s.expires, s.retryPutAt = modeProbe, "", time.Time{}, time.Time{}
}

// fetchTokenLocked PUTs for a token. It returns "" with no error when the
// request should go out without one.
func (s *Source) fetchTokenLocked(ctx context.Context, now time.Time) (string, error) {
	req, err := metaclient.NewRequest(ctx, http.MethodPut, s.endpoint+TokenPath, map[string]string{
		TokenTTLHeader: strconv.Itoa(int(s.ttl / time.Second)),
	})
	if err != nil {
		return "", err
	}
	resp, err := metaclient.Do(s.client, req)
	if err != nil {
		switch {
		case ctx.Err() != nil, isDialError(err):
			// Nothing listens: the GET would fail the same way.
			return "", err
		case metaclient.IsTimeout(err):
			// The reply was dropped on the way back (a hop limit or a
			// firewall): go without a token for a while.
			s.retryPutAt = now.Add(tokenRetryAfter)
			s.log.Warn("metadata token request timed out; continuing without a token (in a container, use host networking)", "provider", "alibaba", "retry_in", tokenRetryAfter, "err", err)
			return "", nil
		default:
			return "", nil // a reset or short read: try this request without a token
		}
	}
	switch resp.Code {
	case http.StatusOK:
		tok := strings.TrimSpace(string(resp.Body))
		if tok == "" {
			return "", fmt.Errorf("PUT %s: empty token: %w", TokenPath, notice.ErrMalformed)
		}
		ttl := s.ttl
		if v, err := strconv.Atoi(resp.Header.Get(TokenTTLHeader)); err == nil && v > 0 && time.Duration(v)*time.Second < ttl {
			ttl = time.Duration(v) * time.Second
		}
		if s.mode != modeToken {
			s.log.Debug("metadata token acquired", "provider", "alibaba", "ttl", ttl)
		}
		s.mode, s.token, s.expires, s.retryPutAt = modeToken, tok, now.Add(ttl), time.Time{}
		return tok, nil
	case http.StatusForbidden, http.StatusNotFound, http.StatusMethodNotAllowed:
		if s.mode != modeTokenless {
			s.log.Info("metadata server has no token API; using plain requests", "provider", "alibaba", "status", resp.Code)
		}
		s.mode, s.token = modeTokenless, ""
		return "", nil
	case http.StatusBadRequest:
		return "", fmt.Errorf("token request rejected (TTL %d s): %w: %w", int(s.ttl/time.Second), notice.ErrUnavailable, resp.Err(req))
	}
	return "", resp.Err(req)
}

// ParseTime reads a termination time as Alibaba writes it and returns it in
// UTC. It accepts the documented [TimeLayout], RFC 3339 with an offset or
// fractional seconds, and a time with no zone at all (taken as UTC, which
// the documentation says the value is in). Anything else is an error
// wrapping notice.ErrMalformed.
func ParseTime(body string) (time.Time, error) {
	s := strings.TrimSpace(body)
	if t, ok := termtime.ParseIn(s, time.UTC, time.RFC3339, "2006-01-02T15:04:05", "2006-01-02 15:04:05"); ok {
		return t, nil
	}
	return time.Time{}, fmt.Errorf("termination time %.64q is not a UTC time like %s: %w", s, TimeLayout, notice.ErrMalformed)
}

// isRegionID accepts Alibaba region ids: lower-case words joined by dashes,
// e.g. cn-hangzhou, ap-southeast-1, us-west-1.
func isRegionID(s string) bool {
	parts := strings.Split(s, "-")
	if len(parts) < 2 || len(s) > 40 {
		return false
	}
	for i, p := range parts {
		if p == "" {
			return false
		}
		for _, c := range p {
			lower := c >= 'a' && c <= 'z'
			digit := c >= '0' && c <= '9'
			if !lower && !(digit && i > 0) {
				return false
			}
		}
	}
	return true
}

// isDialError reports whether err happened while connecting (refused,
// unreachable, dial timeout): no server is there.
func isDialError(err error) bool {
	var op *net.OpError
	return errors.As(err, &op) && op.Op == "dial"
}
