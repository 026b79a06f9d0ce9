package noticetest

import (
	"fmt"
	"hash/fnv"
	"net/http"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/spotsafe/spotsafe/notice"
)

// GCE metadata server protocol constants (PROTOCOLS.md section 2).
const (
	// GCPPathPrefix is where every metadata key lives.
	GCPPathPrefix = "/computeMetadata/v1/"
	// GCPKeyPreempted is TRUE once Compute Engine preempts the VM.
	GCPKeyPreempted = "instance/preempted"
	// GCPKeyMaintenanceEvent announces host maintenance.
	GCPKeyMaintenanceEvent = "instance/maintenance-event"
)

// gcpWaitForever bounds a hanging GET that gives no timeout_sec.
const gcpWaitForever = 24 * time.Hour

// GCP is a fake Google Compute Engine metadata server. It serves
// /computeMetadata/v1/instance/preempted and instance/maintenance-event from
// the schedule, plus fixed identity keys (id, name, hostname, zone,
// machine-type, scheduling/*, project/*), and speaks the protocol's rules:
//
//   - every request needs "Metadata-Flavor: Google" and must not carry
//     X-Forwarded-For, else 403;
//   - every answer carries "Metadata-Flavor: Google" and an ETag derived
//     from the value (so the same value always has the same ETag);
//   - ?wait_for_change=true blocks: with last_etag it returns at once if the
//     current ETag differs, else when the value changes; without last_etag
//     it waits for a change after the request arrived; timeout_sec=n returns
//     the current value (200, same ETag) after n seconds without a change;
//   - a key that does not exist answers 404; a path ending in "/" lists a
//     directory.
//
// The schedule maps to the keys as follows: [notice.KindPreempt] and the
// other final kinds (Stop, Hibernate) set preempted TRUE;
// [notice.KindTerminate] sets maintenance-event TERMINATE_ON_HOST_MAINTENANCE;
// [notice.KindMigrate] and the other advisory kinds set
// MIGRATE_ON_HOST_MAINTENANCE. With no notice, preempted is FALSE and
// maintenance-event NONE. The protocol carries no deadline.
//
// Injected failures ([Fake.Inject]) apply to the two notice keys only, after
// the header checks. Create it with [NewGCP].
type GCP struct {
	Base

	static  map[string]string
	hanging atomic.Int64

	mu sync.Mutex
	// overrides replace a key's answer; a nil value makes it 404.
	overrides map[string]*string
}

var _ Fake = (*GCP)(nil)

// NewGCP starts a fake GCE metadata server. opts may be nil.
func NewGCP(opts *ServerOptions) (*GCP, error) {
	g := &GCP{static: gcpStaticValues(), overrides: make(map[string]*string)}
	if err := g.Start(opts, http.HandlerFunc(g.serve)); err != nil {
		return nil, err
	}
	return g, nil
}

// gcpStaticValues are the identity keys the fake serves: a Spot VM in
// us-central1-a.
func gcpStaticValues() map[string]string {
	return map[string]string{
		"instance/id":                             "4520031799277581759",
		"instance/name":                           "spotsafe-fake",
		"instance/hostname":                       "spotsafe-fake.us-central1-a.c.spotsafe-fake.internal",
		"instance/zone":                           "projects/123456789012/zones/us-central1-a",
		"instance/machine-type":                   "projects/123456789012/machineTypes/n1-standard-4",
		"instance/scheduling/preemptible":         "TRUE",
		"instance/scheduling/provisioning-model":  "SPOT",
		"instance/scheduling/on-host-maintenance": "TERMINATE",
		"instance/scheduling/automatic-restart":   "FALSE",
		"project/project-id":                      "spotsafe-fake",
		"project/numeric-project-id":              "123456789012",
	}
}

// SetValue makes key (relative to /computeMetadata/v1/, e.g.
// "instance/maintenance-event") answer value whatever the schedule says,
// waking hanging GETs. Use it for values the schedule cannot express: a
// malformed value, the legacy SHUTDOWN_ON_HOST_MAINTENANCE, another zone.
func (g *GCP) SetValue(key, value string) {
	g.mu.Lock()
	g.overrides[key] = &value
	g.mu.Unlock()
	g.notify()
}

// DeleteKey makes key answer 404, like a metadata server that predates it.
func (g *GCP) DeleteKey(key string) {
	g.mu.Lock()
	g.overrides[key] = nil
	g.mu.Unlock()
	g.notify()
}

// ResetKey undoes [GCP.SetValue] and [GCP.DeleteKey] for key.
func (g *GCP) ResetKey(key string) {
	g.mu.Lock()
	delete(g.overrides, key)
	g.mu.Unlock()
	g.notify()
}

// Value returns what key answers now and its ETag; ok is false when the key
// answers 404.
func (g *GCP) Value(key string) (value, etag string, ok bool) {
	cur, active, _ := g.Current(time.Now())
	value, ok = g.valueAt(key, cur, active)
	return value, GCPETag(value), ok
}

// Hanging returns how many wait_for_change requests are blocked right now.
// Tests use it to know that a client's hanging GET is in place.
func (g *GCP) Hanging() int { return int(g.hanging.Load()) }

// GCPETag is the ETag the fake sends for value: a hash of the value, so that
// the ETag changes exactly when the value does.
func GCPETag(value string) string {
	h := fnv.New64a()
	_, _ = h.Write([]byte(value))
	return fmt.Sprintf("%016x", h.Sum64())
}

// notify wakes hanging GETs after an override changed.
func (g *GCP) notify() {
	g.Base.mu.Lock()
	g.notifyLocked()
	g.Base.mu.Unlock()
}

// valueAt computes key's answer given the visible notice.
func (g *GCP) valueAt(key string, cur Scheduled, active bool) (string, bool) {
	g.mu.Lock()
	ov, overridden := g.overrides[key]
	g.mu.Unlock()
	if overridden {
		if ov == nil {
			return "", false
		}
		return *ov, true
	}
	switch key {
	case GCPKeyPreempted:
		if active && cur.Kind.Final() && cur.Kind != notice.KindTerminate {
			return "TRUE", true
		}
		return "FALSE", true
	case GCPKeyMaintenanceEvent:
		switch {
		case !active:
			return "NONE", true
		case cur.Kind == notice.KindTerminate:
			return "TERMINATE_ON_HOST_MAINTENANCE", true
		case !cur.Kind.Final():
			return "MIGRATE_ON_HOST_MAINTENANCE", true
		}
		return "NONE", true
	}
	v, ok := g.static[key]
	return v, ok
}

func (g *GCP) serve(w http.ResponseWriter, r *http.Request) {
	h := w.Header()
	h.Set("Metadata-Flavor", "Google")
	h.Set("Server", "Metadata Server for VM")
	if r.Header.Get("X-Forwarded-For") != "" {
		http.Error(w, "Forbidden: requests with X-Forwarded-For are refused", http.StatusForbidden)
		return
	}
	if r.Header.Get("Metadata-Flavor") != "Google" {
		http.Error(w, "Missing required header \"Metadata-Flavor\": \"Google\"", http.StatusForbidden)
		return
	}
	if r.Method != http.MethodGet && r.Method != http.MethodHead {
		h.Set("Allow", "GET, HEAD")
		http.Error(w, "method not allowed", http.StatusMethodNotAllowed)
		return
	}
	switch r.URL.Path {
	case "/":
		gcpWrite(w, r, "computeMetadata/\n")
		return
	case "/computeMetadata/":
		gcpWrite(w, r, "v1/\n")
		return
	}
	key, ok := strings.CutPrefix(r.URL.Path, GCPPathPrefix)
	if !ok {
		http.NotFound(w, r)
		return
	}
	if key == "" || strings.HasSuffix(key, "/") {
		g.serveDir(w, r, key)
		return
	}
	if key == GCPKeyPreempted || key == GCPKeyMaintenanceEvent {
		if g.Intercept(w, r) {
			return
		}
	}
	q := r.URL.Query()
	if q.Get("wait_for_change") != "true" {
		cur, active, _ := g.Current(time.Now())
		g.reply(w, r, key, cur, active)
		return
	}
	limit := gcpWaitForever
	if ts := q.Get("timeout_sec"); ts != "" {
		n, err := strconv.Atoi(ts)
		if err != nil || n < 1 {
			http.Error(w, "invalid timeout_sec", http.StatusBadRequest)
			return
		}
		limit = time.Duration(n) * time.Second
	}
	g.hang(w, r, key, q.Get("last_etag"), time.Now().Add(limit))
}

// hang answers a wait_for_change request: at once if the ETag already
// differs from last, else at the next change of the value or at deadline.
func (g *GCP) hang(w http.ResponseWriter, r *http.Request, key, last string, deadline time.Time) {
	g.hanging.Add(1)
	defer g.hanging.Add(-1)
	closing := g.closed()
	for {
		// Subscribe before reading the value, so that a change in between
		// is not missed; read the value and the next appearance at the
		// same instant for the same reason.
		changed := g.Changed()
		now := time.Now()
		cur, active, next := g.Current(now)
		value, ok := g.valueAt(key, cur, active)
		if !ok {
			http.NotFound(w, r)
			return
		}
		etag := GCPETag(value)
		if last == "" {
			last = etag // wait for a change after the request arrived
		}
		if etag != last || !now.Before(deadline) {
			g.reply(w, r, key, cur, active)
			return
		}
		t := time.NewTimer(deadline.Sub(now))
		var appear <-chan time.Time
		var at *time.Timer
		if !next.IsZero() {
			at = time.NewTimer(next.Sub(now))
			appear = at.C
		}
		select {
		case <-changed:
		case <-appear:
		case <-t.C:
		case <-r.Context().Done():
		case <-closing:
		}
		t.Stop()
		if at != nil {
			at.Stop()
		}
		if r.Context().Err() != nil {
			return
		}
		select {
		case <-closing:
			cur, active, _ := g.Current(time.Now())
			g.reply(w, r, key, cur, active)
			return
		default:
		}
	}
}

func (g *GCP) reply(w http.ResponseWriter, r *http.Request, key string, cur Scheduled, active bool) {
	value, ok := g.valueAt(key, cur, active)
	if !ok {
		http.NotFound(w, r)
		return
	}
	gcpWrite(w, r, value)
}

// serveDir lists the keys and sub-directories under dir ("" is the root).
func (g *GCP) serveDir(w http.ResponseWriter, r *http.Request, dir string) {
	keys := []string{GCPKeyPreempted, GCPKeyMaintenanceEvent}
	for k := range g.static {
		keys = append(keys, k)
	}
	g.mu.Lock()
	for k, v := range g.overrides {
		if v != nil {
			keys = append(keys, k)
		}
	}
	deleted := make(map[string]bool)
	for k, v := range g.overrides {
		if v == nil {
			deleted[k] = true
		}
	}
	g.mu.Unlock()
	var entries []string
	for _, k := range keys {
		rest, ok := strings.CutPrefix(k, dir)
		if !ok || deleted[k] {
			continue
		}
		if i := strings.IndexByte(rest, '/'); i >= 0 {
			rest = rest[:i+1]
		}
		entries = append(entries, rest)
	}
	slices.Sort(entries)
	entries = slices.Compact(entries)
	if len(entries) == 0 {
		http.NotFound(w, r)
		return
	}
	gcpWrite(w, r, strings.Join(entries, "\n")+"\n")
}

func gcpWrite(w http.ResponseWriter, r *http.Request, body string) {
	h := w.Header()
	h.Set("ETag", GCPETag(body))
	h.Set("Content-Type", "application/text")
	h.Set("Content-Length", strconv.Itoa(len(body)))
	if r.Method == http.MethodHead {
		return
	}
	_, _ = w.Write([]byte(body))
}
