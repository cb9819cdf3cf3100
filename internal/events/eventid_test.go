package events

import (
	"encoding/json"
	"testing"
	"time"

	"github.com/google/uuid"
)

// TestEventIDIsTheOutboxIDAsInV010: an ordinary event's id is the bare
// outbox id (and member), exactly what v0.1.0 produced, so a row
// republished by either release during a rolling upgrade keeps one id and
// JetStream drops the copy; the time is not part of it. Only an event
// marked Reused (its outbox id was handed out again after a failover to an
// asynchronous standby) carries the "@<occurred_at µs>" suffix. No two of
// the forms collide.
func TestEventIDIsTheOutboxIDAsInV010(t *testing.T) {
	t.Parallel()
	at := time.Date(2026, 12, 1, 18, 39, 44, 259014000, time.UTC)
	for _, c := range []struct {
		e    Lifecycle
		want string
	}{
		{Lifecycle{OutboxID: 3615, Status: "SUCCEEDED", OccurredAt: at}, "3615"},
		{Lifecycle{OutboxID: 7, Grouped: true, Member: 2, Status: "SUCCEEDED", OccurredAt: at}, "7-2"},
		{Lifecycle{OutboxID: 7, Status: "SUCCEEDED", OccurredAt: at, Reused: true}, "7@1796150384259014"},
		{Lifecycle{OutboxID: 7, Grouped: true, Member: 2, OccurredAt: at, Reused: true}, "7-2@1796150384259014"},
	} {
		if got := c.e.EventID(); got != c.want {
			t.Errorf("%+v: id %q, want %q", c.e, got, c.want)
		}
		if got := NewCloudEvent("", c.e).ID; got != c.want {
			t.Errorf("%+v: CloudEvent id %q, want %q", c.e, got, c.want)
		}
	}
	ids := map[string]bool{}
	for _, e := range []Lifecycle{
		{OutboxID: 7, OccurredAt: at},
		{OutboxID: 7, Grouped: true, Member: 0, OccurredAt: at},
		{OutboxID: 7, Grouped: true, Member: 1, OccurredAt: at},
		{OutboxID: 70, OccurredAt: at},
		{OutboxID: 7, OccurredAt: at, Reused: true},
		{OutboxID: 7, OccurredAt: at.Add(time.Microsecond), Reused: true},
		{OutboxID: 7, Grouped: true, Member: 0, OccurredAt: at, Reused: true},
	} {
		id := e.EventID()
		if ids[id] {
			t.Fatalf("two events share the id %q", id)
		}
		ids[id] = true
	}
}

// TestSameTransition: a stored event is the same transition as an outbox
// event when job, status and occurred time (µs) match, whatever its id,
// source or traceparent (another relay or release); another job, status or
// time, or a body that is no CloudEvent, is not.
func TestSameTransition(t *testing.T) {
	t.Parallel()
	at := time.Date(2026, 12, 1, 18, 39, 44, 259014000, time.UTC)
	e := Lifecycle{OutboxID: 3615, JobID: uuid.New(), Status: "FAILED", Code: "etl_record_invalid", AttemptCount: 2, OccurredAt: at}
	enc := func(source string, e Lifecycle) []byte {
		b, err := json.Marshal(NewCloudEvent(source, e))
		if err != nil {
			t.Fatal(err)
		}
		return b
	}
	reused := e
	reused.Reused = true
	traced := e
	traced.Traceparent = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"
	if !SameTransition(enc("urn:other", traced), e) || !SameTransition(enc("", reused), e) {
		t.Fatal("the same transition under another source, traceparent or id is not recognised")
	}
	other := e
	other.JobID = uuid.New()
	later := e
	later.OccurredAt = at.Add(time.Microsecond)
	status := e
	status.Status, status.Code = "CANCELLED", "etl_cancelled_by_operator"
	for _, o := range []Lifecycle{other, later, status} {
		if SameTransition(enc("", o), e) {
			t.Errorf("%+v taken for the same transition as %+v", o, e)
		}
	}
	if SameTransition([]byte("not json"), e) || SameTransition([]byte(`{}`), e) {
		t.Error("a body that is no lifecycle CloudEvent taken for the same transition")
	}
}
