// Package netsim slows down loopback connections so that benchmarks of
// object stores see a network shaped like a real one: a bandwidth cap per
// connection and a latency per request/response round trip.
//
// Wrap a server's listener before starting it:
//
//	srv := httptest.NewUnstartedServer(handler)
//	srv.Listener = netsim.Listen(srv.Listener, netsim.Options{BytesPerSecond: 100e6, Latency: 20 * time.Millisecond})
//	srv.Start()
//
// The shaping happens on the server side of each connection, so a client
// sees it on both directions: its uploads are read at most at the cap, its
// downloads written at most at the cap, and the first byte of every response
// that follows a request is held back by Latency.
package netsim

import (
	"net"
	"sync"
	"sync/atomic"
	"time"
)

// Options shape every accepted connection. The zero value shapes nothing.
type Options struct {
	// BytesPerSecond caps each direction of each connection; 0 means no cap.
	BytesPerSecond int64
	// Latency delays the first byte written after bytes were read (the
	// start of a response), once per request/response turn; 0 means none.
	Latency time.Duration
}

// chunk bounds how many bytes move between two pacing decisions; small
// enough to keep the rate smooth, large enough to keep syscalls cheap.
const chunk = 64 << 10

// slack is how far a direction may fall behind its schedule (sleep overshoot,
// scheduler delays) and still catch up with a burst; beyond it the
// connection counts as idle and the schedule restarts from now.
const slack = 50 * time.Millisecond

// Listen wraps l so that every accepted connection is shaped by opts.
func Listen(l net.Listener, opts Options) net.Listener {
	return &listener{Listener: l, opts: opts}
}

type listener struct {
	net.Listener
	opts Options
}

func (l *listener) Accept() (net.Conn, error) {
	c, err := l.Listener.Accept()
	if err != nil {
		return nil, err
	}
	return Shape(c, l.opts), nil
}

// Shape wraps one connection. Reads and writes may run concurrently (as
// net/http's server does); each direction has its own pacer.
func Shape(c net.Conn, opts Options) net.Conn {
	if opts.BytesPerSecond <= 0 && opts.Latency <= 0 {
		return c
	}
	return &conn{Conn: c, opts: opts}
}

type conn struct {
	net.Conn
	opts      Options
	rd, wr    pacer
	readSince atomic.Bool // bytes were read since the last write: a new request arrived
}

func (c *conn) Read(p []byte) (int, error) {
	if c.opts.BytesPerSecond > 0 && len(p) > chunk {
		p = p[:chunk]
	}
	n, err := c.Conn.Read(p)
	if n > 0 {
		c.readSince.Store(true)
		c.rd.wait(n, c.opts.BytesPerSecond, true)
	}
	return n, err
}

func (c *conn) Write(p []byte) (int, error) {
	if c.opts.Latency > 0 && c.readSince.Swap(false) {
		time.Sleep(c.opts.Latency)
		c.wr.restart()
	}
	if c.opts.BytesPerSecond <= 0 {
		return c.Conn.Write(p)
	}
	var written int
	for len(p) > 0 {
		b := p[:min(len(p), chunk)]
		c.wr.wait(len(b), c.opts.BytesPerSecond, false)
		n, err := c.Conn.Write(b)
		written += n
		if err != nil {
			return written, err
		}
		p = p[n:]
	}
	return written, nil
}

// pacer spaces transfers of one direction so that they average rate bytes
// per second.
type pacer struct {
	mu   sync.Mutex
	next time.Time // when the direction's budget allows the next byte
}

// wait reserves the next slot of n bytes in the schedule and blocks until
// its start (before a write: the bytes may go out) or its end (after a read:
// the bytes have "arrived").
func (p *pacer) wait(n int, rate int64, untilEnd bool) {
	if rate <= 0 {
		return
	}
	d := time.Duration(float64(n) / float64(rate) * float64(time.Second))
	p.mu.Lock()
	now := time.Now()
	if p.next.Before(now.Add(-slack)) {
		p.next = now
	}
	at := p.next
	p.next = at.Add(d)
	if untilEnd {
		at = p.next
	}
	p.mu.Unlock()
	if sleep := time.Until(at); sleep > 0 {
		time.Sleep(sleep)
	}
}

// restart forgets unused budget, after a pause that was not the sender's.
func (p *pacer) restart() {
	p.mu.Lock()
	p.next = time.Now()
	p.mu.Unlock()
}
