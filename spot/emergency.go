package spot

import (
	"context"
	"time"

	"github.com/spotsafe/spotsafe/checkpoint"
	"github.com/spotsafe/spotsafe/notice"
)

// emergency takes the last checkpoint before the instance goes away: on
// the worker's goroutine, at step, to commit by end.
//
// The full state is captured first (a memory copy, fast next to any
// upload), which gives its exact size; unless the size of its last capture
// already shows it cannot make it and a smaller snapshot exists. With the upload throughput (measured
// on earlier commits, or on the upload in flight) the runner predicts the
// save time and picks, in order:
//
//  1. an upload of an earlier step still running, if it and the full state
//     both fit: let it finish, then upload the full state (two commits);
//  2. the full state alone fits: abandon the running upload, upload it;
//  3. otherwise say so (EventWillNotFit) and, with a smaller snapshot,
//     upload that instead (after the running upload if both fit);
//  4. without one, let a running upload that fits finish (its step becomes
//     the newest committed), else try the full state anyway.
//
// With no throughput known yet the full state is queued (behind a running
// upload, which may take at most half the time left). While the upload
// runs, its progress is watched: if it shows that the full state will not
// commit in time, the runner switches to the smaller snapshot then.
func (j *Job) emergency(ctx context.Context, step int64, n notice.Notice, end time.Time) error {
	r := j.r
	sctx, cancel := context.WithDeadline(context.WithoutCancel(ctx), end)
	defer cancel()
	r.log.Warn("emergency checkpoint", "ckpt.step", step, "provider", n.Provider, "notice.kind", n.Kind.String(),
		"notice.deadline", n.Deadline, "remaining", time.Until(end))

	e := &emergencySave{j: j, step: step, end: end, old: j.inflight}
	j.inflight = nil
	if e.old != nil && ended(e.old) {
		_ = e.old.Wait(sctx)
		e.old = nil
	}
	r.mu.Lock()
	committed := r.committed
	e.tp = r.throughputLocked()
	r.mu.Unlock()
	if live := r.liveThroughput(e.old); live > 0 && (e.tp <= 0 || live < e.tp) {
		e.tp = live
	}

	ie := &InterruptedError{Notice: n, Step: committed}
	var err error
	switch {
	case committed >= step:
		// Nothing new since the last commit.
	case e.old != nil && e.old.Step() == step:
		e.up, e.old = e.old, nil // this very state is uploading
	case j.snapshot == nil && j.small == nil:
		err = ErrNoSnapshot
	default:
		err = e.plan(sctx)
	}

	// The work stops here; the upload goes on without it.
	r.mu.Lock()
	cancelWork := r.cancelWork
	r.mu.Unlock()
	cancelWork(&NoticeError{Notice: n})

	var done *checkpoint.Upload
	if err == nil {
		done, err = e.await(sctx)
	}
	switch {
	case err == nil && done != nil:
		ie.Committed, ie.Step, ie.Reduced = true, done.Step(), e.reduced && done == e.up
		ie.NoticeToCommit = time.Since(n.Observed)
	case err == nil:
		ie.Committed = true
	default:
		ie.Err = err
		r.mu.Lock()
		ie.Step = r.committed
		r.mu.Unlock()
	}

	r.mu.Lock()
	r.interrupted = ie
	r.mu.Unlock()
	if ie.Committed {
		r.log.Warn("interrupted; emergency checkpoint committed", "ckpt.step", ie.Step, "reduced", ie.Reduced,
			"lost_steps", step-ie.Step, "notice_to_commit", ie.NoticeToCommit)
	} else {
		r.log.Error("interrupted; emergency checkpoint failed", "ckpt.step", ie.Step, "lost_steps", step-max(ie.Step, 0), "err", err)
	}
	return ie
}

// emergencySave is the state of one emergency save.
type emergencySave struct {
	j    *Job
	step int64
	end  time.Time
	tp   float64 // bytes/s; 0: unknown

	up      *checkpoint.Upload // the save of step
	reduced bool               // up is the smaller snapshot
	old     *checkpoint.Upload // an earlier step's upload, still running
	keepOld bool               // let old finish (by oldBy) before up starts
	oldBy   time.Time
	warned  bool
}

func ended(u *checkpoint.Upload) bool {
	select {
	case <-u.Done():
		return true
	default:
		return false
	}
}

// oldLeft estimates the rest of the running upload; -1 if unknown.
func (e *emergencySave) oldLeft() time.Duration {
	if e.old == nil || ended(e.old) {
		return 0
	}
	done, total := e.old.Progress()
	return safety(EstimateSave(total-done, e.tp, 0))
}

// plan captures the full state and decides what to upload.
func (e *emergencySave) plan(ctx context.Context) error {
	j, r := e.j, e.j.r
	if j.snapshot == nil {
		return e.saveSmall(ctx)
	}
	// When the state as last captured already cannot make it, go straight
	// to the smaller snapshot: no large copy at the worst moment.
	r.mu.Lock()
	known := r.fullBytes
	if known <= 0 {
		known = r.priorBytes
	}
	r.mu.Unlock()
	if left := time.Until(e.end); j.small != nil && known > 0 {
		if est := safety(EstimateSave(known, e.tp, 0)); est > left {
			return e.wontFit(ctx, known, est, left)
		}
	}
	// Queue behind a running upload; without one the upload starts now.
	full, err := j.save(ctx, e.step, ReasonEmergency, false, checkpoint.BusyReplace, e.end)
	if err != nil {
		if j.small == nil {
			return err
		}
		r.log.Warn("full emergency snapshot failed; saving the smaller one", "ckpt.step", e.step, "err", err)
		return e.saveSmall(ctx)
	}
	e.up = full
	est := safety(EstimateSave(full.Bytes(), e.tp, 0))
	left := time.Until(e.end)
	oldLeft := e.oldLeft()
	switch {
	case est < 0:
		// Unknown throughput: the running upload will tell; it may take
		// half the time left.
		if e.old != nil {
			e.keepOld, e.oldBy = true, time.Now().Add(left/2)
		}
		return nil
	case e.old != nil && oldLeft+est <= left:
		e.keepOld, e.oldBy = true, e.end.Add(-est)
		return nil
	case est <= left:
		e.cancelOld("the emergency checkpoint fits only without it")
		return nil
	}
	return e.wontFit(ctx, full.Bytes(), est, left)
}

// wontFit handles a full state that will not commit in time.
func (e *emergencySave) wontFit(ctx context.Context, bytes int64, est, left time.Duration) error {
	j, r := e.j, e.j.r
	if !e.warned {
		e.warned = true
		r.log.Warn("the full state will not be saved before the deadline", "ckpt.step", e.step, "bytes", bytes,
			"estimate", est, "remaining", left, "throughput", e.tp, "small_snapshot", j.small != nil)
		r.events.emit(Event{Kind: EventWillNotFit, Step: e.step, Bytes: bytes, Estimate: est, Remaining: left,
			Throughput: e.tp, Reduced: j.small != nil, Reason: ReasonEmergency})
	}
	if j.small != nil {
		if e.up != nil {
			e.up.Cancel()
			_ = e.up.Wait(ctx)
		}
		return e.saveSmall(ctx)
	}
	if oldLeft := e.oldLeft(); e.old != nil && oldLeft >= 0 && oldLeft <= left {
		// Better an older commit than none.
		e.up.Cancel()
		_ = e.up.Wait(ctx)
		e.up = nil
		return nil
	}
	e.cancelOld("the emergency checkpoint needs the bandwidth")
	return nil // best effort
}

// saveSmall captures and queues the smaller snapshot.
func (e *emergencySave) saveSmall(ctx context.Context) error {
	up, err := e.j.save(ctx, e.step, ReasonEmergency, true, checkpoint.BusyReplace, e.end)
	if err != nil {
		return err
	}
	e.up, e.reduced = up, true
	est := safety(EstimateSave(up.Bytes(), e.tp, 0))
	if oldLeft := e.oldLeft(); e.old != nil && est >= 0 && oldLeft >= 0 && oldLeft+est <= time.Until(e.end) {
		e.keepOld, e.oldBy = true, e.end.Add(-est)
		return nil
	}
	e.cancelOld("the smaller emergency checkpoint needs the bandwidth")
	return nil
}

func (e *emergencySave) cancelOld(why string) {
	if e.old == nil || ended(e.old) {
		return
	}
	e.j.r.log.Warn("abandoning the running upload: "+why, "ckpt.step", e.old.Step())
	e.old.Cancel()
	e.keepOld = false
}

// watchEvery is how often an emergency upload's progress is checked.
const watchEvery = 50 * time.Millisecond

// await waits for the emergency upload (or, when there is none, for a
// running one that may still commit) and watches its progress. It returns
// the upload that committed.
func (e *emergencySave) await(ctx context.Context) (*checkpoint.Upload, error) {
	r := e.j.r
	if e.up == nil {
		if e.old == nil {
			return nil, nil
		}
		e.up, e.old, e.reduced = e.old, nil, false
	}
	wctx, cancel := context.WithDeadline(context.WithoutCancel(ctx), e.end.Add(time.Second))
	defer cancel()
	tick := time.NewTicker(watchEvery)
	defer tick.Stop()
	for {
		select {
		case <-e.up.Done():
			return e.up, e.up.Wait(wctx)
		case <-wctx.Done():
			return nil, e.up.Wait(wctx)
		case <-tick.C:
		}
		now := time.Now()
		oldRunning := e.old != nil && !ended(e.old)
		if e.keepOld && oldRunning && !now.Before(e.oldBy) {
			e.cancelOld("it is late")
			oldRunning = false
		}
		if e.reduced {
			continue
		}
		// Project the finish from what the store gives right now.
		running := e.up
		if e.keepOld && oldRunning {
			running = e.old
		}
		rate := r.liveThroughput(running)
		if rate <= 0 {
			rate = e.tp
		}
		if rate <= 0 {
			continue
		}
		e.tp = rate
		done, total := e.up.Progress()
		est := safety(EstimateSave(total-done, rate, 0))
		all := est
		if e.keepOld && oldRunning {
			d, t := e.old.Progress()
			all = safety(EstimateSave(total-done+t-d, rate, 0))
		}
		left := e.end.Sub(now)
		switch {
		case all <= left:
		case est <= left:
			e.cancelOld("the emergency checkpoint fits only without it")
		case e.j.small != nil:
			if err := e.wontFit(wctx, total, est, left); err != nil {
				return nil, err
			}
		}
	}
}
