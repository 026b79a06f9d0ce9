package noticetest

import (
	"net/http"
	"sync"
	"time"
)

// Tencent identity values the fake serves.
const (
	TencentInstanceID = "ins-f4kesp0t"
	TencentRegion     = "ap-guangzhou"
	TencentZone       = "ap-guangzhou-3"
)

// TencentTimeLayout is how the real server writes the termination time: UTC+8
// local time with no zone marker.
const TencentTimeLayout = "2006-01-02 15:04:05"

// tencentZone is UTC+8, fixed, so that the fake needs no tzdata either.
var tencentZone = time.FixedZone("UTC+8", 8*60*60)

// Tencent is a fake Tencent Cloud CVM metadata server (PROTOCOLS.md
// section 5): GET /latest/meta-data/spot/termination-time answers 404 until
// a notice is scheduled, then the deadline as UTC+8 local time without a zone
// ("2018-08-18 12:05:33"), whatever the kind: the protocol has one. Identity
// keys: instance-id, placement/region, placement/zone, instance/instance-type.
// There is no token mode.
type Tencent struct {
	Base

	mu     sync.Mutex
	layout string
}

var _ Fake = (*Tencent)(nil)

// NewTencent starts a Tencent fake. opts may be nil.
func NewTencent(opts *ServerOptions) (*Tencent, error) {
	tc := &Tencent{layout: TencentTimeLayout}
	if err := tc.Start(opts, http.HandlerFunc(tc.serve)); err != nil {
		return nil, err
	}
	return tc, nil
}

// SetTimeLayout changes the Go layout the termination time is written in
// (still in UTC+8), e.g. "02/01/2006 15:04:05" for the D/M/Y variant seen in
// localized documentation. "" restores [TencentTimeLayout].
func (tc *Tencent) SetTimeLayout(layout string) {
	if layout == "" {
		layout = TencentTimeLayout
	}
	tc.mu.Lock()
	tc.layout = layout
	tc.mu.Unlock()
}

func (tc *Tencent) serve(w http.ResponseWriter, r *http.Request) {
	if r.Method != http.MethodGet && r.Method != http.MethodHead {
		w.Header().Set("Allow", "GET, HEAD")
		http.Error(w, "Method Not Allowed", http.StatusMethodNotAllowed)
		return
	}
	var body string
	switch r.URL.Path {
	case "/latest/meta-data/spot/termination-time":
		if tc.Intercept(w, r) {
			return
		}
		cur, ok, _ := tc.Current(time.Now())
		if !ok {
			serveNotFoundPage(w)
			return
		}
		tc.mu.Lock()
		layout := tc.layout
		tc.mu.Unlock()
		body = cur.Deadline.In(tencentZone).Format(layout)
	case "/latest/meta-data/instance-id":
		body = TencentInstanceID
	case "/latest/meta-data/placement/region":
		body = TencentRegion
	case "/latest/meta-data/placement/zone":
		body = TencentZone
	case "/latest/meta-data/instance/instance-type":
		body = "SA2.MEDIUM4"
	case "/latest/meta-data/", "/latest/meta-data":
		body = "instance-id\ninstance/\nplacement/\nspot/\n"
	case "/":
		body = "1.0\n2017-09-19\nlatest\n"
	default:
		serveNotFoundPage(w)
		return
	}
	w.Header().Set("Content-Type", "text/plain")
	_, _ = w.Write([]byte(body))
}
