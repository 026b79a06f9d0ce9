package awsspot

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"strings"
	"time"

	"github.com/spotsafe/spotsafe/notice"
)

// category is one notice path.
type category int

const (
	catInstanceAction category = iota
	catRebalance
	catScheduled
	catLifecycle
	numCategories
)

// Notice paths.
const (
	pathInstanceAction  = metaPrefix + "spot/instance-action"
	pathTerminationTime = metaPrefix + "spot/termination-time"
	pathRebalance       = metaPrefix + "events/recommendations/rebalance"
	pathScheduled       = metaPrefix + "events/maintenance/scheduled"
	pathLifecycle       = metaPrefix + "autoscaling/target-lifecycle-state"
)

var categoryPaths = [numCategories]string{
	catInstanceAction: pathInstanceAction,
	catRebalance:      pathRebalance,
	catScheduled:      pathScheduled,
	catLifecycle:      pathLifecycle,
}

// ScheduledTimeLayout is the time layout of scheduled maintenance events.
const ScheduledTimeLayout = "2 Jan 2006 15:04:05 GMT"

// maxRaw bounds the raw body kept in Notice.Detail["raw"].
const maxRaw = 2048

// read GETs one category and turns the answer into notices. A 404 means
// none (also on instances that lack the category). Must be called with s.mu
// held.
func (s *Source) read(ctx context.Context, c category, now time.Time) ([]notice.Notice, error) {
	path := categoryPaths[c]
	resp, req, err := s.get(ctx, path)
	if err != nil {
		return nil, err
	}
	if resp.Code == http.StatusNotFound {
		if c == catLifecycle {
			s.asg = time.Time{}
		}
		return nil, nil
	}
	if err := statusErr(resp, req); err != nil {
		return nil, err
	}
	body := resp.Body
	switch c {
	case catInstanceAction:
		n, err := parseInstanceAction(body)
		if err != nil {
			return s.legacyTermination(ctx, now), fmt.Errorf("%s: %w", path, err)
		}
		return []notice.Notice{s.finish(n, now)}, nil
	case catRebalance:
		n, err := parseRebalance(body)
		if err != nil {
			return nil, fmt.Errorf("%s: %w", path, err)
		}
		return []notice.Notice{s.finish(n, now)}, nil
	case catScheduled:
		ns, err := parseScheduled(body)
		if err != nil {
			return nil, fmt.Errorf("%s: %w", path, err)
		}
		for i := range ns {
			ns[i] = s.finish(ns[i], now)
		}
		return ns, nil
	case catLifecycle:
		state, err := parseLifecycle(body)
		if err != nil {
			return nil, fmt.Errorf("%s: %w", path, err)
		}
		if state != "Terminated" && state != "Warmed:Terminated" {
			s.asg = time.Time{}
			return nil, nil
		}
		if s.asg.IsZero() {
			s.asg = now
		}
		n := notice.Notice{
			ID:       "asg-terminated-" + s.asg.UTC().Format("20060102T150405.000Z"),
			Kind:     notice.KindTerminate,
			Deadline: s.asg.Add(s.opts.LifecycleNotice),
			Detail:   map[string]string{"path": path, "target_lifecycle_state": state, "raw": raw(body)},
		}
		return []notice.Notice{s.finish(n, s.asg)}, nil
	}
	return nil, nil
}

// legacyTermination reads spot/termination-time when spot/instance-action
// did not parse: a terminate notice there has the same identity. Its own
// failures are logged, not returned (the poll already reports one).
func (s *Source) legacyTermination(ctx context.Context, now time.Time) []notice.Notice {
	resp, req, err := s.get(ctx, pathTerminationTime)
	if err == nil {
		err = statusErr(resp, req)
	}
	if err != nil {
		if resp == nil || resp.Code != http.StatusNotFound {
			s.log.Debug("legacy spot/termination-time unreadable", "err", err)
		}
		return nil
	}
	t, err := ParseTime(string(resp.Body))
	if err != nil {
		// PROTOCOLS 1.5: a 200 with a non-time value means nothing.
		s.log.Debug("legacy spot/termination-time is not a time", "err", err)
		return nil
	}
	n := instanceActionNotice("terminate", t)
	n.Detail["path"] = pathTerminationTime
	n.Detail["raw"] = raw(resp.Body)
	return []notice.Notice{s.finish(n, now)}
}

// finish fills what the parsers cannot: provider and first observation.
func (s *Source) finish(n notice.Notice, now time.Time) notice.Notice {
	n.Provider = "aws"
	n.Observed = s.observe(n.ID, now)
	return n
}

// instanceAction is the spot/instance-action document.
type instanceAction struct {
	Action string `json:"action"`
	Time   string `json:"time"`
}

// parseInstanceAction parses spot/instance-action. The identity is the
// action plus the time truncated to seconds (a body hash would change with
// millisecond jitter). An action other than terminate, stop or hibernate is
// taken as terminate: a final notice is the safe reading of an unknown one.
func parseInstanceAction(body []byte) (notice.Notice, error) {
	var ia instanceAction
	if err := decodeJSON(body, &ia); err != nil {
		return notice.Notice{}, err
	}
	action := strings.ToLower(strings.TrimSpace(ia.Action))
	if action == "" {
		return notice.Notice{}, fmt.Errorf("no action in %q: %w", truncate(string(body), 80), notice.ErrMalformed)
	}
	t, err := ParseTime(ia.Time)
	if err != nil {
		return notice.Notice{}, err
	}
	n := instanceActionNotice(action, t)
	n.Detail["path"] = pathInstanceAction
	n.Detail["time"] = ia.Time
	n.Detail["raw"] = raw(body)
	return n, nil
}

func instanceActionNotice(action string, t time.Time) notice.Notice {
	kind := notice.KindTerminate
	switch action {
	case "stop":
		kind = notice.KindStop
	case "hibernate":
		kind = notice.KindHibernate
	}
	return notice.Notice{
		ID:       "spot-" + safeID(action) + "-" + t.UTC().Truncate(time.Second).Format(time.RFC3339),
		Kind:     kind,
		Deadline: t,
		Detail:   map[string]string{"action": action},
	}
}

// parseRebalance parses events/recommendations/rebalance. A rebalance
// recommendation is advisory and announces no deadline, so Deadline stays
// zero ("unknown"); noticeTime is its identity and goes to Detail.
func parseRebalance(body []byte) (notice.Notice, error) {
	var rb struct {
		NoticeTime string `json:"noticeTime"`
	}
	if err := decodeJSON(body, &rb); err != nil {
		return notice.Notice{}, err
	}
	t, err := ParseTime(rb.NoticeTime)
	if err != nil {
		return notice.Notice{}, err
	}
	return notice.Notice{
		ID:   "rebalance-" + t.UTC().Truncate(time.Second).Format(time.RFC3339),
		Kind: notice.KindRebalance,
		Detail: map[string]string{
			"path":        pathRebalance,
			"notice_time": rb.NoticeTime,
			"raw":         raw(body),
		},
	}, nil
}

// scheduledEvent is one element of events/maintenance/scheduled.
type scheduledEvent struct {
	NotBefore   string `json:"NotBefore"`
	NotAfter    string `json:"NotAfter"`
	Code        string `json:"Code"`
	Description string `json:"Description"`
	EventID     string `json:"EventId"`
	State       string `json:"State"`
}

// parseScheduled parses events/maintenance/scheduled. Events whose State
// is canceled or completed are not notices (their disappearance makes the
// Watcher report a cancellation); any other state, active or one AWS may add,
// is. Deadline is NotBefore; NotAfter is optional.
func parseScheduled(body []byte) ([]notice.Notice, error) {
	trimmed := bytes.TrimSpace(body)
	if len(trimmed) == 0 || string(trimmed) == "null" {
		return nil, nil
	}
	var evs []scheduledEvent
	if err := decodeJSON(trimmed, &evs); err != nil {
		return nil, err
	}
	var out []notice.Notice
	seen := make(map[string]bool, len(evs))
	for i, ev := range evs {
		id := strings.TrimSpace(ev.EventID)
		if id == "" {
			return nil, fmt.Errorf("event %d has no EventId: %w", i, notice.ErrMalformed)
		}
		state := strings.ToLower(strings.TrimSpace(ev.State))
		if state == "canceled" || state == "cancelled" || state == "completed" {
			continue
		}
		if seen[id] {
			continue
		}
		seen[id] = true
		nb, err := ParseScheduledTime(ev.NotBefore)
		if err != nil {
			return nil, fmt.Errorf("event %s NotBefore: %w", id, err)
		}
		var na time.Time
		if strings.TrimSpace(ev.NotAfter) != "" {
			if na, err = ParseScheduledTime(ev.NotAfter); err != nil {
				return nil, fmt.Errorf("event %s NotAfter: %w", id, err)
			}
		}
		out = append(out, notice.Notice{
			ID:       id,
			Kind:     scheduledKind(ev.Code),
			Deadline: nb,
			NotAfter: na,
			Detail: map[string]string{
				"path":        pathScheduled,
				"event_id":    id,
				"code":        ev.Code,
				"description": ev.Description,
				"state":       ev.State,
				"not_before":  ev.NotBefore,
				"not_after":   ev.NotAfter,
				"raw":         raw(body),
			},
		})
	}
	return out, nil
}

// scheduledKind maps an event Code to a Kind; unknown codes are
// maintenance.
func scheduledKind(code string) notice.Kind {
	switch strings.ToLower(strings.TrimSpace(code)) {
	case "instance-reboot", "system-reboot":
		return notice.KindReboot
	case "instance-stop":
		return notice.KindStop
	case "instance-retirement":
		return notice.KindTerminate
	}
	return notice.KindMaintenance
}

// parseLifecycle validates autoscaling/target-lifecycle-state: a short
// word such as InService or Warmed:Terminated.
func parseLifecycle(body []byte) (string, error) {
	state := strings.TrimSpace(string(body))
	if state == "" || len(state) > 64 {
		return "", fmt.Errorf("target lifecycle state %q: %w", truncate(state, 80), notice.ErrMalformed)
	}
	for _, r := range state {
		if !(r >= 'A' && r <= 'Z' || r >= 'a' && r <= 'z' || r >= '0' && r <= '9' || r == ':' || r == '-' || r == '_') {
			return "", fmt.Errorf("target lifecycle state %q: %w", truncate(state, 80), notice.ErrMalformed)
		}
	}
	return state, nil
}

// timeLayouts are tried in order by ParseTime. RFC 3339 parsing accepts
// fractional seconds even when the layout has none.
var timeLayouts = []string{
	time.RFC3339,
	"2006-01-02T15:04:05",
	"2006-01-02 15:04:05Z07:00",
	"2006-01-02 15:04:05",
}

// ParseTime parses an IMDS timestamp leniently: RFC 3339 with or without
// fractional seconds, a space for the T, and no zone meaning UTC. A time
// before 2000 or after 2999 is rejected as implausible. Errors wrap
// notice.ErrMalformed.
func ParseTime(s string) (time.Time, error) {
	return parseWith(s, timeLayouts)
}

// ParseScheduledTime parses a scheduled event time ("21 Jan 2019 09:00:43
// GMT"), tolerating RFC 1123 and RFC 3339. Errors wrap notice.ErrMalformed.
func ParseScheduledTime(s string) (time.Time, error) {
	return parseWith(s, append([]string{ScheduledTimeLayout, time.RFC1123}, timeLayouts...))
}

func parseWith(s string, layouts []string) (time.Time, error) {
	v := strings.TrimSpace(s)
	for _, layout := range layouts {
		t, err := time.Parse(layout, v)
		if err != nil {
			continue
		}
		if t.Year() < 2000 || t.Year() > 2999 {
			return time.Time{}, fmt.Errorf("implausible time %q: %w", truncate(s, 80), notice.ErrMalformed)
		}
		return t.UTC(), nil
	}
	return time.Time{}, fmt.Errorf("unparseable time %q: %w", truncate(s, 80), notice.ErrMalformed)
}

// decodeJSON decodes a 2xx body; a failure wraps notice.ErrMalformed.
func decodeJSON(body []byte, v any) error {
	if err := json.Unmarshal(body, v); err != nil {
		return fmt.Errorf("%w: %w (body %q)", notice.ErrMalformed, err, truncate(string(body), 80))
	}
	return nil
}

// safeID keeps an identity fragment printable.
func safeID(s string) string {
	return strings.Map(func(r rune) rune {
		if r >= 'a' && r <= 'z' || r >= '0' && r <= '9' || r == '-' || r == '_' {
			return r
		}
		return '_'
	}, truncate(s, 32))
}

func raw(b []byte) string { return truncate(string(b), maxRaw) }
