// Package notice turns every way an instance can be taken away (a cloud's
// interruption metadata, a scheduler's SIGTERM) into one event model with a
// deadline.
//
// A [Source] is a small driver that asks one provider "is a notice present
// now?"; a [Watcher] polls many sources, deduplicates by [Notice.ID], emits a
// Canceled event when a notice disappears, backs off on errors and never gives
// up on a transient failure. Providers live in spotsafe/providers/...; fake
// metadata servers for tests live in notice/noticetest.
package notice

import (
	"fmt"
	"log/slog"
	"time"
)

// Kind says what the provider announced. The zero value is invalid.
type Kind int

// Kinds of notice. Terminate, Stop, Hibernate and Preempt are final: the
// instance (and the process) goes away. The others are advisory.
const (
	// KindTerminate: the instance will be terminated (AWS terminate, Azure
	// Terminate, Alibaba/Tencent reclamation, GCE TERMINATE_ON_HOST_MAINTENANCE,
	// a SIGTERM).
	KindTerminate Kind = iota + 1
	// KindStop: the instance will be stopped (AWS spot stop, instance-stop).
	KindStop
	// KindHibernate: the instance will hibernate, usually with no lead time.
	KindHibernate
	// KindPreempt: a spot/preemptible eviction (GCE preempted, Azure Preempt).
	KindPreempt
	// KindReboot: a scheduled reboot; the process dies but the disk survives.
	KindReboot
	// KindRedeploy: the VM moves to another host (Azure Redeploy).
	KindRedeploy
	// KindMigrate: a live migration (GCE MIGRATE_ON_HOST_MAINTENANCE).
	KindMigrate
	// KindFreeze: a pause of seconds with memory preserved (Azure Freeze).
	KindFreeze
	// KindRebalance: elevated interruption risk (AWS rebalance recommendation).
	KindRebalance
	// KindMaintenance: other scheduled maintenance, usually far ahead.
	KindMaintenance
)

var kindNames = [...]string{
	KindTerminate:   "terminate",
	KindStop:        "stop",
	KindHibernate:   "hibernate",
	KindPreempt:     "preempt",
	KindReboot:      "reboot",
	KindRedeploy:    "redeploy",
	KindMigrate:     "migrate",
	KindFreeze:      "freeze",
	KindRebalance:   "rebalance",
	KindMaintenance: "maintenance",
}

// String returns the lower-case name of k ("terminate", "preempt", ...).
func (k Kind) String() string {
	if k > 0 && int(k) < len(kindNames) {
		return kindNames[k]
	}
	return fmt.Sprintf("kind(%d)", int(k))
}

// Final reports whether a notice of this kind means the instance goes away.
func (k Kind) Final() bool {
	switch k {
	case KindTerminate, KindStop, KindHibernate, KindPreempt:
		return true
	}
	return false
}

// ParseKind is the inverse of [Kind.String].
func ParseKind(s string) (Kind, error) {
	for k, name := range kindNames {
		if name != "" && name == s {
			return Kind(k), nil
		}
	}
	return 0, fmt.Errorf("notice: unknown kind %q", s)
}

// MarshalText implements encoding.TextMarshaler.
func (k Kind) MarshalText() ([]byte, error) { return []byte(k.String()), nil }

// UnmarshalText implements encoding.TextUnmarshaler.
func (k *Kind) UnmarshalText(b []byte) error {
	v, err := ParseKind(string(b))
	if err != nil {
		return err
	}
	*k = v
	return nil
}

// Notice is one announcement that the instance will be interrupted. It is a
// value: copy it freely.
type Notice struct {
	// ID identifies the notice across polls: the provider's event id, or a
	// stable hash of the fields that identify it (never of a jittery body).
	ID string `json:"id"`
	// Provider is the source's name: "aws", "gcp", "azure", "alibaba",
	// "tencent", "signal", ...
	Provider string `json:"provider"`
	// Kind says what will happen.
	Kind Kind `json:"kind"`
	// Deadline is when the instance goes away (or maintenance starts). It
	// comes from the provider's own timestamp when it gives one, else from
	// Observed plus the provider's nominal notice. Zero means unknown.
	Deadline time.Time `json:"deadline"`
	// NotAfter is the end of a maintenance window, when the provider says.
	NotAfter time.Time `json:"not_after,omitzero"`
	// Observed is when this process first saw the notice.
	Observed time.Time `json:"observed"`
	// Detail holds provider fields worth logging (event codes, descriptions,
	// the raw body under "raw").
	Detail map[string]string `json:"detail,omitempty"`
}

// Final reports whether the instance goes away (see [Kind.Final]).
func (n Notice) Final() bool { return n.Kind.Final() }

// Remaining returns the time left before the deadline at now; negative
// once it has passed, and 0 when the deadline is unknown.
func (n Notice) Remaining(now time.Time) time.Duration {
	if n.Deadline.IsZero() {
		return 0
	}
	return n.Deadline.Sub(now)
}

// String gives a one-line human description.
func (n Notice) String() string {
	return fmt.Sprintf("%s %s (id %s) deadline %s", n.Provider, n.Kind, n.ID, n.Deadline.UTC().Format(time.RFC3339Nano))
}

// LogValue implements slog.LogValuer with the project's stable keys.
func (n Notice) LogValue() slog.Value {
	attrs := []slog.Attr{
		slog.String("id", n.ID),
		slog.String("provider", n.Provider),
		slog.String("kind", n.Kind.String()),
		slog.Bool("final", n.Final()),
		slog.Time("deadline", n.Deadline),
		slog.Time("observed", n.Observed),
	}
	return slog.GroupValue(attrs...)
}

// EventType says what happened to a notice.
type EventType int

// Event types.
const (
	// EventNotice: a notice appeared.
	EventNotice EventType = iota + 1
	// EventUpdated: a known notice changed its kind or deadline.
	EventUpdated
	// EventCanceled: a notice disappeared (canceled, completed or withdrawn).
	EventCanceled
)

// String returns "notice", "updated" or "canceled".
func (t EventType) String() string {
	switch t {
	case EventNotice:
		return "notice"
	case EventUpdated:
		return "updated"
	case EventCanceled:
		return "canceled"
	}
	return fmt.Sprintf("event(%d)", int(t))
}

// MarshalText implements encoding.TextMarshaler.
func (t EventType) MarshalText() ([]byte, error) { return []byte(t.String()), nil }

// Event is what a [Watcher] delivers.
type Event struct {
	Type   EventType `json:"event"`
	Notice Notice    `json:"notice"`
	// At is when the watcher noticed the change.
	At time.Time `json:"at"`
}
