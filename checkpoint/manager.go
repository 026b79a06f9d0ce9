package checkpoint

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"io/fs"
	"log/slog"
	"maps"
	"os"
	"runtime"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/cenkalti/backoff/v4"
)

// Defaults used by [NewManager] for zero [ManagerOptions] fields.
const (
	DefaultKeep        = 3
	DefaultConcurrency = 4
	DefaultAttempts    = 4
	DefaultRangeSize   = 16 << 20
)

// BusyPolicy says what Save does when an earlier upload is still running.
// There is never more than one upload in flight.
type BusyPolicy int

const (
	// BusyWait (the default) makes Save wait until the running upload (and
	// any queued one) has ended, then capture. No state is dropped and
	// staging memory holds one state; the caller stalls when it saves
	// faster than the store can take it.
	BusyWait BusyPolicy = iota + 1
	// BusySkip makes Save return [ErrBusy] at once without capturing
	// anything; the caller's next save point tries again.
	BusySkip
	// BusyReplace makes Save capture at once and queue the state behind
	// the running upload, replacing an older queued state (whose upload
	// ends with [ErrSuperseded]). The caller never waits beyond the
	// capture; staging memory holds up to two states.
	BusyReplace
	// BusyCancel makes Save capture at once, abandon the running upload
	// (it commits nothing and ends with [ErrSuperseded]) and any queued
	// one, and upload the new state as soon as the old upload has stopped.
	// For emergency saves, where only the newest state matters.
	BusyCancel
)

// String returns "wait", "skip", "replace" or "cancel".
func (p BusyPolicy) String() string {
	switch p {
	case BusyWait:
		return "wait"
	case BusySkip:
		return "skip"
	case BusyReplace:
		return "replace"
	case BusyCancel:
		return "cancel"
	}
	return fmt.Sprintf("BusyPolicy(%d)", int(p))
}

// ManagerOptions configures a [Manager]. The zero value is usable.
type ManagerOptions struct {
	// Prefix is prepended to every key ("jobs/llm-7b" stores step 100 under
	// jobs/llm-7b/000000000100/). Default: the store's root.
	Prefix string
	// Keep is how many of the newest valid checkpoints retention keeps
	// after each commit. Default [DefaultKeep] (3); negative disables
	// automatic retention (nothing is ever deleted by Save).
	Keep int
	// KeepEvery, when positive, also keeps every step that is a multiple
	// of it (milestones), whatever Keep says.
	KeepEvery int64
	// Busy is the policy for a Save that arrives while an upload is
	// running. Default [BusyWait]. [Snapshot.Busy] overrides it per save.
	Busy BusyPolicy
	// Concurrency bounds the parallel part uploads and ranged downloads.
	// Default [DefaultConcurrency].
	Concurrency int
	// Attempts is how often one store operation (a part's Put, a ranged
	// Get, the commit) is tried before the save or restore fails, with
	// exponential backoff in between. Default [DefaultAttempts]. Errors
	// that cannot heal (disk full, permission denied, invalid key, the
	// step exists) are not retried.
	Attempts int
	// UploadTimeout bounds each upload, from its start to its commit.
	// Default: no bound other than [Snapshot.Deadline], [Upload.Cancel]
	// and Close.
	UploadTimeout time.Duration
	// RangeSize is the size of the ranged reads a restore issues in
	// parallel for parts larger than it, on stores that implement
	// [RangeGetter]. Default [DefaultRangeSize] (16 MiB).
	RangeSize int64
	// StagingDir is where File parts are copied at capture. Default: a
	// private temporary directory, removed by Close.
	StagingDir string
	// StagingRetain is how many bytes of staging memory the Manager keeps
	// between saves for reuse. Zero keeps what the largest save needed, so
	// repeated saves allocate nothing; negative keeps none.
	StagingRetain int64
	// RunID identifies this run in manifests (Writer.RunID). Default: a
	// random id per Manager.
	RunID string
	// Logger receives upload starts, progress (debug), commits, failures,
	// retries and checkpoints skipped at restore, with the keys ckpt.step,
	// bytes and elapsed. Nil discards.
	Logger *slog.Logger
	// OnEvent, if set, is called when an upload starts, commits or fails.
	// Calls are serialized and come from the Manager's goroutines; do not
	// block in it.
	OnEvent func(Event)
	// OnProgress, if set, is called as bytes are uploaded or restored, at
	// most every 100 ms and once at the end. Calls are serialized; do not
	// block in it.
	OnProgress func(Progress)

	// noCRC turns checksums off, for benchmarks that measure their cost.
	noCRC bool
}

// EventKind is what happened to an upload.
type EventKind int

const (
	// EventStarted: the upload began (after capture, and after any wait
	// for an earlier upload).
	EventStarted EventKind = iota + 1
	// EventCommitted: the manifest is stored; the checkpoint exists.
	EventCommitted
	// EventFailed: the upload ended without a commit (Err says why:
	// a store error, [ErrStepExists], [ErrCanceled], [ErrSuperseded], a
	// deadline).
	EventFailed
)

// String returns "started", "committed" or "failed".
func (k EventKind) String() string {
	switch k {
	case EventStarted:
		return "started"
	case EventCommitted:
		return "committed"
	case EventFailed:
		return "failed"
	}
	return fmt.Sprintf("EventKind(%d)", int(k))
}

// Event reports an upload's progress through its life.
type Event struct {
	Kind  EventKind
	Step  int64
	Bytes int64
	// Capture is how long Save blocked its caller capturing the state.
	Capture time.Duration
	// Duration is the upload's time from start to commit or failure (zero
	// for EventStarted, and for a queued upload that never started).
	Duration time.Duration
	// Err is set for EventFailed.
	Err error
}

// Op is the kind of transfer a [Progress] reports.
type Op int

// The transfers.
const (
	// OpSave is an upload.
	OpSave Op = iota + 1
	// OpRestore is a download: Latest, Load, RestoreTo, Verify.
	OpRestore
)

// String returns "save" or "restore".
func (o Op) String() string {
	switch o {
	case OpSave:
		return "save"
	case OpRestore:
		return "restore"
	}
	return fmt.Sprintf("Op(%d)", int(o))
}

// Progress is a transfer's state: Done of Total bytes after Elapsed.
type Progress struct {
	Op      Op
	Step    int64
	Done    int64
	Total   int64
	Elapsed time.Duration
}

// Snapshot is a state to save, for [Manager.SaveSnapshot].
type Snapshot struct {
	// Step is the training step, >= 0. Each step is committed at most
	// once.
	Step int64
	// Parts are the named pieces of the state.
	Parts []Part
	// Metadata is stored in the manifest as is.
	Metadata map[string]string
	// Deadline, if not zero, is when the upload must have committed; it is
	// abandoned otherwise (nothing is committed). It applies in addition
	// to ManagerOptions.UploadTimeout.
	Deadline time.Time
	// Busy overrides ManagerOptions.Busy for this save.
	Busy BusyPolicy
}

// Manager saves checkpoints in the background and restores the newest one
// that verifies. It is safe for concurrent use. Create it with
// [NewManager] and end it with [Manager.Close].
type Manager struct {
	store  Store
	opts   ManagerOptions
	root   string // "" or "prefix/"
	log    *slog.Logger
	pool   *chunkPool
	writer Writer

	evMu sync.Mutex // serializes OnEvent and OnProgress

	stageMu      sync.Mutex
	stageDir     string
	stageCreated bool

	mu         sync.Mutex
	closed     bool
	active     *Upload       // owns the upload slot: capturing or uploading
	pending    *Upload       // queued behind active (BusyReplace, BusyCancel)
	changed    chan struct{} // closed and replaced whenever active or pending change
	unreported []*Upload     // failed uploads whose error nobody has seen
	recent     []sample      // throughput of the last uploads
	wg         sync.WaitGroup
}

type sample struct {
	bytes int64
	dur   time.Duration
}

// NewManager returns a Manager storing checkpoints in store. opts may be
// nil.
func NewManager(store Store, opts *ManagerOptions) (*Manager, error) {
	if store == nil {
		return nil, errors.New("checkpoint: NewManager: nil store")
	}
	m := &Manager{store: store, changed: make(chan struct{})}
	if opts != nil {
		m.opts = *opts
	}
	o := &m.opts
	if p := strings.Trim(o.Prefix, "/"); p != "" {
		if err := ValidateKey(p); err != nil {
			return nil, fmt.Errorf("checkpoint: NewManager: prefix: %w", err)
		}
		m.root = p + "/"
	}
	if o.Keep == 0 {
		o.Keep = DefaultKeep
	}
	if o.KeepEvery < 0 {
		return nil, fmt.Errorf("checkpoint: NewManager: negative KeepEvery %d", o.KeepEvery)
	}
	if o.Busy == 0 {
		o.Busy = BusyWait
	}
	if o.Busy < BusyWait || o.Busy > BusyCancel {
		return nil, fmt.Errorf("checkpoint: NewManager: unknown %v", o.Busy)
	}
	if o.Concurrency <= 0 {
		o.Concurrency = DefaultConcurrency
	}
	if o.Attempts <= 0 {
		o.Attempts = DefaultAttempts
	}
	if o.RangeSize <= 0 {
		o.RangeSize = DefaultRangeSize
	}
	m.pool = &chunkPool{retain: -1}
	switch {
	case o.StagingRetain < 0:
		m.pool.retain = 0
	case o.StagingRetain > 0:
		m.pool.retain = o.StagingRetain
	}
	m.log = o.Logger
	if m.log == nil {
		m.log = slog.New(slog.DiscardHandler)
	}
	host, _ := os.Hostname()
	m.writer = Writer{Host: host, PID: os.Getpid(), RunID: o.RunID}
	if m.writer.RunID == "" {
		var b [8]byte
		rand.Read(b[:])
		m.writer.RunID = hex.EncodeToString(b[:])
	}
	return m, nil
}

// Save captures parts as the state of step and uploads them in the
// background; it is SaveSnapshot with only a step and parts.
func (m *Manager) Save(ctx context.Context, step int64, parts ...Part) (*Upload, error) {
	return m.SaveSnapshot(ctx, Snapshot{Step: step, Parts: parts})
}

// SaveSnapshot captures the snapshot's parts and returns a handle to its
// upload, which runs in the background: parts in parallel, each retried,
// then MANIFEST.json, written only if the step is not committed yet. The
// caller is blocked only for the capture (and, under [BusyWait], while an
// earlier upload finishes).
//
// ctx bounds the capture and any wait; cancelling it after SaveSnapshot
// returns does not stop the upload (use [Upload.Cancel], a Deadline, or
// Close), so that a save outlives the work loop whose context is
// cancelled by an interruption.
//
// Errors of the upload come back from the handle's Wait, or from the next
// Save, or from Close, whichever comes first: if the previous upload
// failed and its error was not yet returned by Wait, SaveSnapshot returns
// an error wrapping [ErrPreviousFailed] and that failure, and saves
// nothing. Other errors: invalid parts ([ErrInvalidPart]), [ErrBusy] under
// [BusySkip], [ErrClosed], and capture failures (a File that cannot be
// read, a WriterFunc's error).
func (m *Manager) SaveSnapshot(ctx context.Context, s Snapshot) (*Upload, error) {
	if s.Step < 0 {
		return nil, fmt.Errorf("checkpoint: save: negative step %d", s.Step)
	}
	if err := validateParts(s.Parts); err != nil {
		return nil, fmt.Errorf("checkpoint: save step %d: %w", s.Step, err)
	}
	policy := s.Busy
	if policy == 0 {
		policy = m.opts.Busy
	}
	if policy < BusyWait || policy > BusyCancel {
		return nil, fmt.Errorf("checkpoint: save step %d: unknown %v", s.Step, policy)
	}
	u := m.newUpload(ctx, s)
	started := false
	defer func() {
		if !started {
			u.cancel(nil)
		}
	}()

	m.mu.Lock()
	if err := m.admitLocked(u); err != nil {
		m.mu.Unlock()
		return nil, err
	}
	if policy == BusySkip && (m.active != nil || m.pending != nil) {
		m.mu.Unlock()
		return nil, fmt.Errorf("checkpoint: save step %d: %w (step %d)", s.Step, ErrBusy, m.busyStep())
	}
	if policy == BusyWait {
		for m.active != nil || m.pending != nil {
			changed, busy := m.changed, m.busyStep()
			m.mu.Unlock()
			select {
			case <-changed:
			case <-ctx.Done():
				return nil, fmt.Errorf("checkpoint: save step %d: waiting for the upload of step %d: %w", s.Step, busy, ctx.Err())
			}
			m.mu.Lock()
			if err := m.admitLocked(u); err != nil {
				m.mu.Unlock()
				return nil, err
			}
		}
	}
	reserved := policy == BusyWait || policy == BusySkip
	if reserved {
		// Hold the slot while capturing, so that no other save starts.
		m.setActiveLocked(u)
	}
	m.mu.Unlock()

	err := m.capture(ctx, u, s.Parts)

	m.mu.Lock()
	if err != nil {
		if reserved {
			m.releaseLocked()
		}
		m.mu.Unlock()
		return nil, err
	}
	var dropped func()
	switch {
	case reserved:
		m.startLocked(u)
	case m.closed:
		m.mu.Unlock()
		u.releaseStaging()
		return nil, fmt.Errorf("checkpoint: save step %d: %w", s.Step, ErrClosed)
	case m.active == nil && m.pending == nil:
		m.setActiveLocked(u)
		m.startLocked(u)
	default:
		if m.pending != nil {
			dropped = m.dropPendingLocked(ErrSuperseded)
		}
		if policy == BusyCancel && m.active != nil {
			m.active.cancel(ErrSuperseded)
		}
		m.pending = u
		m.notifyLocked()
		m.log.Debug("checkpoint queued behind running upload", "ckpt.step", u.step, "policy", policy.String())
	}
	started = true
	m.mu.Unlock()
	if dropped != nil {
		dropped()
	}
	return u, nil
}

// admitLocked refuses saves after Close and reports an unseen failure.
func (m *Manager) admitLocked(u *Upload) error {
	if m.closed {
		return fmt.Errorf("checkpoint: save step %d: %w", u.step, ErrClosed)
	}
	var errs []error
	for _, f := range m.unreported {
		if !f.observed.Swap(true) {
			errs = append(errs, f.err)
		}
	}
	m.unreported = nil
	if len(errs) > 0 {
		return fmt.Errorf("%w (step %d not saved; save again): %w", ErrPreviousFailed, u.step, errors.Join(errs...))
	}
	return nil
}

func (m *Manager) busyStep() int64 {
	if m.active != nil {
		return m.active.step
	}
	if m.pending != nil {
		return m.pending.step
	}
	return -1
}

func (m *Manager) notifyLocked() {
	close(m.changed)
	m.changed = make(chan struct{})
}

func (m *Manager) setActiveLocked(u *Upload) {
	m.active = u
	m.notifyLocked()
}

func (m *Manager) startLocked(u *Upload) {
	m.wg.Add(1)
	go m.run(u)
}

// releaseLocked frees the slot and starts the queued upload, if any.
func (m *Manager) releaseLocked() {
	m.active = nil
	if p := m.pending; p != nil {
		m.pending = nil
		m.active = p
		m.startLocked(p)
	}
	m.notifyLocked()
}

// dropPendingLocked ends the queued upload without starting it. It
// returns the event to emit once m.mu is unlocked (OnEvent may call back
// into the Manager).
func (m *Manager) dropPendingLocked(cause error) func() {
	p := m.pending
	m.pending = nil
	p.cancel(cause)
	p.releaseStaging()
	err := &SaveError{Step: p.step, Err: cause}
	p.finish(err)
	m.notifyLocked()
	return func() {
		m.emit(Event{Kind: EventFailed, Step: p.step, Bytes: p.total, Capture: p.captureTime, Err: err})
		m.log.Info("checkpoint dropped before upload", "ckpt.step", p.step, "bytes", p.total, "err", cause)
	}
}

// capture copies the parts into staging.
func (m *Manager) capture(ctx context.Context, u *Upload, parts []Part) error {
	start := time.Now()
	for _, p := range parts {
		src, err := m.capturePart(ctx, p)
		if err != nil {
			u.releaseStaging()
			return &SaveError{Step: u.step, Part: p.name, Err: fmt.Errorf("capture: %w", err)}
		}
		u.parts = append(u.parts, stagedPart{name: p.name, src: src})
		u.total += src.Size()
	}
	u.captureTime = time.Since(start)
	return nil
}

func (m *Manager) capturePart(ctx context.Context, p Part) (source, error) {
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	switch p.kind {
	case partBytes:
		b := &buffer{pool: m.pool}
		b.fill(p.data, runtime.GOMAXPROCS(0))
		return b, nil
	case partWriter:
		b := &buffer{pool: m.pool}
		if err := p.write(b); err != nil {
			b.release()
			return nil, err
		}
		return b, nil
	default:
		dir, err := m.stagingDir()
		if err != nil {
			return nil, err
		}
		return stageFile(ctx, dir, p.path)
	}
}

func (m *Manager) stagingDir() (string, error) {
	m.stageMu.Lock()
	defer m.stageMu.Unlock()
	if m.stageDir != "" {
		return m.stageDir, nil
	}
	if m.opts.StagingDir != "" {
		if err := os.MkdirAll(m.opts.StagingDir, 0o700); err != nil {
			return "", fmt.Errorf("staging dir: %w", err)
		}
		m.stageDir = m.opts.StagingDir
		return m.stageDir, nil
	}
	d, err := os.MkdirTemp("", "spotsafe-staging-*")
	if err != nil {
		return "", fmt.Errorf("staging dir: %w", err)
	}
	m.stageDir, m.stageCreated = d, true
	return d, nil
}

// run is the goroutine of one upload; it owns the slot until it ends.
func (m *Manager) run(u *Upload) {
	defer m.wg.Done()
	err := m.upload(u)
	u.releaseStaging()
	u.finish(err)
	if err == nil && m.opts.Keep > 0 {
		m.mu.Lock()
		var exclude []int64
		if m.pending != nil {
			exclude = append(exclude, m.pending.step)
		}
		m.mu.Unlock()
		if _, perr := m.prune(u.ctx, m.opts.Keep, exclude); perr != nil {
			m.log.Warn("checkpoint retention failed", "ckpt.step", u.step, "err", perr)
		}
	}
	m.mu.Lock()
	if err != nil && !errors.Is(err, ErrCanceled) && !errors.Is(err, ErrSuperseded) {
		m.unreported = append(m.unreported, u)
	}
	u.cancel(nil)
	m.releaseLocked()
	m.mu.Unlock()
}

// Throughput returns the measured upload rate in bytes per second over
// the recent committed uploads (parts and commit, not capture), or 0 before
// the first commit. A runner uses it to predict whether a state can be
// saved before an interruption deadline.
func (m *Manager) Throughput() float64 {
	m.mu.Lock()
	defer m.mu.Unlock()
	var b int64
	var d time.Duration
	for _, s := range m.recent {
		b += s.bytes
		d += s.dur
	}
	if d <= 0 {
		return 0
	}
	return float64(b) / d.Seconds()
}

const throughputSamples = 8

func (m *Manager) recordThroughput(bytes int64, d time.Duration) {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.recent = append(m.recent, sample{bytes, d})
	if len(m.recent) > throughputSamples {
		m.recent = m.recent[len(m.recent)-throughputSamples:]
	}
}

// Flush waits until no upload is running or queued, including the
// retention that follows a commit, or until ctx ends (returning its
// error). Unlike Close it leaves the Manager usable, and it reports no
// upload errors (Wait, Save and Close do).
func (m *Manager) Flush(ctx context.Context) error {
	m.mu.Lock()
	for m.active != nil || m.pending != nil {
		changed := m.changed
		m.mu.Unlock()
		select {
		case <-changed:
		case <-ctx.Done():
			return ctx.Err()
		}
		m.mu.Lock()
	}
	m.mu.Unlock()
	return nil
}

// Close waits for the running and queued uploads to end, like
// http.Server.Shutdown. If ctx ends first they are abandoned (nothing more
// is committed) and Close waits for them to stop. Close returns the errors
// of failed uploads nobody has seen yet (through Wait or Save), joined,
// including the abandonment. After Close, Save returns [ErrClosed]; reads
// (Latest, List, RestoreTo, Verify, Prune) still work. Close releases the
// staging memory and removes the private staging directory.
func (m *Manager) Close(ctx context.Context) error {
	m.mu.Lock()
	m.closed = true
	abandoned := false
	var dropped func()
	for m.active != nil || m.pending != nil {
		if !abandoned && ctx.Err() != nil {
			abandoned = true
			cause := fmt.Errorf("checkpoint: upload abandoned by Close: %w", context.Cause(ctx))
			if m.pending != nil {
				p := m.pending
				dropped = m.dropPendingLocked(cause)
				m.unreported = append(m.unreported, p)
			}
			if m.active != nil {
				m.active.cancel(cause)
			}
		}
		changed := m.changed
		m.mu.Unlock()
		if dropped != nil {
			dropped()
			dropped = nil
		}
		if abandoned {
			<-changed
		} else {
			select {
			case <-changed:
			case <-ctx.Done():
			}
		}
		m.mu.Lock()
	}
	var errs []error
	for _, f := range m.unreported {
		if !f.observed.Swap(true) {
			errs = append(errs, f.err)
		}
	}
	m.unreported = nil
	m.mu.Unlock()
	m.wg.Wait()

	m.pool.drain()
	m.stageMu.Lock()
	if m.stageCreated {
		if err := os.RemoveAll(m.stageDir); err != nil {
			errs = append(errs, fmt.Errorf("checkpoint: remove staging dir: %w", err))
		}
		m.stageDir, m.stageCreated = "", false
	}
	m.stageMu.Unlock()
	return errors.Join(errs...)
}

// emit delivers an event to OnEvent.
func (m *Manager) emit(e Event) {
	if m.opts.OnEvent == nil {
		return
	}
	m.evMu.Lock()
	defer m.evMu.Unlock()
	m.opts.OnEvent(e)
}

// key returns the store key of a part of step.
func (m *Manager) key(step int64, name string) string {
	return m.root + stepDir(step) + "/" + name
}

// retry runs op until it succeeds, fails permanently, runs out of
// attempts, or ctx ends.
func (m *Manager) retry(ctx context.Context, what string, op func() error) error {
	bo := backoff.NewExponentialBackOff()
	bo.InitialInterval = 100 * time.Millisecond
	bo.MaxInterval = 5 * time.Second
	bo.MaxElapsedTime = 0
	bo.Reset()
	b := backoff.WithContext(backoff.WithMaxRetries(bo, uint64(m.opts.Attempts-1)), ctx)
	return backoff.RetryNotify(func() error {
		err := op()
		if err != nil && (ctx.Err() != nil || permanent(err)) {
			return backoff.Permanent(err)
		}
		return err
	}, b, func(err error, wait time.Duration) {
		m.log.Warn("checkpoint store operation failed; retrying", "op", what, "err", err, "wait", wait)
	})
}

// permanent reports errors that another attempt cannot fix.
func permanent(err error) bool {
	for _, target := range []error{
		ErrInvalidKey, ErrCorrupt, fs.ErrExist, fs.ErrNotExist, fs.ErrPermission,
		syscall.ENOSPC, syscall.EDQUOT, syscall.EROFS, errors.ErrUnsupported,
		context.Canceled, context.DeadlineExceeded,
	} {
		if errors.Is(err, target) {
			return true
		}
	}
	return false
}

// forEach runs fn(ctx, i) for i in [0, n) with at most limit at a time; the
// first error cancels the rest and is returned.
func forEach(ctx context.Context, n, limit int, fn func(ctx context.Context, i int) error) error {
	ctx, cancel := context.WithCancelCause(ctx)
	defer cancel(nil)
	sem := make(chan struct{}, limit)
	var (
		wg    sync.WaitGroup
		once  sync.Once
		first error
	)
loop:
	for i := range n {
		select {
		case sem <- struct{}{}:
		case <-ctx.Done():
			break loop
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			defer func() { <-sem }()
			if err := fn(ctx, i); err != nil {
				once.Do(func() { first = err; cancel(err) })
			}
		}()
	}
	wg.Wait()
	if first != nil {
		return first
	}
	return ctx.Err()
}

func cloneMeta(md map[string]string) map[string]string {
	if len(md) == 0 {
		return nil
	}
	return maps.Clone(md)
}
