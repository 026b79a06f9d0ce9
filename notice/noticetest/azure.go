package noticetest

import (
	"encoding/json"
	"fmt"
	"math/rand/v2"
	"net/http"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/spotsafe/spotsafe/notice"
)

// AzureEvent is a scheduled event served by an [Azure] fake. Zero fields get
// the defaults documented on each.
type AzureEvent struct {
	// EventID is the identity; default a fresh GUID.
	EventID string
	// EventType is "Preempt", "Terminate", "Reboot", "Redeploy", "Freeze"
	// or anything else (served as is). Required.
	EventType string
	// ResourceType defaults to "VirtualMachine".
	ResourceType string
	// Resources lists the VM names the event affects; default the fake's
	// own VM name. Name other VMs to simulate a broadcast.
	Resources []string
	// EventStatus is "Scheduled" (default) or "Started". A started event
	// is served with NotBefore "".
	EventStatus string
	// NotBefore is served in RFC 1123 with GMT; zero serves "".
	NotBefore time.Time
	// NotBeforeRaw, when set, is served verbatim instead of NotBefore (an
	// ISO 8601 time as mock servers send, or garbage).
	NotBeforeRaw string
	// Description and EventSource ("Platform" by default) are served as
	// is.
	Description string
	EventSource string
	// DurationInSeconds is served as is (-1 unknown, 0 no impact).
	DurationInSeconds int
}

// Azure is a fake Azure instance metadata service: scheduled events
// (/metadata/scheduledevents, GET and POST StartRequests) and instance
// metadata (/metadata/instance and /metadata/instance/compute/name).
//
// Like the real service it answers 400 without the Metadata: true header,
// without a supported api-version (listing the newest versions) or with an
// X-Forwarded-For header; it bumps DocumentIncarnation whenever the Events
// array changes; it serves NotBefore in RFC 1123 GMT and "" once an event
// has Started. An approved (POSTed) event moves to Started. Unlike Azure it
// never starts or removes an event by itself: tests decide with
// [Azure.StartEvent], [Azure.RemoveEvent] and Clear.
//
// The [Fake] interface maps KindPreempt, KindTerminate, KindReboot,
// KindRedeploy and KindFreeze to one event of that type for this VM with
// NotBefore = deadline. Kinds Azure does not have are served with their
// name as an unknown EventType (e.g. "Stop"). Failures injected with Inject
// apply to the scheduled-events path only.
type Azure struct {
	Base

	mu          sync.Mutex
	vmName      string
	guidPrefix  string
	nextID      int
	events      []AzureEvent // added with AddEvent, in order
	started     map[string]bool
	acked       []string
	incarnation int
	lastSig     string
	dirty       bool
	firstDelay  time.Duration
	enabled     bool
}

var _ Fake = (*Azure)(nil)

// Azure API versions the fake accepts. Scheduled events exist in fewer
// versions than instance metadata.
var (
	azureEventsVersions = []string{
		"2017-03-01", "2017-08-01", "2017-11-01", "2019-01-01",
		"2019-04-01", "2019-08-01", "2020-07-01",
	}
	azureInstanceVersions = []string{
		"2017-03-01", "2017-04-02", "2017-08-01", "2017-10-01", "2017-12-01",
		"2018-02-01", "2018-04-02", "2018-10-01", "2019-02-01", "2019-03-11",
		"2019-04-30", "2019-06-01", "2019-06-04", "2019-08-01", "2019-08-15",
		"2019-11-01", "2020-06-01", "2020-07-15", "2020-09-01", "2020-10-01",
		"2020-12-01", "2021-01-01", "2021-02-01", "2021-03-01", "2021-05-01",
		"2021-08-01", "2021-10-01", "2021-11-01", "2021-11-15", "2021-12-13",
		"2023-07-01", "2023-11-15", "2024-03-15", "2024-07-17", "2025-04-07",
	}
)

// DefaultAzureVMName is the fake's VM name until SetVMName.
const DefaultAzureVMName = "spotsafe-vm-0"

// NewAzure starts a fake Azure IMDS. opts may be nil.
func NewAzure(opts *ServerOptions) (*Azure, error) {
	a := &Azure{
		vmName:      DefaultAzureVMName,
		guidPrefix:  fmt.Sprintf("%08X", rand.Uint32()),
		started:     make(map[string]bool),
		incarnation: 1,
		lastSig:     "[]",
		enabled:     true,
	}
	if err := a.Start(opts, http.HandlerFunc(a.serve)); err != nil {
		return nil, err
	}
	return a, nil
}

// SetVMName sets the name served at /metadata/instance/compute/name and
// used as the Resources of events for this VM.
func (a *Azure) SetVMName(name string) {
	a.mu.Lock()
	defer a.mu.Unlock()
	a.vmName = name
	a.dirty = true
}

// VMName returns the fake's VM name.
func (a *Azure) VMName() string {
	a.mu.Lock()
	defer a.mu.Unlock()
	return a.vmName
}

// AddEvent serves ev from now on and returns its EventId. It panics if ev
// has no EventType.
func (a *Azure) AddEvent(ev AzureEvent) string {
	if ev.EventType == "" {
		panic("noticetest: AzureEvent without EventType")
	}
	a.mu.Lock()
	defer a.mu.Unlock()
	if ev.EventID == "" {
		ev.EventID = a.newIDLocked()
	}
	ev.Resources = slices.Clone(ev.Resources)
	a.events = append(a.events, ev)
	if ev.EventStatus == "Started" {
		a.started[ev.EventID] = true
	}
	a.dirty = true
	return ev.EventID
}

// RemoveEvent stops serving the event added with id (it completed or was
// canceled) and reports whether there was one.
func (a *Azure) RemoveEvent(id string) bool {
	a.mu.Lock()
	defer a.mu.Unlock()
	i := slices.IndexFunc(a.events, func(e AzureEvent) bool { return e.EventID == id })
	if i < 0 {
		return false
	}
	a.events = slices.Delete(a.events, i, i+1)
	a.dirty = true
	return true
}

// StartEvent moves the event with id (added, or scheduled through the Fake
// interface) to Started, serving NotBefore "". It reports whether such an
// event is being served.
func (a *Azure) StartEvent(id string) bool {
	a.mu.Lock()
	defer a.mu.Unlock()
	if !a.servingLocked(id, time.Now()) {
		return false
	}
	a.started[id] = true
	a.dirty = true
	return true
}

// Acked returns the EventIds approved through POST StartRequests so far, in
// order (one entry per id per request).
func (a *Azure) Acked() []string {
	a.mu.Lock()
	defer a.mu.Unlock()
	return slices.Clone(a.acked)
}

// Incarnation returns the DocumentIncarnation last served.
func (a *Azure) Incarnation() int {
	a.mu.Lock()
	defer a.mu.Unlock()
	return a.incarnation
}

// SetFirstCallDelay simulates enablement: the next scheduled-events GET
// (the first "since the service was off") is answered only after d; later
// ones at once. Azure's real delay can reach two minutes.
func (a *Azure) SetFirstCallDelay(d time.Duration) {
	a.mu.Lock()
	defer a.mu.Unlock()
	a.firstDelay = d
	a.enabled = d <= 0
}

// Clear withdraws every event: the one scheduled through the Fake interface
// and those added with AddEvent.
func (a *Azure) Clear() {
	a.mu.Lock()
	if len(a.events) > 0 {
		a.events = nil
		a.dirty = true
	}
	a.mu.Unlock()
	a.Base.Clear()
}

// AzureEventType is the EventType the fake serves for kind.
func AzureEventType(kind notice.Kind) string {
	switch kind {
	case notice.KindPreempt:
		return "Preempt"
	case notice.KindTerminate:
		return "Terminate"
	case notice.KindReboot:
		return "Reboot"
	case notice.KindRedeploy:
		return "Redeploy"
	case notice.KindFreeze:
		return "Freeze"
	}
	s := kind.String()
	return strings.ToUpper(s[:1]) + s[1:]
}

var azureDescriptions = map[string]string{
	"Preempt":   "Virtual machine is being evicted from Azure Spot.",
	"Terminate": "Virtual machine is being deleted.",
	"Reboot":    "Virtual machine is going to be restarted as requested by authorized user.",
	"Redeploy":  "Virtual machine is being moved to another node.",
	"Freeze":    "Virtual machine is being paused because of a memory-preserving Live Migration operation.",
}

// azureWireEvent is an event as served.
type azureWireEvent struct {
	EventID           string   `json:"EventId"`
	EventType         string   `json:"EventType"`
	ResourceType      string   `json:"ResourceType"`
	Resources         []string `json:"Resources"`
	EventStatus       string   `json:"EventStatus"`
	NotBefore         string   `json:"NotBefore"`
	Description       string   `json:"Description,omitempty"`
	EventSource       string   `json:"EventSource,omitempty"`
	DurationInSeconds *int     `json:"DurationInSeconds,omitempty"`
}

type azureDocument struct {
	DocumentIncarnation int              `json:"DocumentIncarnation"`
	Events              []azureWireEvent `json:"Events"`
}

func (a *Azure) serve(w http.ResponseWriter, r *http.Request) {
	switch strings.TrimRight(r.URL.Path, "/") {
	case "/metadata/scheduledevents":
		if a.Intercept(w, r) {
			return
		}
		if !a.checkRequest(w, r, azureEventsVersions) {
			return
		}
		switch r.Method {
		case http.MethodGet:
			a.serveEvents(w, r)
		case http.MethodPost:
			a.serveStart(w, r)
		default:
			azureError(w, http.StatusMethodNotAllowed, fmt.Sprintf("Http method not allowed: path = %q, method = %q", r.URL.Path, r.Method), nil)
		}
	case "/metadata/instance":
		if a.checkRequest(w, r, azureInstanceVersions) && a.checkGet(w, r) {
			a.serveInstance(w)
		}
	case "/metadata/instance/compute/name":
		if !a.checkRequest(w, r, azureInstanceVersions) || !a.checkGet(w, r) {
			return
		}
		if r.URL.Query().Get("format") != "text" {
			azureError(w, http.StatusBadRequest, "Bad request. Leaf nodes require format=text.", nil)
			return
		}
		w.Header().Set("Content-Type", "text/plain; charset=utf-8")
		_, _ = w.Write([]byte(a.VMName()))
	default:
		azureError(w, http.StatusNotFound, fmt.Sprintf("API not found: path = %q, method = %q", r.URL.Path, r.Method), nil)
	}
}

// checkRequest applies the rules every IMDS call shares.
func (a *Azure) checkRequest(w http.ResponseWriter, r *http.Request, versions []string) bool {
	if r.Header.Get("X-Forwarded-For") != "" {
		// [unverified] Azure documents that such requests are rejected,
		// not with which code; 400 is its code for every other bad request.
		azureError(w, http.StatusBadRequest, "Bad request. Requests with X-Forwarded-For are not allowed.", nil)
		return false
	}
	if !strings.EqualFold(r.Header.Get("Metadata"), "true") {
		azureError(w, http.StatusBadRequest, "Bad request. Required metadata header not specified", nil)
		return false
	}
	v := r.URL.Query().Get("api-version")
	if v == "" {
		azureError(w, http.StatusBadRequest, "Bad request. api-version was not specified in the request. For more information refer to aka.ms/azureimds", versions)
		return false
	}
	if !slices.Contains(versions, v) {
		azureError(w, http.StatusBadRequest, "Bad request. api-version is invalid or was not specified in the request. For more information refer to aka.ms/azureimds", versions)
		return false
	}
	return true
}

func (a *Azure) checkGet(w http.ResponseWriter, r *http.Request) bool {
	if r.Method != http.MethodGet {
		azureError(w, http.StatusMethodNotAllowed, fmt.Sprintf("Http method not allowed: path = %q, method = %q", r.URL.Path, r.Method), nil)
		return false
	}
	return true
}

// azureError answers like IMDS: a JSON error, with the newest supported
// versions when the api-version was the problem.
func azureError(w http.ResponseWriter, code int, msg string, versions []string) {
	body := map[string]any{"error": msg}
	if versions != nil {
		newest := slices.Clone(versions)
		slices.Reverse(newest)
		body["newest-versions"] = newest[:min(3, len(newest))]
	}
	w.Header().Set("Content-Type", "application/json; charset=utf-8")
	w.WriteHeader(code)
	_ = json.NewEncoder(w).Encode(body)
}

func (a *Azure) serveEvents(w http.ResponseWriter, r *http.Request) {
	a.mu.Lock()
	delay := time.Duration(0)
	if !a.enabled {
		a.enabled = true
		delay = a.firstDelay
	}
	a.mu.Unlock()
	if delay > 0 {
		t := time.NewTimer(delay)
		defer t.Stop()
		select {
		case <-t.C:
		case <-r.Context().Done():
			return
		case <-a.closed():
			return
		}
	}

	a.mu.Lock()
	doc := a.documentLocked(time.Now(), r.URL.Query().Get("api-version"))
	a.mu.Unlock()
	w.Header().Set("Content-Type", "application/json; charset=utf-8")
	_ = json.NewEncoder(w).Encode(doc)
}

// documentLocked builds the document served now, bumping the incarnation
// when the Events array differs from the last one served or was changed
// since. Older api-versions lack the fields added after them.
func (a *Azure) documentLocked(now time.Time, version string) azureDocument {
	events := a.eventsLocked(now)
	sig, _ := json.Marshal(events)
	if a.dirty || string(sig) != a.lastSig {
		a.incarnation++
		a.lastSig, a.dirty = string(sig), false
	}
	for i := range events {
		if version < "2020-07-01" {
			events[i].DurationInSeconds = nil
		}
		if version < "2019-08-01" {
			events[i].EventSource = ""
		}
		if version < "2019-04-01" {
			events[i].Description = ""
		}
	}
	if events == nil {
		events = []azureWireEvent{}
	}
	return azureDocument{DocumentIncarnation: a.incarnation, Events: events}
}

// eventsLocked lists the events visible at now: the added ones, then the
// one scheduled through the Fake interface.
func (a *Azure) eventsLocked(now time.Time) []azureWireEvent {
	var out []azureWireEvent
	for _, ev := range a.events {
		out = append(out, a.wireLocked(ev))
	}
	if cur, ok, _ := a.Current(now); ok {
		typ := AzureEventType(cur.Kind)
		dur := -1
		if cur.Kind == notice.KindFreeze {
			dur = 5
		}
		out = append(out, a.wireLocked(AzureEvent{
			EventID:           a.scheduledID(cur.Seq),
			EventType:         typ,
			NotBefore:         cur.Deadline,
			Description:       azureDescriptions[typ],
			DurationInSeconds: dur,
		}))
	}
	return out
}

func (a *Azure) wireLocked(ev AzureEvent) azureWireEvent {
	we := azureWireEvent{
		EventID:      ev.EventID,
		EventType:    ev.EventType,
		ResourceType: ev.ResourceType,
		Resources:    ev.Resources,
		EventStatus:  "Scheduled",
		Description:  ev.Description,
		EventSource:  ev.EventSource,
	}
	if we.ResourceType == "" {
		we.ResourceType = "VirtualMachine"
	}
	if len(we.Resources) == 0 {
		we.Resources = []string{a.vmName}
	}
	if we.EventSource == "" {
		we.EventSource = "Platform"
	}
	d := ev.DurationInSeconds
	we.DurationInSeconds = &d
	switch {
	case a.started[ev.EventID]:
		we.EventStatus = "Started"
	case ev.NotBeforeRaw != "":
		we.NotBefore = ev.NotBeforeRaw
	case !ev.NotBefore.IsZero():
		we.NotBefore = ev.NotBefore.UTC().Format(http.TimeFormat)
	}
	return we
}

// scheduledID is the EventId of the Fake-interface event with sequence seq:
// a new id for every Schedule.
func (a *Azure) scheduledID(seq int) string {
	return fmt.Sprintf("%s-5907-4000-8000-%012X", a.guidPrefix, seq)
}

func (a *Azure) newIDLocked() string {
	a.nextID++
	return fmt.Sprintf("%s-ADD0-4000-8000-%012X", a.guidPrefix, a.nextID)
}

func (a *Azure) servingLocked(id string, now time.Time) bool {
	for _, ev := range a.eventsLocked(now) {
		if ev.EventID == id {
			return true
		}
	}
	return false
}

// serveStart handles POST StartRequests: 200 when every EventId names an
// event being served (each then moves to Started), 400 otherwise.
func (a *Azure) serveStart(w http.ResponseWriter, r *http.Request) {
	var body struct {
		StartRequests []struct {
			EventID string `json:"EventId"`
		} `json:"StartRequests"`
	}
	dec := json.NewDecoder(http.MaxBytesReader(w, r.Body, 64<<10))
	if err := dec.Decode(&body); err != nil || len(body.StartRequests) == 0 {
		azureError(w, http.StatusBadRequest, "Bad request. The request body is not a valid StartRequests document.", nil)
		return
	}
	now := time.Now()
	a.mu.Lock()
	defer a.mu.Unlock()
	for _, sr := range body.StartRequests {
		if sr.EventID == "" || !a.servingLocked(sr.EventID, now) {
			azureError(w, http.StatusBadRequest, fmt.Sprintf("Bad request. Unknown EventId %q.", sr.EventID), nil)
			return
		}
	}
	for _, sr := range body.StartRequests {
		a.acked = append(a.acked, sr.EventID)
		if !a.started[sr.EventID] {
			a.started[sr.EventID] = true
			a.dirty = true
		}
	}
	w.WriteHeader(http.StatusOK)
}

func (a *Azure) serveInstance(w http.ResponseWriter) {
	a.mu.Lock()
	name := a.vmName
	a.mu.Unlock()
	doc := map[string]any{
		"compute": map[string]any{
			"azEnvironment":     "AzurePublicCloud",
			"evictionPolicy":    "Deallocate",
			"location":          "westeurope",
			"name":              name,
			"osType":            "Linux",
			"priority":          "Spot",
			"provider":          "Microsoft.Compute",
			"resourceGroupName": "spotsafe-test",
			"subscriptionId":    "00000000-0000-0000-0000-000000000000",
			"vmId":              a.guidPrefix + "-0000-4000-8000-000000000001",
			"vmScaleSetName":    "",
			"vmSize":            "Standard_D4s_v5",
			"zone":              "1",
		},
		"network": map[string]any{"interface": []any{}},
	}
	w.Header().Set("Content-Type", "application/json; charset=utf-8")
	_ = json.NewEncoder(w).Encode(doc)
}
