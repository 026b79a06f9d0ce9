// Package metaclient holds the transport rules every metadata provider
// shares: never a proxy, a short dial timeout, no redirects off the metadata
// host, bounded body reads, and one classification of errors into
// notice.ErrTransient and friends.
package metaclient

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"strings"
	"syscall"
	"time"

	"github.com/spotsafe/spotsafe/notice"
)

// Transport defaults, after the AWS SDK's IMDS client: metadata endpoints are
// link-local, so a connection that takes longer than this to open is not
// coming.
const (
	DialTimeout = 250 * time.Millisecond
	// MaxBody bounds every body read: notice documents are tiny, and a
	// misbehaving endpoint must not make us buffer gigabytes.
	MaxBody = 1 << 20
	// DefaultTimeout bounds one ordinary metadata request.
	DefaultTimeout = 2 * time.Second
)

// NewHTTPClient returns a client for a metadata endpoint. timeout bounds a
// whole request (use 0 and per-request contexts for long polls).
func NewHTTPClient(timeout time.Duration) *http.Client {
	tr := &http.Transport{
		Proxy: nil, // never: the default transport would send link-local traffic to HTTP_PROXY
		DialContext: (&net.Dialer{
			Timeout:   DialTimeout,
			KeepAlive: 30 * time.Second,
		}).DialContext,
		MaxIdleConns:        4,
		MaxIdleConnsPerHost: 4,
		IdleConnTimeout:     30 * time.Second,
		DisableCompression:  true,
	}
	return &http.Client{
		Transport:     tr,
		Timeout:       timeout,
		CheckRedirect: SameHostRedirects,
	}
}

// SameHostRedirects is an http.Client.CheckRedirect that refuses to follow a
// redirect to another host: a metadata token must never leave the metadata
// server.
func SameHostRedirects(req *http.Request, via []*http.Request) error {
	if len(via) >= 3 {
		return errors.New("metaclient: too many redirects")
	}
	if req.URL.Host != via[0].URL.Host {
		return fmt.Errorf("metaclient: refusing redirect from %s to %s", via[0].URL.Host, req.URL.Host)
	}
	return nil
}

// StatusError is a non-2xx answer. It wraps notice.ErrTransient for 429 and
// 5xx, so errors.Is(err, notice.ErrTransient) tells whether to retry soon.
type StatusError struct {
	Method string
	URL    string
	Code   int
	// Body is the start of the response body, for the log.
	Body string
}

// Error gives the method, URL, status and the start of the body.
func (e *StatusError) Error() string {
	msg := fmt.Sprintf("%s %s: HTTP %d", e.Method, e.URL, e.Code)
	if e.Body != "" {
		msg += ": " + e.Body
	}
	return msg
}

// Unwrap returns notice.ErrTransient for throttling and server errors.
func (e *StatusError) Unwrap() error {
	if e.Code == http.StatusTooManyRequests || e.Code >= 500 {
		return notice.ErrTransient
	}
	return nil
}

// Response is a fully read answer.
type Response struct {
	Code   int
	Header http.Header
	Body   []byte
}

// Do sends req and reads at most MaxBody bytes of the answer. A transport
// failure comes back wrapping notice.ErrTransient (keeping the cause for
// errors.As); a non-2xx status is not an error here: callers decide what 404
// means. Use [Response.Err] for the usual mapping.
func Do(c *http.Client, req *http.Request) (*Response, error) {
	resp, err := c.Do(req)
	if err != nil {
		return nil, transportError(req, err)
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(io.LimitReader(resp.Body, MaxBody+1))
	if err != nil {
		return nil, transportError(req, err)
	}
	if len(body) > MaxBody {
		return nil, fmt.Errorf("%s %s: body larger than %d bytes: %w", req.Method, redact(req), MaxBody, notice.ErrMalformed)
	}
	return &Response{Code: resp.StatusCode, Header: resp.Header, Body: body}, nil
}

// Err returns a *StatusError for a non-2xx response, nil otherwise.
func (r *Response) Err(req *http.Request) error {
	if r.Code >= 200 && r.Code < 300 {
		return nil
	}
	b := strings.TrimSpace(string(r.Body))
	if len(b) > 120 {
		b = b[:120] + "…"
	}
	if strings.HasPrefix(b, "<") { // HTML error pages say nothing useful
		b = ""
	}
	return &StatusError{Method: req.Method, URL: redact(req), Code: r.Code, Body: b}
}

// TransientError wraps a transport-level failure (reset, refused, timeout,
// unexpected EOF). It matches notice.ErrTransient with errors.Is and keeps the
// cause for errors.As.
type TransientError struct {
	Op  string
	Err error
}

// Error gives the operation and its cause.
func (e *TransientError) Error() string { return e.Op + ": " + e.Err.Error() }

// Is reports true for notice.ErrTransient.
func (e *TransientError) Is(target error) bool { return target == notice.ErrTransient }

// Unwrap returns the cause.
func (e *TransientError) Unwrap() error { return e.Err }

func transportError(req *http.Request, err error) error {
	// A cancelled caller is not a metadata failure; keep the context error
	// visible as is.
	if ctxErr := req.Context().Err(); ctxErr != nil {
		return fmt.Errorf("%s %s: %w", req.Method, redact(req), ctxErr)
	}
	return &TransientError{Op: req.Method + " " + redact(req), Err: err}
}

// IsTimeout reports whether err is a timeout (dial, header or client
// timeout), the symptom of an IMDS hop limit that drops replies.
func IsTimeout(err error) bool {
	var ne net.Error
	if errors.As(err, &ne) && ne.Timeout() {
		return true
	}
	return errors.Is(err, context.DeadlineExceeded) || errors.Is(err, syscall.ETIMEDOUT)
}

// IsTransient reports whether err is worth retrying soon.
func IsTransient(err error) bool { return errors.Is(err, notice.ErrTransient) }

func redact(req *http.Request) string {
	u := *req.URL
	u.User = nil
	return u.String()
}

// NewRequest builds a request with ctx and the given headers.
func NewRequest(ctx context.Context, method, url string, headers map[string]string) (*http.Request, error) {
	req, err := http.NewRequestWithContext(ctx, method, url, nil)
	if err != nil {
		return nil, err
	}
	for k, v := range headers {
		req.Header.Set(k, v)
	}
	return req, nil
}

// Get is NewRequest + Do for a GET.
func Get(ctx context.Context, c *http.Client, url string, headers map[string]string) (*Response, *http.Request, error) {
	req, err := NewRequest(ctx, http.MethodGet, url, headers)
	if err != nil {
		return nil, nil, err
	}
	resp, err := Do(c, req)
	return resp, req, err
}
