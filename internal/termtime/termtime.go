// Package termtime turns a "termination-time" metadata answer into
// notices, for the clouds that publish spot reclamation as one time under
// a well-known path (Alibaba ECS and Tencent CVM): 404 means none is
// scheduled, 200 carries the time, anything else is an error.
package termtime

import (
	"fmt"
	"net/http"
	"sync"
	"time"

	"github.com/spotsafe/spotsafe/internal/metaclient"
	"github.com/spotsafe/spotsafe/notice"
)

// Poller reads termination-time answers for one provider and remembers
// when the current notice was first observed, so that repeated polls
// report the same Observed. Set the exported fields before first use; it
// is then safe for concurrent use.
type Poller struct {
	// Package prefixes error messages ("alibabaspot").
	Package string
	// Provider names the notices and starts their IDs ("alibaba").
	Provider string
	// Path is the termination-time path, named in parse errors.
	Path string
	// Parse reads the body into a UTC time; its errors should wrap
	// notice.ErrMalformed.
	Parse func(body string) (time.Time, error)

	mu           sync.Mutex
	lastID       string
	lastObserved time.Time
}

// Handle interprets the answer to GET Path (req is the request, for error
// messages). It returns nil while no reclamation is scheduled (404) and one
// KindTerminate notice whose Deadline is the parsed time, with ID
// "<Provider>/terminate/<RFC 3339 time>", once one is. A body Parse rejects
// and any other status are errors and make no notice.
func (p *Poller) Handle(resp *metaclient.Response, req *http.Request) ([]notice.Notice, error) {
	switch {
	case resp.Code == http.StatusNotFound:
		p.remember("", time.Time{})
		return nil, nil
	case resp.Code != http.StatusOK:
		return nil, fmt.Errorf("%s: %w", p.Package, resp.Err(req))
	}
	raw := string(resp.Body)
	deadline, err := p.Parse(raw)
	if err != nil {
		return nil, fmt.Errorf("%s: GET %s: %w", p.Package, p.Path, err)
	}
	id := p.Provider + "/terminate/" + deadline.Format(time.RFC3339)
	return []notice.Notice{{
		ID:       id,
		Provider: p.Provider,
		Kind:     notice.KindTerminate,
		Deadline: deadline,
		Observed: p.remember(id, time.Now()),
		Detail: map[string]string{
			"termination_time": deadline.Format(time.RFC3339),
			"raw":              raw,
		},
	}}, nil
}

// remember keeps the first observation time of the current notice; id ""
// forgets.
func (p *Poller) remember(id string, now time.Time) time.Time {
	p.mu.Lock()
	defer p.mu.Unlock()
	if id == "" || id != p.lastID {
		p.lastID, p.lastObserved = id, now
	}
	return p.lastObserved
}

// ParseIn reads s (already trimmed) with the first of layouts that
// accepts it, in loc for layouts without a zone, and returns it in UTC.
// ok is false when no layout fits or the first that fits gives a year
// before 2000 (a zero or garbage time, not a reclamation).
func ParseIn(s string, loc *time.Location, layouts ...string) (t time.Time, ok bool) {
	for _, layout := range layouts {
		t, err := time.ParseInLocation(layout, s, loc)
		if err != nil {
			continue
		}
		if t.Year() < 2000 {
			break
		}
		return t.UTC(), true
	}
	return time.Time{}, false
}
