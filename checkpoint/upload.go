package checkpoint

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"log/slog"
	"sync"
	"sync/atomic"
	"time"
)

// Upload is the handle of one save: its background upload and its outcome.
type Upload struct {
	m           *Manager
	step        int64
	meta        map[string]string
	created     time.Time
	deadline    time.Time
	parts       []stagedPart
	total       int64
	captureTime time.Duration

	ctx    context.Context // values of Save's ctx, never its cancellation
	cancel context.CancelCauseFunc
	done   chan struct{}
	err    error
	man    *Manifest
	prog   atomic.Pointer[tracker]

	observed atomic.Bool
	staged   sync.Once
}

type stagedPart struct {
	name string
	src  source
}

func (m *Manager) newUpload(ctx context.Context, s Snapshot) *Upload {
	u := &Upload{
		m:        m,
		step:     s.Step,
		meta:     cloneMeta(s.Metadata),
		created:  time.Now().UTC(),
		deadline: s.Deadline,
		done:     make(chan struct{}),
	}
	u.ctx, u.cancel = context.WithCancelCause(context.WithoutCancel(ctx))
	return u
}

// Step returns the step being saved.
func (u *Upload) Step() int64 { return u.step }

// Bytes returns the size of the captured state.
func (u *Upload) Bytes() int64 { return u.total }

// CaptureTime returns how long Save blocked its caller capturing the state.
func (u *Upload) CaptureTime() time.Duration { return u.captureTime }

// Done returns a channel closed when the upload has ended, committed or
// not.
func (u *Upload) Done() <-chan struct{} { return u.done }

// Progress returns the bytes uploaded so far and the total.
func (u *Upload) Progress() (done, total int64) {
	if t := u.prog.Load(); t != nil {
		return min(t.done.Load(), u.total), u.total
	}
	return 0, u.total
}

// Wait waits for the upload to end and returns its outcome: nil once the
// checkpoint is committed, else an error (a [*SaveError] wrapping the
// cause). If ctx ends first Wait returns ctx's error and the upload goes
// on. Once Wait has returned an upload's error, the next Save and Close
// do not report it again.
func (u *Upload) Wait(ctx context.Context) error {
	select {
	case <-u.done:
		u.observed.Store(true)
		return u.err
	case <-ctx.Done():
		return ctx.Err()
	}
}

// Manifest returns the committed manifest, or nil if the upload has not
// committed (yet).
func (u *Upload) Manifest() *Manifest {
	select {
	case <-u.done:
		return u.man
	default:
		return nil
	}
}

// Cancel abandons the upload: it stops as soon as the store returns,
// nothing is committed, and Wait returns an error wrapping [ErrCanceled].
// Parts already stored stay behind as an incomplete step, which retention
// removes after the next commit. If the upload has already committed,
// Cancel does nothing.
func (u *Upload) Cancel() {
	m := u.m
	m.mu.Lock()
	var dropped func()
	if m.pending == u {
		dropped = m.dropPendingLocked(ErrCanceled)
	}
	m.mu.Unlock()
	u.cancel(ErrCanceled)
	if dropped != nil {
		dropped()
	}
}

func (u *Upload) finish(err error) {
	u.err = err
	close(u.done)
}

func (u *Upload) releaseStaging() {
	u.staged.Do(func() {
		for _, p := range u.parts {
			p.src.release()
		}
	})
}

// upload stores the parts and commits the manifest.
func (m *Manager) upload(u *Upload) (err error) {
	ctx := u.ctx
	var cancel context.CancelFunc = func() {}
	deadline := u.deadline
	if t := m.opts.UploadTimeout; t > 0 && (deadline.IsZero() || time.Now().Add(t).Before(deadline)) {
		deadline = time.Now().Add(t)
	}
	if !deadline.IsZero() {
		ctx, cancel = context.WithDeadlineCause(ctx, deadline,
			fmt.Errorf("checkpoint: upload deadline %s passed: %w", deadline.Format(time.RFC3339Nano), context.DeadlineExceeded))
	}
	defer cancel()

	start := time.Now()
	tr := m.newTracker(OpSave, u.step, u.total)
	u.prog.Store(tr)
	m.emit(Event{Kind: EventStarted, Step: u.step, Bytes: u.total, Capture: u.captureTime})
	m.log.Info("checkpoint upload started", "ckpt.step", u.step, "bytes", u.total, "parts", len(u.parts), "capture", u.captureTime)
	defer func() {
		if err == nil {
			return
		}
		if ctx.Err() != nil {
			// Report why the upload stopped (canceled, superseded,
			// deadline), not the store's echo of it.
			err = &SaveError{Step: u.step, Err: context.Cause(ctx)}
		}
		elapsed := time.Since(start)
		m.emit(Event{Kind: EventFailed, Step: u.step, Bytes: u.total, Capture: u.captureTime, Duration: elapsed, Err: err})
		level := slog.LevelError
		if errors.Is(err, context.Canceled) {
			level = slog.LevelInfo
		}
		m.log.Log(context.Background(), level, "checkpoint upload failed", "ckpt.step", u.step, "bytes", u.total, "elapsed", elapsed, "err", err)
	}()

	if err := ctx.Err(); err != nil {
		return err
	}
	// Only the holder of the step's claim stores parts, and never those
	// of a committed step.
	expires := deadline
	if expires.IsZero() {
		expires = time.Now().Add(claimTTL)
	}
	if err := m.claim(ctx, u.step, expires); err != nil {
		return &SaveError{Step: u.step, Err: err}
	}
	defer m.release(ctx, u.step)
	exists, err := m.exists(ctx, m.key(u.step, ManifestName))
	if err != nil {
		return &SaveError{Step: u.step, Err: fmt.Errorf("check for an existing commit: %w", err)}
	}
	if exists {
		return &SaveError{Step: u.step, Err: fmt.Errorf("%w: step %d", ErrStepExists, u.step)}
	}

	infos := make([]PartInfo, len(u.parts))
	err = forEach(ctx, len(u.parts), m.opts.Concurrency, func(ctx context.Context, i int) error {
		info, err := m.putPart(ctx, tr, u.step, u.parts[i])
		if err != nil {
			return &SaveError{Step: u.step, Part: u.parts[i].name, Err: err}
		}
		infos[i] = info
		return nil
	})
	if err != nil {
		return err
	}

	man := &Manifest{
		Format:   FormatName,
		Version:  FormatVersion,
		Step:     u.step,
		Created:  u.created,
		Parts:    infos,
		Metadata: u.meta,
		Writer:   m.writer,
	}
	data, err := json.MarshalIndent(man, "", "  ")
	if err != nil {
		return &SaveError{Step: u.step, Err: err}
	}
	if err := m.commit(ctx, u.step, data); err != nil {
		return &SaveError{Step: u.step, Err: err}
	}
	elapsed := time.Since(start)
	u.man = man
	tr.finish()
	m.recordThroughput(u.total, elapsed)
	m.emit(Event{Kind: EventCommitted, Step: u.step, Bytes: u.total, Capture: u.captureTime, Duration: elapsed})
	m.log.Info("checkpoint committed", "ckpt.step", u.step, "bytes", u.total, "elapsed", elapsed)
	return nil
}

// putPart uploads one part with retries and returns its manifest entry.
// The CRC-32C is computed alongside, from the staged bytes.
func (m *Manager) putPart(ctx context.Context, tr *tracker, step int64, p stagedPart) (PartInfo, error) {
	key := m.key(step, p.name)
	size := p.src.Size()
	var crc uint32
	var crcErr error
	crcDone := make(chan struct{})
	crcCtx, stopCRC := context.WithCancel(ctx)
	defer stopCRC()
	if m.opts.noCRC {
		close(crcDone)
	} else {
		go func() {
			defer close(crcDone)
			crc, crcErr = sourceCRC(crcCtx, p.src)
		}()
	}
	var counted atomic.Int64
	err := m.retry(ctx, "put "+key, func() error {
		tr.add(-counted.Swap(0)) // a retry starts over
		r := &partReader{src: p.src, size: size, count: func(n int64) {
			counted.Add(n)
			tr.add(n)
		}}
		return m.store.Put(ctx, key, r, size)
	})
	if err != nil {
		stopCRC()
	}
	<-crcDone // the staged bytes must outlive the checksum
	if err != nil {
		return PartInfo{}, err
	}
	if crcErr != nil {
		return PartInfo{}, fmt.Errorf("checksum: %w", crcErr)
	}
	return PartInfo{Name: p.name, Size: size, CRC32C: crc}, nil
}

// exists reports whether key exists.
func (m *Manager) exists(ctx context.Context, key string) (bool, error) {
	var found bool
	err := m.retry(ctx, "get "+key, func() error {
		rc, err := m.store.Get(ctx, key)
		if errors.Is(err, fs.ErrNotExist) {
			found = false
			return nil
		}
		if err != nil {
			return err
		}
		rc.Close()
		found = true
		return nil
	})
	return found, err
}

// commit writes the manifest, conditionally when the store can.
func (m *Manager) commit(ctx context.Context, step int64, data []byte) error {
	key := m.key(step, ManifestName)
	err := m.create(ctx, key, data)
	if errors.Is(err, fs.ErrExist) {
		return fmt.Errorf("%w: another writer committed %s first", ErrStepExists, key)
	}
	return err
}

// maxManifest bounds manifest reads.
const maxManifest = 64 << 20

func (m *Manager) readSmall(ctx context.Context, key string) ([]byte, error) {
	var data []byte
	err := m.retry(ctx, "get "+key, func() error {
		rc, err := m.store.Get(ctx, key)
		if err != nil {
			return err
		}
		defer rc.Close()
		data, err = io.ReadAll(io.LimitReader(rc, maxManifest+1))
		if err == nil && len(data) > maxManifest {
			err = fmt.Errorf("%s: larger than %d bytes", key, maxManifest)
		}
		return err
	})
	return data, err
}

// tracker reports a transfer's progress to OnProgress and, at debug level,
// to the log.
type tracker struct {
	m     *Manager
	op    Op
	step  int64
	total int64
	start time.Time
	done  atomic.Int64

	mu      sync.Mutex
	last    time.Time
	lastLog time.Time
}

const (
	progressEvery    = 100 * time.Millisecond
	progressLogEvery = time.Second
)

func (m *Manager) newTracker(op Op, step, total int64) *tracker {
	now := time.Now()
	return &tracker{m: m, op: op, step: step, total: total, start: now, last: now, lastLog: now}
}

func (t *tracker) add(n int64) {
	if n == 0 {
		return
	}
	t.done.Add(n)
	if !t.mu.TryLock() {
		return // another goroutine is reporting
	}
	defer t.mu.Unlock()
	now := time.Now()
	if now.Sub(t.last) >= progressEvery {
		t.last = now
		t.report(now)
	}
	if now.Sub(t.lastLog) >= progressLogEvery {
		t.lastLog = now
		t.m.log.Debug("checkpoint "+t.op.String()+" progress", "ckpt.step", t.step, "bytes", min(t.done.Load(), t.total), "total", t.total, "elapsed", now.Sub(t.start))
	}
}

func (t *tracker) report(now time.Time) {
	if t.m.opts.OnProgress == nil {
		return
	}
	p := Progress{Op: t.op, Step: t.step, Done: max(0, min(t.done.Load(), t.total)), Total: t.total, Elapsed: now.Sub(t.start)}
	t.m.evMu.Lock()
	defer t.m.evMu.Unlock()
	t.m.opts.OnProgress(p)
}

// finish reports completion.
func (t *tracker) finish() {
	t.mu.Lock()
	defer t.mu.Unlock()
	t.done.Store(t.total)
	t.report(time.Now())
}
