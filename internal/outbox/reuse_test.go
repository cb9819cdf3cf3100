package outbox

import (
	"encoding/json"
	"errors"
	"strconv"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/mightyetl/mightyetl/internal/events"
	"github.com/mightyetl/mightyetl/internal/metrics"
)

// rewindOutboxIDs sets the outbox id sequence back so that the next row
// gets id next, as a promoted asynchronous standby hands out again the ids
// the lost primary used last.
func (f fixture) rewindOutboxIDs(t *testing.T, next int64) {
	t.Helper()
	if _, err := f.pool.Exec(t.Context(),
		`SELECT setval(pg_get_serial_sequence('etl_outbox_events', 'outbox_event_id'), $1, false)`, next); err != nil {
		t.Fatalf("rewind outbox ids: %v", err)
	}
}

// occurredAt returns the stored occurred_at of outbox row id.
func (f fixture) occurredAt(t *testing.T, id int64) time.Time {
	t.Helper()
	var at time.Time
	if err := f.pool.QueryRow(t.Context(), `SELECT occurred_at FROM etl_outbox_events WHERE outbox_event_id = $1`, id).Scan(&at); err != nil {
		t.Fatal(err)
	}
	return at
}

// A row republished after the relay died between publish and delete keeps
// its bare id; JetStream acknowledges the copy as a duplicate, the relay
// finds the stored original is the same transition and deletes the row:
// the stream (what a consumer sees) holds one message, and no id counts as
// reused.
func TestRepublishedRowKeepsItsBareIDAndIsDroppedAsACopy(t *testing.T) {
	t.Parallel()
	f := newFixture(t, "")
	m := metrics.NewOutbox(nil)
	r := f.relay(t, m, Options{})
	id := f.insert(t, lifecycle("FAILED", "etl_record_invalid"))[0]

	crash := errors.New("relay died before commit")
	r.beforeCommit = func() error { return crash }
	if _, err := r.RunOnce(t.Context()); !errors.Is(err, crash) {
		t.Fatalf("run once = %v, want the simulated crash", err)
	}
	r.beforeCommit = nil
	if n, err := r.RunOnce(t.Context()); err != nil || n != 1 {
		t.Fatalf("run once after restart = %d, %v; want 1, nil", n, err)
	}
	if n := f.count(t, "true"); n != 0 {
		t.Fatalf("outbox rows left = %d, want 0", n)
	}
	ces, msgIDs := f.streamEvents(t)
	if len(ces) != 1 || ces[0].ID != strconv.FormatInt(id, 10) || msgIDs[0] != ces[0].ID {
		t.Fatalf("stream events %+v with Nats-Msg-Ids %q; want one, id %d", ces, msgIDs, id)
	}
	if got := testutil.ToFloat64(m.ReusedIDs); got != 0 {
		t.Fatalf("reused ids = %v, want 0", got)
	}
}

// A row that a v0.1.0 relay published (bare id, its own envelope) and did
// not delete before it was stopped, republished by this release during a
// rolling upgrade, is the same message to JetStream: the stream keeps the
// v0.1.0 copy only, so a consumer sees the transition once, under one id.
func TestRowPublishedByV010IsACopyForTheNewRelay(t *testing.T) {
	t.Parallel()
	f := newFixture(t, "")
	m := metrics.NewOutbox(nil)
	r := f.relay(t, m, Options{})
	job := uuid.New()
	id := f.insert(t, outboxRow{kind: metrics.OutboxKindLifecycle, status: "SUCCEEDED", jobID: job, attempts: 2})[0]
	at := f.occurredAt(t, id)
	if _, err := events.EnsureLifecycleStream(t.Context(), f.js, f.subjects.Prefix()); err != nil {
		t.Fatal(err)
	}
	// The message v0.1.0 published for this row, written out by hand.
	v010 := nats.NewMsg(f.subjects.Prefix() + ".lifecycle.succeeded")
	v010.Header.Set(jetstream.MsgIDHeader, strconv.FormatInt(id, 10))
	v010.Header.Set("Content-Type", "application/cloudevents+json")
	body, err := json.Marshal(map[string]any{
		"specversion": "1.0", "id": strconv.FormatInt(id, 10), "source": "urn:mightyetl:relay",
		"type": "io.mightyetl.job.succeeded", "time": at.UTC().Format(time.RFC3339Nano),
		"datacontenttype": "application/json",
		"data":            map[string]any{"jobRecordId": job.String(), "jobStatus": "SUCCEEDED", "attemptCount": 2},
	})
	if err != nil {
		t.Fatal(err)
	}
	v010.Data = body
	if _, err := f.js.PublishMsg(t.Context(), v010); err != nil {
		t.Fatal(err)
	}
	if n, err := r.RunOnce(t.Context()); err != nil || n != 1 {
		t.Fatalf("run once = %d, %v; want 1, nil", n, err)
	}
	if n := f.count(t, "true"); n != 0 {
		t.Fatalf("outbox rows left = %d, want 0", n)
	}
	ces, msgIDs := f.streamEvents(t)
	if len(ces) != 1 || msgIDs[0] != strconv.FormatInt(id, 10) {
		t.Fatalf("stream events %+v with Nats-Msg-Ids %q; want the v0.1.0 one only", ces, msgIDs)
	}
	if got := testutil.ToFloat64(m.ReusedIDs); got != 0 {
		t.Fatalf("reused ids = %v, want 0", got)
	}
}

// After a failover to an asynchronous standby the promoted primary hands
// out again outbox ids whose events the relay already published. The new
// rows' events (a plain row and a group row) are acknowledged as
// duplicates, the relay finds other transitions stored under those ids and
// publishes them again as "<id>[-<member>]@<occurred_at µs>": the consumer
// sees both the lost primary's events and the new ones. A crash after that
// republish and a retry add nothing more.
func TestReusedOutboxIDIsPublishedUnderASuffixedID(t *testing.T) {
	t.Parallel()
	f := newFixture(t, "")
	m := metrics.NewOutbox(nil)
	r := f.relay(t, m, Options{})
	lostJob := uuid.New()
	plain := f.insert(t, outboxRow{kind: metrics.OutboxKindLifecycle, status: "SUCCEEDED", jobID: lostJob, attempts: 1})[0]
	group := f.insertGroup(t, "SUCCEEDED", []uuid.UUID{uuid.New(), uuid.New()})
	if n, err := r.RunOnce(t.Context()); err != nil || n != 3 {
		t.Fatalf("first run = %d, %v; want 3, nil", n, err)
	}

	// The failover: the same ids again, for other transitions.
	f.rewindOutboxIDs(t, plain)
	newJob := uuid.New()
	if got := f.insert(t, outboxRow{kind: metrics.OutboxKindLifecycle, status: "FAILED", code: "etl_record_invalid", jobID: newJob, attempts: 3})[0]; got != plain {
		t.Fatalf("rewound outbox id = %d, want %d", got, plain)
	}
	newMembers := []uuid.UUID{uuid.New(), uuid.New()}
	if got := f.insertGroup(t, "CANCELLED", newMembers); got != group {
		t.Fatalf("rewound group id = %d, want %d", got, group)
	}
	plainAt, groupAt := f.occurredAt(t, plain), f.occurredAt(t, group)

	crash := errors.New("relay died before commit")
	r.beforeCommit = func() error { return crash }
	if _, err := r.RunOnce(t.Context()); !errors.Is(err, crash) {
		t.Fatalf("run once = %v, want the simulated crash", err)
	}
	r.beforeCommit = nil
	if n, err := r.RunOnce(t.Context()); err != nil || n != 3 {
		t.Fatalf("run after the failover = %d, %v; want 3, nil", n, err)
	}
	if n := f.count(t, "true"); n != 0 {
		t.Fatalf("outbox rows left = %d, want 0", n)
	}
	µs := func(at time.Time) string { return strconv.FormatInt(at.UnixMicro(), 10) }
	wantIDs := []string{
		strconv.FormatInt(plain, 10), strconv.FormatInt(group, 10) + "-0", strconv.FormatInt(group, 10) + "-1",
		strconv.FormatInt(plain, 10) + "@" + µs(plainAt),
		strconv.FormatInt(group, 10) + "-0@" + µs(groupAt), strconv.FormatInt(group, 10) + "-1@" + µs(groupAt),
	}
	ces, msgIDs := f.streamEvents(t)
	if len(ces) != len(wantIDs) {
		t.Fatalf("stream events = %d (%q), want %d", len(ces), msgIDs, len(wantIDs))
	}
	for i, ce := range ces {
		if ce.ID != wantIDs[i] || msgIDs[i] != wantIDs[i] {
			t.Errorf("event %d: id %q, Nats-Msg-Id %q, want %q", i, ce.ID, msgIDs[i], wantIDs[i])
		}
	}
	if ces[0].Data.JobRecordID != lostJob || ces[3].Data.JobRecordID != newJob || ces[3].Data.FailureCode != "etl_record_invalid" ||
		ces[4].Data.JobRecordID != newMembers[0] || ces[5].Data.JobRecordID != newMembers[1] || ces[5].Type != "io.mightyetl.job.cancelled" {
		t.Fatalf("events after the failover: %+v", ces)
	}
	// Three events republished before the crash, the same three after it
	// (their suffixed ids then acknowledged as copies).
	if got := testutil.ToFloat64(m.ReusedIDs); got != 6 {
		t.Fatalf("reused ids = %v, want 6", got)
	}
}

// When the stored original of a duplicate-acknowledged event is no longer
// in the stream, the relay cannot tell a copy from a reused id and
// publishes the event again under the suffixed id: at least once, never
// lost.
func TestDuplicateWhoseOriginalIsGoneIsRepublishedSuffixed(t *testing.T) {
	t.Parallel()
	f := newFixture(t, "")
	m := metrics.NewOutbox(nil)
	r := f.relay(t, m, Options{})
	id := f.insert(t, lifecycle("SUCCEEDED", ""))[0]
	at := f.occurredAt(t, id)
	crash := errors.New("relay died before commit")
	r.beforeCommit = func() error { return crash }
	if _, err := r.RunOnce(t.Context()); !errors.Is(err, crash) {
		t.Fatalf("run once = %v, want the simulated crash", err)
	}
	r.beforeCommit = nil
	st, err := f.js.Stream(t.Context(), f.subjects.LifecycleStream())
	if err != nil {
		t.Fatal(err)
	}
	if err := st.DeleteMsg(t.Context(), 1); err != nil {
		t.Fatalf("delete the stored original: %v", err)
	}
	if n, err := r.RunOnce(t.Context()); err != nil || n != 1 {
		t.Fatalf("run once = %d, %v; want 1, nil", n, err)
	}
	want := strconv.FormatInt(id, 10) + "@" + strconv.FormatInt(at.UnixMicro(), 10)
	ces, msgIDs := f.streamEvents(t)
	if len(ces) != 1 || ces[0].ID != want || msgIDs[0] != want {
		t.Fatalf("stream events %+v with Nats-Msg-Ids %q; want one with id %q", ces, msgIDs, want)
	}
	if got := testutil.ToFloat64(m.ReusedIDs); got != 1 {
		t.Fatalf("reused ids = %v, want 1", got)
	}
}
