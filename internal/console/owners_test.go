package console_test

import (
	"net/url"
	"strconv"
	"testing"

	"github.com/mightyetl/mightyetl/internal/console"
	"github.com/mightyetl/mightyetl/internal/pg"
)

// The priority filter takes one digit 1..4 (or nothing); anything else is
// refused, never widened to "any"; the filter's query keeps it.
func TestParseFilterPriority(t *testing.T) {
	for _, tc := range []struct {
		value string
		want  int
		ok    bool
	}{
		{"", 0, true}, {"1", 1, true}, {"4", 4, true}, {" 3 ", 3, true},
		{"0", 0, false}, {"5", 0, false}, {"01", 0, false}, {"x", 0, false}, {"-1", 0, false}, {"1.0", 0, false}, {"+2", 0, false},
	} {
		f, err := console.ParseFilter(url.Values{"priority": {tc.value}})
		if (err == nil) != tc.ok || f.Priority != tc.want {
			t.Errorf("priority %q: %d, %v; want %d, ok %v", tc.value, f.Priority, err, tc.want, tc.ok)
		}
		if tc.ok && tc.want != 0 {
			if q := f.Query(false).Get("priority"); q != strconv.Itoa(tc.want) {
				t.Errorf("priority %q: query has %q", tc.value, q)
			}
		}
	}
}

// What the overview says of an owner's claim state.
func TestOwnerStateText(t *testing.T) {
	secs := func(f float64) *float64 { return &f }
	for _, tc := range []struct {
		row  console.OwnerRow
		want string
	}{
		{console.OwnerRow{ClaimState: pg.OwnerDue, DueSince: secs(1.84)}, "due for 1.8s"},
		{console.OwnerRow{ClaimState: pg.OwnerDue, DueSince: secs(125)}, "due for 2m5s"},
		{console.OwnerRow{ClaimState: pg.OwnerIdle, IdleVisits: 3, NextLookIn: secs(0.4)}, "idle (3 empty looks), next look in 400ms"},
		{console.OwnerRow{ClaimState: pg.OwnerScheduled, NextLookIn: secs(3600)}, "scheduled: due in 1h0m0s"},
		{console.OwnerRow{ClaimState: pg.OwnerParked}, "parked: no queued job"},
		{console.OwnerRow{ClaimState: pg.OwnerUnregistered}, "not registered for fair claims"},
	} {
		if got := tc.row.StateText(); got != tc.want {
			t.Errorf("%s: %q, want %q", tc.row.ClaimState, got, tc.want)
		}
	}
}
