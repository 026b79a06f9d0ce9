package spot

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"strconv"
	"strings"
	"time"

	"github.com/spotsafe/spotsafe/checkpoint"
	"github.com/spotsafe/spotsafe/notice"
)

// Restored is the checkpoint a run starts from: its step, metadata and
// verified parts (read them with ReadPart).
type Restored struct {
	*checkpoint.Checkpoint
	// Reduced is set when the checkpoint holds the smaller snapshot
	// (Options.SmallSnapshot), saved because the full state would not fit
	// before a deadline.
	Reduced bool
	// Base is, for a reduced checkpoint, the newest full checkpoint before
	// it (nil if none), so that the worker can combine the two: for
	// example weights from the reduced one and optimizer state from Base.
	Base *checkpoint.Checkpoint
	// Duration is how long the restore took.
	Duration time.Duration
}

// Job is the worker's handle on the runner, passed to the function given to
// [Run]. Its methods are meant for the worker's goroutine (the one Run
// called fn on), except Notices, Committed and Interval, which are safe
// anywhere.
type Job struct {
	r        *runner
	restored *Restored

	// Owned by the worker's goroutine.
	snapshot     func(step int64) ([]checkpoint.Part, error)
	small        func(step int64) ([]checkpoint.Part, error)
	meta         map[string]string
	lastStep     int64
	lastSaveStep int64
	inflight     *checkpoint.Upload
}

// Restored returns the checkpoint the run resumed from, nil on a fresh
// start.
func (j *Job) Restored() *Restored { return j.restored }

// SetSnapshot sets the function that returns the worker's full state,
// replacing Options.Snapshot. It is typically called once the worker has
// built its state from Restored.
func (j *Job) SetSnapshot(fn func(step int64) ([]checkpoint.Part, error)) { j.snapshot = fn }

// SetSmallSnapshot sets the function that returns the smaller state saved
// when the full one would not fit before a deadline, replacing
// Options.SmallSnapshot.
func (j *Job) SetSmallSnapshot(fn func(step int64) ([]checkpoint.Part, error)) {
	j.small = fn
	j.r.mu.Lock()
	j.r.hasSmall = fn != nil
	j.r.mu.Unlock()
}

// SetMetadata stores key=value in the metadata of the following
// checkpoints. Keys starting with "spotsafe." are reserved and ignored.
func (j *Job) SetMetadata(key, value string) {
	if strings.HasPrefix(key, "spotsafe.") {
		return
	}
	if j.meta == nil {
		j.meta = make(map[string]string)
	}
	j.meta[key] = value
}

// Notices returns the notices present now.
func (j *Job) Notices() []notice.Notice {
	j.r.mu.Lock()
	defer j.r.mu.Unlock()
	out := make([]notice.Notice, 0, len(j.r.notices))
	for _, n := range j.r.notices {
		out = append(out, n)
	}
	return out
}

// Committed returns the newest committed step, -1 if none.
func (j *Job) Committed() int64 {
	j.r.mu.Lock()
	defer j.r.mu.Unlock()
	return j.r.committed
}

// Interval returns the current periodic checkpoint interval (it changes
// with Options.Adaptive); 0 or negative means none.
func (j *Job) Interval() time.Duration {
	j.r.mu.Lock()
	defer j.r.mu.Unlock()
	return j.r.interval
}

// Step marks a safe point: the worker's state is consistent and is that of
// step (restoring checkpoint step must bring the worker back to exactly
// here). Steps must not decrease. Step returns at once unless a checkpoint
// is due:
//
//   - a periodic or early (advisory notice) checkpoint: the snapshot
//     function is called here, on the worker's goroutine, the state is
//     captured, and Step returns while it uploads in the background;
//   - a final notice: the emergency checkpoint is captured (the smaller
//     snapshot if the full state will not commit in time), the work's
//     context is cancelled with a [*NoticeError] as cause, and Step waits
//     for the commit and returns an [*InterruptedError]. The worker must
//     return; Run returns the same error.
//
// Step also returns the context's cause once ctx is cancelled, so a loop
// can simply return Step's error.
func (j *Job) Step(ctx context.Context, step int64) error {
	if step < j.lastStep || step < 0 {
		return fmt.Errorf("spot: Step(%d) after Step(%d): steps must not decrease or be negative", step, j.lastStep)
	}
	j.lastStep = step
	if j.r.attention.Load() || j.r.o.EverySteps > 0 && step-max(j.lastSaveStep, 0) >= j.r.o.EverySteps {
		return j.safePoint(ctx, step, false)
	}
	if ctx.Err() != nil {
		return context.Cause(ctx)
	}
	return nil
}

// Checkpoint is a safe point that saves the state of step now (unless it
// is committed already) and waits for the commit. On a final notice it
// behaves as Step does.
func (j *Job) Checkpoint(ctx context.Context, step int64) error {
	if step < j.lastStep || step < 0 {
		return fmt.Errorf("spot: Checkpoint(%d) after Step(%d): steps must not decrease or be negative", step, j.lastStep)
	}
	j.lastStep = step
	return j.safePoint(ctx, step, true)
}

// safePoint is Step's slow path.
func (j *Job) safePoint(ctx context.Context, step int64, explicit bool) error {
	r := j.r
	r.mu.Lock()
	if ie := r.interrupted; ie != nil {
		r.mu.Unlock()
		return ie
	}
	if r.urgent != nil {
		n, end := *r.urgent, r.saveEnd
		r.emergency = true
		r.mu.Unlock()
		return j.emergency(ctx, step, n, end)
	}
	r.mu.Unlock()
	if err := ctx.Err(); err != nil {
		return context.Cause(ctx)
	}

	// One upload at a time: a periodic save waits until the previous one
	// has ended; an explicit one waits for it.
	if j.inflight != nil {
		if explicit {
			if j.awaitOrUrgent(ctx, j.inflight) {
				return j.safePoint(ctx, step, false)
			}
		}
		select {
		case <-j.inflight.Done():
			_ = j.inflight.Wait(ctx) // marks its error as seen; events report it
			j.inflight = nil
		default:
			return nil // stay attentive; try at the next step
		}
	}

	r.mu.Lock()
	reason := Reason("")
	switch {
	case explicit:
		reason = ReasonExplicit
	case r.advisory:
		reason = ReasonAdvisory
	case r.periodicDue || r.o.EverySteps > 0 && step-max(j.lastSaveStep, 0) >= r.o.EverySteps:
		reason = ReasonPeriodic
	}
	if reason == "" || step <= j.lastSaveStep {
		// Nothing due, or this state is saved already.
		r.advisory, r.periodicDue = false, false
		r.attention.Store(r.urgent != nil)
		r.mu.Unlock()
		if explicit {
			return j.waitCommitted(ctx, step)
		}
		return nil
	}
	r.mu.Unlock()

	if j.snapshot == nil {
		return ErrNoSnapshot
	}
	up, err := j.save(ctx, step, reason, false, checkpoint.BusyReplace, time.Time{})
	r.mu.Lock()
	r.advisory, r.periodicDue = false, false
	r.lastSaveAt = time.Now()
	r.attention.Store(r.urgent != nil)
	r.mu.Unlock()
	r.kick()
	if err != nil {
		if explicit || errors.Is(err, errSnapshot) {
			return err
		}
		// A storage problem must not stop the work; the next period
		// tries again, and the events say what happened.
		return nil
	}
	j.inflight = up
	if explicit {
		if j.awaitOrUrgent(ctx, up) {
			// A final notice: the emergency path takes over this upload.
			return j.safePoint(ctx, step, false)
		}
		if err := up.Wait(ctx); err != nil {
			return fmt.Errorf("spot: checkpoint step %d: %w", step, err)
		}
		j.inflight = nil
	}
	return nil
}

// awaitOrUrgent waits for up to end, for ctx, or for a final notice, and
// reports whether it was the notice.
func (j *Job) awaitOrUrgent(ctx context.Context, up *checkpoint.Upload) bool {
	select {
	case <-up.Done():
		return false
	case <-ctx.Done():
		return false
	case <-j.r.urgentC:
	}
	j.r.mu.Lock()
	urgent := j.r.urgent != nil
	j.r.mu.Unlock()
	if urgent && !ended(up) {
		return true
	}
	// The notice was withdrawn: just wait.
	select {
	case <-up.Done():
	case <-ctx.Done():
	}
	return false
}

// waitCommitted waits for an upload of step already in flight.
func (j *Job) waitCommitted(ctx context.Context, step int64) error {
	if j.inflight != nil && j.inflight.Step() == step {
		if j.awaitOrUrgent(ctx, j.inflight) {
			return j.safePoint(ctx, step, false)
		}
		if err := j.inflight.Wait(ctx); err != nil {
			return fmt.Errorf("spot: checkpoint step %d: %w", step, err)
		}
	}
	return nil
}

// errSnapshot marks failures of the worker's snapshot function.
var errSnapshot = errors.New("spot: snapshot function failed")

// save calls a snapshot function and hands its parts to the Manager.
func (j *Job) save(ctx context.Context, step int64, reason Reason, reduced bool, busy checkpoint.BusyPolicy, deadline time.Time) (*checkpoint.Upload, error) {
	r := j.r
	fn := j.snapshot
	if reduced {
		fn = j.small
	}
	start := time.Now()
	parts, err := fn(step)
	if err != nil {
		err = fmt.Errorf("%w at step %d: %w", errSnapshot, step, err)
		r.log.Error("snapshot failed", "ckpt.step", step, "reason", reason, "err", err)
		r.events.emit(Event{Kind: EventCheckpointFailed, Step: step, Reason: reason, Reduced: reduced, Err: err})
		return nil, err
	}
	r.mu.Lock()
	r.saves[step] = saveInfo{reason: reason, reduced: reduced, start: start}
	md := j.metadataLocked(reason, reduced)
	r.mu.Unlock()
	snap := checkpoint.Snapshot{Step: step, Parts: parts, Metadata: md, Deadline: deadline, Busy: busy}
	up, err := r.m.SaveSnapshot(ctx, snap)
	if errors.Is(err, checkpoint.ErrPreviousFailed) {
		// An earlier failure, reported (and logged by its events) now;
		// this state was not saved, so save it again.
		r.log.Warn("an earlier checkpoint failed", "err", err)
		up, err = r.m.SaveSnapshot(ctx, snap)
	}
	blocked := time.Since(start)
	if err != nil {
		r.mu.Lock()
		delete(r.saves, step)
		r.mu.Unlock()
		r.log.Warn("checkpoint not taken", "ckpt.step", step, "reason", reason, "err", err)
		r.events.emit(Event{Kind: EventCheckpointFailed, Step: step, Reason: reason, Reduced: reduced, Err: err})
		return nil, err
	}
	j.lastSaveStep = step
	r.mu.Lock()
	if !reduced {
		r.fullBytes = up.Bytes()
		// The cost to the work, for the adaptive interval.
		if r.cost == 0 {
			r.cost = blocked
		} else {
			r.cost = (3*r.cost + blocked) / 4
		}
	}
	r.mu.Unlock()
	return up, nil
}

// metadataLocked builds a checkpoint's metadata: the worker's own keys and
// the runner's history.
func (j *Job) metadataLocked(reason Reason, reduced bool) map[string]string {
	r := j.r
	md := maps.Clone(j.meta)
	if md == nil {
		md = make(map[string]string)
	}
	md[MetaReason] = string(reason)
	if reduced {
		md[MetaReduced] = "true"
	}
	runtime := r.priorRuntime + time.Since(r.start)
	md[MetaRuntime] = strconv.FormatFloat(runtime.Seconds(), 'f', 3, 64)
	interruptions := r.priorInterruptions
	if reason == ReasonEmergency {
		interruptions++
		md[MetaNotice] = r.urgent.ID
	}
	md[MetaInterruptions] = strconv.FormatInt(interruptions, 10)
	if tp := r.throughputLocked(); tp > 0 {
		md[MetaThroughput] = strconv.FormatFloat(tp, 'f', 0, 64)
	}
	return md
}
