package azurespot_test

import (
	"encoding/json"
	"io"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/spotsafe/spotsafe/notice"
	"github.com/spotsafe/spotsafe/notice/noticetest"
)

// These tests hold the fake to the wire protocol of PROTOCOLS.md section 3
// with plain HTTP requests, independent of the source.

type fakeDoc struct {
	DocumentIncarnation int
	Events              []map[string]any
}

func do(t *testing.T, method, u string, header map[string]string, body string) (int, string) {
	t.Helper()
	req, err := http.NewRequest(method, u, strings.NewReader(body))
	require.NoError(t, err)
	for k, v := range header {
		req.Header.Set(k, v)
	}
	resp, err := http.DefaultClient.Do(req)
	require.NoError(t, err)
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	require.NoError(t, err)
	return resp.StatusCode, string(b)
}

var md = map[string]string{"Metadata": "true"}

func getDoc(t *testing.T, f *noticetest.Azure) fakeDoc {
	t.Helper()
	code, body := do(t, http.MethodGet, f.URL()+"/metadata/scheduledevents?api-version=2020-07-01", md, "")
	require.Equal(t, http.StatusOK, code, body)
	var d fakeDoc
	require.NoError(t, json.Unmarshal([]byte(body), &d), body)
	return d
}

func TestFakeRequestRules(t *testing.T) {
	t.Parallel()
	f := newFake(t)
	ev := f.URL() + "/metadata/scheduledevents"
	for _, tc := range []struct {
		name   string
		method string
		url    string
		header map[string]string
		code   int
		want   string
	}{
		{"no header", "GET", ev + "?api-version=2020-07-01", nil, 400, "metadata header"},
		{"header false", "GET", ev + "?api-version=2020-07-01", map[string]string{"Metadata": "false"}, 400, "metadata header"},
		{"no version", "GET", ev, md, 400, "newest-versions"},
		{"old latest", "GET", ev + "?api-version=latest", md, 400, "newest-versions"},
		{"instance version on events", "GET", ev + "?api-version=2021-02-01", md, 400, "2020-07-01"},
		{"forwarded", "GET", ev + "?api-version=2020-07-01", map[string]string{"Metadata": "true", "X-Forwarded-For": "10.0.0.9"}, 400, "X-Forwarded-For"},
		{"wrong verb", "PUT", ev + "?api-version=2020-07-01", md, 405, "method"},
		{"name needs text", "GET", f.URL() + "/metadata/instance/compute/name?api-version=2021-02-01", md, 400, "format=text"},
		{"name", "GET", f.URL() + "/metadata/instance/compute/name?api-version=2021-02-01&format=text", md, 200, noticetest.DefaultAzureVMName},
		{"instance", "GET", f.URL() + "/metadata/instance?api-version=2021-02-01", md, 200, `"priority":"Spot"`},
		{"instance no header", "GET", f.URL() + "/metadata/instance?api-version=2021-02-01", nil, 400, "metadata header"},
		{"unknown path", "GET", f.URL() + "/latest/meta-data/spot/instance-action", md, 404, "not found"},
		{"empty document", "GET", ev + "?api-version=2020-07-01", md, 200, `"Events":[]`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			code, body := do(t, tc.method, tc.url, tc.header, "")
			assert.Equal(t, tc.code, code, body)
			assert.Contains(t, strings.ToLower(body), strings.ToLower(tc.want))
		})
	}
}

func TestFakeDocument(t *testing.T) {
	t.Parallel()
	f := newFake(t)
	f.SetVMName("WestNO_0")
	d0 := getDoc(t, f)
	assert.Empty(t, d0.Events)
	assert.Equal(t, d0.DocumentIncarnation, getDoc(t, f).DocumentIncarnation, "no change, same incarnation")

	nb := time.Date(2031, 4, 11, 22, 26, 58, 0, time.UTC)
	f.Interrupt(notice.KindPreempt, nb)
	d1 := getDoc(t, f)
	require.Len(t, d1.Events, 1)
	assert.Greater(t, d1.DocumentIncarnation, d0.DocumentIncarnation)
	e := d1.Events[0]
	assert.Equal(t, "Preempt", e["EventType"])
	assert.Equal(t, "Scheduled", e["EventStatus"])
	assert.Equal(t, "VirtualMachine", e["ResourceType"])
	assert.Equal(t, []any{"WestNO_0"}, e["Resources"])
	assert.Equal(t, "Fri, 11 Apr 2031 22:26:58 GMT", e["NotBefore"], "RFC 1123 with GMT")
	assert.EqualValues(t, -1, e["DurationInSeconds"])
	assert.Regexp(t, `^[0-9A-F]{8}-[0-9A-F]{4}-[0-9A-F]{4}-[0-9A-F]{4}-[0-9A-F]{12}$`, e["EventId"])
	assert.Equal(t, d1.DocumentIncarnation, getDoc(t, f).DocumentIncarnation)

	// Older api-versions lack the later fields.
	code, body := do(t, http.MethodGet, f.URL()+"/metadata/scheduledevents?api-version=2019-01-01", md, "")
	require.Equal(t, 200, code)
	assert.NotContains(t, body, "DurationInSeconds")
	assert.NotContains(t, body, "EventSource")
	assert.NotContains(t, body, "Description")
	assert.Contains(t, body, "Preempt")

	// Approve: 200, the event moves to Started with NotBefore "", the
	// incarnation bumps.
	id := e["EventId"].(string)
	code, body = do(t, http.MethodPost, f.URL()+"/metadata/scheduledevents?api-version=2020-07-01", md, `{"StartRequests":[{"EventId":"`+id+`"}]}`)
	require.Equal(t, 200, code, body)
	d2 := getDoc(t, f)
	require.Len(t, d2.Events, 1)
	assert.Equal(t, "Started", d2.Events[0]["EventStatus"])
	assert.Equal(t, "", d2.Events[0]["NotBefore"])
	assert.Greater(t, d2.DocumentIncarnation, d1.DocumentIncarnation)
	assert.Equal(t, []string{id}, f.Acked())

	// Approving again is fine (Azure: 200 even if already approved).
	code, _ = do(t, http.MethodPost, f.URL()+"/metadata/scheduledevents?api-version=2020-07-01", md, `{"StartRequests":[{"EventId":"`+id+`"}]}`)
	assert.Equal(t, 200, code)
	assert.Equal(t, d2.DocumentIncarnation, getDoc(t, f).DocumentIncarnation, "no change from a repeated approval")

	f.Clear()
	d3 := getDoc(t, f)
	assert.Empty(t, d3.Events)
	assert.Greater(t, d3.DocumentIncarnation, d2.DocumentIncarnation)
}

func TestFakeStartRequestsErrors(t *testing.T) {
	t.Parallel()
	f := newFake(t)
	id := f.AddEvent(noticetest.AzureEvent{EventType: "Reboot", NotBefore: time.Now().Add(time.Hour)})
	u := f.URL() + "/metadata/scheduledevents?api-version=2020-07-01"
	for _, body := range []string{
		``,
		`not json`,
		`{}`,
		`{"StartRequests":[]}`,
		`{"StartRequests":[{"EventId":""}]}`,
		`{"StartRequests":[{"EventId":"no-such-event"}]}`,
		`{"StartRequests":[{"EventId":"` + id + `"},{"EventId":"no-such-event"}]}`,
	} {
		code, resp := do(t, http.MethodPost, u, md, body)
		assert.Equal(t, 400, code, "body %q: %s", body, resp)
	}
	assert.Empty(t, f.Acked(), "nothing applied from a rejected request")
	code, _ := do(t, http.MethodPost, u, nil, `{"StartRequests":[{"EventId":"`+id+`"}]}`)
	assert.Equal(t, 400, code, "POST needs the header too")
}

func TestFakeAddEventDefaultsAndSchedule(t *testing.T) {
	t.Parallel()
	f := newFake(t)
	f.SetVMName("me")
	a := f.AddEvent(noticetest.AzureEvent{EventType: "Freeze", Resources: []string{"other"}})
	b := f.AddEvent(noticetest.AzureEvent{EventType: "Reboot", EventStatus: "Started", NotBefore: time.Now()})
	assert.NotEqual(t, a, b)
	f.Schedule(notice.KindTerminate, time.Now().Add(200*time.Millisecond), time.Now().Add(time.Hour))
	d := getDoc(t, f)
	require.Len(t, d.Events, 2, "the scheduled event is not visible yet")
	assert.Equal(t, []any{"other"}, d.Events[0]["Resources"])
	assert.Equal(t, "", d.Events[0]["NotBefore"], "zero NotBefore serves \"\"")
	assert.Equal(t, "Started", d.Events[1]["EventStatus"])
	assert.Equal(t, "", d.Events[1]["NotBefore"], "Started serves \"\"")
	time.Sleep(250 * time.Millisecond)
	d2 := getDoc(t, f)
	require.Len(t, d2.Events, 3)
	assert.Equal(t, "Terminate", d2.Events[2]["EventType"])
	assert.Greater(t, d2.DocumentIncarnation, d.DocumentIncarnation, "appearing by time bumps the incarnation")

	assert.True(t, f.RemoveEvent(a))
	assert.False(t, f.RemoveEvent(a))
	assert.False(t, f.StartEvent("nope"))
	assert.Len(t, getDoc(t, f).Events, 2)
	assert.Equal(t, "Stop", noticetest.AzureEventType(notice.KindStop))
}
