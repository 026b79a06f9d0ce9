package awsspot

import (
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/spotsafe/spotsafe/notice"
)

// Seeds: the documented examples (PROTOCOLS.md 1.5, AWS docs) and the
// shapes that broke other handlers.
var (
	instanceActionSeeds = []string{
		`{"action":"stop","time":"2017-09-18T08:22:00Z"}`,
		`{"action":"terminate","time":"2017-09-18T08:22:00Z"}`,
		`{"action": "hibernate", "time": "2017-09-18T08:22:00.123Z"}`,
		`{"action":"terminate","time":"2017-09-18 08:22:00"}`,
		`{"action":"terminate","time":"2017-09-18T08:22:00+02:00"}`,
		`{"action":"reboot","time":"2017-09-18T08:22:00Z"}`,
		`{"action":"terminate"}`,
		`{"time":"2017-09-18T08:22:00Z"}`,
		`{}`, `null`, `[]`, ``, `<html></html>`,
		"\x00{\"garbage\": [1, 2,,, <not json> 9999-99-99 TRUE?",
	}
	scheduledSeeds = []string{
		`[]`,
		`[ {
  "NotBefore" : "21 Jan 2019 09:00:43 GMT",
  "Code" : "system-reboot",
  "Description" : "scheduled reboot",
  "EventId" : "instance-event-0d59937288b749b32",
  "NotAfter" : "21 Jan 2019 09:17:23 GMT",
  "State" : "active"
} ]`,
		`[{"NotBefore":"5 Feb 2024 00:00:00 GMT","Code":"instance-stop","Description":"The instance is running on degraded hardware","EventId":"instance-event-1","State":"active"}]`,
		`[{"NotBefore":"21 Jan 2019 09:00:43 GMT","Code":"system-maintenance","EventId":"e","State":"canceled"}]`,
		`[{"NotBefore":"2019-01-21T09:00:43Z","Code":"instance-retirement","EventId":"e","State":"active"}]`,
		`[{"NotBefore":"","Code":"system-reboot","EventId":"e","State":"active"}]`,
		`[{"NotBefore":"21 Jan 2019 09:00:43 GMT","NotAfter":"bad","EventId":"e"}]`,
		`{"NotBefore":"21 Jan 2019 09:00:43 GMT"}`, `null`, ``, `[1]`,
	}
	rebalanceSeeds = []string{
		`{"noticeTime":"2020-10-27T08:22:00Z"}`,
		`{"noticeTime":"2020-10-27T08:22:00.5Z"}`,
		`{"noticeTime":""}`, `{}`, `"2020-10-27T08:22:00Z"`,
	}
	lifecycleSeeds = []string{
		"InService", "Standby", "Detached", "Terminated", "Warmed:Hibernated",
		"Warmed:Running", "Warmed:Stopped", "Warmed:Terminated", "Terminated\n",
		"", "<html>", "In Service",
	}
)

// checkErr asserts that a parse error says the body is malformed.
func checkErr(t *testing.T, err error) {
	t.Helper()
	if !errors.Is(err, notice.ErrMalformed) {
		t.Fatalf("error %v does not wrap notice.ErrMalformed", err)
	}
}

func checkTime(t *testing.T, what string, v time.Time) {
	t.Helper()
	if v.Year() < 2000 || v.Year() > 2999 || v.Location() != time.UTC {
		t.Fatalf("%s = %v: want a plausible UTC time", what, v)
	}
}

func FuzzParseInstanceAction(f *testing.F) {
	for _, s := range instanceActionSeeds {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, body []byte) {
		n, err := parseInstanceAction(body)
		if err != nil {
			checkErr(t, err)
			return
		}
		if !n.Kind.Final() {
			t.Fatalf("instance-action gave non-final kind %v", n.Kind)
		}
		checkTime(t, "deadline", n.Deadline)
		if !strings.HasPrefix(n.ID, "spot-") || n.Detail["raw"] == "" && len(body) > 0 {
			t.Fatalf("bad notice %+v", n)
		}
		again, err := parseInstanceAction(body)
		if err != nil || again.ID != n.ID || !again.Deadline.Equal(n.Deadline) {
			t.Fatalf("not deterministic: %+v vs %+v (%v)", n, again, err)
		}
	})
}

func FuzzParseScheduledEvents(f *testing.F) {
	for _, s := range scheduledSeeds {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, body []byte) {
		ns, err := parseScheduled(body)
		if err != nil {
			checkErr(t, err)
			if ns != nil {
				t.Fatalf("notices %v returned with error %v", ns, err)
			}
			return
		}
		ids := map[string]bool{}
		for _, n := range ns {
			if n.ID == "" || ids[n.ID] {
				t.Fatalf("empty or duplicate id in %v", ns)
			}
			ids[n.ID] = true
			if n.Kind < notice.KindTerminate || n.Kind > notice.KindMaintenance {
				t.Fatalf("invalid kind %v", n.Kind)
			}
			checkTime(t, "NotBefore", n.Deadline)
			if !n.NotAfter.IsZero() {
				checkTime(t, "NotAfter", n.NotAfter)
			}
			if s := strings.ToLower(strings.TrimSpace(n.Detail["state"])); s == "canceled" || s == "completed" {
				t.Fatalf("%s event returned as a notice", s)
			}
		}
	})
}

func FuzzParseRebalance(f *testing.F) {
	for _, s := range rebalanceSeeds {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, body []byte) {
		n, err := parseRebalance(body)
		if err != nil {
			checkErr(t, err)
			return
		}
		if n.Kind != notice.KindRebalance || !n.Deadline.IsZero() || !strings.HasPrefix(n.ID, "rebalance-") {
			t.Fatalf("bad rebalance notice %+v", n)
		}
	})
}

func FuzzParseLifecycle(f *testing.F) {
	for _, s := range lifecycleSeeds {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, body []byte) {
		state, err := parseLifecycle(body)
		if err != nil {
			checkErr(t, err)
			return
		}
		if state == "" || strings.ContainsAny(state, " \t\r\n<>{}\"") {
			t.Fatalf("accepted state %q", state)
		}
	})
}

func FuzzParseTime(f *testing.F) {
	for _, s := range []string{
		"2015-01-05T18:02:00Z", "2017-09-18T08:22:00.123456789Z", "2017-09-18T08:22:00+05:30",
		"2017-09-18 08:22:00", "21 Jan 2019 09:00:43 GMT", "Mon, 21 Jan 2019 09:00:43 GMT",
		"0001-01-01T00:00:00Z", "9999-12-31T23:59:59Z", "", "soon",
	} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		for name, parse := range map[string]func(string) (time.Time, error){"ParseTime": ParseTime, "ParseScheduledTime": ParseScheduledTime} {
			v, err := parse(s)
			if err != nil {
				checkErr(t, err)
				continue
			}
			checkTime(t, name, v)
			// What we parsed survives a round trip through RFC 3339.
			back, err := ParseTime(v.Format(time.RFC3339Nano))
			if err != nil || !back.Equal(v) {
				t.Fatalf("%s(%q) = %v does not round-trip: %v %v", name, s, v, back, err)
			}
		}
	})
}

// TestParseExamples pins the documented examples to their meaning.
func TestParseExamples(t *testing.T) {
	n, err := parseInstanceAction([]byte(`{"action":"stop","time":"2017-09-18T08:22:00Z"}`))
	if err != nil || n.Kind != notice.KindStop || !n.Deadline.Equal(time.Date(2017, 9, 18, 8, 22, 0, 0, time.UTC)) || n.ID != "spot-stop-2017-09-18T08:22:00Z" {
		t.Fatalf("stop example: %+v %v", n, err)
	}
	n, err = parseInstanceAction([]byte(`{"action":"reboot","time":"2017-09-18T08:22:00.999Z"}`))
	if err != nil || n.Kind != notice.KindTerminate || n.Detail["action"] != "reboot" || n.ID != "spot-reboot-2017-09-18T08:22:00Z" {
		t.Fatalf("unknown action must read as terminate: %+v %v", n, err)
	}
	ns, err := parseScheduled([]byte(scheduledSeeds[1]))
	if err != nil || len(ns) != 1 {
		t.Fatalf("scheduled example: %v %v", ns, err)
	}
	if e := ns[0]; e.ID != "instance-event-0d59937288b749b32" || e.Kind != notice.KindReboot ||
		!e.Deadline.Equal(time.Date(2019, 1, 21, 9, 0, 43, 0, time.UTC)) || !e.NotAfter.Equal(time.Date(2019, 1, 21, 9, 17, 23, 0, time.UTC)) {
		t.Fatalf("scheduled example: %+v", e)
	}
	if ns, err := parseScheduled([]byte(scheduledSeeds[3])); err != nil || len(ns) != 0 {
		t.Fatalf("canceled event: %v %v", ns, err)
	}
	for _, bad := range []string{"0001-01-01T00:00:00Z", "soon", ""} {
		if _, err := ParseTime(bad); !errors.Is(err, notice.ErrMalformed) {
			t.Errorf("ParseTime(%q) = %v, want ErrMalformed", bad, err)
		}
	}
	v, err := ParseTime("2017-09-18 08:22:00")
	if err != nil || !v.Equal(time.Date(2017, 9, 18, 8, 22, 0, 0, time.UTC)) {
		t.Errorf("zone-less time is UTC: %v %v", v, err)
	}
}
