package azurespot_test

import (
	"encoding/json"
	"errors"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/spotsafe/spotsafe/notice"
	"github.com/spotsafe/spotsafe/providers/azurespot"
)

// protocolExample is the document shown in PROTOCOLS.md section 3.3.
const protocolExample = `{
  "DocumentIncarnation": 2,
  "Events": [{
    "EventId": "C7061BAC-AFDC-4513-B24B-AA5F13A16123",
    "EventType": "Freeze",
    "ResourceType": "VirtualMachine",
    "Resources": ["WestNO_0", "WestNO_1"],
    "EventStatus": "Scheduled",
    "NotBefore": "Mon, 11 Apr 2026 22:26:58 GMT",
    "Description": "Host maintenance",
    "EventSource": "Platform",
    "DurationInSeconds": 5
  }]
}`

func TestParseDocument(t *testing.T) {
	t.Parallel()
	doc, err := azurespot.ParseDocument([]byte(protocolExample))
	require.NoError(t, err)
	require.NotNil(t, doc.Incarnation)
	assert.Equal(t, 2, *doc.Incarnation)
	require.Len(t, doc.Events, 1)
	ev := doc.Events[0]
	assert.Equal(t, "C7061BAC-AFDC-4513-B24B-AA5F13A16123", ev.EventID)
	assert.Equal(t, notice.KindFreeze, ev.Kind())
	assert.True(t, ev.Concerns("WestNO_1"))
	assert.True(t, ev.Concerns("westno_0"))
	assert.False(t, ev.Concerns("WestNO_2"))
	require.NotNil(t, ev.DurationInSeconds)
	assert.Equal(t, 5, *ev.DurationInSeconds)
	d, err := ev.Deadline()
	require.NoError(t, err)
	assert.Equal(t, time.Date(2026, 4, 11, 22, 26, 58, 0, time.UTC), d)

	empty, err := azurespot.ParseDocument([]byte(`{"DocumentIncarnation":7,"Events":[]}`))
	require.NoError(t, err)
	assert.Empty(t, empty.Events)
	noInc, err := azurespot.ParseDocument([]byte(`{"Events":[]}`))
	require.NoError(t, err)
	assert.Nil(t, noInc.Incarnation)
}

func TestParseDocumentRejects(t *testing.T) {
	t.Parallel()
	for _, body := range []string{
		``,
		`   `,
		`null`,
		`[]`,
		`"Events"`,
		`{"DocumentIncarnation":"2","Events":[]}`,
		`{"DocumentIncarnation":2,"Events":{}}`,
		`{"DocumentIncarnation":2,"Events":[{"EventType":"Preempt"}]}`,
		`{"DocumentIncarnation":2,"Events":[{"EventId":"x"}]}`,
		`{"DocumentIncarnation":2,"Events":[{"EventId":"x","EventType":"Preempt","Resources":"vm"}]}`,
		`{"DocumentIncarnation":2,"Events":[{"EventId":"x","EventType":"Preempt","DurationInSeconds":"5"}]}`,
		`{"DocumentIncarnation":2,"Events":[7]}`,
		`{"DocumentIncarnation":2,"Events":[`,
		"\x00{\"garbage\": [1, 2,,, <not json> 9999-99-99 TRUE?",
	} {
		_, err := azurespot.ParseDocument([]byte(body))
		require.Error(t, err, "body %q", body)
		assert.ErrorIs(t, err, notice.ErrMalformed, "body %q", body)
	}
}

func TestParseTime(t *testing.T) {
	t.Parallel()
	want := time.Date(2026, 4, 11, 22, 26, 58, 0, time.UTC)
	for _, s := range []string{
		"Sat, 11 Apr 2026 22:26:58 GMT",
		"Sat, 11 Apr 2026 22:26:58 UTC",
		"Sat, 11 Apr 2026 22:26:58 +0000",
		"Sun, 12 Apr 2026 00:26:58 +0200",
		"2026-04-11T22:26:58Z",
		"2026-04-11T17:26:58-05:00",
		"2026-04-11T22:26:58",
		"2026-04-11 22:26:58Z",
		" Sat, 11 Apr 2026 22:26:58 GMT ",
	} {
		got, err := azurespot.ParseTime(s)
		require.NoError(t, err, s)
		assert.True(t, got.Equal(want), "%q → %v", s, got)
		assert.Equal(t, time.UTC, got.Location(), s)
	}
	for _, s := range []string{"", "now", "Sat, 11 Apr 2026 22:26:58 CET", "1712874418", "2026-04-31T00:00:00Z"} {
		_, err := azurespot.ParseTime(s)
		assert.ErrorIs(t, err, notice.ErrMalformed, "%q", s)
	}
}

func FuzzParseDocument(f *testing.F) {
	f.Add([]byte(protocolExample))
	f.Add([]byte(`{"DocumentIncarnation":1,"Events":[]}`))
	f.Add([]byte(`{"DocumentIncarnation":3,"Events":[{"EventId":"A","EventType":"Preempt","ResourceType":"VirtualMachine","Resources":["vm"],"EventStatus":"Started","NotBefore":"","Description":"","EventSource":"Platform","DurationInSeconds":-1}]}`))
	f.Add([]byte(`{"DocumentIncarnation":4,"Events":[{"EventId":"B","EventType":"Terminate","Resources":["a","b"],"EventStatus":"Scheduled","NotBefore":"2026-04-11T22:26:58Z"}]}`))
	f.Add([]byte(`{"Events":[{"EventId":"C","EventType":"Reboot","NotBefore":"garbage"}]}`))
	f.Fuzz(func(t *testing.T, body []byte) {
		doc, err := azurespot.ParseDocument(body)
		if err != nil {
			if !errors.Is(err, notice.ErrMalformed) {
				t.Fatalf("error %v does not wrap ErrMalformed", err)
			}
			return
		}
		for _, ev := range doc.Events {
			if ev.EventID == "" || ev.EventType == "" {
				t.Fatalf("accepted an event without identity: %+v", ev)
			}
			if ev.Kind() < notice.KindTerminate || ev.Kind() > notice.KindMaintenance {
				t.Fatalf("kind %v out of range", ev.Kind())
			}
			d, err := ev.Deadline()
			if err != nil && !errors.Is(err, notice.ErrMalformed) {
				t.Fatalf("deadline error %v does not wrap ErrMalformed", err)
			}
			if err == nil && d.Location() != time.UTC && !d.IsZero() {
				t.Fatalf("deadline %v not in UTC", d)
			}
			// An accepted event re-encodes and parses to the same identity.
			b, merr := json.Marshal(map[string]any{"Events": []json.RawMessage{ev.Raw}})
			if merr != nil {
				t.Fatalf("re-encoding an accepted event: %v", merr)
			}
			again, err := azurespot.ParseDocument(b)
			if err != nil || len(again.Events) != 1 || again.Events[0].EventID != ev.EventID || again.Events[0].NotBefore != ev.NotBefore {
				t.Fatalf("round trip of %s: %+v, %v", ev.Raw, again, err)
			}
		}
	})
}
