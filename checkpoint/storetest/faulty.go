package storetest

import (
	"context"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/spotsafe/spotsafe/checkpoint"
)

// Faulty is a checkpoint.Store that forwards to an inner store and injects
// the faults it is armed with: a call that fails, a stream that fails or
// hangs after N bytes, a corrupted byte, slowness, a disk that fills up.
// Faults can be added and removed while the store is in use; it is safe for
// concurrent use.
//
// Faulty itself implements checkpoint.RangeGetter (forwarded, or emulated
// with Get when the inner store lacks it) and checkpoint.ConditionalPutter
// (forwarded, or failing with errors.ErrUnsupported). Use [Faulty.Store] for
// a view with exactly the inner store's optional interfaces.
type Faulty struct {
	inner checkpoint.Store

	mu     sync.Mutex
	faults []*armed
	calls  map[Op]int
}

var (
	_ checkpoint.Store             = (*Faulty)(nil)
	_ checkpoint.RangeGetter       = (*Faulty)(nil)
	_ checkpoint.ConditionalPutter = (*Faulty)(nil)
)

// Op names store operations, as bits so that a fault can apply to several.
type Op uint

// The operations of a store. OpWrite, OpRead and OpAll are combinations.
const (
	OpPut Op = 1 << iota
	OpPutIfAbsent
	OpGet
	OpGetRange
	OpList
	OpDelete

	OpWrite = OpPut | OpPutIfAbsent
	OpRead  = OpGet | OpGetRange
	OpAll   = OpWrite | OpRead | OpList | OpDelete
)

var opNames = []string{"Put", "PutIfAbsent", "Get", "GetRange", "List", "Delete"}

// String returns the operation's method name, or names joined by "|".
func (o Op) String() string {
	var names []string
	for i, n := range opNames {
		if o&(1<<i) != 0 {
			names = append(names, n)
		}
	}
	if len(names) == 0 {
		return fmt.Sprintf("Op(%d)", uint(o))
	}
	return strings.Join(names, "|")
}

// FaultKind is what a [Fault] does.
type FaultKind int

// Fault kinds; see the constructors ([FailCall], [FailAfterBytes],
// [Corrupt], [Slow], [Hang], [HangAfterBytes], [NoSpace]) for what each does.
const (
	FaultFail FaultKind = iota + 1
	FaultFailAfter
	FaultCorrupt
	FaultSlow
	FaultHang
)

// ErrInjected is the error a failing fault returns when its Err is nil.
var ErrInjected = errors.New("storetest: injected fault")

// Fault describes one injected fault. Build one with a constructor and
// narrow it by setting KeyPrefix, Nth or Times.
type Fault struct {
	Kind FaultKind
	// Ops the fault applies to; 0 means OpAll.
	Ops Op
	// KeyPrefix limits the fault to keys that start with it (for List,
	// to prefixes that start with it); "" matches all.
	KeyPrefix string
	// Nth is the first matching call (1-based, counted from when the
	// fault was armed) that the fault applies to; 0 means the first.
	Nth int
	// Times is how many matching calls, from the Nth on, the fault applies
	// to; 0 means all of them.
	Times int

	// Err is the error of FaultFail and FaultFailAfter; nil means
	// ErrInjected.
	Err error
	// Bytes is, for FaultFailAfter, the number of bytes that pass before
	// the stream fails, and for FaultHang, the number of bytes that pass
	// before the stream hangs (0: the call itself hangs).
	Bytes int64
	// Cumulative makes FaultFailAfter count Bytes across all the calls it
	// applies to, like a disk that fills up, instead of per call.
	Cumulative bool
	// Offset is the object offset of the byte FaultCorrupt flips: in what
	// a read returns, or in what a write stores.
	Offset int64
	// Delay is added by FaultSlow before each call.
	Delay time.Duration
	// BytesPerSecond limits, for FaultSlow, the throughput of each stream;
	// 0 means no limit.
	BytesPerSecond int64
}

// FailCall makes the nth call (1-based) to one of ops fail with err (nil
// means ErrInjected) without reaching the inner store.
func FailCall(ops Op, nth int, err error) Fault {
	return Fault{Kind: FaultFail, Ops: ops, Nth: nth, Times: 1, Err: err}
}

// FailAfterBytes makes every stream of ops fail with err (nil means
// ErrInjected) after n bytes: for writes, the reader the inner store
// consumes fails, so the inner store sees an interrupted upload; for reads,
// the reader returned to the caller fails.
func FailAfterBytes(ops Op, n int64, err error) Fault {
	return Fault{Kind: FaultFailAfter, Ops: ops, Bytes: n, Err: err}
}

// NoSpace makes writes fail like a full disk once n bytes in total have
// been written through the wrapper: the error matches syscall.ENOSPC.
func NoSpace(n int64) Fault {
	return Fault{
		Kind: FaultFailAfter, Ops: OpWrite, Bytes: n, Cumulative: true,
		Err: &fs.PathError{Op: "write", Path: "storetest", Err: syscall.ENOSPC},
	}
}

// Corrupt flips the byte at object offset off in what reads return (ops
// OpGet, OpGetRange) or in what writes store (OpPut, OpPutIfAbsent).
func Corrupt(ops Op, off int64) Fault {
	return Fault{Kind: FaultCorrupt, Ops: ops, Offset: off}
}

// Slow delays each call to ops by perCall and limits each of their streams
// to bytesPerSecond (0: no limit).
func Slow(ops Op, bytesPerSecond int64, perCall time.Duration) Fault {
	return Fault{Kind: FaultSlow, Ops: ops, BytesPerSecond: bytesPerSecond, Delay: perCall}
}

// Hang makes calls to ops block until their context is done; they then
// fail with the context's error.
func Hang(ops Op) Fault { return Fault{Kind: FaultHang, Ops: ops} }

// HangAfterBytes makes the streams of ops block after n bytes until the
// call's context is done (for reads: the context given to Get or
// GetRange); the stream then fails with the context's error. List and
// Delete, which have no stream, hang at once.
func HangAfterBytes(ops Op, n int64) Fault { return Fault{Kind: FaultHang, Ops: ops, Bytes: n} }

// armed is a fault with its counters.
type armed struct {
	Fault
	seen    int   // matching calls so far
	written int64 // bytes so far, for Cumulative
}

// NewFaulty wraps inner, armed with faults.
func NewFaulty(inner checkpoint.Store, faults ...Fault) *Faulty {
	f := &Faulty{inner: inner, calls: make(map[Op]int)}
	f.Inject(faults...)
	return f
}

// Inject arms more faults. A call subject to several faults gets all of
// them, in the order they were armed.
func (f *Faulty) Inject(faults ...Fault) {
	f.mu.Lock()
	defer f.mu.Unlock()
	for _, ft := range faults {
		if ft.Ops == 0 {
			ft.Ops = OpAll
		}
		if ft.Nth <= 0 {
			ft.Nth = 1
		}
		f.faults = append(f.faults, &armed{Fault: ft})
	}
}

// Reset disarms every fault. Streams already running keep theirs.
func (f *Faulty) Reset() {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.faults = nil
}

// Calls returns how many calls were made to ops (faulty or not).
func (f *Faulty) Calls(ops Op) int {
	f.mu.Lock()
	defer f.mu.Unlock()
	n := 0
	for op, c := range f.calls {
		if op&ops != 0 {
			n += c
		}
	}
	return n
}

// Inner returns the wrapped store.
func (f *Faulty) Inner() checkpoint.Store { return f.inner }

// Store returns f as a checkpoint.Store that implements RangeGetter and
// ConditionalPutter only if the inner store does.
func (f *Faulty) Store() checkpoint.Store {
	_, rg := f.inner.(checkpoint.RangeGetter)
	_, cp := f.inner.(checkpoint.ConditionalPutter)
	switch {
	case rg && cp:
		return f
	case rg:
		return faultyRange{faultyPlain{f}}
	case cp:
		return faultyCond{faultyPlain{f}}
	}
	return faultyPlain{f}
}

// begin counts a call and returns the faults that apply to it.
func (f *Faulty) begin(op Op, key string) []*armed {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.calls[op]++
	var out []*armed
	for _, a := range f.faults {
		if a.Ops&op == 0 || !strings.HasPrefix(key, a.KeyPrefix) {
			continue
		}
		a.seen++
		if a.seen >= a.Nth && (a.Times == 0 || a.seen < a.Nth+a.Times) {
			out = append(out, a)
		}
	}
	return out
}

// before applies the faults that act before the inner call: delays,
// failures and hangs of the call itself.
func before(ctx context.Context, op Op, key string, faults []*armed) error {
	for _, a := range faults {
		switch a.Kind {
		case FaultSlow:
			if err := sleep(ctx, a.Delay); err != nil {
				return fmt.Errorf("storetest: %s %s: %w", op, key, err)
			}
		case FaultFail:
			return fmt.Errorf("storetest: %s %s: %w", op, key, errOr(a.Err))
		case FaultHang:
			// List and Delete have no stream: they hang at once.
			if a.Bytes <= 0 || op&(OpList|OpDelete) != 0 {
				<-ctx.Done()
				return fmt.Errorf("storetest: %s %s: hung until: %w", op, key, ctxErr(ctx))
			}
		}
	}
	return nil
}

// streaming reports whether any fault acts on the data stream.
func streaming(faults []*armed) bool {
	for _, a := range faults {
		switch {
		case a.Kind == FaultFailAfter, a.Kind == FaultCorrupt,
			a.Kind == FaultHang && a.Bytes > 0,
			a.Kind == FaultSlow && a.BytesPerSecond > 0:
			return true
		}
	}
	return false
}

func errOr(err error) error {
	if err == nil {
		return ErrInjected
	}
	return err
}

func sleep(ctx context.Context, d time.Duration) error {
	if d <= 0 {
		return nil
	}
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		return nil
	case <-ctx.Done():
		return ctxErr(ctx)
	}
}

// ctxErr is ctx's error, joined with its cause when that differs, so that
// errors.Is finds both context.Canceled and the cause.
func ctxErr(ctx context.Context) error {
	err, cause := ctx.Err(), context.Cause(ctx)
	if cause == nil || cause == err {
		return err
	}
	return fmt.Errorf("%w: %w", err, cause)
}

// Put stores through the inner store, subject to the faults for OpPut.
func (f *Faulty) Put(ctx context.Context, key string, r io.Reader, size int64) error {
	return f.put(ctx, OpPut, key, r, size, f.inner.Put)
}

// PutIfAbsent forwards to the inner store's PutIfAbsent, subject to the
// faults for OpPutIfAbsent; it fails with errors.ErrUnsupported if the
// inner store has none.
func (f *Faulty) PutIfAbsent(ctx context.Context, key string, r io.Reader, size int64) error {
	cp, ok := f.inner.(checkpoint.ConditionalPutter)
	if !ok {
		return fmt.Errorf("storetest: PutIfAbsent: inner store %T: %w", f.inner, errors.ErrUnsupported)
	}
	return f.put(ctx, OpPutIfAbsent, key, r, size, cp.PutIfAbsent)
}

func (f *Faulty) put(ctx context.Context, op Op, key string, r io.Reader, size int64,
	put func(context.Context, string, io.Reader, int64) error) error {
	faults := f.begin(op, key)
	if err := before(ctx, op, key, faults); err != nil {
		return err
	}
	if streaming(faults) {
		r = &faultReader{f: f, ctx: ctx, r: r, faults: faults}
	}
	return put(ctx, key, r, size)
}

// Get reads through the inner store, subject to the faults for OpGet.
func (f *Faulty) Get(ctx context.Context, key string) (io.ReadCloser, error) {
	faults := f.begin(OpGet, key)
	if err := before(ctx, OpGet, key, faults); err != nil {
		return nil, err
	}
	rc, err := f.inner.Get(ctx, key)
	return f.wrapRead(ctx, rc, err, 0, faults)
}

// GetRange reads through the inner store's GetRange (or, if it has none,
// through Get, skipping offset bytes), subject to the faults for
// OpGetRange.
func (f *Faulty) GetRange(ctx context.Context, key string, offset, length int64) (io.ReadCloser, error) {
	faults := f.begin(OpGetRange, key)
	if err := before(ctx, OpGetRange, key, faults); err != nil {
		return nil, err
	}
	rc, err := getRange(ctx, f.inner, key, offset, length)
	return f.wrapRead(ctx, rc, err, offset, faults)
}

func getRange(ctx context.Context, s checkpoint.Store, key string, offset, length int64) (io.ReadCloser, error) {
	if rg, ok := s.(checkpoint.RangeGetter); ok {
		return rg.GetRange(ctx, key, offset, length)
	}
	if offset < 0 {
		return nil, fmt.Errorf("storetest: GetRange %s: negative offset %d", key, offset)
	}
	rc, err := s.Get(ctx, key)
	if err != nil {
		return nil, err
	}
	if n, err := io.CopyN(io.Discard, rc, offset); err != nil {
		rc.Close()
		return nil, fmt.Errorf("storetest: GetRange %s: offset %d past the end (%d bytes): %w", key, offset, n, err)
	}
	if length < 0 {
		return rc, nil
	}
	return struct {
		io.Reader
		io.Closer
	}{io.LimitReader(rc, length), rc}, nil
}

func (f *Faulty) wrapRead(ctx context.Context, rc io.ReadCloser, err error, base int64, faults []*armed) (io.ReadCloser, error) {
	if err != nil || !streaming(faults) {
		return rc, err
	}
	return struct {
		io.Reader
		io.Closer
	}{&faultReader{f: f, ctx: ctx, r: rc, faults: faults, base: base}, rc}, nil
}

// List lists through the inner store, subject to the faults for OpList
// (matched against the prefix).
func (f *Faulty) List(ctx context.Context, prefix string) ([]checkpoint.ObjectInfo, error) {
	if err := before(ctx, OpList, prefix, f.begin(OpList, prefix)); err != nil {
		return nil, err
	}
	return f.inner.List(ctx, prefix)
}

// Delete deletes through the inner store, subject to the faults for
// OpDelete.
func (f *Faulty) Delete(ctx context.Context, key string) error {
	if err := before(ctx, OpDelete, key, f.begin(OpDelete, key)); err != nil {
		return err
	}
	return f.inner.Delete(ctx, key)
}

// faultReader applies stream faults to r. off counts the bytes passed;
// base is the object offset of the first byte (GetRange).
type faultReader struct {
	f      *Faulty
	ctx    context.Context
	r      io.Reader
	faults []*armed
	base   int64
	off    int64
	start  time.Time
	err    error
}

func (fr *faultReader) Read(p []byte) (int, error) {
	if fr.err != nil {
		return 0, fr.err
	}
	if fr.start.IsZero() {
		fr.start = time.Now()
	}
	// Cut p so that no limit is crossed within one read.
	for _, a := range fr.faults {
		var left int64 = -1
		switch {
		case a.Kind == FaultFailAfter && a.Cumulative:
			fr.f.mu.Lock()
			left = a.Bytes - a.written
			fr.f.mu.Unlock()
		case a.Kind == FaultFailAfter, a.Kind == FaultHang && a.Bytes > 0:
			left = a.Bytes - fr.off
		}
		if left < 0 {
			continue
		}
		if left == 0 {
			// A stream that ends exactly at the limit ends normally.
			var probe [1]byte
			if n, err := fr.r.Read(probe[:]); n == 0 && err == io.EOF {
				return 0, io.EOF
			}
			if a.Kind == FaultHang {
				<-fr.ctx.Done()
				fr.err = fmt.Errorf("storetest: stream hung after %d bytes until: %w", fr.off, ctxErr(fr.ctx))
			} else {
				fr.err = fmt.Errorf("storetest: stream failed after %d bytes: %w", fr.off, errOr(a.Err))
			}
			return 0, fr.err
		}
		if int64(len(p)) > left {
			p = p[:left]
		}
	}
	n, err := fr.r.Read(p)
	for _, a := range fr.faults {
		switch a.Kind {
		case FaultCorrupt:
			if i := a.Offset - fr.base - fr.off; i >= 0 && i < int64(n) {
				p[i] ^= 0xff
			}
		case FaultFailAfter:
			if a.Cumulative {
				fr.f.mu.Lock()
				a.written += int64(n)
				fr.f.mu.Unlock()
			}
		}
	}
	fr.off += int64(n)
	for _, a := range fr.faults {
		if a.Kind == FaultSlow && a.BytesPerSecond > 0 {
			due := fr.start.Add(time.Duration(float64(fr.off) / float64(a.BytesPerSecond) * float64(time.Second)))
			if serr := sleep(fr.ctx, time.Until(due)); serr != nil {
				fr.err = fmt.Errorf("storetest: slow stream: %w", serr)
				return n, fr.err
			}
		}
	}
	return n, err
}

// The views returned by Faulty.Store.
type (
	faultyPlain struct{ f *Faulty }
	faultyRange struct{ faultyPlain }
	faultyCond  struct{ faultyPlain }
)

func (p faultyPlain) Put(ctx context.Context, key string, r io.Reader, size int64) error {
	return p.f.Put(ctx, key, r, size)
}

func (p faultyPlain) Get(ctx context.Context, key string) (io.ReadCloser, error) {
	return p.f.Get(ctx, key)
}

func (p faultyPlain) List(ctx context.Context, prefix string) ([]checkpoint.ObjectInfo, error) {
	return p.f.List(ctx, prefix)
}

func (p faultyPlain) Delete(ctx context.Context, key string) error { return p.f.Delete(ctx, key) }

func (p faultyRange) GetRange(ctx context.Context, key string, offset, length int64) (io.ReadCloser, error) {
	return p.f.GetRange(ctx, key, offset, length)
}

func (p faultyCond) PutIfAbsent(ctx context.Context, key string, r io.Reader, size int64) error {
	return p.f.PutIfAbsent(ctx, key, r, size)
}
