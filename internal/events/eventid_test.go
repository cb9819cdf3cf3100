package events

import (
	"testing"
	"time"
)

// TestEventIDUniqueAcrossFailover: an event id is stable for one row (a
// republished event keeps it) and differs for a row that reuses an outbox
// id later, as a promoted asynchronous standby hands out again the ids the
// lost primary used last; plain and group ids never collide.
func TestEventIDUniqueAcrossFailover(t *testing.T) {
	t.Parallel()
	at := time.Date(2026, 12, 1, 18, 39, 44, 259014000, time.UTC)
	row := Lifecycle{OutboxID: 7, Status: "SUCCEEDED", OccurredAt: at}
	if a, b := row.EventID(), row.EventID(); a != b || a != "7@1796150384259014" {
		t.Fatalf("ids of one row: %q, %q; want both 7@1796150384259014", a, b)
	}
	reused := Lifecycle{OutboxID: 7, Status: "SUCCEEDED", OccurredAt: at.Add(3 * time.Second)}
	if row.EventID() == reused.EventID() {
		t.Fatalf("a reused outbox id with a later occurred_at kept the id %q", row.EventID())
	}
	ids := map[string]bool{}
	for _, e := range []Lifecycle{
		{OutboxID: 7, OccurredAt: at},
		{OutboxID: 7, Grouped: true, Member: 0, OccurredAt: at},
		{OutboxID: 7, Grouped: true, Member: 1, OccurredAt: at},
		{OutboxID: 70, OccurredAt: at},
		{OutboxID: 7, Grouped: true, Member: 0, OccurredAt: at.Add(time.Microsecond)},
	} {
		id := e.EventID()
		if ids[id] {
			t.Fatalf("two events share the id %q", id)
		}
		ids[id] = true
	}
	if got := (Lifecycle{OutboxID: 7, Grouped: true, Member: 2}).EventID(); got != "7-2" {
		t.Fatalf("zero occurred_at: id %q, want 7-2", got)
	}
}
