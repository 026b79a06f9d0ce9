package tencentspot_test

import (
	"errors"
	"testing"
	"time"

	"github.com/spotsafe/spotsafe/notice"
	"github.com/spotsafe/spotsafe/providers/tencentspot"
)

// FuzzParseTime checks that ParseTime never panics, returns UTC times only,
// rejects input only with notice.ErrMalformed, and that what it accepts
// survives a round trip through the documented UTC+8 layout.
//
// Seeds: the documented example "2018-08-18 12:05:33" (PROTOCOLS.md
// section 5), the D/M/Y variant of localized documentation, RFC 3339 with and
// without a zone, a fraction, a trailing newline, and bodies that must be
// rejected (empty, M/D/Y, date only, hour 25, the fakes' garbage body).
func FuzzParseTime(f *testing.F) {
	for _, s := range []string{
		"2018-08-18 12:05:33",
		"18/08/2018 12:05:33",
		"2018-08-18T12:05:33+08:00",
		"2018-08-18T04:05:33Z",
		"2018-08-18T12:05:33",
		"2018-08-18 12:05:33.25",
		"2018-08-18 12:05:33\n",
		"",
		"08/18/2018 12:05:33",
		"2018-08-18",
		"2018-08-18 25:05:33",
		"\x00{\"garbage\": [1, 2,,, <not json> 9999-99-99 TRUE?",
	} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		got, err := tencentspot.ParseTime(s)
		if err != nil {
			if !errors.Is(err, notice.ErrMalformed) {
				t.Fatalf("ParseTime(%q) error %v does not wrap ErrMalformed", s, err)
			}
			return
		}
		if got.Location() != time.UTC {
			t.Fatalf("ParseTime(%q) = %v, not UTC", s, got)
		}
		wire := got.In(tencentspot.Zone).Format(tencentspot.TimeLayout)
		again, err := tencentspot.ParseTime(wire)
		if err != nil || !again.Equal(got.Truncate(time.Second)) {
			t.Fatalf("round trip of %q via %q: %v, %v; want %v", s, wire, again, err, got.Truncate(time.Second))
		}
	})
}
