package spot

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/spotsafe/spotsafe/checkpoint"
	_ "github.com/spotsafe/spotsafe/checkpoint/filestore" // the default store
	"github.com/spotsafe/spotsafe/notice"
	"github.com/spotsafe/spotsafe/providers"
)

// Metadata keys the runner stores in every checkpoint's manifest. Keys set
// with [Job.SetMetadata] must not start with "spotsafe.".
const (
	// MetaReason is why the checkpoint was taken (a [Reason]).
	MetaReason = "spotsafe.reason"
	// MetaReduced is "true" on a checkpoint of the smaller snapshot.
	MetaReduced = "spotsafe.reduced"
	// MetaRuntime is the job's total run time over all its runs, in
	// seconds, when the checkpoint was taken.
	MetaRuntime = "spotsafe.runtime_seconds"
	// MetaInterruptions counts the final notices the job has received
	// over all its runs.
	MetaInterruptions = "spotsafe.interruptions"
	// MetaThroughput is the upload rate measured when the checkpoint was
	// taken, in bytes per second.
	MetaThroughput = "spotsafe.throughput"
	// MetaNotice is the ID of the notice behind an emergency checkpoint.
	MetaNotice = "spotsafe.notice"
)

// ErrNoSafePoint is wrapped by the InterruptedError of a run whose worker
// returned after a final notice without reaching [Job.Step] again, so no
// emergency checkpoint could be taken (the newest periodic one remains).
var ErrNoSafePoint = errors.New("spot: the worker returned without reaching a safe point after the notice")

// ErrNoSnapshot is returned by [Job.Step] when a checkpoint is due and
// neither Options.Snapshot nor [Job.SetSnapshot] says how to take one.
var ErrNoSnapshot = errors.New("spot: no snapshot function (set Options.Snapshot or call Job.SetSnapshot)")

// NoticeError is the cause with which the work's context is cancelled on a
// final notice: context.Cause(ctx) returns it. It matches [ErrInterrupted].
type NoticeError struct {
	Notice notice.Notice
	// Late is set when the context was cancelled because the worker had
	// not reached a safe point in time.
	Late bool
}

// Error names the notice, and says when the worker was cancelled early.
func (e *NoticeError) Error() string {
	if e.Late {
		return fmt.Sprintf("spot: %s %s notice, and no safe point reached in time", e.Notice.Provider, e.Notice.Kind)
	}
	return fmt.Sprintf("spot: %s %s notice", e.Notice.Provider, e.Notice.Kind)
}

// Is matches ErrInterrupted.
func (e *NoticeError) Is(target error) bool { return target == ErrInterrupted }

// Run runs fn under spot supervision and returns its outcome.
//
// It opens the checkpoint store, restores the newest checkpoint that
// verifies (available to fn as [Job.Restored]), starts watching the cloud's
// interruption notices and the termination signals, and calls fn on the
// calling goroutine with a [Job]. fn calls [Job.Step] at safe points, where
// the runner takes periodic, early (advisory notice) and emergency (final
// notice) checkpoints by calling the snapshot function on fn's goroutine.
//
// Run returns nil when fn returns nil; fn's error when it fails; and, after
// a final notice, an [*InterruptedError] (matching [ErrInterrupted], and
// [ErrSaveFailed] if the emergency checkpoint did not commit) whatever fn
// returned. [ExitCode] turns the result into a process exit code. Run
// returns only after fn has returned, every upload has ended, and every
// goroutine it started has stopped. opts may be nil.
func Run(ctx context.Context, fn func(ctx context.Context, job *Job) error, opts *Options) error {
	if fn == nil {
		return errors.New("spot: Run: nil work function")
	}
	o, err := normalize(opts)
	if err != nil {
		return err
	}
	r := &runner{
		o:          o,
		log:        o.log,
		events:     newDispatcher(o.OnEvent),
		start:      time.Now(),
		notices:    make(map[string]notice.Notice),
		handled:    make(map[string]string),
		saves:      make(map[int64]saveInfo),
		committed:  -1,
		wake:       make(chan struct{}, 1),
		urgentC:    make(chan struct{}),
		lastSaveAt: time.Now(),
		hasSmall:   o.SmallSnapshot != nil,
	}
	defer r.events.close()
	return r.run(ctx, fn)
}

// saveInfo is what the runner remembers of a save in flight, to label the
// Manager's events.
type saveInfo struct {
	reason   Reason
	reduced  bool
	start    time.Time // capture
	uploaded time.Time // upload start
}

// runner is the state of one Run.
type runner struct {
	o      *options
	log    *slog.Logger
	events *dispatcher
	m      *checkpoint.Manager
	start  time.Time

	// From the restored checkpoint.
	priorRuntime       time.Duration
	priorInterruptions int64
	priorThroughput    float64
	priorBytes         int64

	attention atomic.Bool   // Step must take its slow path
	wake      chan struct{} // wakes the control loop
	urgentC   chan struct{} // closed when a final notice is first acted on
	urgentSet sync.Once

	mu          sync.Mutex
	notices     map[string]notice.Notice // active, by ID
	handled     map[string]string        // advisory notice ID -> the version that got its checkpoint
	urgent      *notice.Notice           // the final notice being acted on
	saveEnd     time.Time                // when the emergency save must have committed
	cutoff      time.Time                // when a worker that has not reached Step is cancelled
	emergency   bool                     // the worker entered the emergency path
	lateFired   bool
	advisory    bool // an advisory checkpoint is due
	periodicDue bool
	lastSaveAt  time.Time
	saves       map[int64]saveInfo
	committed   int64
	lastUpload  time.Duration // duration of the last committed upload
	cost        time.Duration // moving average of the time a save blocks Step
	fullBytes   int64         // size of the last full state captured
	interval    time.Duration // current periodic interval
	hasSmall    bool          // a smaller snapshot is available
	cancelWork  context.CancelCauseFunc
	interrupted *InterruptedError
}

func (r *runner) run(ctx context.Context, fn func(ctx context.Context, job *Job) error) (err error) {
	o := r.o
	store, closeStore, err := r.openStore(ctx)
	if err != nil {
		return err
	}
	defer closeStore()

	mo := checkpoint.ManagerOptions{}
	if o.Manager != nil {
		mo = *o.Manager
	}
	userEvent := mo.OnEvent
	mo.OnEvent = func(e checkpoint.Event) {
		r.onManagerEvent(e)
		if userEvent != nil {
			userEvent(e)
		}
	}
	if mo.Logger == nil {
		mo.Logger = r.log
	}
	r.m, err = checkpoint.NewManager(store, &mo)
	if err != nil {
		return fmt.Errorf("spot: %w", err)
	}
	closeManager := func(ctx context.Context) {
		if cerr := r.m.Close(ctx); cerr != nil {
			r.log.Warn("checkpoint manager closed with errors", "err", cerr)
		}
	}

	job := &Job{r: r, snapshot: o.Snapshot, small: o.SmallSnapshot, lastStep: -1, lastSaveStep: -1}
	if err := r.restore(ctx, job); err != nil {
		closeManager(ctx)
		return err
	}

	sources, closeSources, err := r.sources(ctx)
	if err != nil {
		closeManager(ctx)
		return err
	}
	defer closeSources()

	workCtx, cancelWork := context.WithCancelCause(ctx)
	defer cancelWork(nil)
	r.mu.Lock()
	r.cancelWork = cancelWork
	r.interval = r.currentIntervalLocked()
	r.mu.Unlock()

	// The watcher and the control loop live until fn has returned.
	bg, stopBG := context.WithCancel(context.WithoutCancel(ctx))
	var wg sync.WaitGroup
	if len(sources) > 0 {
		w := notice.NewWatcher(sources, &notice.WatcherOptions{Interval: o.PollInterval, Logger: r.log})
		wg.Go(func() { _ = w.Watch(bg, r.onNotice) })
	}
	wg.Go(func() { r.control(bg) })

	names := make([]string, len(sources))
	for i, s := range sources {
		names[i] = s.Name()
	}
	startStep := int64(-1)
	if job.restored != nil {
		startStep = job.restored.Step
	}
	r.events.emit(Event{Kind: EventStarted, Step: startStep, Detail: "watching " + strings.Join(names, ", ")})
	r.log.Info("work started", "ckpt.step", startStep, "sources", names)

	ferr := fn(workCtx, job)

	stopBG()
	wg.Wait()
	cancelWork(context.Canceled)

	result, closeCtx, cancelClose, last := r.outcome(ctx, job, ferr)
	defer cancelClose()
	closeManager(closeCtx)
	last()
	return result
}

// outcome decides what Run returns once fn has returned, how long closing
// the Manager may wait for uploads, and the last event, emitted once the
// Manager is closed so that it follows every checkpoint event.
func (r *runner) outcome(ctx context.Context, job *Job, ferr error) (error, context.Context, context.CancelFunc, func()) {
	r.mu.Lock()
	ie, urgent, end := r.interrupted, r.urgent, r.saveEnd
	committed := r.committed
	if urgent == nil {
		// A final notice the control loop has not acted on yet.
		now := time.Now()
		for _, n := range r.notices {
			if r.isUrgent(n, now) {
				urgent = &n
				end = r.saveEndFor(n, now)
				break
			}
		}
	}
	r.mu.Unlock()
	switch {
	case ie != nil:
		// The emergency save has ended; nothing else needs to finish.
		c, cancel := context.WithTimeout(context.WithoutCancel(ctx), time.Second)
		return ie, c, cancel, func() {
			r.events.emit(Event{Kind: EventInterrupted, Step: ie.Step, Notice: ie.Notice, Reduced: ie.Reduced, Duration: ie.NoticeToCommit, Err: ie.Err})
		}
	case urgent != nil && ferr != nil:
		// A final notice, but the worker returned without a safe point.
		ie = &InterruptedError{Notice: *urgent, Step: committed, Err: errors.Join(ErrNoSafePoint, ferr)}
		r.log.Error("interrupted without an emergency checkpoint", "notice", *urgent, "ckpt.step", committed, "err", ferr)
		c, cancel := context.WithDeadline(context.WithoutCancel(ctx), end)
		return ie, c, cancel, func() {
			r.mu.Lock()
			ie.Step = r.committed
			r.mu.Unlock()
			r.events.emit(Event{Kind: EventInterrupted, Step: ie.Step, Notice: *urgent, Err: ie.Err})
		}
	}
	c, cancel := context.WithCancel(ctx)
	return ferr, c, cancel, func() {
		r.mu.Lock()
		committed := r.committed
		r.mu.Unlock()
		if ferr != nil {
			r.log.Error("work failed", "ckpt.step", committed, "lastStep", job.lastStep, "err", ferr)
		} else {
			r.log.Info("work finished", "ckpt.step", committed, "lastStep", job.lastStep)
		}
		r.events.emit(Event{Kind: EventFinished, Step: committed, Err: ferr})
	}
}

func (r *runner) openStore(ctx context.Context) (checkpoint.Store, func(), error) {
	if r.o.Store != nil {
		return r.o.Store, func() {}, nil
	}
	s, err := checkpoint.Open(ctx, r.o.StoreURL)
	if err != nil {
		return nil, nil, fmt.Errorf("spot: %w", err)
	}
	return s, func() {
		if c, ok := s.(io.Closer); ok {
			if err := c.Close(); err != nil {
				r.log.Warn("closing checkpoint store", "err", err)
			}
		}
	}, nil
}

// restore loads the newest checkpoint that verifies; a reduced one comes
// with the newest full one before it.
func (r *runner) restore(ctx context.Context, job *Job) error {
	start := time.Now()
	cp, err := r.m.Latest(ctx)
	if errors.Is(err, checkpoint.ErrNoCheckpoint) {
		if errors.Is(err, checkpoint.ErrCorrupt) {
			r.log.Warn("every checkpoint failed verification; starting afresh", "err", err)
		} else {
			r.log.Info("no checkpoint; starting afresh")
		}
		return nil
	}
	if err != nil {
		return fmt.Errorf("spot: restore: %w", err)
	}
	res := &Restored{Checkpoint: cp, Reduced: cp.Metadata()[MetaReduced] == "true"}
	if res.Reduced {
		res.Base = r.loadBase(ctx, cp.Step)
	}
	res.Duration = time.Since(start)
	job.restored = res
	job.lastStep = cp.Step
	job.lastSaveStep = cp.Step

	md := cp.Metadata()
	if v, err := strconv.ParseFloat(md[MetaRuntime], 64); err == nil && v > 0 {
		r.priorRuntime = time.Duration(v * float64(time.Second))
	}
	if v, err := strconv.ParseInt(md[MetaInterruptions], 10, 64); err == nil && v > 0 {
		r.priorInterruptions = v
	}
	if v, err := strconv.ParseFloat(md[MetaThroughput], 64); err == nil && v > 0 {
		r.priorThroughput = v
	}
	bytes := cp.Manifest.Bytes()
	if !res.Reduced {
		r.priorBytes = bytes
	} else if res.Base != nil {
		r.priorBytes = res.Base.Manifest.Bytes()
	}
	r.committed = cp.Step
	r.log.Info("checkpoint restored", "ckpt.step", cp.Step, "bytes", bytes, "elapsed", res.Duration, "reduced", res.Reduced)
	r.events.emit(Event{Kind: EventRestored, Step: cp.Step, Bytes: bytes, Duration: res.Duration, Reduced: res.Reduced})
	return nil
}

// loadBase finds the newest full checkpoint older than step.
func (r *runner) loadBase(ctx context.Context, step int64) *checkpoint.Checkpoint {
	infos, err := r.m.List(ctx)
	if err != nil {
		r.log.Warn("listing checkpoints for the base of a reduced checkpoint", "err", err)
		return nil
	}
	for i := len(infos) - 1; i >= 0; i-- {
		in := infos[i]
		if in.Step >= step || in.Status != checkpoint.StatusValid || in.Manifest.Metadata[MetaReduced] == "true" {
			continue
		}
		cp, err := r.m.Load(ctx, in.Step)
		if err != nil {
			r.log.Warn("base checkpoint failed to load; trying an older one", "ckpt.step", in.Step, "err", err)
			continue
		}
		return cp
	}
	return nil
}

// sources builds the notice sources: the cloud's (or Options.Sources) and
// the signal source.
func (r *runner) sources(ctx context.Context) ([]notice.Source, func(), error) {
	o := r.o
	var out []notice.Source
	switch {
	case o.Sources != nil:
		out = append(out, o.Sources...)
	case o.Provider == ProviderNone:
	case o.Provider == ProviderAuto:
		d, err := providers.Detect(ctx, &providers.DetectOptions{Endpoint: o.Endpoint, Logger: r.log, PollInterval: o.PollInterval})
		switch {
		case errors.Is(err, providers.ErrNoCloud):
			r.log.Info("no cloud detected; watching signals only", "err", err)
		case err != nil:
			return nil, nil, fmt.Errorf("spot: %w", err)
		default:
			out = append(out, d.Source)
		}
	default:
		s, err := providers.NewSource(o.Provider, &providers.SourceOptions{Endpoint: o.Endpoint, Logger: r.log, PollInterval: o.PollInterval})
		if err != nil {
			return nil, nil, fmt.Errorf("spot: %w", err)
		}
		out = append(out, s)
	}
	closeFn := func() {}
	if !o.NoSignals {
		sig := notice.NewSignalSource(&notice.SignalOptions{Signals: o.Signals, Grace: o.Grace})
		out = append(out, sig)
		closeFn = func() { _ = sig.Close() }
	}
	return out, closeFn, nil
}

// onNotice handles a watcher event (on the watcher's goroutine).
func (r *runner) onNotice(ev notice.Event) {
	n := ev.Notice
	r.mu.Lock()
	if ev.Type == notice.EventCanceled {
		delete(r.notices, n.ID)
	} else {
		r.notices[n.ID] = n
	}
	urgent := r.isUrgent(n, time.Now())
	r.mu.Unlock()

	// The watcher logs the notice itself.
	if ev.Type == notice.EventCanceled {
		r.events.emit(Event{Kind: EventNoticeCanceled, Notice: n})
	} else {
		r.events.emit(Event{Kind: EventNotice, Notice: n, Urgent: urgent, Remaining: n.Remaining(time.Now())})
	}
	r.kick()
}

// isUrgent reports whether n stops the work now: final, with a deadline
// unknown or within the horizon.
func (r *runner) isUrgent(n notice.Notice, now time.Time) bool {
	return n.Final() && (n.Deadline.IsZero() || n.Deadline.Sub(now) <= r.o.Horizon)
}

// kick wakes the control loop.
func (r *runner) kick() {
	select {
	case r.wake <- struct{}{}:
	default:
	}
}

// control is the runner's clock: it raises periodic checkpoints, promotes
// far final notices when they come within the horizon, and cancels a late
// worker.
func (r *runner) control(ctx context.Context) {
	timer := time.NewTimer(time.Hour)
	defer timer.Stop()
	for {
		next := r.evaluate(time.Now())
		wait := time.Hour
		if !next.IsZero() {
			wait = max(time.Until(next), 0)
		}
		timer.Reset(wait)
		select {
		case <-ctx.Done():
			return
		case <-r.wake:
		case <-timer.C:
		}
	}
}

// evaluate updates the runner's decisions at now and returns when it must
// look again (zero: only when woken).
func (r *runner) evaluate(now time.Time) time.Time {
	var next time.Time
	soon := func(t time.Time) {
		if next.IsZero() || t.Before(next) {
			next = t
		}
	}
	var emits []Event
	var late func()

	r.mu.Lock()
	// Periodic checkpoints.
	r.interval = r.currentIntervalLocked()
	if r.interval > 0 && !r.emergency {
		due := r.lastSaveAt.Add(r.interval)
		if !now.Before(due) {
			r.periodicDue = true
		} else {
			soon(due)
		}
	}
	// Notices: the earliest urgent final notice is acted on; others get
	// one early checkpoint per version.
	var pick *notice.Notice
	for _, n := range r.notices {
		if r.isUrgent(n, now) {
			if pick == nil || deadlineOf(n, r.o.Grace).Before(deadlineOf(*pick, r.o.Grace)) {
				pick = &n
			}
			continue
		}
		if n.Final() {
			soon(n.Deadline.Add(-r.o.Horizon))
		}
		if v := noticeVersion(n); r.handled[n.ID] != v {
			r.handled[n.ID] = v
			r.advisory = true
		}
	}
	if !r.emergency {
		switch {
		case pick != nil && (r.urgent == nil || r.urgent.ID != pick.ID || !r.urgent.Deadline.Equal(pick.Deadline)):
			r.urgent = pick
			r.saveEnd = r.saveEndFor(*pick, now)
			r.cutoff = r.cutoffFor(now)
			r.lateFired = false
			r.log.Warn("final notice: checkpointing at the next safe point", "provider", pick.Provider, "notice.kind", pick.Kind.String(),
				"notice.deadline", pick.Deadline, "save_by", r.saveEnd, "cancel_at", r.cutoff)
		case pick == nil && r.urgent != nil:
			r.log.Info("final notice withdrawn before the work stopped; carrying on", "notice", *r.urgent)
			r.urgent = nil
		}
	}
	if r.urgent != nil && !r.emergency && !r.lateFired {
		if !now.Before(r.cutoff) {
			r.lateFired = true
			n := *r.urgent
			cancel := r.cancelWork
			emits = append(emits, Event{Kind: EventLate, Notice: n, Remaining: r.saveEnd.Sub(now)})
			late = func() {
				r.log.Warn("the worker has not reached a safe point; cancelling its context so that it can still save",
					"provider", n.Provider, "notice.kind", n.Kind.String(), "remaining", r.saveEnd.Sub(now))
				if cancel != nil {
					cancel(&NoticeError{Notice: n, Late: true})
				}
			}
		} else {
			soon(r.cutoff)
		}
	}
	if r.urgent != nil || r.advisory || r.periodicDue {
		r.attention.Store(true)
	}
	if r.urgent != nil {
		r.urgentSet.Do(func() { close(r.urgentC) })
	}
	r.mu.Unlock()

	for _, e := range emits {
		r.events.emit(e)
	}
	if late != nil {
		late()
	}
	return next
}

// noticeVersion identifies a notice's content, so that an updated
// advisory notice gets another early checkpoint.
func noticeVersion(n notice.Notice) string {
	return n.Kind.String() + "@" + n.Deadline.UTC().Format(time.RFC3339Nano)
}

func deadlineOf(n notice.Notice, grace time.Duration) time.Time {
	if n.Deadline.IsZero() {
		return n.Observed.Add(grace)
	}
	return n.Deadline
}

// minSaveWindow is the least time an emergency save is given, even when
// the notice arrives inside the margin or after its deadline: best effort.
const minSaveWindow = time.Second

// saveEndFor is when the emergency save for n must have committed:
// Deadline − Margin, with the margin capped at a third of the time left,
// and never sooner than minSaveWindow from now.
func (r *runner) saveEndFor(n notice.Notice, now time.Time) time.Time {
	deadline := deadlineOf(n, r.o.Grace)
	left := deadline.Sub(now)
	margin := max(min(r.o.Margin, left/3), 0)
	end := deadline.Add(-margin)
	if end.Before(now.Add(minSaveWindow)) {
		end = now.Add(minSaveWindow)
	}
	return end
}

// cutoffFor is when a worker that has not reached a safe point is
// cancelled: early enough that the expected save (the full state if it
// fits, else nothing but the small one) plus one capture still fits before
// saveEnd. With no measurement yet, half the time left.
func (r *runner) cutoffFor(now time.Time) time.Time {
	left := r.saveEnd.Sub(now)
	tp := r.throughputLocked()
	if tp <= 0 || r.fullBytes <= 0 && r.priorBytes <= 0 {
		return now.Add(left / 2)
	}
	bytes := r.fullBytes
	if bytes <= 0 {
		bytes = r.priorBytes
	}
	need := r.cost + safety(EstimateSave(bytes, tp, 0))
	if need > left && r.hasSmall {
		need = r.cost
	}
	return now.Add(max(left-need, 0))
}

// safety inflates estimates: throughput varies.
func safety(d time.Duration) time.Duration { return d + d/4 }

// throughputLocked is the measured upload rate, or the one stored by the
// previous run.
func (r *runner) throughputLocked() float64 {
	if tp := r.m.Throughput(); tp > 0 {
		return tp
	}
	return r.priorThroughput
}

// liveAfter is how long an upload must have run before its rate is
// trusted: stores read ahead of what they have sent.
const liveAfter = 250 * time.Millisecond

// liveThroughput is the rate of a running upload so far, 0 if it has not
// run long enough to tell.
func (r *runner) liveThroughput(up *checkpoint.Upload) float64 {
	if up == nil {
		return 0
	}
	done, _ := up.Progress()
	r.mu.Lock()
	started := r.saves[up.Step()].uploaded
	r.mu.Unlock()
	elapsed := time.Since(started)
	if started.IsZero() || elapsed < liveAfter || done <= 0 {
		return 0
	}
	return float64(done) / elapsed.Seconds()
}

// currentIntervalLocked is the periodic interval, adaptive or fixed.
func (r *runner) currentIntervalLocked() time.Duration {
	o := r.o
	if !o.Adaptive || r.cost <= 0 {
		return o.Interval
	}
	mtbi := r.mtbiLocked()
	t := OptimalInterval(r.cost, mtbi)
	t = max(t, 2*r.lastUpload)
	return min(t, mtbi)
}

// mtbiLocked estimates the mean time between interruptions from the
// job's whole history, with the prior counted as one observed interval.
func (r *runner) mtbiLocked() time.Duration {
	runtime := r.priorRuntime + time.Since(r.start)
	return (r.o.MTBI + runtime) / time.Duration(1+r.priorInterruptions)
}

// onManagerEvent turns the Manager's upload events into the runner's.
func (r *runner) onManagerEvent(e checkpoint.Event) {
	r.mu.Lock()
	info := r.saves[e.Step]
	ev := Event{Step: e.Step, Reason: info.reason, Reduced: info.reduced, Bytes: e.Bytes, Err: e.Err}
	switch e.Kind {
	case checkpoint.EventStarted:
		ev.Kind = EventCheckpointStarted
		ev.Duration = e.Capture
		if _, ok := r.saves[e.Step]; ok {
			info.uploaded = time.Now()
			r.saves[e.Step] = info
		}
	case checkpoint.EventCommitted:
		ev.Kind = EventCheckpointCommitted
		ev.Duration = e.Duration
		r.committed = max(r.committed, e.Step)
		r.lastUpload = e.Duration
		if e.Duration > 0 {
			ev.Throughput = float64(e.Bytes) / e.Duration.Seconds()
		}
		delete(r.saves, e.Step)
	case checkpoint.EventFailed:
		ev.Kind = EventCheckpointFailed
		ev.Duration = e.Duration
		delete(r.saves, e.Step)
	}
	r.mu.Unlock()
	r.events.emit(ev)
}
