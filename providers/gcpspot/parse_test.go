package gcpspot

import (
	"errors"
	"strings"
	"testing"

	"github.com/spotsafe/spotsafe/notice"
)

// FuzzParseValue checks the value parser on both keys. Seeds: every
// documented value of instance/preempted (TRUE, FALSE) and
// instance/maintenance-event (NONE, MIGRATE_ON_HOST_MAINTENANCE,
// TERMINATE_ON_HOST_MAINTENANCE, the legacy SHUTDOWN_ON_HOST_MAINTENANCE),
// with the white space and case variations the parser tolerates, plus values
// it must reject: empty, a value of the other key, an undocumented event, a
// NUL, and the fake's garbage body.
func FuzzParseValue(f *testing.F) {
	for _, v := range []string{
		"TRUE", "FALSE", "NONE",
		"MIGRATE_ON_HOST_MAINTENANCE", "TERMINATE_ON_HOST_MAINTENANCE", "SHUTDOWN_ON_HOST_MAINTENANCE",
		"true", " TRUE\n", "none\r\n",
		"", "TRUE\x00", "REBOOT_ON_HOST_MAINTENANCE", "1", "yes", "falſe", "TRUE\u00a0",
		"\x00{\"garbage\": [1, 2,,, <not json> 9999-99-99 TRUE?",
	} {
		f.Add(KeyPreempted, v)
		f.Add(KeyMaintenanceEvent, v)
	}
	f.Fuzz(func(t *testing.T, key, value string) {
		kind, present, err := parseValue(key, value)
		if key != KeyPreempted && key != KeyMaintenanceEvent {
			if err == nil {
				t.Fatalf("unknown key %q accepted", key)
			}
			return
		}
		if err != nil {
			if !errors.Is(err, notice.ErrMalformed) {
				t.Fatalf("parseValue(%q, %q) error %v does not wrap ErrMalformed", key, value, err)
			}
			if present || kind != 0 {
				t.Fatalf("parseValue(%q, %q) made a notice and an error", key, value)
			}
			return
		}
		if present != (kind != 0) {
			t.Fatalf("parseValue(%q, %q) = %v, %v", key, value, kind, present)
		}
		switch {
		case key == KeyPreempted && present && kind != notice.KindPreempt,
			key == KeyMaintenanceEvent && present && kind != notice.KindTerminate && kind != notice.KindMigrate:
			t.Fatalf("parseValue(%q, %q) = %v, not a kind of this key", key, value, kind)
		}
		// Accepted values are documented words up to case and white space.
		v := strings.ToUpper(strings.TrimSpace(value))
		switch v {
		case "TRUE", "FALSE", "NONE", "MIGRATE_ON_HOST_MAINTENANCE", "TERMINATE_ON_HOST_MAINTENANCE", "SHUTDOWN_ON_HOST_MAINTENANCE":
		default:
			t.Fatalf("parseValue(%q, %q) accepted an undocumented value", key, value)
		}
		// The same word in another spelling parses the same.
		k2, p2, err2 := parseValue(key, " "+strings.ToLower(v)+"\n")
		if err2 != nil || k2 != kind || p2 != present {
			t.Fatalf("parseValue(%q) differs between %q and its lower-case form", key, value)
		}
	})
}

func TestParseValueTable(t *testing.T) {
	for _, tc := range []struct {
		key, value string
		kind       notice.Kind
		present    bool
		bad        bool
	}{
		{KeyPreempted, "TRUE", notice.KindPreempt, true, false},
		{KeyPreempted, "FALSE", 0, false, false},
		{KeyPreempted, "NONE", 0, false, true},
		{KeyMaintenanceEvent, "NONE", 0, false, false},
		{KeyMaintenanceEvent, "TERMINATE_ON_HOST_MAINTENANCE", notice.KindTerminate, true, false},
		{KeyMaintenanceEvent, "SHUTDOWN_ON_HOST_MAINTENANCE", notice.KindTerminate, true, false},
		{KeyMaintenanceEvent, "MIGRATE_ON_HOST_MAINTENANCE", notice.KindMigrate, true, false},
		{KeyMaintenanceEvent, "TRUE", 0, false, true},
		{KeyMaintenanceEvent, "", 0, false, true},
		{KeyPreempted, "falſe", 0, false, true},
	} {
		kind, present, err := parseValue(tc.key, tc.value)
		if (err != nil) != tc.bad || kind != tc.kind || present != tc.present {
			t.Errorf("parseValue(%q, %q) = %v, %v, %v; want %v, %v, error %v", tc.key, tc.value, kind, present, err, tc.kind, tc.present, tc.bad)
		}
	}
}
