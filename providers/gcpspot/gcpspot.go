// Package gcpspot watches the Google Compute Engine metadata server for
// interruption notices: instance/preempted (Spot and preemptible VMs) and
// instance/maintenance-event (host maintenance).
//
// [Source] implements [notice.Source] (Poll: one plain GET per key),
// [notice.Waiter] (Wait: hanging GETs with wait_for_change and last_etag, so
// that a change is seen within milliseconds without polling) and
// [notice.Intervaler]. It speaks the protocol in PROTOCOLS.md section 2: the
// Metadata-Flavor: Google header on every request, the IP literal rather than
// DNS, GCE_METADATA_HOST honoured, 503 bursts retried, 404 meaning "key not
// served here", and identity (key, value, ETag of the first observation).
//
// GCE gives no timestamp: a notice's Deadline is its first observation plus
// the nominal notice (30 s for preemption, 60 s for host maintenance).
package gcpspot

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"net/url"
	"os"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/cenkalti/backoff/v4"

	"github.com/spotsafe/spotsafe/internal/metaclient"
	"github.com/spotsafe/spotsafe/notice"
)

// Defaults for zero [Options] fields.
const (
	// DefaultEndpoint is the metadata server's IP literal: the short name
	// "metadata" and metadata.google.internal need DNS, which netgo builds
	// and some containers cannot resolve.
	DefaultEndpoint = "http://169.254.169.254"
	// EnvMetadataHost overrides the endpoint with host:port, as in Google's
	// own client libraries and every GCE metadata emulator.
	EnvMetadataHost = "GCE_METADATA_HOST"
	// DefaultWaitTimeout is the timeout_sec of a hanging GET.
	DefaultWaitTimeout = 60 * time.Second
	// DefaultPreemptNotice is the time between preempted=TRUE (sent with the
	// ACPI soft off) and the hard power off.
	DefaultPreemptNotice = 30 * time.Second
	// DefaultMaintenanceNotice is the warning GCE gives before host
	// maintenance on ordinary VMs (GPU VMs get about an hour; the shorter
	// value errs on the safe side).
	DefaultMaintenanceNotice = 60 * time.Second
	// RequestTimeout bounds one plain (non-hanging) request.
	RequestTimeout = metaclient.DefaultTimeout
)

// Metadata keys watched, relative to /computeMetadata/v1/.
const (
	// KeyPreempted is TRUE once Compute Engine preempts the VM, else FALSE.
	KeyPreempted = "instance/preempted"
	// KeyMaintenanceEvent is NONE, MIGRATE_ON_HOST_MAINTENANCE or
	// TERMINATE_ON_HOST_MAINTENANCE (legacy: SHUTDOWN_ON_HOST_MAINTENANCE).
	KeyMaintenanceEvent = "instance/maintenance-event"
)

const (
	pathPrefix = "/computeMetadata/v1/"
	// probeTimeout bounds Probe: a link-local server answers in
	// milliseconds, and detection probes several clouds at once.
	probeTimeout = time.Second
	// Retries inside one Poll or Wait: GCE answers 503 for under a second
	// during its own maintenance; 100+200+400+800 ms (±20 %) outlasts that.
	maxRetries     = 4
	retryInitial   = 100 * time.Millisecond
	retryMax       = time.Second
	retryJitter    = 0.2
	minWaitSlack   = 5 * time.Second
	headerFlavor   = "Metadata-Flavor"
	flavorGoogle   = "Google"
	providerName   = "gcp"
	maxValueInErrs = 64
)

// Options configures a [Source]. The zero value talks to the real metadata
// server.
type Options struct {
	// Endpoint is the metadata server's base URL (scheme://host[:port], no
	// path). Default: http://$GCE_METADATA_HOST when that is set, else
	// [DefaultEndpoint].
	Endpoint string
	// HTTPClient sends the requests. Default: the shared metadata transport
	// (no proxy, 250 ms dial timeout, no client-wide timeout; every request
	// gets its own deadline). A client with a Timeout shorter than
	// WaitTimeout would cut every hanging GET short, so WaitTimeout is then
	// lowered below it.
	HTTPClient *http.Client
	// Logger receives rare state changes (a key not served, a lowered
	// WaitTimeout). Nil discards.
	Logger *slog.Logger
	// PollInterval is reported to the Watcher through [notice.Intervaler].
	// The Watcher uses Wait, not polling, so it matters only where hanging
	// GETs do not work: it spaces re-polls when neither key can be waited
	// on (both 404), and it is the shortest time a Wait that comes back
	// unchanged takes (a server that ignores wait_for_change must not make
	// the Watcher spin). Default 1 s.
	PollInterval time.Duration
	// WaitTimeout is the timeout_sec of the hanging GETs: the server answers
	// with the unchanged value after this long. Rounded up to whole seconds.
	// Default 60 s. The client gives each hanging GET WaitTimeout plus a
	// margin before calling it a failure.
	WaitTimeout time.Duration
	// PreemptNotice is added to the first observation of preempted=TRUE to
	// make the deadline. Default 30 s.
	PreemptNotice time.Duration
	// MaintenanceNotice is added to the first observation of a
	// maintenance-event to make the deadline. Default 60 s.
	MaintenanceNotice time.Duration
}

// Source watches the GCE metadata server. Create it with [New]. Poll and Wait
// are meant for one goroutine at a time (the Watcher's); Probe and Instance
// may be called concurrently with them.
type Source struct {
	opts       Options
	client     *http.Client
	log        *slog.Logger
	endpoint   string
	timeoutSec int           // timeout_sec sent with hanging GETs
	waitLimit  time.Duration // how long a hanging GET may take before it failed

	mu   sync.Mutex
	keys [2]keyState
}

var _ interface {
	notice.Source
	notice.Waiter
	notice.Intervaler
} = (*Source)(nil)

// keyState is what the source knows about one watched key.
type keyState struct {
	key     string
	fetched bool   // answered at least once (200 or 404)
	found   bool   // the last answer was 200
	logged  bool   // a 404 was logged
	etag    string // ETag of the last 200 answer
	// The current notice, if any: first observation of its value.
	kind     notice.Kind
	value    string
	obsETag  string
	observed time.Time
	// A malformed value already reported: it fails one Poll or Wait, then
	// contributes nothing until it changes, so that a bad maintenance-event
	// never hides preempted for good.
	bad      bool
	badValue string
	badETag  string
}

// New returns a Source. opts may be nil.
func New(opts *Options) *Source {
	s := &Source{}
	if opts != nil {
		s.opts = *opts
	}
	s.log = s.opts.Logger
	if s.log == nil {
		s.log = slog.New(slog.DiscardHandler)
	}
	s.endpoint = s.opts.Endpoint
	if s.endpoint == "" {
		if host := strings.TrimSpace(os.Getenv(EnvMetadataHost)); host != "" {
			s.endpoint = host
			if !strings.Contains(host, "://") {
				s.endpoint = "http://" + host
			}
		} else {
			s.endpoint = DefaultEndpoint
		}
	}
	s.endpoint = strings.TrimRight(s.endpoint, "/")
	if s.opts.WaitTimeout <= 0 {
		s.opts.WaitTimeout = DefaultWaitTimeout
	}
	if s.opts.PreemptNotice <= 0 {
		s.opts.PreemptNotice = DefaultPreemptNotice
	}
	if s.opts.MaintenanceNotice <= 0 {
		s.opts.MaintenanceNotice = DefaultMaintenanceNotice
	}
	s.client = s.opts.HTTPClient
	if s.client == nil {
		s.client = metaclient.NewHTTPClient(0)
	}
	wait := s.opts.WaitTimeout
	if ct := s.client.Timeout; ct > 0 && ct < wait+time.Second {
		wait = max(time.Second, (ct * 3 / 4).Truncate(time.Second))
		s.log.Warn("HTTPClient.Timeout is shorter than WaitTimeout; lowering timeout_sec",
			"provider", providerName, "client_timeout", ct, "wait_timeout", wait)
	}
	s.timeoutSec = int((wait + time.Second - 1) / time.Second)
	s.waitLimit = time.Duration(s.timeoutSec)*time.Second + max(minWaitSlack, wait/4)
	s.keys[0].key = KeyPreempted
	s.keys[1].key = KeyMaintenanceEvent
	return s
}

// Name returns "gcp".
func (s *Source) Name() string { return providerName }

// PollInterval implements [notice.Intervaler].
func (s *Source) PollInterval() time.Duration { return s.opts.PollInterval }

// Poll reads both keys now (one GET each, in parallel) and returns the
// notices present. Reading maintenance-event also arms GCE's 60 s warning,
// which is only given if the key was read since the last event. Transient
// failures (503, 5xx, 429, reset or refused connections) are retried a few
// times with a short backoff before Poll gives up with an error wrapping
// [notice.ErrTransient]; 403 gives [notice.ErrUnavailable]; a value outside
// the documented set gives [notice.ErrMalformed] and no notice.
func (s *Source) Poll(ctx context.Context) ([]notice.Notice, error) {
	answers := make([]answer, len(s.keys))
	var wg sync.WaitGroup
	for i := range s.keys {
		wg.Go(func() { answers[i] = s.fetch(ctx, s.keys[i].key, "", false) })
	}
	wg.Wait()
	for i := range answers {
		answers[i].idx = i
	}
	return s.apply(answers)
}

// Wait blocks until preempted or maintenance-event changes (two concurrent
// hanging GETs carrying the last ETag seen, so that a change between two
// calls is never missed), or until the server's timeout_sec passes, and
// returns the notices present then. It returns as soon as either key
// answers; the other request is cancelled and waited for, so no goroutine
// outlives Wait. Before the first successful Poll it polls instead.
func (s *Source) Wait(ctx context.Context) ([]notice.Notice, error) {
	type target struct {
		idx  int
		etag string
	}
	var targets []target
	primed := true
	s.mu.Lock()
	for i := range s.keys {
		k := &s.keys[i]
		if !k.fetched {
			primed = false
		}
		if k.found {
			targets = append(targets, target{i, k.etag})
		}
	}
	s.mu.Unlock()
	if !primed {
		return s.Poll(ctx)
	}
	if len(targets) == 0 {
		// Neither key is served: nothing to hang on. Look again later.
		t := time.NewTimer(s.interval())
		select {
		case <-ctx.Done():
			t.Stop()
			return nil, ctx.Err()
		case <-t.C:
		}
		return s.Poll(ctx)
	}

	start := time.Now()
	wctx, cancel := context.WithCancel(ctx)
	defer cancel()
	results := make(chan answer, len(targets))
	var wg sync.WaitGroup
	for _, tg := range targets {
		wg.Go(func() {
			a := s.fetch(wctx, s.keys[tg.idx].key, tg.etag, true)
			a.idx, a.sent = tg.idx, tg.etag
			results <- a
		})
	}
	var got []answer
	select {
	case a := <-results:
		got = append(got, a)
	case <-ctx.Done():
	}
	cancel()
	wg.Wait()
	close(results)
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	for a := range results {
		if a.err != nil && errors.Is(a.err, context.Canceled) {
			continue // cut short by us, not a failure
		}
		got = append(got, a)
	}
	ns, err := s.apply(got)
	if err != nil {
		return nil, err
	}
	// A server that ignores wait_for_change (some emulators, a caching
	// proxy) answers at once with the same ETag; without a pause the
	// Watcher would loop on Wait as fast as the server answers.
	if unchanged(got) {
		if rest := s.interval() - time.Since(start); rest > 0 {
			t := time.NewTimer(rest)
			select {
			case <-ctx.Done():
				t.Stop()
				return nil, ctx.Err()
			case <-t.C:
			}
		}
	}
	return ns, nil
}

// unchanged reports whether every answer is a 200 with the ETag it was
// asked to wait on.
func unchanged(as []answer) bool {
	for _, a := range as {
		if a.err != nil || !a.found || a.etag != a.sent {
			return false
		}
	}
	return len(as) > 0
}

func (s *Source) interval() time.Duration {
	if s.opts.PollInterval > 0 {
		return s.opts.PollInterval
	}
	return notice.DefaultInterval
}

// answer is one key's response.
type answer struct {
	idx   int
	sent  string // the last_etag of a hanging GET
	found bool   // false: 404
	value string
	etag  string
	at    time.Time
	err   error
}

// apply records answers and returns the notices present, or the errors.
func (s *Source) apply(answers []answer) ([]notice.Notice, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	var errs []error
	for _, a := range answers {
		if a.err != nil {
			errs = append(errs, fmt.Errorf("gcpspot: %w", a.err))
			continue
		}
		if err := s.keys[a.idx].update(a, s.log); err != nil {
			errs = append(errs, err)
		}
	}
	if len(errs) > 0 {
		return nil, errors.Join(errs...)
	}
	var out []notice.Notice
	for i := range s.keys {
		k := &s.keys[i]
		if k.observed.IsZero() {
			continue
		}
		nominal := s.opts.MaintenanceNotice
		if k.kind == notice.KindPreempt {
			nominal = s.opts.PreemptNotice
		}
		id := providerName + ":" + k.key + "=" + k.value
		if k.obsETag != "" {
			id += "@" + k.obsETag
		}
		out = append(out, notice.Notice{
			ID:       id,
			Provider: providerName,
			Kind:     k.kind,
			Deadline: k.observed.Add(nominal),
			Observed: k.observed,
			Detail:   map[string]string{"key": k.key, "value": k.value, "etag": k.obsETag},
		})
	}
	return out, nil
}

func (k *keyState) update(a answer, log *slog.Logger) error {
	k.fetched = true
	if !a.found {
		if !k.logged {
			k.logged = true
			log.Info("metadata key not served; no notices from it", "provider", providerName, "key", k.key)
		}
		k.found, k.etag = false, ""
		k.clear()
		return nil
	}
	k.found, k.etag = true, a.etag
	kind, present, err := parseValue(k.key, a.value)
	if err != nil {
		k.clear()
		if k.bad && k.badValue == a.value && k.badETag == a.etag {
			return nil
		}
		k.bad, k.badValue, k.badETag = true, a.value, a.etag
		return err
	}
	k.bad = false
	switch {
	case !present:
		k.clear()
	case k.observed.IsZero() || k.value != a.value:
		k.kind, k.value, k.obsETag, k.observed = kind, a.value, a.etag, a.at
	}
	return nil
}

func (k *keyState) clear() {
	k.kind, k.value, k.obsETag, k.observed = 0, "", "", time.Time{}
}

// parseValue maps a key's value to a notice kind; present is false for
// FALSE and NONE. Values are matched after trimming white space, ignoring
// ASCII case. Anything outside the documented set is an error wrapping
// notice.ErrMalformed.
func parseValue(key, value string) (kind notice.Kind, present bool, err error) {
	v := strings.TrimSpace(value)
	if !isASCII(v) {
		v = "" // no Unicode case folding: "falſe" is not FALSE
	}
	v = strings.ToUpper(v)
	switch key {
	case KeyPreempted:
		switch v {
		case "FALSE":
			return 0, false, nil
		case "TRUE":
			return notice.KindPreempt, true, nil
		}
	case KeyMaintenanceEvent:
		switch v {
		case "NONE":
			return 0, false, nil
		case "TERMINATE_ON_HOST_MAINTENANCE", "SHUTDOWN_ON_HOST_MAINTENANCE":
			return notice.KindTerminate, true, nil
		case "MIGRATE_ON_HOST_MAINTENANCE":
			return notice.KindMigrate, true, nil
		}
	default:
		return 0, false, fmt.Errorf("gcpspot: unknown key %q", key)
	}
	if len(value) > maxValueInErrs {
		value = value[:maxValueInErrs] + "…"
	}
	return 0, false, fmt.Errorf("gcpspot: %s: unexpected value %q: %w", key, value, notice.ErrMalformed)
}

// fetch GETs one key (hanging when wait is set), retrying transient failures
// with a short backoff. A timeout is not retried: a server that does not
// answer within the request's limit will not answer the next time either.
func (s *Source) fetch(ctx context.Context, key, etag string, wait bool) answer {
	bo := backoff.NewExponentialBackOff(
		backoff.WithInitialInterval(retryInitial),
		backoff.WithMultiplier(2),
		backoff.WithMaxInterval(retryMax),
		backoff.WithRandomizationFactor(retryJitter),
		backoff.WithMaxElapsedTime(0),
	)
	for attempt := 0; ; attempt++ {
		a := s.fetchOnce(ctx, key, etag, wait)
		if a.err == nil || attempt == maxRetries || !metaclient.IsTransient(a.err) || metaclient.IsTimeout(a.err) || ctx.Err() != nil {
			return a
		}
		t := time.NewTimer(bo.NextBackOff())
		select {
		case <-ctx.Done():
			t.Stop()
			a.err = fmt.Errorf("%w (while retrying after: %v)", ctx.Err(), a.err)
			return a
		case <-t.C:
		}
	}
}

func (s *Source) fetchOnce(ctx context.Context, key, etag string, wait bool) answer {
	u := s.endpoint + pathPrefix + key
	limit := RequestTimeout
	if wait {
		u += "?wait_for_change=true&last_etag=" + url.QueryEscape(etag) + "&timeout_sec=" + strconv.Itoa(s.timeoutSec)
		limit = s.waitLimit
	}
	rctx, cancel := context.WithTimeout(ctx, limit)
	defer cancel()
	resp, req, err := metaclient.Get(rctx, s.client, u, map[string]string{headerFlavor: flavorGoogle})
	at := time.Now()
	if err != nil {
		if ctx.Err() == nil && rctx.Err() != nil {
			err = &metaclient.TransientError{Op: "GET " + u, Err: fmt.Errorf("no answer within %v: %w", limit, context.DeadlineExceeded)}
		}
		return answer{err: err}
	}
	switch {
	case resp.Code == http.StatusOK:
		return answer{found: true, value: strings.TrimSpace(string(resp.Body)), etag: resp.Header.Get("ETag"), at: at}
	case resp.Code == http.StatusNotFound:
		return answer{at: at}
	case resp.Code == http.StatusForbidden:
		return answer{err: fmt.Errorf("%w (the server wants the Metadata-Flavor: Google header and no X-Forwarded-For; is a proxy in the way?): %w",
			resp.Err(req), notice.ErrUnavailable)}
	}
	return answer{err: resp.Err(req)}
}

// Probe reports whether a GCE metadata server answers at the endpoint: one
// short request, nil when the answer carries "Metadata-Flavor: Google"
// (whatever its status). Another server (AWS and Azure share the address)
// gives an error wrapping [notice.ErrUnavailable]; no answer gives a
// transport error.
func (s *Source) Probe(ctx context.Context) error {
	ctx, cancel := context.WithTimeout(ctx, probeTimeout)
	defer cancel()
	resp, _, err := metaclient.Get(ctx, s.client, s.endpoint+"/", map[string]string{headerFlavor: flavorGoogle})
	if err != nil {
		return fmt.Errorf("gcpspot: probe: %w", err)
	}
	if got := resp.Header.Get(headerFlavor); got != flavorGoogle {
		return fmt.Errorf("gcpspot: probe %s: HTTP %d without %s: %s, not a GCE metadata server: %w",
			s.endpoint, resp.Code, headerFlavor, flavorGoogle, notice.ErrUnavailable)
	}
	return nil
}

// Instance describes the VM, from the metadata server's identity keys.
type Instance struct {
	// ID is the numeric instance id.
	ID string `json:"id"`
	// Name is the instance name.
	Name string `json:"name"`
	// Zone is the zone name, e.g. "us-central1-a".
	Zone string `json:"zone"`
	// Region is the zone without its last part, e.g. "us-central1".
	Region string `json:"region"`
	// MachineType is the machine type name, e.g. "n1-standard-4".
	MachineType string `json:"machine_type"`
	// Preemptible is scheduling/preemptible (TRUE for preemptible and, in
	// practice, Spot VMs).
	Preemptible bool `json:"preemptible"`
	// ProvisioningModel is scheduling/provisioning-model ("SPOT",
	// "STANDARD"), empty where the server does not serve it.
	ProvisioningModel string `json:"provisioning_model,omitempty"`
}

// Spot reports whether the VM can be preempted.
func (i Instance) Spot() bool { return i.Preemptible || i.ProvisioningModel == "SPOT" }

// Instance reads the VM's identity: instance/id, name, zone, machine-type,
// scheduling/preemptible and scheduling/provisioning-model (which may be
// absent on older VMs).
func (s *Source) Instance(ctx context.Context) (Instance, error) {
	var in Instance
	get := func(key string, optional bool) (string, error) {
		a := s.fetch(ctx, key, "", false)
		switch {
		case a.err != nil:
			return "", fmt.Errorf("gcpspot: %w", a.err)
		case !a.found && !optional:
			return "", fmt.Errorf("gcpspot: %s not served: %w", key, notice.ErrUnavailable)
		}
		return strings.TrimSpace(a.value), nil
	}
	var err error
	if in.ID, err = get("instance/id", false); err != nil {
		return in, err
	}
	if in.Name, err = get("instance/name", false); err != nil {
		return in, err
	}
	zone, err := get("instance/zone", false)
	if err != nil {
		return in, err
	}
	in.Zone = lastSegment(zone)
	if i := strings.LastIndexByte(in.Zone, '-'); i > 0 {
		in.Region = in.Zone[:i]
	}
	mt, err := get("instance/machine-type", false)
	if err != nil {
		return in, err
	}
	in.MachineType = lastSegment(mt)
	pre, err := get("instance/scheduling/preemptible", true)
	if err != nil {
		return in, err
	}
	in.Preemptible = strings.EqualFold(pre, "TRUE")
	if in.ProvisioningModel, err = get("instance/scheduling/provisioning-model", true); err != nil {
		return in, err
	}
	return in, nil
}

func isASCII(s string) bool {
	for i := range len(s) {
		if s[i] >= 0x80 {
			return false
		}
	}
	return true
}

func lastSegment(s string) string {
	return s[strings.LastIndexByte(s, '/')+1:]
}
