package app

import (
	"runtime/debug"
	"testing"
)

// TestSetGCPercentDefault: without GOGC the binary collects at its default;
// a GOGC of the environment (already applied by the runtime) is kept.
func TestSetGCPercentDefault(t *testing.T) {
	orig := debug.SetGCPercent(100)
	defer debug.SetGCPercent(orig)
	for _, percent := range []int{IntakeGCPercent, WorkerGCPercent} {
		debug.SetGCPercent(100)
		SetGCPercentDefault(func(string) string { return "" }, percent)
		if got := debug.SetGCPercent(100); got != percent {
			t.Errorf("GOGC unset: gc percent %d, want %d", got, percent)
		}
		SetGCPercentDefault(func(k string) string {
			if k == "GOGC" {
				return "50"
			}
			return ""
		}, percent)
		if got := debug.SetGCPercent(100); got != 100 {
			t.Errorf("GOGC set: gc percent changed to %d", got)
		}
	}
}
