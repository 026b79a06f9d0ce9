// Package noticetest provides fake metadata servers for every provider
// spotsafe supports, speaking each documented protocol (tokens, 404 when no
// notice, ETag + wait_for_change, DocumentIncarnation, UTC+8 times), with
// controls to schedule an interruption, clear it and inject failures. It also
// holds the conformance suite every provider [notice.Source] runs.
//
// It is public so that users can test their own programs against a
// simulated interruption; `spotsafe fake PROVIDER` serves the same fakes.
package noticetest

import (
	"context"
	"fmt"
	"net"
	"net/http"
	"sync"
	"sync/atomic"
	"time"

	"github.com/spotsafe/spotsafe/notice"
)

// Fake is what every provider's fake server offers.
type Fake interface {
	// URL is the base URL (scheme://host:port, no path) to give a source as
	// its endpoint.
	URL() string
	// Schedule makes a notice of kind appear at appear, announcing deadline
	// where the provider's protocol carries one.
	Schedule(kind notice.Kind, appear, deadline time.Time)
	// Interrupt is Schedule(kind, now, deadline).
	Interrupt(kind notice.Kind, deadline time.Time)
	// Clear withdraws any notice (a cancellation).
	Clear()
	// Inject makes the next n requests to notice paths fail with f; n <= 0
	// removes queued failures.
	Inject(f Failure, n int)
	// Requests counts the requests served so far.
	Requests() int
	// Close stops the server, releasing hanging requests.
	Close()
}

// ServerOptions configures a fake server. The zero value listens on a free
// loopback port.
type ServerOptions struct {
	// Listen is the address to listen on; default "127.0.0.1:0".
	Listen string
}

// Failure is a fault a fake can inject.
type Failure int

// Failures.
const (
	// FailServerError answers 500.
	FailServerError Failure = iota + 1
	// FailUnavailable answers 503 (GCE during maintenance).
	FailUnavailable
	// FailThrottle answers 429.
	FailThrottle
	// FailHang never answers until the client gives up or the fake closes.
	FailHang
	// FailGarbage answers 200 with a body that parses as nothing.
	FailGarbage
	// FailReset closes the connection without an answer.
	FailReset
)

// String names the failure.
func (f Failure) String() string {
	switch f {
	case FailServerError:
		return "server-error"
	case FailUnavailable:
		return "unavailable"
	case FailThrottle:
		return "throttle"
	case FailHang:
		return "hang"
	case FailGarbage:
		return "garbage"
	case FailReset:
		return "reset"
	}
	return fmt.Sprintf("failure(%d)", int(f))
}

// GarbageBody is what FailGarbage answers.
const GarbageBody = "\x00{\"garbage\": [1, 2,,, <not json> 9999-99-99 TRUE?"

// Faults queues failures for a fake's handler. The zero value is ready.
type Faults struct {
	mu      sync.Mutex
	queue   []Failure
	closing chan struct{}
	once    sync.Once
}

// Inject queues n failures of kind f; n <= 0 clears the queue.
func (fs *Faults) Inject(f Failure, n int) {
	fs.mu.Lock()
	defer fs.mu.Unlock()
	if n <= 0 {
		fs.queue = nil
		return
	}
	for range n {
		fs.queue = append(fs.queue, f)
	}
}

// Intercept applies the next queued failure to the request, if any, and
// reports whether it did (the handler must then return).
func (fs *Faults) Intercept(w http.ResponseWriter, r *http.Request) bool {
	fs.mu.Lock()
	if len(fs.queue) == 0 {
		fs.mu.Unlock()
		return false
	}
	f := fs.queue[0]
	fs.queue = fs.queue[1:]
	closing := fs.closingChan()
	fs.mu.Unlock()

	switch f {
	case FailServerError:
		http.Error(w, "internal error (injected)", http.StatusInternalServerError)
	case FailUnavailable:
		http.Error(w, "service unavailable (injected)", http.StatusServiceUnavailable)
	case FailThrottle:
		http.Error(w, "too many requests (injected)", http.StatusTooManyRequests)
	case FailGarbage:
		w.Header().Set("Content-Type", "text/plain")
		_, _ = w.Write([]byte(GarbageBody))
	case FailHang:
		select {
		case <-r.Context().Done():
		case <-closing:
		}
	case FailReset:
		reset(w)
	}
	return true
}

// closingChan must be called with fs.mu held.
func (fs *Faults) closingChan() chan struct{} {
	if fs.closing == nil {
		fs.closing = make(chan struct{})
	}
	return fs.closing
}

// release ends every hanging request.
func (fs *Faults) release() {
	fs.mu.Lock()
	ch := fs.closingChan()
	fs.mu.Unlock()
	fs.once.Do(func() { close(ch) })
}

// reset hijacks the connection and closes it with an RST where possible.
func reset(w http.ResponseWriter) {
	hj, ok := w.(http.Hijacker)
	if !ok {
		panic(http.ErrAbortHandler)
	}
	conn, _, err := hj.Hijack()
	if err != nil {
		panic(http.ErrAbortHandler)
	}
	if tc, ok := conn.(*net.TCPConn); ok {
		_ = tc.SetLinger(0)
	}
	_ = conn.Close()
}

// Scheduled is the notice a fake serves.
type Scheduled struct {
	Kind     notice.Kind
	Appear   time.Time
	Deadline time.Time
	// Seq increases with every Schedule or Clear; fakes use it for
	// identities (event ids, incarnations).
	Seq int
}

// Base holds what every fake shares: the listener and HTTP server, the
// schedule, failure injection and request counting. Provider fakes embed it
// and supply a handler.
type Base struct {
	Faults

	srv      *http.Server
	ln       net.Listener
	done     chan struct{}
	requests atomic.Int64

	mu      sync.Mutex
	sched   Scheduled
	active  bool
	changed chan struct{}
}

// Start listens per opts and serves h (wrapped to count requests) in a
// goroutine owned by Base until Close.
func (b *Base) Start(opts *ServerOptions, h http.Handler) error {
	addr := "127.0.0.1:0"
	if opts != nil && opts.Listen != "" {
		addr = opts.Listen
	}
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return fmt.Errorf("noticetest: listen %s: %w", addr, err)
	}
	b.ln = ln
	b.done = make(chan struct{})
	b.srv = &http.Server{
		Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			b.requests.Add(1)
			h.ServeHTTP(w, r)
		}),
		ReadHeaderTimeout: 5 * time.Second,
	}
	go func() {
		defer close(b.done)
		_ = b.srv.Serve(ln)
	}()
	return nil
}

// URL returns "http://host:port".
func (b *Base) URL() string { return "http://" + b.ln.Addr().String() }

// Addr returns the listening address.
func (b *Base) Addr() net.Addr { return b.ln.Addr() }

// Requests counts requests served.
func (b *Base) Requests() int { return int(b.requests.Load()) }

// Schedule sets the notice to serve from appear on.
func (b *Base) Schedule(kind notice.Kind, appear, deadline time.Time) {
	b.mu.Lock()
	b.sched = Scheduled{Kind: kind, Appear: appear, Deadline: deadline, Seq: b.sched.Seq + 1}
	b.active = true
	b.notifyLocked()
	b.mu.Unlock()
}

// Interrupt makes a notice present now.
func (b *Base) Interrupt(kind notice.Kind, deadline time.Time) {
	b.Schedule(kind, time.Now(), deadline)
}

// Clear withdraws the notice.
func (b *Base) Clear() {
	b.mu.Lock()
	b.active = false
	b.sched.Seq++
	b.notifyLocked()
	b.mu.Unlock()
}

// Current returns the notice visible at now, if any, and the pending one
// (visible later) as next.
func (b *Base) Current(now time.Time) (cur Scheduled, ok bool, next time.Time) {
	b.mu.Lock()
	defer b.mu.Unlock()
	if !b.active {
		return Scheduled{Seq: b.sched.Seq}, false, time.Time{}
	}
	if now.Before(b.sched.Appear) {
		return Scheduled{Seq: b.sched.Seq}, false, b.sched.Appear
	}
	return b.sched, true, time.Time{}
}

// Changed returns a channel closed at the next Schedule or Clear.
func (b *Base) Changed() <-chan struct{} {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.changed == nil {
		b.changed = make(chan struct{})
	}
	return b.changed
}

func (b *Base) notifyLocked() {
	if b.changed != nil {
		close(b.changed)
		b.changed = nil
	}
}

// WaitChange blocks until the schedule changes after changed was taken
// from [Base.Changed], a scheduled notice appears, timeout passes, ctx ends
// or the server closes. It reports whether something changed. Take changed
// before reading the state you compare against, so that a change in between
// is not missed.
func (b *Base) WaitChange(ctx context.Context, changed <-chan struct{}, timeout time.Duration) bool {
	_, _, next := b.Current(time.Now())
	t := time.NewTimer(timeout)
	defer t.Stop()
	var appear <-chan time.Time
	if !next.IsZero() {
		at := time.NewTimer(time.Until(next))
		defer at.Stop()
		appear = at.C
	}
	select {
	case <-changed:
		return true
	case <-appear:
		return true
	case <-t.C:
	case <-ctx.Done():
	case <-b.closed():
	}
	return false
}

// closed shares the Faults' channel so that Close ends every wait.
func (b *Base) closed() chan struct{} {
	b.Faults.mu.Lock()
	defer b.Faults.mu.Unlock()
	return b.Faults.closingChan()
}

// Close releases hanging requests and stops the server.
func (b *Base) Close() {
	if b.srv == nil {
		return
	}
	// Hanging requests are released first; Close then drops every
	// connection at once (Shutdown would wait for idle spare connections a
	// client opened but never used).
	b.release()
	_ = b.srv.Close()
	<-b.done
}
