package notice

import (
	"context"
	"os"
	"os/signal"
	"sync"
	"syscall"
	"time"
)

// DefaultGrace is the time assumed between a termination signal and SIGKILL
// when none is configured: Kubernetes' default terminationGracePeriodSeconds.
const DefaultGrace = 30 * time.Second

// SignalOptions configures a [SignalSource]. The zero value is usable.
type SignalOptions struct {
	// Signals to treat as a notice. Default SIGTERM and SIGINT. Under Slurm
	// add the signal given to --signal (e.g. SIGUSR1).
	Signals []os.Signal
	// Grace is the time between the signal and the hard kill: the pod's
	// terminationGracePeriodSeconds, Slurm's GraceTime or --signal's
	// sig_time. Default 30 s.
	Grace time.Duration
	// Kind of the notice. Default KindTerminate.
	Kind Kind
}

// SignalSource turns OS signals into final notices with
// Deadline = time of the signal + Grace. It catches the signals from the
// moment it is created, so a signal that arrives before watching starts is
// not lost, and it disables their default action (exit) until [SignalSource.Close]:
// the program must exit on its own. It implements [Source] and [Waiter].
type SignalSource struct {
	opts SignalOptions
	ch   chan os.Signal

	mu       sync.Mutex
	received []Notice
	stop     sync.Once
}

var _ interface {
	Source
	Waiter
} = (*SignalSource)(nil)

// NewSignalSource starts catching the configured signals. Call Close to
// restore their default behaviour.
func NewSignalSource(opts *SignalOptions) *SignalSource {
	s := &SignalSource{}
	if opts != nil {
		s.opts = *opts
	}
	if len(s.opts.Signals) == 0 {
		s.opts.Signals = []os.Signal{syscall.SIGTERM, os.Interrupt}
	}
	if s.opts.Grace <= 0 {
		s.opts.Grace = DefaultGrace
	}
	if s.opts.Kind == 0 {
		s.opts.Kind = KindTerminate
	}
	// Buffered so that signal.Notify never drops one while nobody waits.
	s.ch = make(chan os.Signal, len(s.opts.Signals)+1)
	signal.Notify(s.ch, s.opts.Signals...)
	return s
}

// Name returns "signal".
func (s *SignalSource) Name() string { return "signal" }

// Poll returns a notice for every distinct signal received so far.
func (s *SignalSource) Poll(ctx context.Context) ([]Notice, error) {
	for {
		select {
		case sig := <-s.ch:
			s.record(sig, time.Now())
		default:
			return s.snapshot(), nil
		}
	}
}

// Wait blocks until a signal arrives or ctx ends.
func (s *SignalSource) Wait(ctx context.Context) ([]Notice, error) {
	select {
	case sig := <-s.ch:
		s.record(sig, time.Now())
		return s.Poll(ctx)
	case <-ctx.Done():
		return nil, ctx.Err()
	}
}

// Close stops catching signals. It is safe to call more than once.
func (s *SignalSource) Close() error {
	s.stop.Do(func() { signal.Stop(s.ch) })
	return nil
}

func (s *SignalSource) record(sig os.Signal, at time.Time) {
	id := "signal/" + signalName(sig)
	s.mu.Lock()
	defer s.mu.Unlock()
	for _, n := range s.received {
		if n.ID == id {
			return // a repeated signal (Slurm sends SIGTERM twice) keeps the first deadline
		}
	}
	s.received = append(s.received, Notice{
		ID:       id,
		Provider: "signal",
		Kind:     s.opts.Kind,
		Deadline: at.Add(s.opts.Grace),
		Observed: at,
		Detail:   map[string]string{"signal": signalName(sig), "grace": s.opts.Grace.String()},
	})
}

func (s *SignalSource) snapshot() []Notice {
	s.mu.Lock()
	defer s.mu.Unlock()
	if len(s.received) == 0 {
		return nil
	}
	return append([]Notice(nil), s.received...)
}
