// Package tencentspot is the Tencent Cloud CVM interruption source: it reads
// the spot reclamation time from the instance metadata server
// (GET /latest/meta-data/spot/termination-time, 404 while none is
// scheduled).
//
// The time comes as local time in UTC+8 with no zone marker
// ("2018-08-18 12:05:33"); localized documentation also shows a D/M/Y
// variant. Both are read in a fixed +08:00 zone (no tzdata needed) and
// converted to UTC. Tencent documents no token mode.
package tencentspot

import (
	"context"
	"fmt"
	"log/slog"
	"net/http"
	"strings"
	"time"

	"github.com/spotsafe/spotsafe/internal/metaclient"
	"github.com/spotsafe/spotsafe/internal/termtime"
	"github.com/spotsafe/spotsafe/notice"
)

// Protocol constants (PROTOCOLS.md section 5).
const (
	// DefaultEndpoint is the CVM metadata server. Unlike the other clouds it
	// is a host name: Tencent documents no IP literal for it.
	DefaultEndpoint = "http://metadata.tencentyun.com"
	// TerminationPath answers 404 while no reclamation is scheduled (or on
	// an instance that is not spot) and the UTC+8 local release time once
	// one is.
	TerminationPath = "/latest/meta-data/spot/termination-time"
	// InstanceIDPath is read by Probe: CVM instance ids look like
	// "ins-a1b2c3d4", unlike any other cloud's.
	InstanceIDPath = "/latest/meta-data/instance-id"
	// NominalNotice is the usual lead time between the notice and the
	// release [unverified: not stated in the English documentation]. The
	// notice carries its own time; this is only for planning.
	NominalNotice = 2 * time.Minute
)

// TimeLayout is the documented format of the termination time, in UTC+8.
const TimeLayout = "2006-01-02 15:04:05"

// Zone is the fixed UTC+8 zone (China Standard Time) the termination time
// is written in.
var Zone = time.FixedZone("UTC+8", 8*60*60)

// Options configures a [Source]. The zero value talks to the real metadata
// server.
type Options struct {
	// Endpoint is the metadata server's base URL (scheme://host[:port]).
	// Default [DefaultEndpoint].
	Endpoint string
	// HTTPClient sends the requests. Default: a client from the shared
	// metadata transport (no proxy, 250 ms dial, 2 s per request).
	HTTPClient *http.Client
	// Logger is accepted for symmetry with the other providers; the source
	// has nothing to log on its own. Nil discards.
	Logger *slog.Logger
	// PollInterval is what the source asks a Watcher for; 0 leaves the
	// Watcher's default (1 s).
	PollInterval time.Duration
}

// Source polls the Tencent termination time. It implements notice.Source and
// notice.Intervaler.
type Source struct {
	endpoint string
	client   *http.Client
	log      *slog.Logger
	interval time.Duration
	term     termtime.Poller
}

var _ interface {
	notice.Source
	notice.Intervaler
} = (*Source)(nil)

// New returns a Source. opts may be nil.
func New(opts *Options) *Source {
	var o Options
	if opts != nil {
		o = *opts
	}
	s := &Source{
		endpoint: strings.TrimRight(o.Endpoint, "/"),
		client:   o.HTTPClient,
		log:      o.Logger,
		interval: o.PollInterval,
		term:     termtime.Poller{Package: "tencentspot", Provider: "tencent", Path: TerminationPath, Parse: ParseTime},
	}
	if s.endpoint == "" {
		s.endpoint = DefaultEndpoint
	}
	if s.client == nil {
		s.client = metaclient.NewHTTPClient(metaclient.DefaultTimeout)
	}
	if s.log == nil {
		s.log = slog.New(slog.DiscardHandler)
	}
	return s
}

// Name returns "tencent".
func (s *Source) Name() string { return "tencent" }

// PollInterval returns Options.PollInterval (0: the Watcher's default).
func (s *Source) PollInterval() time.Duration { return s.interval }

// Poll reads the termination time once. It returns nil while no reclamation
// is scheduled, and one KindTerminate notice whose Deadline is the announced
// time converted to UTC (identity: that time) once one is. A body that is not
// a time is an error wrapping notice.ErrMalformed and makes no notice.
func (s *Source) Poll(ctx context.Context) ([]notice.Notice, error) {
	resp, req, err := metaclient.Get(ctx, s.client, s.endpoint+TerminationPath, nil)
	if err != nil {
		return nil, fmt.Errorf("tencentspot: %w", err)
	}
	return s.term.Handle(resp, req)
}

// Probe reports whether a Tencent Cloud metadata server answers at the
// endpoint: one GET of instance-id, which must look like a CVM id
// ("ins-" and letters or digits). ctx should carry a short deadline.
func (s *Source) Probe(ctx context.Context) error {
	resp, req, err := metaclient.Get(ctx, s.client, s.endpoint+InstanceIDPath, nil)
	if err != nil {
		return fmt.Errorf("tencentspot: probe: %w", err)
	}
	if err := resp.Err(req); err != nil {
		return fmt.Errorf("tencentspot: probe: %w", err)
	}
	id := strings.TrimSpace(string(resp.Body))
	if !isInstanceID(id) {
		return fmt.Errorf("tencentspot: probe: instance-id %.40q is not a CVM instance id: %w", id, notice.ErrMalformed)
	}
	return nil
}

// ParseTime reads a termination time as Tencent writes it and returns it in
// UTC. It accepts the documented "2006-01-02 15:04:05" and the D/M/Y
// "02/01/2006 15:04:05" of localized documentation, both in UTC+8, and
// RFC 3339 with its own offset. Anything else is an error wrapping
// notice.ErrMalformed.
func ParseTime(s string) (time.Time, error) {
	s = strings.TrimSpace(s)
	if t, ok := termtime.ParseIn(s, Zone, TimeLayout, "02/01/2006 15:04:05", time.RFC3339, "2006-01-02T15:04:05"); ok {
		return t, nil
	}
	return time.Time{}, fmt.Errorf("termination time %.64q is not a time like %q (UTC+8): %w", s, TimeLayout, notice.ErrMalformed)
}

// isInstanceID accepts "ins-" followed by lower-case letters and digits.
func isInstanceID(s string) bool {
	rest, ok := strings.CutPrefix(s, "ins-")
	if !ok || rest == "" || len(rest) > 32 {
		return false
	}
	for _, c := range rest {
		if (c < 'a' || c > 'z') && (c < '0' || c > '9') {
			return false
		}
	}
	return true
}
