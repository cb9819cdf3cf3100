package worker_test

import (
	"regexp"
	"strings"
	"testing"

	"github.com/mightyetl/mightyetl/internal/worker"
)

// TestDefaultOwnerID: the one default of the worker id (Config.OwnerID,
// MIGHTYETL_WORKER_ID) is host-pid-random within the lease owner id
// alphabet and length, new on every call, and what WithDefaults gives a
// Config without one; a set OwnerID is kept.
func TestDefaultOwnerID(t *testing.T) {
	valid := regexp.MustCompile(`^[A-Za-z0-9._:-]{8,128}$`)
	a, b := worker.DefaultOwnerID(), worker.DefaultOwnerID()
	for _, id := range []string{a, b} {
		if !valid.MatchString(id) || strings.Count(id, "-") < 2 {
			t.Errorf("DefaultOwnerID() = %q: not host-pid-random in [A-Za-z0-9._:-]{8,128}", id)
		}
	}
	if a == b {
		t.Errorf("two calls returned the same id %q", a)
	}
	if pa, pb := hostPID(a), hostPID(b); pa != pb {
		t.Errorf("host-pid differs between calls of one process: %q, %q", pa, pb)
	}
	c := worker.Config{}.WithDefaults()
	if !valid.MatchString(c.OwnerID) || hostPID(c.OwnerID) != hostPID(a) {
		t.Errorf("Config{}.WithDefaults().OwnerID = %q, want a DefaultOwnerID() like %q", c.OwnerID, a)
	}
	if got := (worker.Config{OwnerID: "set-owner-1"}).WithDefaults().OwnerID; got != "set-owner-1" {
		t.Errorf("a set OwnerID became %q", got)
	}
}

// hostPID is an owner id without its random part.
func hostPID(id string) string {
	if i := strings.LastIndex(id, "-"); i >= 0 {
		return id[:i]
	}
	return id
}
