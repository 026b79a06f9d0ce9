package spot

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/spotsafe/spotsafe/notice"
)

// Exit codes returned by [ExitCode]. They follow sysexits.h where one fits,
// so that schedulers can tell a run to restart from a run to give up on:
//
//	0   ExitFinished     the work completed
//	1   ExitFailed       the work failed; restarting will not help by itself
//	74  ExitSaveFailed   interrupted, and the emergency checkpoint failed:
//	                     restart from the previous checkpoint (EX_IOERR)
//	75  ExitInterrupted  interrupted, emergency checkpoint committed:
//	                     restart to resume (EX_TEMPFAIL, "try again later")
const (
	ExitFinished    = 0
	ExitFailed      = 1
	ExitSaveFailed  = 74
	ExitInterrupted = 75
)

// Sentinel errors.
var (
	// ErrInterrupted is wrapped by the error Run returns when the work
	// stopped because the instance is being taken away.
	ErrInterrupted = errors.New("spot: interrupted")
	// ErrSaveFailed is matched, together with ErrInterrupted, when the
	// emergency checkpoint could not be committed before the deadline.
	ErrSaveFailed = errors.New("spot: emergency checkpoint failed")
)

// InterruptedError is what Run returns (wrapped or as is) after a final
// notice. errors.Is(err, ErrInterrupted) is always true for it, and
// errors.Is(err, ErrSaveFailed) when nothing new was committed.
type InterruptedError struct {
	// Notice is the notice that stopped the work.
	Notice notice.Notice
	// Step is the newest committed step when the run ended (-1: none).
	Step int64
	// Committed reports whether the emergency checkpoint committed.
	Committed bool
	// Reduced reports whether the smaller snapshot was saved because the
	// full state would not fit in the time left.
	Reduced bool
	// NoticeToCommit is the time from the notice to the commit.
	NoticeToCommit time.Duration
	// Err is the emergency save's error, if it failed.
	Err error
}

// Error says which notice stopped the work and what was committed.
func (e *InterruptedError) Error() string {
	if e.Committed {
		return fmt.Sprintf("spot: interrupted by %s %s notice; checkpoint at step %d committed %v after the notice",
			e.Notice.Provider, e.Notice.Kind, e.Step, e.NoticeToCommit.Round(time.Millisecond))
	}
	msg := fmt.Sprintf("spot: interrupted by %s %s notice; emergency checkpoint failed", e.Notice.Provider, e.Notice.Kind)
	if e.Step >= 0 {
		msg += fmt.Sprintf(" (step %d is the newest committed)", e.Step)
	}
	if e.Err != nil {
		msg += ": " + e.Err.Error()
	}
	return msg
}

// Is matches ErrInterrupted, and ErrSaveFailed when nothing was committed.
func (e *InterruptedError) Is(target error) bool {
	return target == ErrInterrupted || (target == ErrSaveFailed && !e.Committed)
}

// Unwrap returns the save error.
func (e *InterruptedError) Unwrap() error { return e.Err }

// ExitCode maps Run's result to the exit code a scheduler understands: see
// the Exit constants. A context cancelled by the caller (Ctrl-C without a
// signal source) counts as failed.
func ExitCode(err error) int {
	switch {
	case err == nil:
		return ExitFinished
	case errors.Is(err, ErrSaveFailed):
		return ExitSaveFailed
	case errors.Is(err, ErrInterrupted):
		return ExitInterrupted
	case errors.Is(err, context.Canceled):
		return ExitFailed
	}
	return ExitFailed
}
