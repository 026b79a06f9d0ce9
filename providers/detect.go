// Package providers finds the cloud a program runs on and builds its
// interruption source. Each cloud's source lives in its own package
// (awsspot, gcpspot, azurespot, alibabaspot, tencentspot); this package ties
// them together for programs that should work on any of them.
//
// [Detect] never guesses: it believes, in order, the SPOTSAFE_PROVIDER
// environment variable, the machine's DMI (SMBIOS) vendor strings, and a
// metadata server that answers a provider-specific probe. When none of them
// names a cloud it returns [ErrNoCloud]; a program then relies on signals
// alone.
package providers

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"time"

	"github.com/spotsafe/spotsafe/internal/metaclient"
	"github.com/spotsafe/spotsafe/notice"
	"github.com/spotsafe/spotsafe/providers/alibabaspot"
	"github.com/spotsafe/spotsafe/providers/awsspot"
	"github.com/spotsafe/spotsafe/providers/azurespot"
	"github.com/spotsafe/spotsafe/providers/gcpspot"
	"github.com/spotsafe/spotsafe/providers/tencentspot"
)

// Environment variables Detect reads.
const (
	// EnvProvider forces a provider: aws, gcp, azure, alibaba, tencent, or
	// none (no cloud: Detect returns ErrNoCloud at once). Empty or "auto"
	// means detect.
	EnvProvider = "SPOTSAFE_PROVIDER"
	// EnvEndpoint points every provider at one metadata base URL, such as
	// the one `spotsafe fake` prints. It applies when DetectOptions sets no
	// endpoint.
	EnvEndpoint = "SPOTSAFE_ENDPOINT"
)

// Defaults for zero [DetectOptions] fields.
const (
	// DefaultDMIRoot is where Linux exposes the SMBIOS strings.
	DefaultDMIRoot = "/sys/class/dmi/id"
	// DefaultProbeTimeout bounds each provider's probe. Metadata servers are
	// link-local and answer in milliseconds; off-cloud, a dial to an
	// unrouted address gives up after 250 ms. All probes run at once, so
	// Detect answers "no cloud" in under a second.
	DefaultProbeTimeout = 750 * time.Millisecond
)

// Ways a provider can be detected, as reported in [Detection.Via].
const (
	ViaEnv   = "env"
	ViaDMI   = "dmi"
	ViaProbe = "probe"
)

// ErrNoCloud is returned by [Detect] when nothing says which cloud this is.
var ErrNoCloud = errors.New("providers: no cloud metadata endpoint answered; set SPOTSAFE_PROVIDER to force one")

// names lists the supported providers in probing order.
var names = [...]string{"aws", "gcp", "azure", "alibaba", "tencent"}

// Names returns the supported provider names: aws, gcp, azure, alibaba,
// tencent.
func Names() []string { return names[:] }

// SourceOptions configures the source [NewSource] builds. The zero value
// talks to the provider's real metadata server.
type SourceOptions struct {
	// Endpoint overrides the metadata base URL (scheme://host[:port]).
	Endpoint string
	// HTTPClient overrides the provider's default metadata client.
	HTTPClient *http.Client
	// Logger is handed to the source. Nil discards.
	Logger *slog.Logger
	// PollInterval is what the source asks a Watcher for; 0 keeps the
	// Watcher's default.
	PollInterval time.Duration
	// Getenv is handed to sources that read their cloud SDK's variables
	// (awsspot: AWS_EC2_METADATA_SERVICE_ENDPOINT and friends). Default
	// os.Getenv. (gcpspot reads GCE_METADATA_HOST from the process
	// environment whatever this says.)
	Getenv func(string) string
}

// NewSource builds the interruption source of the named provider (one of
// [Names]). opts may be nil.
func NewSource(provider string, opts *SourceOptions) (notice.Source, error) {
	var o SourceOptions
	if opts != nil {
		o = *opts
	}
	switch provider {
	case "aws":
		return awsspot.New(&awsspot.Options{Endpoint: o.Endpoint, HTTPClient: o.HTTPClient, Logger: o.Logger, PollInterval: o.PollInterval, Getenv: o.Getenv}), nil
	case "gcp":
		return gcpspot.New(&gcpspot.Options{Endpoint: o.Endpoint, HTTPClient: o.HTTPClient, Logger: o.Logger, PollInterval: o.PollInterval}), nil
	case "azure":
		return azurespot.New(&azurespot.Options{Endpoint: o.Endpoint, HTTPClient: o.HTTPClient, Logger: o.Logger, PollInterval: o.PollInterval}), nil
	case "alibaba":
		return alibabaspot.New(&alibabaspot.Options{Endpoint: o.Endpoint, HTTPClient: o.HTTPClient, Logger: o.Logger, PollInterval: o.PollInterval}), nil
	case "tencent":
		return tencentspot.New(&tencentspot.Options{Endpoint: o.Endpoint, HTTPClient: o.HTTPClient, Logger: o.Logger, PollInterval: o.PollInterval}), nil
	}
	return nil, fmt.Errorf("providers: unknown provider %q (want one of %s)", provider, strings.Join(Names(), ", "))
}

// DefaultEndpoint returns the named provider's real metadata base URL, ""
// for an unknown name.
func DefaultEndpoint(provider string) string {
	switch provider {
	case "aws":
		return awsspot.DefaultEndpoint
	case "gcp":
		return gcpspot.DefaultEndpoint
	case "azure":
		return azurespot.DefaultEndpoint
	case "alibaba":
		return alibabaspot.DefaultEndpoint
	case "tencent":
		return tencentspot.DefaultEndpoint
	}
	return ""
}

// DetectOptions configures [Detect]. The zero value detects the real cloud.
type DetectOptions struct {
	// Endpoint points every provider at one base URL (a fake, or a local
	// metadata proxy). With an endpoint set, DMI is skipped: the machine's
	// hardware says nothing about what answers there. Default: the
	// SPOTSAFE_ENDPOINT environment variable, else each provider's own.
	Endpoint string
	// Endpoints overrides the base URL per provider name; it wins over
	// Endpoint.
	Endpoints map[string]string
	// HTTPClient is handed to every source. Default: each provider's own
	// (they differ: Azure's first call may take two minutes).
	HTTPClient *http.Client
	// Logger is handed to every source and gets one line per probe. Nil
	// discards.
	Logger *slog.Logger
	// PollInterval is handed to the source returned.
	PollInterval time.Duration
	// ProbeTimeout bounds each probe. Default [DefaultProbeTimeout].
	ProbeTimeout time.Duration
	// DMIRoot is the directory holding sys_vendor, product_name and the
	// other SMBIOS strings. Default [DefaultDMIRoot]. A directory without
	// them disables the DMI step.
	DMIRoot string
	// Getenv reads the environment. Default os.Getenv.
	Getenv func(string) string
}

// Detection is the answer of [Detect].
type Detection struct {
	// Provider is one of [Names].
	Provider string
	// Source polls the provider's metadata server, built with the options
	// given to Detect.
	Source notice.Source
	// Via says what identified the provider: "env", "dmi" or "probe".
	Via string
	// Endpoint is the base URL the source talks to.
	Endpoint string
	// Evidence says why, for the log: the variable, the DMI string or the
	// probe that answered.
	Evidence string
}

// prober is what every provider source offers for detection: one short
// request that succeeds only against that provider's metadata server.
type prober interface {
	notice.Source
	Probe(ctx context.Context) error
}

// Detect finds the cloud this program runs on and returns its source. In
// order: the SPOTSAFE_PROVIDER variable; the DMI vendor strings (unless an
// endpoint override is set); then one short probe of every provider at
// once, the first that answers winning. When nothing identifies a cloud it
// returns an error wrapping [ErrNoCloud] within about a second. opts may be
// nil.
func Detect(ctx context.Context, opts *DetectOptions) (*Detection, error) {
	var o DetectOptions
	if opts != nil {
		o = *opts
	}
	if o.Getenv == nil {
		o.Getenv = os.Getenv
	}
	if o.Logger == nil {
		o.Logger = slog.New(slog.DiscardHandler)
	}
	if o.ProbeTimeout <= 0 {
		o.ProbeTimeout = DefaultProbeTimeout
	}
	if o.DMIRoot == "" {
		o.DMIRoot = DefaultDMIRoot
	}
	if o.Endpoint == "" {
		o.Endpoint = strings.TrimSpace(o.Getenv(EnvEndpoint))
	}

	switch p := strings.ToLower(strings.TrimSpace(o.Getenv(EnvProvider))); {
	case p == "none":
		return nil, fmt.Errorf("%s=none: %w", EnvProvider, ErrNoCloud)
	case p != "" && p != "auto":
		if !slices.Contains(Names(), p) {
			return nil, fmt.Errorf("providers: %s=%q: want one of %s, none or auto", EnvProvider, p, strings.Join(Names(), ", "))
		}
		return o.detection(p, ViaEnv, EnvProvider+"="+p)
	}

	if o.Endpoint == "" {
		p, evidence, err := fromDMI(o.DMIRoot)
		if err != nil {
			return nil, err
		}
		if p != "" {
			return o.detection(p, ViaDMI, evidence)
		}
	}
	return o.probe(ctx)
}

func (o *DetectOptions) endpoint(provider string) string {
	if e := o.Endpoints[provider]; e != "" {
		return e
	}
	return o.Endpoint
}

func (o *DetectOptions) source(provider string) (notice.Source, error) {
	return NewSource(provider, &SourceOptions{
		Endpoint:     o.endpoint(provider),
		HTTPClient:   o.HTTPClient,
		Logger:       o.Logger,
		PollInterval: o.PollInterval,
		Getenv:       o.Getenv,
	})
}

func (o *DetectOptions) detection(provider, via, evidence string) (*Detection, error) {
	src, err := o.source(provider)
	if err != nil {
		return nil, err
	}
	ep := o.endpoint(provider)
	if ep == "" {
		ep = DefaultEndpoint(provider)
	}
	o.Logger.Info("cloud detected", "provider", provider, "via", via, "evidence", evidence, "endpoint", ep)
	return &Detection{Provider: provider, Source: src, Via: via, Endpoint: ep, Evidence: evidence}, nil
}

type probeResult struct {
	provider string
	err      error
}

// probe asks every provider at once; the first positive answer wins and the
// other probes are cancelled and waited for.
//
// Probes share one client that keeps no idle connections: a probe cancelled
// while dialing would otherwise leave a connection open (the transport keeps
// a late dial for reuse) that nobody will use. The winner gets a fresh
// source with the provider's own client.
func (o *DetectOptions) probe(ctx context.Context) (*Detection, error) {
	client := o.HTTPClient
	if client == nil {
		client = metaclient.NewHTTPClient(0) // each probe has its own deadline
		if tr, ok := client.Transport.(*http.Transport); ok {
			tr.DisableKeepAlives = true
		}
	}
	defer client.CloseIdleConnections()

	pctx, cancel := context.WithCancel(ctx)
	defer cancel()
	// Sized for every probe, so that none blocks on send once a winner is
	// chosen and nobody reads any more.
	results := make(chan probeResult, len(names))
	started := 0
	for _, p := range names {
		s, err := NewSource(p, &SourceOptions{Endpoint: o.endpoint(p), HTTPClient: client, Logger: o.Logger, Getenv: o.Getenv})
		if err != nil {
			return nil, err
		}
		pr, ok := s.(prober)
		if !ok {
			o.Logger.Debug("provider cannot be probed", "provider", p)
			continue
		}
		started++
		go func() {
			c, stop := context.WithTimeout(pctx, o.ProbeTimeout)
			defer stop()
			results <- probeResult{provider: p, err: pr.Probe(c)}
		}()
	}

	winner := ""
	var tried []string
	for range started {
		r := <-results
		if winner != "" {
			continue // draining: the probe was cancelled
		}
		if r.err != nil {
			o.Logger.Debug("probe failed", "provider", r.provider, "err", r.err)
			tried = append(tried, r.provider)
			continue
		}
		winner = r.provider
		cancel()
	}
	if err := ctx.Err(); err != nil && winner == "" {
		return nil, fmt.Errorf("providers: detect: %w", err)
	}
	if winner == "" {
		slices.Sort(tried)
		o.Logger.Info("no cloud detected", "probed", tried)
		return nil, fmt.Errorf("%w (probed %s)", ErrNoCloud, strings.Join(tried, ", "))
	}
	return o.detection(winner, ViaProbe, winner+" probe answered")
}

// dmiRule is one vendor string that names a cloud (PROTOCOLS.md 0.8).
type dmiRule struct {
	file, provider string
	match          func(string) bool
}

func equals(want string) func(string) bool {
	return func(v string) bool { return strings.EqualFold(v, want) }
}

func hasPrefix(prefix string) func(string) bool {
	return func(v string) bool { return strings.HasPrefix(strings.ToLower(v), strings.ToLower(prefix)) }
}

func contains(sub string) func(string) bool {
	return func(v string) bool { return strings.Contains(strings.ToLower(v), strings.ToLower(sub)) }
}

var dmiRules = []dmiRule{
	{"sys_vendor", "aws", equals("Amazon EC2")}, // Nitro
	{"bios_vendor", "aws", hasPrefix("Amazon")}, // older Xen
	{"bios_version", "aws", contains("amazon")}, // Xen HVM "4.11.amazon" [unverified]
	{"product_name", "gcp", equals("Google Compute Engine")},
	{"sys_vendor", "gcp", equals("Google")},
	{"chassis_asset_tag", "azure", equals("7783-7084-3265-9085-8269-3286-77")},
	{"sys_vendor", "alibaba", equals("Alibaba Cloud")},
	{"product_name", "alibaba", equals("Alibaba Cloud ECS")},
	{"sys_vendor", "tencent", contains("Tencent")},             // [unverified]
	{"chassis_asset_tag", "oracle", equals("OracleCloud.com")}, // no notice metadata
}

// fromDMI names the cloud from the SMBIOS strings under root, "" when they
// name none (or are not there, as in many containers and off Linux).
func fromDMI(root string) (provider, evidence string, err error) {
	cache := map[string]string{}
	read := func(name string) string {
		if v, ok := cache[name]; ok {
			return v
		}
		b, _ := os.ReadFile(filepath.Join(root, name))
		v := strings.TrimSpace(string(b))
		cache[name] = v
		return v
	}
	for _, r := range dmiRules {
		v := read(r.file)
		if v == "" || !r.match(v) {
			continue
		}
		evidence = fmt.Sprintf("%s=%q", r.file, v)
		if r.provider == "oracle" {
			return "", "", fmt.Errorf("DMI %s: Oracle Cloud announces no interruption in instance metadata (rely on signals): %w", evidence, ErrNoCloud)
		}
		return r.provider, "DMI " + evidence, nil
	}
	return "", "", nil
}
