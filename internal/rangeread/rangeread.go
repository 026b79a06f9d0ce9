// Package rangeread turns one large object into an ordered stream while
// fetching its byte ranges in parallel, for object stores whose single
// connection is slower than the path to the store (S3, OSS).
//
// A window of at most Concurrency chunks is in flight or buffered at any
// time, so memory stays at Concurrency × ChunkSize whatever the object size.
// A chunk whose body breaks off is fetched again from where it stopped.
package rangeread

import (
	"context"
	"errors"
	"fmt"
	"io"
	"sync"
	"time"

	"github.com/cenkalti/backoff/v4"
)

// FetchFunc opens bytes [off, off+n) of the object. The body must yield
// exactly n bytes.
type FetchFunc func(ctx context.Context, off, n int64) (io.ReadCloser, error)

// Options tune a Reader. The zero value is usable.
type Options struct {
	// ChunkSize is the length of each ranged request; default 8 MiB.
	ChunkSize int64
	// Concurrency is how many chunks are fetched or buffered at once;
	// default 8.
	Concurrency int
	// Attempts is how often one chunk is tried before its error ends the
	// stream; default 3. Errors from FetchFunc itself are not retried here
	// (SDKs retry their own requests); broken bodies are.
	Attempts int
	// Backoff between attempts; default exponential from 100 ms.
	Backoff func() backoff.BackOff
	// Buffers, if set and of ChunkSize, supplies the chunk buffers, so that
	// successive Readers of one store reuse memory.
	Buffers *BufferPool
}

// BufferPool recycles chunk buffers of one size between Readers. It is
// safe for concurrent use.
type BufferPool struct {
	size int64
	pool sync.Pool
}

// NewBufferPool returns a pool of buffers of size bytes.
func NewBufferPool(size int64) *BufferPool {
	return &BufferPool{size: size}
}

func (p *BufferPool) get() []byte {
	if b, ok := p.pool.Get().(*[]byte); ok {
		return *b
	}
	return make([]byte, p.size)
}

func (p *BufferPool) put(b []byte) {
	if int64(cap(b)) == p.size {
		b = b[:cap(b)]
		p.pool.Put(&b)
	}
}

const (
	defaultChunk       = 8 << 20
	defaultConcurrency = 8
	defaultAttempts    = 3
)

// Reader is the ordered stream. Close it to stop the background fetches;
// Read and Close must not be called concurrently (as for any io.Reader).
type Reader struct {
	ctx    context.Context
	cancel context.CancelFunc
	fetch  FetchFunc
	opts   Options
	size   int64
	n      int // number of chunks

	results []chan result // one per chunk, buffered 1
	slots   chan struct{} // window: a slot is held from dispatch until the chunk is consumed
	free    chan []byte   // buffers to reuse
	wg      sync.WaitGroup

	next int    // index of the chunk to consume next
	cur  []byte // unread rest of the current chunk
	buf  []byte // the current chunk's whole buffer, returned to free when drained
	held bool   // the current chunk still holds a slot
	err  error
}

type result struct {
	buf []byte
	err error
}

// New starts fetching an object of size bytes. first, if not nil, is an
// already open body for the first chunk (bytes [0, min(ChunkSize, size)));
// callers that learn the size from a first ranged request pass its body
// here instead of wasting it. New takes ownership of first.
func New(ctx context.Context, size int64, first io.ReadCloser, fetch FetchFunc, opts *Options) *Reader {
	var o Options
	if opts != nil {
		o = *opts
	}
	if o.ChunkSize <= 0 {
		o.ChunkSize = defaultChunk
	}
	if o.Concurrency <= 0 {
		o.Concurrency = defaultConcurrency
	}
	if o.Attempts <= 0 {
		o.Attempts = defaultAttempts
	}
	if o.Buffers != nil && o.Buffers.size != o.ChunkSize {
		o.Buffers = nil
	}
	if o.Backoff == nil {
		o.Backoff = func() backoff.BackOff {
			b := backoff.NewExponentialBackOff()
			b.InitialInterval = 100 * time.Millisecond
			b.MaxElapsedTime = 0
			return b
		}
	}
	ctx, cancel := context.WithCancel(ctx)
	r := &Reader{
		ctx:    ctx,
		cancel: cancel,
		fetch:  fetch,
		opts:   o,
		size:   size,
		n:      int((size + o.ChunkSize - 1) / o.ChunkSize),
		slots:  make(chan struct{}, o.Concurrency),
		free:   make(chan []byte, o.Concurrency),
	}
	r.results = make([]chan result, r.n)
	for i := range r.results {
		r.results[i] = make(chan result, 1)
	}
	r.wg.Add(1)
	go r.dispatch(first)
	return r
}

// dispatch starts one fetch per chunk, in order, as window slots free up.
func (r *Reader) dispatch(first io.ReadCloser) {
	defer r.wg.Done()
	if r.n == 0 && first != nil {
		first.Close()
	}
	for i := 0; i < r.n; i++ {
		select {
		case r.slots <- struct{}{}:
		case <-r.ctx.Done():
			if i == 0 && first != nil {
				first.Close()
			}
			return
		}
		var body io.ReadCloser
		if i == 0 {
			body = first
		}
		r.wg.Add(1)
		go func(i int, body io.ReadCloser) {
			defer r.wg.Done()
			buf, err := r.get(i, body)
			r.results[i] <- result{buf, err}
		}(i, body)
	}
}

// get fills chunk i, retrying broken bodies from where they stopped.
func (r *Reader) get(i int, body io.ReadCloser) ([]byte, error) {
	off := int64(i) * r.opts.ChunkSize
	n := min(r.opts.ChunkSize, r.size-off)
	var buf []byte
	select {
	case buf = <-r.free:
	default:
		if r.opts.Buffers != nil {
			buf = r.opts.Buffers.get()
		} else {
			buf = make([]byte, r.opts.ChunkSize)
		}
	}
	buf = buf[:n]
	var got int64
	b := backoff.WithContext(r.opts.Backoff(), r.ctx)
	for attempt := 1; ; attempt++ {
		if body == nil {
			var err error
			body, err = r.fetch(r.ctx, off+got, n-got)
			if err != nil {
				return buf, err
			}
		}
		k, err := io.ReadFull(body, buf[got:])
		got += int64(k)
		if err == nil {
			// The body must end here; more bytes mean the object changed.
			var one [1]byte
			if extra, _ := body.Read(one[:]); extra > 0 {
				err = fmt.Errorf("rangeread: range %d-%d returned more than %d bytes", off, off+n-1, n)
				body.Close()
				return buf, err
			}
		}
		body.Close()
		body = nil
		if err == nil {
			return buf, nil
		}
		if errors.Is(err, io.EOF) {
			err = io.ErrUnexpectedEOF
		}
		if r.ctx.Err() != nil {
			return buf, r.ctx.Err()
		}
		if attempt >= r.opts.Attempts {
			return buf, fmt.Errorf("rangeread: bytes %d-%d after %d attempts: %w", off, off+n-1, attempt, err)
		}
		wait := b.NextBackOff()
		if wait == backoff.Stop {
			return buf, fmt.Errorf("rangeread: bytes %d-%d: %w", off, off+n-1, err)
		}
		t := time.NewTimer(wait)
		select {
		case <-t.C:
		case <-r.ctx.Done():
			t.Stop()
			return buf, r.ctx.Err()
		}
	}
}

// fill makes cur non-empty, or sets err (io.EOF at the end).
func (r *Reader) fill() {
	for len(r.cur) == 0 && r.err == nil {
		r.release()
		if r.next == r.n {
			r.err = io.EOF
			return
		}
		var res result
		select {
		case res = <-r.results[r.next]:
		case <-r.ctx.Done():
			r.err = r.ctx.Err()
			return
		}
		r.next++
		r.held = true
		r.buf, r.cur = res.buf, res.buf
		if res.err != nil {
			r.err = res.err
			r.cur = nil
		}
	}
}

// release returns the drained chunk's buffer and window slot.
func (r *Reader) release() {
	if r.buf != nil {
		select {
		case r.free <- r.buf[:cap(r.buf)]:
		default:
			if r.opts.Buffers != nil {
				r.opts.Buffers.put(r.buf)
			}
		}
		r.buf = nil
	}
	if r.held {
		<-r.slots
		r.held = false
	}
}

// Read reads the object in order.
func (r *Reader) Read(p []byte) (int, error) {
	if len(p) == 0 {
		return 0, nil
	}
	r.fill()
	if len(r.cur) == 0 {
		return 0, r.err
	}
	k := copy(p, r.cur)
	r.cur = r.cur[k:]
	return k, nil
}

// WriteTo writes the rest of the object to w without an intermediate copy.
func (r *Reader) WriteTo(w io.Writer) (int64, error) {
	var total int64
	for {
		r.fill()
		if len(r.cur) == 0 {
			if r.err == io.EOF {
				return total, nil
			}
			return total, r.err
		}
		k, err := w.Write(r.cur)
		total += int64(k)
		r.cur = r.cur[k:]
		if err != nil {
			return total, err
		}
	}
}

// Close stops all fetches and waits for them to end.
func (r *Reader) Close() error {
	r.cancel()
	r.wg.Wait()
	if r.err == nil {
		r.err = errClosed
	}
	if p := r.opts.Buffers; p != nil {
		// Every goroutine has ended: hand all buffers back.
		if r.buf != nil {
			p.put(r.buf)
		}
		for _, ch := range r.results[r.next:] {
			select {
			case res := <-ch:
				p.put(res.buf)
			default:
			}
		}
		for {
			select {
			case b := <-r.free:
				p.put(b)
				continue
			default:
			}
			break
		}
	}
	r.cur, r.buf = nil, nil
	return nil
}

var errClosed = errors.New("rangeread: read after Close")
