package notice

import (
	"context"
	"errors"
	"time"
)

// Source is the driver interface a provider implements.
//
// Poll makes one request (or a few, e.g. a token refresh) and returns the
// notices present now, nil when there are none. It must return promptly when
// ctx ends. Notices must carry a stable ID and Observed time; the source keeps
// the first observation time of a notice it sees again so that the deadline of
// a provider without a timestamp does not drift.
//
// When only some of its requests fail, Poll may return the notices it could
// read together with the error (a partial result): the Watcher then reports
// those that are new but cancels none, so that one broken path neither hides
// a notice from another nor fakes a cancellation.
//
// A Source is used by one goroutine at a time.
type Source interface {
	Name() string
	Poll(ctx context.Context) ([]Notice, error)
}

// Waiter is an optional capability for sources that can block until the
// answer changes (GCE's hanging GET, OS signals). Wait returns the notices
// present after a change, or after some provider-chosen timeout with the same
// answer. The Watcher calls Poll once at start, then Wait in a loop.
type Waiter interface {
	Wait(ctx context.Context) ([]Notice, error)
}

// Acker is an optional capability for providers that let a VM approve a
// pending event so that it starts early (Azure StartRequests).
type Acker interface {
	Ack(ctx context.Context, n Notice) error
}

// Intervaler is an optional capability: a source that wants a poll interval
// other than the Watcher's default says so.
type Intervaler interface {
	PollInterval() time.Duration
}

// Sentinel errors. Sources wrap them with %w so that callers can use
// errors.Is.
var (
	// ErrTransient marks a failure worth retrying soon: 5xx, 429, a reset or
	// refused connection, a timeout.
	ErrTransient = errors.New("notice: transient metadata error")
	// ErrMalformed marks a response that did not parse. No notice is made up
	// from it.
	ErrMalformed = errors.New("notice: malformed metadata response")
	// ErrUnavailable marks a metadata service that refuses this client (IMDS
	// disabled, a missing header, a hop limit that drops replies): polling
	// will not heal it without a configuration change.
	ErrUnavailable = errors.New("notice: metadata service unavailable")
)
