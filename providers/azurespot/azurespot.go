// Package azurespot watches Azure Scheduled Events, the instance metadata
// service (IMDS) document that announces Spot evictions (Preempt), scale-set
// deletions (Terminate) and platform maintenance (Reboot, Redeploy, Freeze).
//
// [Source] implements [notice.Source] (one GET per poll), [notice.Acker]
// (POST StartRequests to approve an event early) and [notice.Intervaler]. It
// speaks the protocol in PROTOCOLS.md section 3: the Metadata: true header on
// every call, a patient first call (the service is enabled by the first
// request and may take up to two minutes to answer), events filtered to this
// VM's own name, EventId as identity, and NotBefore as the deadline.
package azurespot

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"maps"
	"net/http"
	"strings"
	"sync"
	"time"

	"github.com/spotsafe/spotsafe/internal/metaclient"
	"github.com/spotsafe/spotsafe/notice"
)

// Defaults for zero [Options] fields.
const (
	// DefaultEndpoint is Azure's link-local IMDS address. Azure documents
	// no DNS name for it, and proxies must be bypassed.
	DefaultEndpoint = "http://169.254.169.254"
	// DefaultFirstCallTimeout bounds the first scheduled-events call:
	// Azure enables the service on the first request, which can take up to
	// two minutes to answer.
	DefaultFirstCallTimeout = 120 * time.Second
	// DefaultRequestTimeout bounds every later request.
	DefaultRequestTimeout = metaclient.DefaultTimeout
)

// API versions spoken. 2020-07-01 is the newest scheduled-events version
// (it adds DurationInSeconds); 2021-02-01 is an instance-metadata version
// that has compute.name, priority and evictionPolicy.
const (
	EventsAPIVersion   = "2020-07-01"
	InstanceAPIVersion = "2021-02-01"
)

// Paths under the endpoint.
const (
	eventsPath   = "/metadata/scheduledevents"
	instancePath = "/metadata/instance"
	namePath     = "/metadata/instance/compute/name"
)

// nameRetry spaces attempts to learn the VM name after a transient failure:
// polling must not pay for a second failing request every second, yet events
// are unfiltered until the name is known.
const nameRetry = 10 * time.Second

// Options configures a [Source]. The zero value talks to the real IMDS.
type Options struct {
	// Endpoint is the IMDS base URL (scheme://host[:port], no path).
	// Default [DefaultEndpoint]; tests point it at a noticetest.Azure fake.
	Endpoint string
	// HTTPClient sends the requests. Default: the shared metadata transport
	// (no proxy, 250 ms dial timeout, no client-wide timeout). A client
	// with its own Timeout shorter than FirstCallTimeout cuts the first
	// call short.
	HTTPClient *http.Client
	// Logger receives rare state changes (VM name unknown, an approval
	// sent). Nil discards.
	Logger *slog.Logger
	// PollInterval is reported to the Watcher through
	// [notice.Intervaler]. Zero leaves the Watcher's default (1 s, which is
	// what Microsoft recommends). IMDS allows about 5 requests per second
	// per VM, shared with everything else on it.
	PollInterval time.Duration
	// VMName is this VM's name as it appears in an event's Resources
	// (for a uniform scale set "<vmssName>_<instanceId>"). Default: fetched
	// once from /metadata/instance/compute/name. When it cannot be learned
	// the source logs once and keeps every event, even ones for other VMs.
	VMName string
	// FirstCallTimeout bounds scheduled-events calls until one has
	// succeeded. Default 120 s. A slow first call is not a failure.
	FirstCallTimeout time.Duration
	// RequestTimeout bounds every other request. Default 2 s.
	RequestTimeout time.Duration
}

// Source polls Azure Scheduled Events. Create it with [New]. Poll is meant
// for one goroutine at a time (the Watcher's); Ack and Probe may be called
// concurrently with it.
type Source struct {
	opts      Options
	client    *http.Client
	log       *slog.Logger
	eventsURL string

	mu       sync.Mutex
	enabled  bool // a scheduled-events call has succeeded
	vmName   string
	nameErr  error     // why the name is unknown, once logged
	nameNext time.Time // earliest next attempt to learn the name
	nameDone bool      // the name is known or will never be
	// The last answer, returned again while DocumentIncarnation and the
	// event ids stay the same.
	lastInc  int
	lastKey  string
	lastNote []notice.Notice
	haveLast bool
	// seen remembers, per EventId, the first observation and the last
	// deadline announced, so that a Started event (NotBefore "") keeps
	// its deadline and Observed never drifts.
	seen map[string]seenEvent
}

type seenEvent struct {
	observed time.Time
	deadline time.Time
}

var _ interface {
	notice.Source
	notice.Acker
	notice.Intervaler
} = (*Source)(nil)

// New returns a Source. opts may be nil.
func New(opts *Options) *Source {
	s := &Source{seen: make(map[string]seenEvent)}
	if opts != nil {
		s.opts = *opts
	}
	if s.opts.Endpoint == "" {
		s.opts.Endpoint = DefaultEndpoint
	}
	s.opts.Endpoint = strings.TrimRight(s.opts.Endpoint, "/")
	if s.opts.FirstCallTimeout <= 0 {
		s.opts.FirstCallTimeout = DefaultFirstCallTimeout
	}
	if s.opts.RequestTimeout <= 0 {
		s.opts.RequestTimeout = DefaultRequestTimeout
	}
	s.client = s.opts.HTTPClient
	if s.client == nil {
		s.client = metaclient.NewHTTPClient(0)
	}
	s.log = s.opts.Logger
	if s.log == nil {
		s.log = slog.New(slog.DiscardHandler)
	}
	s.log = s.log.With("provider", "azure")
	s.vmName = s.opts.VMName
	s.nameDone = s.vmName != ""
	s.eventsURL = s.opts.Endpoint + eventsPath + "?api-version=" + EventsAPIVersion
	return s
}

// Name returns "azure".
func (s *Source) Name() string { return "azure" }

// PollInterval returns Options.PollInterval (zero: the Watcher's default).
func (s *Source) PollInterval() time.Duration { return s.opts.PollInterval }

// VMName returns the name events are filtered by, "" while unknown.
func (s *Source) VMName() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.vmName
}

// Poll fetches the scheduled-events document and returns the events that
// concern this VM, one notice per EventId. An event that has disappeared is
// simply not returned, so a Watcher reports it canceled. A document that does
// not parse, or an event of this VM whose NotBefore does not parse, fails
// the whole poll with an error wrapping [notice.ErrMalformed] rather than
// guess.
func (s *Source) Poll(ctx context.Context) ([]notice.Notice, error) {
	s.mu.Lock()
	timeout := s.opts.RequestTimeout
	if !s.enabled {
		timeout = s.opts.FirstCallTimeout
	}
	s.mu.Unlock()

	rctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	resp, req, err := metaclient.Get(rctx, s.client, s.eventsURL, metadataHeader)
	if err != nil {
		return nil, fmt.Errorf("azurespot: %w", requestError(ctx, err, timeout))
	}
	if err := classify(resp, req); err != nil {
		return nil, err
	}
	doc, err := ParseDocument(resp.Body)
	if err != nil {
		return nil, fmt.Errorf("azurespot: GET %s: %w", eventsPath, err)
	}
	now := time.Now()
	// Learn the name only once IMDS has answered: no extra requests while
	// it is down, and its first answer is what makes the name matter.
	s.learnName(ctx)

	s.mu.Lock()
	defer s.mu.Unlock()
	if !s.enabled {
		s.enabled = true
		s.log.Debug("scheduled events answered", "incarnation", doc.Incarnation)
	}
	key := doc.key()
	if s.haveLast && doc.Incarnation != nil && *doc.Incarnation == s.lastInc && key == s.lastKey {
		return cloneNotices(s.lastNote), nil
	}
	ns, err := s.notices(doc, now)
	if err != nil {
		return nil, fmt.Errorf("azurespot: GET %s: %w", eventsPath, err)
	}
	s.haveLast = doc.Incarnation != nil
	if s.haveLast {
		s.lastInc, s.lastKey, s.lastNote = *doc.Incarnation, key, ns
	}
	return cloneNotices(ns), nil
}

// notices turns the events of doc that concern this VM into notices and
// forgets events that are gone. Called with s.mu held.
func (s *Source) notices(doc *Document, now time.Time) ([]notice.Notice, error) {
	var ns []notice.Notice
	present := make(map[string]bool, len(doc.Events))
	for _, ev := range doc.Events {
		if s.vmName != "" && !ev.Concerns(s.vmName) {
			continue
		}
		deadline, err := ev.Deadline()
		if err != nil {
			return nil, err
		}
		prev, known := s.seen[ev.EventID]
		observed := now
		if known {
			observed = prev.observed
		}
		switch {
		case !deadline.IsZero():
		case known && !prev.deadline.IsZero():
			// Started: NotBefore is "" now; keep what was announced.
			deadline = prev.deadline
		default:
			// Seen for the first time already Started (hardware failures
			// skip Scheduled): it is happening now.
			deadline = observed
		}
		present[ev.EventID] = true
		s.seen[ev.EventID] = seenEvent{observed: observed, deadline: deadline}
		ns = append(ns, notice.Notice{
			ID:       ev.EventID,
			Provider: "azure",
			Kind:     ev.Kind(),
			Deadline: deadline,
			Observed: observed,
			Detail:   ev.detail(doc.Incarnation),
		})
	}
	// Only after every event parsed: a malformed poll leaves no trace.
	for id := range s.seen {
		if !present[id] {
			delete(s.seen, id)
		}
	}
	return ns, nil
}

// Ack approves n's event early by POSTing StartRequests. Approval lets the
// event proceed for every VM listed in its Resources, not only this one: in a
// cluster that shares an availability set or scale-set placement group, let
// one elected member approve. Acking a Preempt gains nothing (eviction
// proceeds at NotBefore anyway); acking a user-initiated Reboot or Redeploy
// makes it start sooner.
func (s *Source) Ack(ctx context.Context, n notice.Notice) error {
	if n.Provider != "" && n.Provider != "azure" {
		return fmt.Errorf("azurespot: cannot ack a %s notice", n.Provider)
	}
	if n.ID == "" {
		return errors.New("azurespot: cannot ack a notice without an EventId")
	}
	body, err := marshalStartRequests(n.ID)
	if err != nil {
		return fmt.Errorf("azurespot: ack %s: %w", n.ID, err)
	}
	rctx, cancel := context.WithTimeout(ctx, s.opts.RequestTimeout)
	defer cancel()
	req, err := http.NewRequestWithContext(rctx, http.MethodPost, s.eventsURL, strings.NewReader(string(body)))
	if err != nil {
		return fmt.Errorf("azurespot: ack %s: %w", n.ID, err)
	}
	req.Header.Set("Metadata", "true")
	req.Header.Set("Content-Type", "application/json")
	resp, err := metaclient.Do(s.client, req)
	if err != nil {
		return fmt.Errorf("azurespot: ack %s: %w", n.ID, requestError(ctx, err, s.opts.RequestTimeout))
	}
	if err := classify(resp, req); err != nil {
		return fmt.Errorf("azurespot: ack %s: %w", n.ID, err)
	}
	s.log.Info("approved scheduled event", "notice", n, "resources", n.Detail["resources"])
	return nil
}

// Probe reports whether an Azure IMDS answers at the endpoint: nil when
// /metadata/instance returns a JSON document with a compute section. It makes
// one short request (RequestTimeout) and, as a side effect, learns the VM
// name when Options.VMName was not given. Other clouds' metadata servers
// refuse the path or the header, which gives an error wrapping
// [notice.ErrUnavailable].
func (s *Source) Probe(ctx context.Context) error {
	rctx, cancel := context.WithTimeout(ctx, s.opts.RequestTimeout)
	defer cancel()
	url := s.opts.Endpoint + instancePath + "?api-version=" + InstanceAPIVersion
	resp, req, err := metaclient.Get(rctx, s.client, url, metadataHeader)
	if err != nil {
		return fmt.Errorf("azurespot: probe: %w", requestError(ctx, err, s.opts.RequestTimeout))
	}
	if err := classify(resp, req); err != nil {
		return fmt.Errorf("azurespot: probe: %w", err)
	}
	inst, err := parseInstance(resp.Body)
	if err != nil {
		return fmt.Errorf("azurespot: probe: %w: %w", notice.ErrUnavailable, err)
	}
	if inst.Compute.Name != "" {
		s.mu.Lock()
		if !s.nameDone {
			s.vmName, s.nameDone = inst.Compute.Name, true
			s.haveLast = false
		}
		s.mu.Unlock()
	}
	return nil
}

// learnName fetches the VM name until it is known, at most once per
// nameRetry after a transient failure, and gives up for good on a definite
// refusal. Failures are logged once: events are then kept unfiltered.
func (s *Source) learnName(ctx context.Context) {
	s.mu.Lock()
	if s.nameDone || time.Now().Before(s.nameNext) {
		s.mu.Unlock()
		return
	}
	s.mu.Unlock()

	name, err := s.fetchName(ctx)
	if ctx.Err() != nil {
		return // the caller gave up; not the name service's fault
	}

	s.mu.Lock()
	defer s.mu.Unlock()
	if s.nameDone {
		return // Probe learned it meanwhile
	}
	if err == nil {
		s.vmName, s.nameDone = name, true
		s.haveLast = false // the filter changed: recompute
		if s.nameErr != nil {
			s.log.Info("learned VM name; filtering scheduled events by it", "vm", name)
		}
		return
	}
	if s.nameErr == nil {
		s.log.Warn("cannot learn this VM's name; keeping scheduled events for every VM (set Options.VMName)", "err", err)
	}
	s.nameErr = err
	if metaclient.IsTransient(err) {
		s.nameNext = time.Now().Add(nameRetry)
	} else {
		s.nameDone = true
	}
}

func (s *Source) fetchName(ctx context.Context) (string, error) {
	rctx, cancel := context.WithTimeout(ctx, s.opts.RequestTimeout)
	defer cancel()
	url := s.opts.Endpoint + namePath + "?api-version=" + InstanceAPIVersion + "&format=text"
	resp, req, err := metaclient.Get(rctx, s.client, url, metadataHeader)
	if err != nil {
		return "", fmt.Errorf("azurespot: %w", requestError(ctx, err, s.opts.RequestTimeout))
	}
	if err := classify(resp, req); err != nil {
		return "", err
	}
	name := strings.TrimSpace(string(resp.Body))
	if name == "" || strings.ContainsAny(name, "{}<>\"\n") {
		return "", fmt.Errorf("azurespot: GET %s: VM name %.40q: %w", namePath, name, notice.ErrMalformed)
	}
	return name, nil
}

var metadataHeader = map[string]string{"Metadata": "true"}

// requestError wraps a transport failure. metaclient reports a request whose
// context ended as the context's error; when that context was our own
// per-request timeout and not the caller's, the endpoint was too slow, which is
// transient.
func requestError(parent context.Context, err error, timeout time.Duration) error {
	if parent.Err() == nil && errors.Is(err, context.DeadlineExceeded) {
		return fmt.Errorf("%w: no answer within %v: %w", notice.ErrTransient, timeout, err)
	}
	return err
}

// classify maps an IMDS status to the notice sentinels: 429, 5xx and 410
// (Azure: "retry after up to 70 s") are transient; 400 (missing header or
// api-version), 403, 404 and 405 will not heal by polling.
func classify(resp *metaclient.Response, req *http.Request) error {
	err := resp.Err(req)
	if err == nil {
		return nil
	}
	switch {
	case resp.Code == http.StatusGone:
		return fmt.Errorf("azurespot: %w: %w", notice.ErrTransient, err)
	case metaclient.IsTransient(err):
		return fmt.Errorf("azurespot: %w", err)
	default:
		return fmt.Errorf("azurespot: %w: %w", notice.ErrUnavailable, err)
	}
}

func cloneNotices(ns []notice.Notice) []notice.Notice {
	if len(ns) == 0 {
		return nil
	}
	out := make([]notice.Notice, len(ns))
	for i, n := range ns {
		n.Detail = maps.Clone(n.Detail)
		out[i] = n
	}
	return out
}
