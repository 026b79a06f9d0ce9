package alibabaspot_test

import (
	"errors"
	"testing"
	"time"

	"github.com/spotsafe/spotsafe/notice"
	"github.com/spotsafe/spotsafe/providers/alibabaspot"
)

// FuzzParseTime checks that ParseTime never panics, returns UTC times only,
// rejects input only with notice.ErrMalformed, and that what it accepts
// survives a round trip through the wire layout.
//
// Seeds: the documented example (PROTOCOLS.md section 4), variants a server
// or a proxy might produce (offset, fraction, no zone, trailing newline), and
// bodies that must be rejected (empty, the word "none", an epoch number, an
// impossible date, the fakes' garbage body).
func FuzzParseTime(f *testing.F) {
	for _, s := range []string{
		"2015-01-05T18:02:00Z",
		"2015-01-05T18:02:00Z\n",
		"2015-01-06T02:02:00+08:00",
		"2015-01-05T18:02:00.123456789Z",
		"2015-01-05T18:02:00",
		"",
		"none",
		"1428254455",
		"2015-02-30T18:02:00Z",
		"\x00{\"garbage\": [1, 2,,, <not json> 9999-99-99 TRUE?",
	} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		got, err := alibabaspot.ParseTime(s)
		if err != nil {
			if !errors.Is(err, notice.ErrMalformed) {
				t.Fatalf("ParseTime(%q) error %v does not wrap ErrMalformed", s, err)
			}
			return
		}
		if got.Location() != time.UTC {
			t.Fatalf("ParseTime(%q) = %v, not UTC", s, got)
		}
		again, err := alibabaspot.ParseTime(got.Format(alibabaspot.TimeLayout))
		if err != nil || !again.Equal(got.Truncate(time.Second)) {
			t.Fatalf("round trip of %q: %v, %v; want %v", s, again, err, got.Truncate(time.Second))
		}
	})
}
