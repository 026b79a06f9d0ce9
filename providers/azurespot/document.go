package azurespot

import (
	"bytes"
	"encoding/json"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/spotsafe/spotsafe/notice"
)

// Document is a scheduled-events answer.
type Document struct {
	// Incarnation is DocumentIncarnation: it changes whenever Events
	// changes. Nil when the server left it out (mock servers do).
	Incarnation *int
	// Events in the order served.
	Events []Event
}

// Event is one scheduled event. Field names follow the wire.
type Event struct {
	EventID      string   `json:"EventId"`
	EventType    string   `json:"EventType"`
	ResourceType string   `json:"ResourceType"`
	Resources    []string `json:"Resources"`
	// EventStatus is "Scheduled" or "Started".
	EventStatus string `json:"EventStatus"`
	// NotBefore is RFC 1123 with GMT, "" once Started.
	NotBefore   string `json:"NotBefore"`
	Description string `json:"Description"`
	// EventSource is "Platform" or "User".
	EventSource string `json:"EventSource"`
	// DurationInSeconds is the expected impact; -1 unknown, 0 none.
	DurationInSeconds *int `json:"DurationInSeconds"`
	// Raw is the event's JSON as served.
	Raw json.RawMessage `json:"-"`
}

// ParseDocument decodes a scheduled-events body. The body must be a JSON
// object; every event needs an EventId and an EventType. Unknown fields are
// ignored so that newer API versions keep working. Errors wrap
// [notice.ErrMalformed].
func ParseDocument(body []byte) (*Document, error) {
	body = bytes.TrimSpace(body)
	if len(body) == 0 || body[0] != '{' {
		return nil, fmt.Errorf("scheduled events: body is not a JSON object: %w", notice.ErrMalformed)
	}
	var wire struct {
		DocumentIncarnation *int              `json:"DocumentIncarnation"`
		Events              []json.RawMessage `json:"Events"`
	}
	if err := json.Unmarshal(body, &wire); err != nil {
		return nil, fmt.Errorf("scheduled events: %w: %w", notice.ErrMalformed, err)
	}
	doc := &Document{Incarnation: wire.DocumentIncarnation, Events: make([]Event, 0, len(wire.Events))}
	for i, raw := range wire.Events {
		var ev Event
		if err := json.Unmarshal(raw, &ev); err != nil {
			return nil, fmt.Errorf("scheduled events: event %d: %w: %w", i, notice.ErrMalformed, err)
		}
		if ev.EventID == "" || ev.EventType == "" {
			return nil, fmt.Errorf("scheduled events: event %d lacks EventId or EventType: %w", i, notice.ErrMalformed)
		}
		ev.Raw = append(json.RawMessage(nil), raw...)
		doc.Events = append(doc.Events, ev)
	}
	return doc, nil
}

// key identifies the event set cheaply, as a guard beside the incarnation: a
// server that restarted its counter must not hide a new event.
func (d *Document) key() string {
	var b strings.Builder
	for _, ev := range d.Events {
		b.WriteString(ev.EventID)
		b.WriteByte('/')
		b.WriteString(ev.EventStatus)
		b.WriteByte('/')
		b.WriteString(ev.NotBefore)
		b.WriteByte(';')
	}
	return b.String()
}

// Concerns reports whether the event names vm among its Resources. Azure VM
// names are case-insensitive. Events for a whole availability set or
// placement group are broadcast to every member, so an event can name this
// VM among others.
func (e *Event) Concerns(vm string) bool {
	for _, r := range e.Resources {
		if strings.EqualFold(strings.TrimSpace(r), vm) {
			return true
		}
	}
	return false
}

// Kind maps EventType: Preempt and Terminate are final; Reboot, Redeploy
// and Freeze advisory; an unknown type is KindMaintenance (the raw type is
// kept in the notice's Detail["type"]).
func (e *Event) Kind() notice.Kind {
	switch strings.ToLower(e.EventType) {
	case "preempt":
		return notice.KindPreempt
	case "terminate":
		return notice.KindTerminate
	case "reboot":
		return notice.KindReboot
	case "redeploy":
		return notice.KindRedeploy
	case "freeze":
		return notice.KindFreeze
	}
	return notice.KindMaintenance
}

// Deadline parses NotBefore: zero for "" (the event has Started), an error
// wrapping [notice.ErrMalformed] when it does not parse.
func (e *Event) Deadline() (time.Time, error) {
	if strings.TrimSpace(e.NotBefore) == "" {
		return time.Time{}, nil
	}
	t, err := ParseTime(e.NotBefore)
	if err != nil {
		return time.Time{}, fmt.Errorf("scheduled event %s: %w", e.EventID, err)
	}
	return t, nil
}

// timeLayouts are tried in order. Azure sends RFC 1123 with GMT; Microsoft's
// own mock server and others send ISO 8601. Zone abbreviations other than
// GMT/UTC are refused: Go would silently read them as UTC.
var timeLayouts = []string{
	"Mon, 02 Jan 2006 15:04:05 GMT",
	"Mon, 2 Jan 2006 15:04:05 GMT",
	"Mon, 02 Jan 2006 15:04:05 UTC",
	time.RFC1123Z,
	time.RFC3339Nano,
	"2006-01-02T15:04:05.999999999", // ISO 8601 without a zone: UTC
	"2006-01-02 15:04:05Z07:00",
}

// ParseTime parses a NotBefore value, in UTC. Errors wrap
// [notice.ErrMalformed].
func ParseTime(s string) (time.Time, error) {
	s = strings.TrimSpace(s)
	for _, layout := range timeLayouts {
		if t, err := time.Parse(layout, s); err == nil {
			return t.UTC(), nil
		}
	}
	return time.Time{}, fmt.Errorf("NotBefore %.60q is neither RFC 1123 nor ISO 8601: %w", s, notice.ErrMalformed)
}

func (e *Event) detail(inc *int) map[string]string {
	d := map[string]string{
		"type":       e.EventType,
		"status":     e.EventStatus,
		"not_before": e.NotBefore,
		"resources":  strings.Join(e.Resources, ","),
	}
	for k, v := range map[string]string{
		"resource_type": e.ResourceType,
		"description":   e.Description,
		"source":        e.EventSource,
		"raw":           string(e.Raw),
	} {
		if v != "" {
			d[k] = v
		}
	}
	if e.DurationInSeconds != nil {
		d["duration_seconds"] = strconv.Itoa(*e.DurationInSeconds)
	}
	if inc != nil {
		d["incarnation"] = strconv.Itoa(*inc)
	}
	return d
}

// StartRequests is the body of an approval POST.
type StartRequests struct {
	StartRequests []StartRequest `json:"StartRequests"`
}

// StartRequest names one event to approve.
type StartRequest struct {
	EventID string `json:"EventId"`
}

func marshalStartRequests(ids ...string) ([]byte, error) {
	req := StartRequests{StartRequests: make([]StartRequest, len(ids))}
	for i, id := range ids {
		req.StartRequests[i].EventID = id
	}
	return json.Marshal(req)
}

// instance is the part of /metadata/instance this package reads.
type instance struct {
	Compute struct {
		Name           string `json:"name"`
		VMID           string `json:"vmId"`
		Priority       string `json:"priority"`
		EvictionPolicy string `json:"evictionPolicy"`
	} `json:"compute"`
}

func parseInstance(body []byte) (*instance, error) {
	var raw struct {
		Compute *json.RawMessage `json:"compute"`
	}
	if err := json.Unmarshal(body, &raw); err != nil {
		return nil, fmt.Errorf("instance metadata: %w: %w", notice.ErrMalformed, err)
	}
	if raw.Compute == nil {
		return nil, fmt.Errorf("instance metadata has no compute section: %w", notice.ErrMalformed)
	}
	var inst instance
	if err := json.Unmarshal(body, &inst); err != nil {
		return nil, fmt.Errorf("instance metadata: %w: %w", notice.ErrMalformed, err)
	}
	return &inst, nil
}
