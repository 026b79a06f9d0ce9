package spot

import (
	"fmt"
	"sync"
	"time"

	"github.com/spotsafe/spotsafe/notice"
)

// EventKind says what an [Event] reports.
type EventKind int

// Event kinds, in the order a run usually produces them.
const (
	// EventRestored: a checkpoint was restored (Step, Bytes, Duration,
	// Reduced).
	EventRestored EventKind = iota + 1
	// EventStarted: the work starts (Step: the restored step, -1 on a
	// fresh start; Detail: the notice sources watched).
	EventStarted
	// EventNotice: a notice appeared or changed (Notice; Urgent when it
	// stops the work, Remaining).
	EventNotice
	// EventNoticeCanceled: a notice was withdrawn.
	EventNoticeCanceled
	// EventCheckpointStarted: an upload began (Step, Reason, Bytes,
	// Duration: the time the work was blocked capturing it).
	EventCheckpointStarted
	// EventCheckpointCommitted: a checkpoint exists (Step, Reason, Bytes,
	// Duration: upload time, Throughput).
	EventCheckpointCommitted
	// EventCheckpointFailed: a save failed or was abandoned (Step, Reason,
	// Err).
	EventCheckpointFailed
	// EventWillNotFit: the full state will not be saved before the
	// deadline (Bytes, Estimate, Remaining, Throughput); Reduced says
	// whether the smaller snapshot is saved instead.
	EventWillNotFit
	// EventLate: the worker did not reach a safe point in time after a
	// final notice; its context was cancelled early (Notice, Remaining).
	EventLate
	// EventInterrupted: the run ends because of a final notice (Step: the
	// newest committed step, Notice, Reduced, Duration: notice to commit,
	// Err when the emergency save failed).
	EventInterrupted
	// EventFinished: the work function returned (Step: newest committed
	// step, Err: its error, if any).
	EventFinished
)

var eventNames = [...]string{
	EventRestored:            "restored",
	EventStarted:             "started",
	EventNotice:              "notice",
	EventNoticeCanceled:      "notice-canceled",
	EventCheckpointStarted:   "checkpoint-started",
	EventCheckpointCommitted: "checkpoint-committed",
	EventCheckpointFailed:    "checkpoint-failed",
	EventWillNotFit:          "will-not-fit",
	EventLate:                "late",
	EventInterrupted:         "interrupted",
	EventFinished:            "finished",
}

// String returns the kind's name, such as "checkpoint-committed".
func (k EventKind) String() string {
	if k > 0 && int(k) < len(eventNames) {
		return eventNames[k]
	}
	return fmt.Sprintf("EventKind(%d)", int(k))
}

// MarshalText implements encoding.TextMarshaler.
func (k EventKind) MarshalText() ([]byte, error) { return []byte(k.String()), nil }

// UnmarshalText implements encoding.TextUnmarshaler, so that events sent as
// JSON (to a scheduler, say) decode again.
func (k *EventKind) UnmarshalText(b []byte) error {
	for i, name := range eventNames {
		if name != "" && name == string(b) {
			*k = EventKind(i)
			return nil
		}
	}
	return fmt.Errorf("spot: unknown event kind %q", b)
}

// Reason says why a checkpoint was taken.
type Reason string

// Reasons for a checkpoint, stored in its metadata under "spotsafe.reason".
const (
	// ReasonPeriodic: the interval or step count elapsed.
	ReasonPeriodic Reason = "periodic"
	// ReasonAdvisory: an advisory notice (rebalance, maintenance, a final
	// notice beyond the horizon).
	ReasonAdvisory Reason = "advisory"
	// ReasonEmergency: a final notice.
	ReasonEmergency Reason = "emergency"
	// ReasonExplicit: the worker called [Job.Checkpoint].
	ReasonExplicit Reason = "explicit"
)

// Event is one thing that happened during [Run]; which fields are set
// depends on Kind. Events are delivered to Options.OnEvent.
type Event struct {
	Kind EventKind `json:"kind"`
	At   time.Time `json:"at"`
	// Step is the checkpoint's step, or the restored or committed step.
	Step int64 `json:"step"`
	// Reason is why a checkpoint was taken.
	Reason Reason `json:"reason,omitempty"`
	// Notice is the notice concerned, for notice, late and interrupted
	// events.
	Notice notice.Notice `json:"notice,omitzero"`
	// Urgent: the notice stops the work (final, and within the horizon).
	Urgent bool `json:"urgent,omitempty"`
	// Bytes is the size of the checkpoint.
	Bytes int64 `json:"bytes,omitempty"`
	// Duration is the restore time, capture time, upload time or notice
	// to commit time, depending on Kind.
	Duration time.Duration `json:"duration,omitempty"`
	// Reduced: the smaller snapshot was (or will be) saved or restored.
	Reduced bool `json:"reduced,omitempty"`
	// Estimate is the predicted save time of the full state.
	Estimate time.Duration `json:"estimate,omitempty"`
	// Remaining is the time left before the save must have committed.
	Remaining time.Duration `json:"remaining,omitempty"`
	// Throughput is the measured upload rate in bytes per second (0:
	// unknown).
	Throughput float64 `json:"throughput,omitempty"`
	// Detail is a human-readable note.
	Detail string `json:"detail,omitempty"`
	// Err is the error of a failed checkpoint or of the work.
	Err error `json:"-"`
}

// dispatcher delivers events to one callback, in order, from its own
// goroutine, so that neither the work nor the checkpoint uploads wait for
// a slow consumer. close drains the queue and waits.
type dispatcher struct {
	fn    func(Event)
	mu    sync.Mutex
	queue []Event
	shut  bool
	ready chan struct{}
	done  chan struct{}
}

func newDispatcher(fn func(Event)) *dispatcher {
	d := &dispatcher{fn: fn, ready: make(chan struct{}, 1), done: make(chan struct{})}
	if fn == nil {
		close(d.done)
		return d
	}
	go d.run()
	return d
}

func (d *dispatcher) emit(e Event) {
	if d.fn == nil {
		return
	}
	if e.At.IsZero() {
		e.At = time.Now()
	}
	d.mu.Lock()
	if d.shut {
		d.mu.Unlock()
		return
	}
	d.queue = append(d.queue, e)
	d.mu.Unlock()
	select {
	case d.ready <- struct{}{}:
	default:
	}
}

func (d *dispatcher) run() {
	defer close(d.done)
	for {
		d.mu.Lock()
		batch, shut := d.queue, d.shut
		d.queue = nil
		d.mu.Unlock()
		for _, e := range batch {
			d.fn(e)
		}
		if len(batch) == 0 {
			if shut {
				return
			}
			<-d.ready
		}
	}
}

// close delivers the queued events and stops the goroutine.
func (d *dispatcher) close() {
	d.mu.Lock()
	d.shut = true
	d.mu.Unlock()
	select {
	case d.ready <- struct{}{}:
	default:
	}
	<-d.done
}
