// Package testwait is the one way tests wait for a condition: poll it until
// it holds or a deadline passes, then fail the test naming what was awaited.
// Tests wait on conditions with deadlines, never assert on elapsed time.
package testwait

import (
	"testing"
	"time"
)

// pollEvery is the polling period: short enough not to slow tests, long
// enough not to load a 2-core machine.
const pollEvery = 10 * time.Millisecond

// For polls cond until it returns true, failing t (Fatalf) when within
// passes first. what names the condition in the failure message.
func For(t testing.TB, within time.Duration, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(within)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out after %s waiting for %s", within, what)
		}
		time.Sleep(pollEvery)
	}
}
