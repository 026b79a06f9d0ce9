package noticetest

import (
	"crypto/rand"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"net/http"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/spotsafe/spotsafe/notice"
)

// Identity the [AWS] fake serves.
const (
	AWSInstanceID       = "i-0123456789abcdef0"
	AWSInstanceType     = "m5.large"
	AWSRegion           = "us-east-2"
	AWSAvailabilityZone = "us-east-2a"
)

// AWSScheduledTimeLayout is the layout of scheduled-event times.
const AWSScheduledTimeLayout = "2 Jan 2006 15:04:05 GMT"

// AWS IMDSv2 header names.
const (
	awsTTLHeader   = "X-aws-ec2-metadata-token-ttl-seconds"
	awsTokenHeader = "X-aws-ec2-metadata-token"
)

// awsNotFound is the page real IMDS answers for an absent path.
const awsNotFound = `<?xml version="1.0" encoding="iso-8859-1"?>
<!DOCTYPE html PUBLIC "-//W3C//DTD XHTML 1.0 Transitional//EN"
	"http://www.w3.org/TR/xhtml1/DTD/xhtml1-transitional.dtd">
<html xmlns="http://www.w3.org/1999/xhtml" xml:lang="en" lang="en">
 <head>
  <title>404 - Not Found</title>
 </head>
 <body>
  <h1>404 - Not Found</h1>
 </body>
</html>
`

// AWSScheduledEvent is one element of events/maintenance/scheduled.
type AWSScheduledEvent struct {
	// EventID is the identity; default a fresh "instance-event-…" id.
	EventID string
	// Code: instance-reboot, system-reboot, system-maintenance,
	// instance-retirement or instance-stop (served as is).
	Code string
	// Description is served as is.
	Description string
	// State: active (default), canceled or completed.
	State string
	// NotBefore and NotAfter are served in AWSScheduledTimeLayout; a zero
	// NotAfter is omitted, as for degraded-hardware events.
	NotBefore, NotAfter time.Time
}

// AWS is a fake EC2 instance metadata service (IMDS), IMDSv1 and IMDSv2.
//
// Token protocol: PUT /latest/api/token with X-aws-ec2-metadata-token-ttl-seconds
// between 1 and 21600 returns a token and echoes the granted TTL; a missing or
// out-of-range TTL answers 400, an X-Forwarded-For header 403, a PUT to a
// version-specific path (/2021-03-23/api/token) 403. Tokens expire. A GET
// with an unknown or expired token answers 401; without a token it is served
// (IMDSv1) unless [AWS.RequireTokens] is set. Absent paths answer 404 with
// IMDS's HTML page; documents are JSON with Content-Type text/plain.
//
// The [Fake] interface maps KindTerminate, KindStop and KindHibernate (and
// KindPreempt, as terminate) to spot/instance-action {"action","time"} with
// time = deadline, plus spot/termination-time for terminate; KindRebalance to
// events/recommendations/rebalance with noticeTime = the appear time;
// KindReboot to an active instance-reboot event and every other kind to an
// active system-maintenance event in events/maintenance/scheduled, with
// NotBefore = deadline. Clear withdraws all of these, including what the
// AWS-specific controls set.
//
// Failures injected with Inject apply to the notice paths (spot/, events/,
// autoscaling/), not to the token PUT or identity paths; the token PUT has
// its own controls ([AWS.DisableV2], [AWS.DropTokenPUT]).
type AWS struct {
	Base

	mu            sync.Mutex
	tokens        map[string]time.Time // token → expiry
	requireTokens bool
	disableV2     int
	dropPUT       bool
	tokenPUTs     int
	unauthorized  int
	rebalance     time.Time
	events        []AWSScheduledEvent
	nextEvent     int
	lifecycle     string
	lifeCycle     string
	raw           map[string]string
}

var _ Fake = (*AWS)(nil)

// NewAWS starts a fake IMDS. Close it when done.
func NewAWS(opts *ServerOptions) (*AWS, error) {
	a := &AWS{
		tokens:    make(map[string]time.Time),
		lifeCycle: "spot",
		raw:       make(map[string]string),
	}
	if err := a.Start(opts, http.HandlerFunc(a.serve)); err != nil {
		return nil, err
	}
	return a, nil
}

// RequireTokens sets HttpTokens=required: token-less GETs answer 401.
func (a *AWS) RequireTokens(on bool) {
	a.mu.Lock()
	defer a.mu.Unlock()
	a.requireTokens = on
}

// DisableV2 makes the token PUT answer code (typically 403, 404 or 405, as
// where IMDSv2 is unavailable; 400 to simulate a rejected request); 0
// serves tokens again.
func (a *AWS) DisableV2(code int) {
	a.mu.Lock()
	defer a.mu.Unlock()
	a.disableV2 = code
}

// DropTokenPUT simulates a hop limit of 1 seen from a container: the token
// PUT never answers until the client gives up.
func (a *AWS) DropTokenPUT(on bool) {
	a.mu.Lock()
	defer a.mu.Unlock()
	a.dropPUT = on
}

// ExpireTokens makes every token issued so far stale.
func (a *AWS) ExpireTokens() {
	a.mu.Lock()
	defer a.mu.Unlock()
	clear(a.tokens)
}

// TokenPUTs counts token PUT requests, answered or not.
func (a *AWS) TokenPUTs() int {
	a.mu.Lock()
	defer a.mu.Unlock()
	return a.tokenPUTs
}

// Unauthorized counts GETs answered 401.
func (a *AWS) Unauthorized() int {
	a.mu.Lock()
	defer a.mu.Unlock()
	return a.unauthorized
}

// SetRebalance serves a rebalance recommendation with noticeTime t; a zero
// t removes it.
func (a *AWS) SetRebalance(t time.Time) {
	a.mu.Lock()
	defer a.mu.Unlock()
	a.rebalance = t
}

// AddScheduledEvent adds a scheduled event and returns its EventId.
func (a *AWS) AddScheduledEvent(ev AWSScheduledEvent) string {
	a.mu.Lock()
	defer a.mu.Unlock()
	if ev.EventID == "" {
		a.nextEvent++
		ev.EventID = fmt.Sprintf("instance-event-%017x", 0xa000000+a.nextEvent)
	}
	if ev.State == "" {
		ev.State = "active"
	}
	a.events = append(a.events, ev)
	return ev.EventID
}

// SetScheduledEventState changes the State of an event added with
// AddScheduledEvent ("canceled", "completed", "active"). A canceled or
// completed event stays in events/maintenance/scheduled with that state and
// also appears in events/maintenance/history. It reports whether the event
// exists.
func (a *AWS) SetScheduledEventState(id, state string) bool {
	a.mu.Lock()
	defer a.mu.Unlock()
	for i := range a.events {
		if a.events[i].EventID == id {
			a.events[i].State = state
			return true
		}
	}
	return false
}

// RemoveScheduledEvent deletes an event added with AddScheduledEvent.
func (a *AWS) RemoveScheduledEvent(id string) {
	a.mu.Lock()
	defer a.mu.Unlock()
	a.events = slices.DeleteFunc(a.events, func(ev AWSScheduledEvent) bool { return ev.EventID == id })
}

// SetLifecycleState serves autoscaling/target-lifecycle-state ("InService",
// "Terminated", ...); "" makes it 404.
func (a *AWS) SetLifecycleState(state string) {
	a.mu.Lock()
	defer a.mu.Unlock()
	a.lifecycle = state
}

// SetLifeCycle sets instance-life-cycle ("spot" by default, "on-demand");
// "" makes it 404.
func (a *AWS) SetLifeCycle(v string) {
	a.mu.Lock()
	defer a.mu.Unlock()
	a.lifeCycle = v
}

// SetRaw serves body verbatim (200, text/plain) at path, relative to
// /latest/meta-data/ (e.g. "spot/instance-action"), overriding everything
// else there; "" removes the override. Use it for malformed documents.
func (a *AWS) SetRaw(path, body string) {
	a.mu.Lock()
	defer a.mu.Unlock()
	if body == "" {
		delete(a.raw, path)
		return
	}
	a.raw[path] = body
}

// Clear withdraws every notice: the scheduled one and whatever SetRebalance,
// AddScheduledEvent and SetLifecycleState set.
func (a *AWS) Clear() {
	a.mu.Lock()
	a.rebalance = time.Time{}
	a.events = nil
	a.lifecycle = ""
	a.mu.Unlock()
	a.Base.Clear()
}

func (a *AWS) serve(w http.ResponseWriter, r *http.Request) {
	w.Header().Set("Server", "EC2ws")
	path := r.URL.Path
	if path == "/latest/api/token" {
		a.serveToken(w, r)
		return
	}
	if strings.HasSuffix(path, "/api/token") {
		awsError(w, http.StatusForbidden)
		return
	}
	if r.Method != http.MethodGet && r.Method != http.MethodHead {
		w.Header().Set("Allow", "GET, HEAD")
		awsError(w, http.StatusMethodNotAllowed)
		return
	}
	if r.Header.Get("X-Forwarded-For") != "" {
		awsError(w, http.StatusForbidden)
		return
	}

	a.mu.Lock()
	tok := r.Header.Get(awsTokenHeader)
	ttl := -1
	if tok != "" {
		exp, ok := a.tokens[tok]
		if !ok || !time.Now().Before(exp) {
			a.unauthorized++
			a.mu.Unlock()
			awsError(w, http.StatusUnauthorized)
			return
		}
		ttl = int(time.Until(exp) / time.Second)
	} else if a.requireTokens {
		a.unauthorized++
		a.mu.Unlock()
		awsError(w, http.StatusUnauthorized)
		return
	}
	a.mu.Unlock()

	rel, ok := strings.CutPrefix(path, "/latest/")
	if !ok {
		if path == "/" {
			awsText(w, "latest\n", ttl)
		} else {
			awsError(w, http.StatusNotFound)
		}
		return
	}
	if awsNoticePath(rel) && a.Intercept(w, r) {
		return
	}
	tree := a.tree(time.Now())
	if body, ok := tree[rel]; ok {
		awsText(w, body, ttl)
		return
	}
	if list := awsListing(tree, rel); list != "" {
		awsText(w, list, ttl)
		return
	}
	awsError(w, http.StatusNotFound)
}

func (a *AWS) serveToken(w http.ResponseWriter, r *http.Request) {
	a.mu.Lock()
	if r.Method == http.MethodPut {
		a.tokenPUTs++
	}
	code, drop := a.disableV2, a.dropPUT
	a.mu.Unlock()
	switch {
	case r.Method != http.MethodPut:
		w.Header().Set("Allow", "PUT")
		awsError(w, http.StatusMethodNotAllowed)
		return
	case r.Header.Get("X-Forwarded-For") != "":
		awsError(w, http.StatusForbidden)
		return
	case code != 0:
		awsError(w, code)
		return
	case drop:
		select {
		case <-r.Context().Done():
		case <-a.closed():
		}
		return
	}
	ttl, err := strconv.Atoi(strings.TrimSpace(r.Header.Get(awsTTLHeader)))
	if err != nil || ttl < 1 || ttl > 21600 {
		awsError(w, http.StatusBadRequest)
		return
	}
	var b [40]byte
	_, _ = rand.Read(b[:])
	tok := base64.StdEncoding.EncodeToString(b[:])
	a.mu.Lock()
	a.tokens[tok] = time.Now().Add(time.Duration(ttl) * time.Second)
	a.mu.Unlock()
	w.Header().Set(awsTTLHeader, strconv.Itoa(ttl))
	awsText(w, tok, -1)
}

// tree returns every path (relative to /latest/) served at now.
func (a *AWS) tree(now time.Time) map[string]string {
	a.mu.Lock()
	defer a.mu.Unlock()
	m := map[string]string{
		"meta-data/ami-id":                      "ami-0abcdef1234567890",
		"meta-data/instance-id":                 AWSInstanceID,
		"meta-data/instance-type":               AWSInstanceType,
		"meta-data/placement/region":            AWSRegion,
		"meta-data/placement/availability-zone": AWSAvailabilityZone,
		// The bundling status, not the Spot notice: a common mistake.
		"meta-data/instance-action": "none",
		"dynamic/instance-identity/document": fmt.Sprintf(`{
  "accountId" : "123456789012",
  "availabilityZone" : %q,
  "instanceId" : %q,
  "instanceType" : %q,
  "region" : %q
}`, AWSAvailabilityZone, AWSInstanceID, AWSInstanceType, AWSRegion),
	}
	if a.lifeCycle != "" {
		m["meta-data/instance-life-cycle"] = a.lifeCycle
	}
	if a.lifecycle != "" {
		m["meta-data/autoscaling/target-lifecycle-state"] = a.lifecycle
	}
	if !a.rebalance.IsZero() {
		m["meta-data/events/recommendations/rebalance"] = awsRebalance(a.rebalance)
	}
	events := slices.Clone(a.events)
	if cur, ok, _ := a.Current(now); ok {
		switch cur.Kind {
		case notice.KindTerminate, notice.KindStop, notice.KindHibernate, notice.KindPreempt:
			action := "terminate"
			switch cur.Kind {
			case notice.KindStop:
				action = "stop"
			case notice.KindHibernate:
				action = "hibernate"
			}
			t := cur.Deadline.UTC().Format(time.RFC3339)
			m["meta-data/spot/instance-action"] = fmt.Sprintf(`{"action":%q,"time":%q}`, action, t)
			if action == "terminate" {
				m["meta-data/spot/termination-time"] = t
			}
		case notice.KindRebalance:
			m["meta-data/events/recommendations/rebalance"] = awsRebalance(cur.Appear)
		default:
			code, desc := "system-maintenance", "scheduled maintenance"
			if cur.Kind == notice.KindReboot {
				code, desc = "instance-reboot", "scheduled reboot"
			}
			events = append(events, AWSScheduledEvent{
				EventID:     fmt.Sprintf("instance-event-%017x", 0xb000000+cur.Seq),
				Code:        code,
				Description: desc,
				State:       "active",
				NotBefore:   cur.Deadline,
				NotAfter:    cur.Deadline.Add(2 * time.Hour),
			})
		}
	}
	for k, v := range a.raw {
		m["meta-data/"+k] = v
	}
	if _, ok := m["meta-data/events/maintenance/scheduled"]; !ok {
		m["meta-data/events/maintenance/scheduled"] = awsEvents(events, false)
	}
	if _, ok := m["meta-data/events/maintenance/history"]; !ok {
		m["meta-data/events/maintenance/history"] = awsEvents(events, true)
	}
	return m
}

func awsRebalance(t time.Time) string {
	return fmt.Sprintf(`{"noticeTime":%q}`, t.UTC().Truncate(time.Second).Format(time.RFC3339))
}

// awsEvents renders the scheduled (history=false) or history list, in
// IMDS's field order.
func awsEvents(evs []AWSScheduledEvent, history bool) string {
	type wire struct {
		NotBefore   string `json:"NotBefore"`
		Code        string `json:"Code"`
		Description string `json:"Description"`
		EventID     string `json:"EventId"`
		NotAfter    string `json:"NotAfter,omitempty"`
		State       string `json:"State"`
	}
	out := []wire{}
	for _, ev := range evs {
		done := ev.State == "canceled" || ev.State == "completed"
		if history && !done {
			continue
		}
		w := wire{
			NotBefore:   ev.NotBefore.UTC().Format(AWSScheduledTimeLayout),
			Code:        ev.Code,
			Description: ev.Description,
			EventID:     ev.EventID,
			State:       ev.State,
		}
		if !ev.NotAfter.IsZero() {
			w.NotAfter = ev.NotAfter.UTC().Format(AWSScheduledTimeLayout)
		}
		if history {
			w.Description = "[" + strings.ToUpper(ev.State[:1]) + ev.State[1:] + "] " + w.Description
		}
		out = append(out, w)
	}
	b, _ := json.MarshalIndent(out, "", "  ")
	return string(b)
}

// awsListing lists the children of directory dir ("" or ending in "/"),
// directories with a trailing slash, as IMDS does.
func awsListing(tree map[string]string, dir string) string {
	if dir != "" && !strings.HasSuffix(dir, "/") {
		return ""
	}
	var names []string
	for p := range tree {
		rest, ok := strings.CutPrefix(p, dir)
		if !ok {
			continue
		}
		name, _, isDir := strings.Cut(rest, "/")
		if isDir {
			name += "/"
		}
		if !slices.Contains(names, name) {
			names = append(names, name)
		}
	}
	slices.Sort(names)
	return strings.Join(names, "\n")
}

// awsNoticePath reports whether rel (relative to /latest/) is a notice
// path, where injected failures apply.
func awsNoticePath(rel string) bool {
	for _, p := range []string{"meta-data/spot/", "meta-data/events/", "meta-data/autoscaling/"} {
		if strings.HasPrefix(rel, p) {
			return true
		}
	}
	return false
}

// awsText answers 200 text/plain, echoing the token's remaining TTL as
// IMDS does when ttl >= 0.
func awsText(w http.ResponseWriter, body string, ttl int) {
	w.Header().Set("Content-Type", "text/plain")
	if ttl >= 0 {
		w.Header().Set(awsTTLHeader, strconv.Itoa(ttl))
	}
	w.Header().Set("Content-Length", strconv.Itoa(len(body)))
	_, _ = w.Write([]byte(body))
}

// awsError answers code with an IMDS-style HTML page.
func awsError(w http.ResponseWriter, code int) {
	w.Header().Set("Content-Type", "text/html")
	page := awsNotFound
	if code != http.StatusNotFound {
		text := fmt.Sprintf("%d - %s", code, http.StatusText(code))
		page = strings.ReplaceAll(awsNotFound, "404 - Not Found", text)
	}
	w.WriteHeader(code)
	_, _ = w.Write([]byte(page))
}
