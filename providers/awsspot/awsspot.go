// Package awsspot watches the AWS EC2 instance metadata service (IMDS) for
// everything that takes an instance away: Spot interruption notices (terminate,
// stop, hibernate), rebalance recommendations, scheduled maintenance events and
// Auto Scaling scale-in.
//
// [Source] implements [notice.Source] and [notice.Intervaler]. Each Poll reads
// four paths under /latest/meta-data/ (never cached):
//
//	spot/instance-action                  terminate/stop/hibernate, deadline = "time"
//	events/recommendations/rebalance      advisory, no deadline
//	events/maintenance/scheduled          reboot/stop/retirement/maintenance, deadline = NotBefore
//	autoscaling/target-lifecycle-state    "Terminated": deadline = first seen + LifecycleNotice
//
// It speaks IMDSv2 (a session token from PUT /latest/api/token, cached and
// refreshed before it expires, renewed once on a 401) and falls back to IMDSv1
// the way the AWS SDK does. A token request that times out is the symptom of
// an IMDS hop limit of 1 seen from a container; when IMDSv1 is disabled too the
// error names the fix. See PROTOCOLS.md section 1 and docs/providers-aws.md.
package awsspot

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"net/url"
	"os"
	"regexp"
	"strings"
	"sync"
	"time"

	"github.com/spotsafe/spotsafe/internal/metaclient"
	"github.com/spotsafe/spotsafe/notice"
)

// Defaults for zero [Options] fields.
const (
	// DefaultEndpoint is IMDS's IPv4 address. The IP literal, not a DNS
	// name: netgo builds and minimal containers resolve nothing.
	DefaultEndpoint = "http://169.254.169.254"
	// DefaultEndpointIPv6 is IMDS on Nitro instances with the IPv6 endpoint
	// enabled (AWS_EC2_METADATA_SERVICE_ENDPOINT_MODE=IPv6).
	DefaultEndpointIPv6 = "http://[fd00:ec2::254]"
	// DefaultTokenTTL is the session token lifetime asked for; the maximum
	// IMDS grants, as the AWS SDK does.
	DefaultTokenTTL = 6 * time.Hour
	// DefaultTokenTimeout bounds the token PUT. Real IMDS answers in about a
	// millisecond; a PUT that takes longer is a reply dropped by the hop
	// limit, and every poll must not pay a long timeout for it.
	DefaultTokenTimeout = time.Second
	// DefaultTimeout bounds every other request.
	DefaultTimeout = metaclient.DefaultTimeout
	// DefaultLifecycleNotice is the deadline assumed after an Auto Scaling
	// target lifecycle state of Terminated first appears: the protocol
	// carries no timestamp, and the real delay depends on lifecycle hooks.
	DefaultLifecycleNotice = 2 * time.Minute
)

// MaxTokenTTL is the longest session token IMDS grants.
const MaxTokenTTL = 21600 * time.Second

// Environment variables honoured, with the AWS SDK's meaning.
const (
	EnvEndpoint     = "AWS_EC2_METADATA_SERVICE_ENDPOINT"
	EnvEndpointMode = "AWS_EC2_METADATA_SERVICE_ENDPOINT_MODE"
	EnvDisabled     = "AWS_EC2_METADATA_DISABLED"
	EnvV1Disabled   = "AWS_EC2_METADATA_V1_DISABLED"
)

// Options configures a [Source]. The zero value talks to the real IMDS.
type Options struct {
	// Endpoint is IMDS's base URL (scheme://host[:port], no path). Default:
	// $AWS_EC2_METADATA_SERVICE_ENDPOINT, else DefaultEndpointIPv6 when
	// $AWS_EC2_METADATA_SERVICE_ENDPOINT_MODE is IPv6, else DefaultEndpoint.
	Endpoint string
	// HTTPClient sends every request. Default: a client from
	// internal/metaclient (never a proxy, 250 ms dial timeout, redirects only
	// to the same host). A client of your own should not use a proxy either.
	HTTPClient *http.Client
	// Logger receives fallbacks and configuration problems. Nil discards.
	Logger *slog.Logger
	// PollInterval is what the source asks a Watcher for through
	// [notice.Intervaler]; zero leaves the Watcher's default (1 s).
	PollInterval time.Duration
	// TokenTTL is the IMDSv2 session token lifetime to ask for, 1 s to
	// 6 h. Default DefaultTokenTTL.
	TokenTTL time.Duration
	// TokenTimeout bounds the token PUT. Default DefaultTokenTimeout.
	TokenTimeout time.Duration
	// Timeout bounds every metadata GET. Default DefaultTimeout.
	Timeout time.Duration
	// DisableV1 forbids the IMDSv1 fallback (also set by
	// AWS_EC2_METADATA_V1_DISABLED=true): only token requests are made.
	DisableV1 bool
	// LifecycleNotice is the deadline assumed after the Auto Scaling target
	// lifecycle state turns Terminated: set it to your termination lifecycle
	// hook's heartbeat timeout if you use one. Default DefaultLifecycleNotice.
	LifecycleNotice time.Duration
	// Getenv reads the environment variables above. Default os.Getenv;
	// tests pass their own to stay independent of the machine.
	Getenv func(string) string
}

// Source polls EC2 IMDS for interruption notices. Create it with [New]. It
// is safe for concurrent use, though a Watcher polls it from one goroutine.
type Source struct {
	endpoint string
	client   *http.Client
	log      *slog.Logger
	opts     Options
	// cfgErr makes every call fail: IMDS disabled by the environment, or
	// an invalid option.
	cfgErr error

	tokMu sync.Mutex
	tok   tokenState

	mu    sync.Mutex
	last  [numCategories][]notice.Notice // last good answer per path
	first map[string]time.Time           // first observation per notice ID
	asg   time.Time                      // first observation of Terminated
}

var _ interface {
	notice.Source
	notice.Intervaler
} = (*Source)(nil)

// New returns a Source configured by opts, which may be nil. A bad option or
// AWS_EC2_METADATA_DISABLED=true does not fail here: Poll and Probe then
// return an error wrapping [notice.ErrUnavailable] that says why.
func New(opts *Options) *Source {
	s := &Source{first: make(map[string]time.Time)}
	if opts != nil {
		s.opts = *opts
	}
	o := &s.opts
	if o.Getenv == nil {
		o.Getenv = os.Getenv
	}
	s.log = o.Logger
	if s.log == nil {
		s.log = slog.New(slog.DiscardHandler)
	}
	s.log = s.log.With("provider", "aws")
	s.client = o.HTTPClient
	if s.client == nil {
		s.client = metaclient.NewHTTPClient(metaclient.DefaultTimeout)
	}
	if o.TokenTTL == 0 {
		o.TokenTTL = DefaultTokenTTL
	}
	if o.TokenTimeout <= 0 {
		o.TokenTimeout = DefaultTokenTimeout
	}
	if o.Timeout <= 0 {
		o.Timeout = DefaultTimeout
	}
	if o.LifecycleNotice <= 0 {
		o.LifecycleNotice = DefaultLifecycleNotice
	}
	if envTrue(o.Getenv(EnvV1Disabled)) {
		o.DisableV1 = true
	}

	var errs []error
	if envTrue(o.Getenv(EnvDisabled)) {
		errs = append(errs, fmt.Errorf("%s=true", EnvDisabled))
	}
	if o.TokenTTL < time.Second || o.TokenTTL > MaxTokenTTL {
		errs = append(errs, fmt.Errorf("TokenTTL %v is outside 1s..%v", o.TokenTTL, MaxTokenTTL))
	}
	ep, err := resolveEndpoint(o.Endpoint, o.Getenv)
	if err != nil {
		errs = append(errs, err)
	}
	s.endpoint = ep
	if len(errs) > 0 {
		s.cfgErr = fmt.Errorf("aws: IMDS not usable: %w: %w", errors.Join(errs...), notice.ErrUnavailable)
	}
	return s
}

// Name returns "aws".
func (s *Source) Name() string { return "aws" }

// PollInterval returns Options.PollInterval (zero: the Watcher's default).
func (s *Source) PollInterval() time.Duration { return s.opts.PollInterval }

// Endpoint returns the IMDS base URL in use.
func (s *Source) Endpoint() string { return s.endpoint }

// Poll reads every notice path once and returns the notices present now.
//
// A path that fails keeps its previous answer (so a failing request never
// looks like a cancellation) and its error is returned; the notices read from
// the other paths come back with it, so that a broken advisory path cannot
// hide a Spot interruption. Errors wrap notice.ErrTransient (429, 5xx,
// connection trouble, timeouts), notice.ErrMalformed (a body that does not
// parse: no notice is made from it) or notice.ErrUnavailable (IMDS refuses
// this client; polling will not heal it). A transport failure or refusal
// ends the poll early: the other paths would fail the same way.
func (s *Source) Poll(ctx context.Context) ([]notice.Notice, error) {
	if s.cfgErr != nil {
		return nil, s.cfgErr
	}
	s.mu.Lock()
	defer s.mu.Unlock()

	now := time.Now()
	var (
		out     []notice.Notice
		errs    []error
		stopped bool
	)
	for c := range numCategories {
		if stopped {
			out = append(out, s.last[c]...)
			continue
		}
		ns, err := s.read(ctx, c, now)
		if err != nil {
			errs = append(errs, err)
			out = append(out, union(s.last[c], ns)...)
			stopped = endsPoll(ctx, err)
			continue
		}
		s.last[c] = ns
		out = append(out, ns...)
	}
	// Forget first observations of notices that are gone, so that a notice
	// that comes back later is new again.
	seen := make(map[string]bool, len(out))
	for _, n := range out {
		seen[n.ID] = true
	}
	for id := range s.first {
		if !seen[id] {
			delete(s.first, id)
		}
	}
	if len(out) == 0 {
		out = nil
	}
	if len(errs) > 0 {
		return out, fmt.Errorf("aws: %w", errors.Join(errs...))
	}
	return out, nil
}

// Probe tells whether EC2 IMDS answers at the endpoint: nil if it does. It
// gets a session token (kept for later polls) and reads instance-id, so a
// metadata server of another cloud at the same address (GCE, Azure,
// OpenStack) does not pass. When IMDS answers but refuses this client (a
// hop limit with IMDSv1 disabled, IMDS turned off) the error wraps
// notice.ErrUnavailable and says what to change.
func (s *Source) Probe(ctx context.Context) error {
	if s.cfgErr != nil {
		return s.cfgErr
	}
	resp, req, err := s.get(ctx, pathInstanceID)
	if err != nil {
		return fmt.Errorf("aws: probe: %w", err)
	}
	if err := statusErr(resp, req); err != nil {
		return fmt.Errorf("aws: not EC2 IMDS: %w", err)
	}
	if resp.Header.Get("Metadata-Flavor") != "" {
		return fmt.Errorf("aws: %s answers like GCE metadata, not EC2 IMDS", s.endpoint)
	}
	if id := strings.TrimSpace(string(resp.Body)); !instanceIDRe.MatchString(id) {
		return fmt.Errorf("aws: not EC2 IMDS: instance-id %q does not look like i-…", truncate(id, 40))
	}
	return nil
}

// Instance describes the instance, for logs and for telling Spot from
// on-demand.
type Instance struct {
	ID               string `json:"instance_id"`
	Type             string `json:"instance_type"`
	Region           string `json:"region"`
	AvailabilityZone string `json:"availability_zone"`
	// LifeCycle is instance-life-cycle: "spot", "on-demand", ... ("" when
	// IMDS does not say).
	LifeCycle string `json:"life_cycle,omitempty"`
}

// Spot reports whether IMDS says this is a Spot instance.
func (i Instance) Spot() bool { return i.LifeCycle == "spot" }

// Instance reads the instance's identity: instance-id, instance-type,
// placement/availability-zone, placement/region (derived from the zone when
// the category is missing, as on instances older than it) and
// instance-life-cycle.
func (s *Source) Instance(ctx context.Context) (Instance, error) {
	if s.cfgErr != nil {
		return Instance{}, s.cfgErr
	}
	var in Instance
	fields := []struct {
		path     string
		dst      *string
		optional bool
	}{
		{pathInstanceID, &in.ID, false},
		{metaPrefix + "instance-type", &in.Type, false},
		{metaPrefix + "placement/availability-zone", &in.AvailabilityZone, false},
		{metaPrefix + "placement/region", &in.Region, true},
		{metaPrefix + "instance-life-cycle", &in.LifeCycle, true},
	}
	for _, f := range fields {
		resp, req, err := s.get(ctx, f.path)
		if err == nil && resp.Code == http.StatusNotFound && f.optional {
			continue
		}
		if err == nil {
			err = statusErr(resp, req)
		}
		if err != nil {
			return Instance{}, fmt.Errorf("aws: instance: %w", err)
		}
		*f.dst = strings.TrimSpace(string(resp.Body))
	}
	if in.Region == "" && len(in.AvailabilityZone) > 1 {
		in.Region = strings.TrimRightFunc(in.AvailabilityZone, func(r rune) bool { return r >= 'a' && r <= 'z' })
	}
	return in, nil
}

// observe returns the first observation time of id, recording now if new.
// Must be called with s.mu held.
func (s *Source) observe(id string, now time.Time) time.Time {
	if t, ok := s.first[id]; ok {
		return t
	}
	s.first[id] = now
	return now
}

// endsPoll reports whether err makes the remaining paths of this poll
// pointless: the caller gave up, the connection failed, no session token,
// or IMDS refuses us.
func endsPoll(ctx context.Context, err error) bool {
	if ctx.Err() != nil || errors.Is(err, notice.ErrUnavailable) {
		return true
	}
	var te *metaclient.TransientError
	var tk tokenError
	return errors.As(err, &te) || errors.As(err, &tk)
}

// union returns a followed by the notices of b whose ID a lacks.
func union(a, b []notice.Notice) []notice.Notice {
	out := append([]notice.Notice(nil), a...)
	for _, n := range b {
		dup := false
		for _, m := range a {
			dup = dup || m.ID == n.ID
		}
		if !dup {
			out = append(out, n)
		}
	}
	return out
}

var instanceIDRe = regexp.MustCompile(`^i-[0-9a-f]{8,32}$`)

func resolveEndpoint(ep string, getenv func(string) string) (string, error) {
	if ep == "" {
		ep = getenv(EnvEndpoint)
	}
	if ep == "" {
		switch mode := getenv(EnvEndpointMode); strings.ToLower(mode) {
		case "", "ipv4":
			ep = DefaultEndpoint
		case "ipv6":
			ep = DefaultEndpointIPv6
		default:
			return DefaultEndpoint, fmt.Errorf("%s=%q: want IPv4 or IPv6", EnvEndpointMode, mode)
		}
	}
	u, err := url.Parse(ep)
	if err != nil {
		return ep, fmt.Errorf("endpoint %q: %w", ep, err)
	}
	if (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" || (u.Path != "" && u.Path != "/") || u.RawQuery != "" {
		return ep, fmt.Errorf("endpoint %q: want http://host[:port]", ep)
	}
	return strings.TrimSuffix(ep, "/"), nil
}

func envTrue(v string) bool { return strings.EqualFold(strings.TrimSpace(v), "true") }

func truncate(s string, n int) string {
	if len(s) <= n {
		return s
	}
	return s[:n] + "…"
}
