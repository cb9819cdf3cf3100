package outbox

import (
	"context"
	"encoding/json"
	"errors"
	"log/slog"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/prometheus/client_golang/prometheus/testutil"
	"go.uber.org/goleak"

	"github.com/mightyetl/mightyetl/internal/events"
	"github.com/mightyetl/mightyetl/internal/lease"
	"github.com/mightyetl/mightyetl/internal/metrics"
	"github.com/mightyetl/mightyetl/internal/natstest"
	"github.com/mightyetl/mightyetl/internal/pg"
	"github.com/mightyetl/mightyetl/internal/pgtest"
	"github.com/mightyetl/mightyetl/internal/startstop"
	"github.com/mightyetl/mightyetl/internal/startstop/startstoptest"
	"github.com/mightyetl/mightyetl/internal/testwait"
)

func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m)
}

type fixture struct {
	pool     *pgxpool.Pool
	nc       *nats.Conn
	js       jetstream.JetStream
	subjects events.Subjects
}

// newFixture gives a test its own database and subject prefix on the shared
// NATS server; its lifecycle stream is deleted when the test ends.
func newFixture(t *testing.T, natsURL string) fixture {
	t.Helper()
	pool, _ := pgtest.NewDatabase(t)
	if natsURL == "" {
		natsURL = natstest.URL(t)
	}
	prefix := natstest.Prefix(t)
	nc, err := events.Connect(t.Context(), events.Options{URL: natsURL, Name: "outbox-test", ReconnectWait: 50 * time.Millisecond}, nil, nil)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(nc.Close)
	js, err := jetstream.New(nc)
	if err != nil {
		t.Fatal(err)
	}
	s, _ := events.NewSubjects(prefix)
	t.Cleanup(func() {
		if nc.IsConnected() {
			ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
			defer cancel()
			_ = js.DeleteStream(ctx, s.LifecycleStream())
		}
	})
	return fixture{pool: pool, nc: nc, js: js, subjects: s}
}

func (f fixture) relay(t *testing.T, m *metrics.Outbox, opts Options) *Relay {
	t.Helper()
	r, err := New(f.pool, f.nc, f.subjects.Prefix(), slog.New(slog.DiscardHandler), m, opts)
	if err != nil {
		t.Fatal(err)
	}
	return r
}

func (f fixture) start(t *testing.T, r *Relay) {
	t.Helper()
	if err := r.Start(t.Context()); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		if err := r.Stop(ctx); err != nil {
			t.Errorf("stop relay: %v", err)
		}
	})
}

type outboxRow struct {
	kind, status, code string
	jobID              uuid.UUID
	attempts           int
}

// insert writes outbox rows directly and returns their ids, in order.
func (f fixture) insert(t *testing.T, rows ...outboxRow) []int64 {
	t.Helper()
	ids := make([]int64, 0, len(rows))
	for _, r := range rows {
		var status, code *string
		if r.status != "" {
			status = &r.status
		}
		if r.code != "" {
			code = &r.code
		}
		jobID := r.jobID
		if jobID == uuid.Nil {
			jobID = uuid.New()
		}
		var id int64
		err := f.pool.QueryRow(t.Context(), `
			INSERT INTO etl_outbox_events (event_kind, job_record_id, job_status, attempt_count, event_code)
			VALUES ($1, $2, $3, $4, $5) RETURNING outbox_event_id`,
			r.kind, jobID, status, r.attempts, code).Scan(&id)
		if err != nil {
			t.Fatalf("insert outbox row: %v", err)
		}
		ids = append(ids, id)
	}
	return ids
}

func available(n int) []outboxRow {
	out := make([]outboxRow, n)
	for i := range out {
		out[i] = outboxRow{kind: metrics.OutboxKindAvailable, status: "PENDING"}
	}
	return out
}

func lifecycle(status, code string) outboxRow {
	return outboxRow{kind: metrics.OutboxKindLifecycle, status: status, code: code, attempts: 1}
}

func (f fixture) count(t *testing.T, where string) int {
	t.Helper()
	var n int
	if err := f.pool.QueryRow(t.Context(), "SELECT count(*) FROM etl_outbox_events WHERE "+where).Scan(&n); err != nil {
		t.Fatal(err)
	}
	return n
}

func (f fixture) streamMsgs(t *testing.T) uint64 {
	t.Helper()
	st, err := f.js.Stream(t.Context(), f.subjects.LifecycleStream())
	if err != nil {
		t.Fatalf("lifecycle stream: %v", err)
	}
	info, err := st.Info(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	return info.State.Msgs
}

// drain runs batches until one publishes nothing and returns the number of
// non-empty batches and the rows they published.
func drain(t *testing.T, r *Relay) (batches, rows int) {
	t.Helper()
	for {
		n, err := r.RunOnce(t.Context())
		if err != nil {
			t.Fatalf("run once: %v", err)
		}
		if n == 0 {
			return batches, rows
		}
		batches++
		rows += n
	}
}

// sentinel publishes a marker on subject from the same connection as the
// relay: core NATS keeps one connection's messages in order, so everything
// the relay sent before arrives before the marker.
func sentinel(t *testing.T, nc *nats.Conn, subject string) {
	t.Helper()
	if err := nc.Publish(subject, []byte("sentinel")); err != nil {
		t.Fatal(err)
	}
}

// collect receives from sub until the sentinel and returns what came before.
func collect(t *testing.T, sub *nats.Subscription) []*nats.Msg {
	t.Helper()
	var out []*nats.Msg
	for {
		msg, err := sub.NextMsg(10 * time.Second)
		if err != nil {
			t.Fatalf("next message: %v", err)
		}
		if string(msg.Data) == "sentinel" {
			return out
		}
		out = append(out, msg)
	}
}

// subscribeAvailable subscribes to the fixture's wake-up subject, the
// subscription registered with the server before it returns.
func (f fixture) subscribeAvailable(t *testing.T) *nats.Subscription {
	t.Helper()
	sub, err := f.nc.SubscribeSync(f.subjects.JobsAvailable())
	if err != nil {
		t.Fatal(err)
	}
	if err := f.nc.Flush(); err != nil {
		t.Fatal(err)
	}
	return sub
}

// emptyWakeups fails unless msgs are n wake-ups with empty bodies.
func emptyWakeups(t *testing.T, msgs []*nats.Msg, n int) {
	t.Helper()
	if len(msgs) != n {
		t.Fatalf("wake-up messages = %d, want %d", len(msgs), n)
	}
	for _, msg := range msgs {
		if len(msg.Data) != 0 {
			t.Fatalf("wake-up body = %q, want empty", msg.Data)
		}
	}
}

func TestAvailableRowsCoalesceIntoOneWakeupPerBatch(t *testing.T) {
	t.Parallel()
	f := newFixture(t, "")
	sub := f.subscribeAvailable(t)
	m := metrics.NewOutbox(nil)
	r := f.relay(t, m, Options{BatchSize: 4})
	f.insert(t, available(10)...)

	if got, _ := drain(t, r); got != 3 {
		t.Fatalf("batches = %d, want 3 (4+4+2 rows)", got)
	}
	sentinel(t, f.nc, f.subjects.JobsAvailable())
	emptyWakeups(t, collect(t, sub), 3) // one per batch
	if n := f.count(t, "true"); n != 0 {
		t.Fatalf("outbox rows left = %d, want 0", n)
	}
	if got := testutil.ToFloat64(m.Published.WithLabelValues(metrics.OutboxKindAvailable, metrics.OutboxPublished)); got != 10 {
		t.Fatalf("published available rows = %v, want 10", got)
	}
}

func TestLeaseRevokedRowsDeliverTheJobID(t *testing.T) {
	t.Parallel()
	f := newFixture(t, "")
	em := metrics.NewEvents(nil)
	got := make(chan uuid.UUID, 10)
	sub, err := events.SubscribeRevocations(f.nc, f.subjects.Prefix(), em, func(id uuid.UUID) { got <- id })
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = sub.Unsubscribe() }()
	if err := f.nc.Flush(); err != nil {
		t.Fatal(err)
	}
	a, b := uuid.New(), uuid.New()
	f.insert(t,
		outboxRow{kind: metrics.OutboxKindRevoked, jobID: a, status: "CANCELLED"},
		outboxRow{kind: metrics.OutboxKindRevoked, jobID: b, status: "CANCELLED"})
	r := f.relay(t, nil, Options{})
	if n, err := r.RunOnce(t.Context()); err != nil || n != 2 {
		t.Fatalf("run once = %d, %v; want 2, nil", n, err)
	}
	// A malformed revocation is ignored and counted.
	sentinelID := uuid.New()
	if err := f.nc.Publish(f.subjects.JobsRevoked(), []byte("not-a-uuid")); err != nil {
		t.Fatal(err)
	}
	if err := f.nc.Publish(f.subjects.JobsRevoked(), []byte(sentinelID.String())); err != nil {
		t.Fatal(err)
	}
	seen := map[uuid.UUID]bool{}
	for len(seen) < 3 {
		select {
		case id := <-got:
			seen[id] = true
		case <-time.After(10 * time.Second):
			t.Fatalf("revocations received: %v", seen)
		}
	}
	if !seen[a] || !seen[b] || !seen[sentinelID] {
		t.Fatalf("revocations received: %v, want %s and %s", seen, a, b)
	}
	if n := testutil.ToFloat64(em.Malformed.WithLabelValues(metrics.WakeupRevoked)); n != 1 {
		t.Fatalf("malformed revocations = %v, want 1", n)
	}
}

func TestLifecycleEventsReachJetStreamAsCloudEvents(t *testing.T) {
	t.Parallel()
	f := newFixture(t, "")
	ids := f.insert(t,
		lifecycle("SUCCEEDED", ""),
		lifecycle("FAILED", "etl_record_invalid"),
		lifecycle("CANCELLED", "etl_job_cancelled_by_owner"))
	r := f.relay(t, nil, Options{})
	if n, err := r.RunOnce(t.Context()); err != nil || n != 3 {
		t.Fatalf("run once = %d, %v; want 3, nil", n, err)
	}
	st, err := f.js.Stream(t.Context(), f.subjects.LifecycleStream())
	if err != nil {
		t.Fatal(err)
	}
	info := st.CachedInfo()
	if info.Config.MaxAge != events.LifecycleMaxAge || info.Config.Duplicates != events.LifecycleDuplicateWindow ||
		info.Config.Storage != jetstream.FileStorage || info.Config.Retention != jetstream.LimitsPolicy {
		t.Fatalf("stream config = %+v", info.Config)
	}
	want := []struct{ status, failure, cancellation string }{
		{"SUCCEEDED", "", ""},
		{"FAILED", "etl_record_invalid", ""},
		{"CANCELLED", "", "etl_job_cancelled_by_owner"},
	}
	for i, w := range want {
		msg, err := st.GetMsg(t.Context(), uint64(i+1))
		if err != nil {
			t.Fatalf("get message %d: %v", i+1, err)
		}
		if msg.Subject != f.subjects.Prefix()+".lifecycle."+strings.ToLower(w.status) {
			t.Errorf("subject = %s", msg.Subject)
		}
		if got := msg.Header.Get(jetstream.MsgIDHeader); got != strconv.FormatInt(ids[i], 10) {
			t.Errorf("Nats-Msg-Id = %q, want outbox id %d", got, ids[i])
		}
		var env map[string]json.RawMessage
		if err := json.Unmarshal(msg.Data, &env); err != nil {
			t.Fatalf("envelope: %v", err)
		}
		keys := map[string]bool{}
		for k := range env {
			keys[k] = true
		}
		for _, k := range []string{"specversion", "id", "source", "type", "time", "datacontenttype", "data"} {
			if !keys[k] {
				t.Errorf("envelope lacks %q", k)
			}
			delete(keys, k)
		}
		if len(keys) != 0 {
			t.Errorf("envelope has extra attributes %v", keys)
		}
		var ce events.CloudEvent
		if err := json.Unmarshal(msg.Data, &ce); err != nil {
			t.Fatal(err)
		}
		if ce.SpecVersion != "1.0" || ce.ID != strconv.FormatInt(ids[i], 10) || ce.Source != events.DefaultSource ||
			ce.Type != "io.mightyetl.job."+strings.ToLower(w.status) || ce.DataContentType != "application/json" ||
			ce.Time.IsZero() {
			t.Errorf("envelope = %+v", ce)
		}
		var data map[string]any
		if err := json.Unmarshal(env["data"], &data); err != nil {
			t.Fatal(err)
		}
		allowed := map[string]bool{"jobRecordId": true, "jobStatus": true, "attemptCount": true, "failureCode": true, "cancellationCode": true}
		for k := range data {
			if !allowed[k] {
				t.Errorf("data has unexpected field %q (payload-free envelope)", k)
			}
		}
		if ce.Data.JobStatus != w.status || ce.Data.FailureCode != w.failure || ce.Data.CancellationCode != w.cancellation || ce.Data.AttemptCount != 1 {
			t.Errorf("data = %+v", ce.Data)
		}
	}
	if n := f.count(t, "true"); n != 0 {
		t.Fatalf("outbox rows left = %d, want 0", n)
	}
}

func TestCrashBetweenPublishAndDeleteRepublishesAndStreamDeduplicates(t *testing.T) {
	t.Parallel()
	f := newFixture(t, "")
	m := metrics.NewOutbox(nil)
	r := f.relay(t, m, Options{})
	f.insert(t, lifecycle("SUCCEEDED", ""), lifecycle("FAILED", "etl_record_invalid"))

	crash := errors.New("relay died before commit")
	r.beforeCommit = func() error { return crash }
	if _, err := r.RunOnce(t.Context()); !errors.Is(err, crash) {
		t.Fatalf("run once = %v, want the simulated crash", err)
	}
	if n := f.count(t, "true"); n != 2 {
		t.Fatalf("outbox rows after crash = %d, want 2 (nothing lost)", n)
	}
	r.beforeCommit = nil
	if n, err := r.RunOnce(t.Context()); err != nil || n != 2 {
		t.Fatalf("run once after restart = %d, %v; want 2, nil", n, err)
	}
	if got := testutil.ToFloat64(m.Published.WithLabelValues(metrics.OutboxKindLifecycle, metrics.OutboxPublished)); got != 4 {
		t.Fatalf("lifecycle publishes = %v, want 4 (each event twice)", got)
	}
	if got := f.streamMsgs(t); got != 2 {
		t.Fatalf("stream messages = %d, want 2 (duplicates dropped by Nats-Msg-Id)", got)
	}
	if n := f.count(t, "true"); n != 0 {
		t.Fatalf("outbox rows left = %d, want 0", n)
	}
}

func TestTwoRelaysPublishEachRowOnce(t *testing.T) {
	t.Parallel()
	f := newFixture(t, "")
	const n = 300
	rows := available(n)
	for i := 0; i < n; i++ {
		rows = append(rows, lifecycle("SUCCEEDED", ""))
	}
	f.insert(t, rows...)
	m1, m2 := metrics.NewOutbox(nil), metrics.NewOutbox(nil)
	r1 := f.relay(t, m1, Options{BatchSize: 7})
	r2 := f.relay(t, m2, Options{BatchSize: 7})

	// Both relays race over the same rows from the same start.
	start := make(chan struct{})
	var wg sync.WaitGroup
	totals := make([]int, 2)
	errs := make([]error, 2)
	for i, r := range []*Relay{r1, r2} {
		wg.Add(1)
		go func() {
			defer wg.Done()
			<-start
			for {
				p, err := r.RunOnce(context.Background())
				if err != nil {
					errs[i] = err
					return
				}
				if p == 0 {
					return
				}
				totals[i] += p
			}
		}()
	}
	close(start)
	wg.Wait()
	for _, err := range errs {
		if err != nil {
			t.Fatal(err)
		}
	}
	// A relay may see an empty batch while the other still holds rows; finish up.
	_, rest := drain(t, r1)
	totals[0] += rest
	if got := totals[0] + totals[1]; got != 2*n {
		t.Fatalf("rows published = %d (%v), want %d: each row exactly once", got, totals, 2*n)
	}
	lc := testutil.ToFloat64(m1.Published.WithLabelValues(metrics.OutboxKindLifecycle, metrics.OutboxPublished)) +
		testutil.ToFloat64(m2.Published.WithLabelValues(metrics.OutboxKindLifecycle, metrics.OutboxPublished))
	if lc != n {
		t.Fatalf("lifecycle publishes = %v, want %d", lc, n)
	}
	if got := f.streamMsgs(t); got != n {
		t.Fatalf("stream messages = %d, want %d", got, n)
	}
	if left := f.count(t, "true"); left != 0 {
		t.Fatalf("outbox rows left = %d", left)
	}
}

func TestNotifyWakesTheRelayLongBeforeThePoll(t *testing.T) {
	t.Parallel()
	f := newFixture(t, "")
	sub := f.subscribeAvailable(t)
	m := metrics.NewOutbox(nil)
	r := f.relay(t, m, Options{PollInterval: 30 * time.Second})
	f.start(t, r)
	notified := func() float64 { return testutil.ToFloat64(m.Wakeups.WithLabelValues(metrics.WakeNotify)) }
	// The listener signals once when LISTEN is established.
	testwait.For(t, 10*time.Second, "LISTEN established", func() bool { return notified() >= 1 })
	before := notified()

	pgtest.InsertJobs(t, f.pool, pg.NewJob{})
	// Far less than the 30s poll: only the notification can explain it.
	if _, err := sub.NextMsg(10 * time.Second); err != nil {
		t.Fatalf("no wake-up before the poll interval: %v", err)
	}
	if notified() <= before {
		t.Fatalf("wake-up published without a notification")
	}
}

func TestNATSOutageKeepsLifecycleRowsDropsAdvisoryAndDrainsAfterRestart(t *testing.T) {
	t.Parallel()
	srv := natstest.StartServer(t)
	f := newFixture(t, srv.URL())
	m := metrics.NewOutbox(nil)
	r := f.relay(t, m, Options{PollInterval: 50 * time.Millisecond})
	f.start(t, r)

	// Healthy: the stream exists and one event is in it.
	f.insert(t, lifecycle("SUCCEEDED", ""))
	testwait.For(t, 10*time.Second, "first event published", func() bool { return f.count(t, "true") == 0 })

	srv.Stop()
	testwait.For(t, 10*time.Second, "client sees the outage", func() bool { return !f.nc.IsConnected() })
	lifecycleIDs := f.insert(t, lifecycle("SUCCEEDED", ""), lifecycle("FAILED", "etl_record_invalid"), lifecycle("CANCELLED", "etl_job_cancelled_by_owner"))
	rows := append(available(5), outboxRow{kind: metrics.OutboxKindRevoked, status: "CANCELLED"})
	f.insert(t, rows...)

	dropped := func() float64 {
		return testutil.ToFloat64(m.Published.WithLabelValues(metrics.OutboxKindAvailable, metrics.OutboxDropped)) +
			testutil.ToFloat64(m.Published.WithLabelValues(metrics.OutboxKindRevoked, metrics.OutboxDropped))
	}
	testwait.For(t, 10*time.Second, "advisory rows dropped", func() bool { return dropped() == 6 })
	// The counter moves before the batch commits its delete: wait for the rows.
	testwait.For(t, 10*time.Second, "dropped advisory rows deleted", func() bool {
		return f.count(t, "event_kind <> 'job_lifecycle'") == 0
	})
	// The relay keeps running through the outage: more polls happen, and the
	// lifecycle rows stay put.
	polls := testutil.ToFloat64(m.Wakeups.WithLabelValues(metrics.WakePoll))
	testwait.For(t, 10*time.Second, "relay keeps polling", func() bool {
		return testutil.ToFloat64(m.Wakeups.WithLabelValues(metrics.WakePoll)) >= polls+3
	})
	if n := f.count(t, "event_kind = 'job_lifecycle'"); n != len(lifecycleIDs) {
		t.Fatalf("lifecycle rows during outage = %d, want %d (never dropped)", n, len(lifecycleIDs))
	}
	testwait.For(t, 10*time.Second, "backlog gauge shows the kept rows", func() bool {
		return testutil.ToFloat64(m.Backlog) == float64(len(lifecycleIDs))
	})

	srv.Start()
	testwait.For(t, 30*time.Second, "backlog drained after NATS came back", func() bool { return f.count(t, "true") == 0 })
	if got := f.streamMsgs(t); got != 1+uint64(len(lifecycleIDs)) {
		t.Fatalf("stream messages = %d, want %d", got, 1+len(lifecycleIDs))
	}
}

// TestStartStopContract runs the shared start/stop stress test against real
// relays (each with its LISTEN connection, loop and a live NATS connection).
// Against the hand-written Start/Stop it replaced, its StopBeforeStart case
// failed: a Stop before Start did not stop a later Start, so a process told
// to stop while still starting went on to run a relay nobody would stop.
func TestStartStopContract(t *testing.T) {
	t.Parallel()
	f := newFixture(t, "")
	startstoptest.Stress(t, func(t *testing.T) startstop.Service { return f.relay(t, nil, Options{}) }, 20*time.Second)
	if _, err := New(f.pool, f.nc, "bad prefix", nil, nil, Options{}); !errors.Is(err, events.ErrInvalidPrefix) {
		t.Fatalf("bad prefix = %v", err)
	}
}

// TestFailedStartCheckLeavesTheRelayStopped: a relay whose start-up check
// fails runs nothing, and Stop returns at once.
func TestFailedStartCheckLeavesTheRelayStopped(t *testing.T) {
	t.Parallel()
	f := newFixture(t, "")
	r := f.relay(t, nil, Options{})
	ended, cancel := context.WithCancel(t.Context())
	cancel()
	if err := r.Start(ended); err == nil {
		t.Fatal("Start with an ended context passed its start-up check")
	}
	if err := r.Stop(t.Context()); err != nil {
		t.Fatalf("Stop after a failed Start: %v", err)
	}
	if err := r.Start(t.Context()); !errors.Is(err, startstop.ErrStopped) {
		t.Fatalf("Start after a failed Start and Stop = %v, want ErrStopped", err)
	}
}

// insertGroup writes one group lifecycle row (migration 00006) for jobs and
// returns its id.
func (f fixture) insertGroup(t *testing.T, status string, jobs []uuid.UUID) int64 {
	t.Helper()
	attempts := make([]int32, len(jobs))
	for i := range attempts {
		attempts[i] = int32(i%3 + 1)
	}
	var id int64
	if err := f.pool.QueryRow(t.Context(), `
		INSERT INTO etl_outbox_events (event_kind, job_status, job_record_ids, attempt_counts)
		VALUES ('job_lifecycle', $1, $2, $3) RETURNING outbox_event_id`, status, jobs, attempts).Scan(&id); err != nil {
		t.Fatalf("insert group row: %v", err)
	}
	return id
}

// streamEvents reads every message of the lifecycle stream as CloudEvents,
// with their Nats-Msg-Id.
func (f fixture) streamEvents(t *testing.T) (ces []events.CloudEvent, msgIDs []string) {
	t.Helper()
	st, err := f.js.Stream(t.Context(), f.subjects.LifecycleStream())
	if err != nil {
		t.Fatal(err)
	}
	info, err := st.Info(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	for seq := info.State.FirstSeq; seq <= info.State.LastSeq && info.State.Msgs > 0; seq++ {
		msg, err := st.GetMsg(t.Context(), seq)
		if err != nil {
			t.Fatalf("get message %d: %v", seq, err)
		}
		var ce events.CloudEvent
		if err := json.Unmarshal(msg.Data, &ce); err != nil {
			t.Fatal(err)
		}
		ces = append(ces, ce)
		msgIDs = append(msgIDs, msg.Header.Get(jetstream.MsgIDHeader))
	}
	return ces, msgIDs
}

// A group row becomes exactly one CloudEvent per job, in array order, each
// with the stable id "<row id>-<member>" as event id and Nats-Msg-Id; after a
// crash between publish and delete the same ids go out again and the stream
// keeps one copy of each.
func TestGroupRowBecomesOneEventPerJobWithStableIDsAcrossACrash(t *testing.T) {
	t.Parallel()
	f := newFixture(t, "")
	m := metrics.NewOutbox(nil)
	r := f.relay(t, m, Options{})
	jobs := make([]uuid.UUID, 5)
	for i := range jobs {
		jobs[i] = uuid.New()
	}
	plain := f.insert(t, lifecycle("FAILED", "etl_record_invalid"))[0]
	group := f.insertGroup(t, "SUCCEEDED", jobs)

	crash := errors.New("relay died before commit")
	r.beforeCommit = func() error { return crash }
	if _, err := r.RunOnce(t.Context()); !errors.Is(err, crash) {
		t.Fatalf("run once = %v, want the simulated crash", err)
	}
	if n := f.count(t, "true"); n != 2 {
		t.Fatalf("outbox rows after crash = %d, want 2", n)
	}
	r.beforeCommit = nil
	if n, err := r.RunOnce(t.Context()); err != nil || n != 6 {
		t.Fatalf("run once after restart = %d, %v; want 6 events, nil", n, err)
	}
	if n := f.count(t, "true"); n != 0 {
		t.Fatalf("outbox rows left = %d, want 0", n)
	}
	if got := testutil.ToFloat64(m.Published.WithLabelValues(metrics.OutboxKindLifecycle, metrics.OutboxPublished)); got != 12 {
		t.Fatalf("lifecycle publishes = %v, want 12 (each event twice)", got)
	}
	ces, msgIDs := f.streamEvents(t)
	if len(ces) != 6 {
		t.Fatalf("stream events = %d, want 6 (copies dropped by Nats-Msg-Id)", len(ces))
	}
	wantIDs := []string{strconv.FormatInt(plain, 10)}
	for i := range jobs {
		wantIDs = append(wantIDs, strconv.FormatInt(group, 10)+"-"+strconv.Itoa(i))
	}
	for i, ce := range ces {
		if ce.ID != wantIDs[i] || msgIDs[i] != wantIDs[i] {
			t.Errorf("event %d: id %q, Nats-Msg-Id %q, want %q", i, ce.ID, msgIDs[i], wantIDs[i])
		}
		if i == 0 {
			continue
		}
		if ce.Data.JobRecordID != jobs[i-1] || ce.Data.JobStatus != "SUCCEEDED" || ce.Data.AttemptCount != (i-1)%3+1 ||
			ce.Type != "io.mightyetl.job.succeeded" {
			t.Errorf("event %d: %+v", i, ce)
		}
	}
}

// The relay caps the events of one batch at BatchSize (always at least one
// row), leaving the other rows for the next batch, and a malformed group row
// is discarded without blocking the rest.
func TestGroupRowsRespectTheBatchSizeAndMalformedGroupsAreDropped(t *testing.T) {
	t.Parallel()
	f := newFixture(t, "")
	r := f.relay(t, nil, Options{BatchSize: 4})
	for range 3 {
		f.insertGroup(t, "SUCCEEDED", []uuid.UUID{uuid.New(), uuid.New(), uuid.New()})
	}
	big := make([]uuid.UUID, 10)
	for i := range big {
		big[i] = uuid.New()
	}
	f.insertGroup(t, "SUCCEEDED", big)
	// A row no mightyETL statement writes: the status is not a subject token.
	if _, err := f.pool.Exec(t.Context(), `INSERT INTO etl_outbox_events (event_kind, job_status, job_record_ids, attempt_counts)
		VALUES ('job_lifecycle', 'BAD.STATUS', ARRAY[gen_random_uuid()], ARRAY[1])`); err != nil {
		t.Fatal(err)
	}
	var perBatch []int
	for {
		n, err := r.RunOnce(t.Context())
		if err != nil {
			t.Fatal(err)
		}
		if n == 0 && f.count(t, "true") == 0 {
			break
		}
		perBatch = append(perBatch, n)
		if len(perBatch) > 10 {
			t.Fatalf("relay did not drain: batches %v", perBatch)
		}
	}
	// 3 (one group of 3; a second would exceed 4), 3, 3, 10 (a lone group
	// larger than the cap still goes); the last batch publishes nothing and
	// drops the malformed row, which ends the loop with an empty outbox.
	if want := []int{3, 3, 3, 10}; !slices.Equal(perBatch, want) {
		t.Fatalf("events per batch %v, want %v", perBatch, want)
	}
	if got := f.streamMsgs(t); got != 19 {
		t.Fatalf("stream messages = %d, want 19", got)
	}
}

// A real finish group written by lease.Succeed is one outbox row whose
// members are exactly the jobs that won, readable per job through the
// etl_outbox_job_events view.
func TestSucceedWritesOneGroupRowPerFinishGroup(t *testing.T) {
	t.Parallel()
	f := newFixture(t, "")
	ctx := t.Context()
	pgtest.InsertN(t, f.pool, 4, pg.NewJob{Kind: pg.KindDiagnostic, Payload: "{}"})
	if _, err := f.pool.Exec(ctx, `DELETE FROM etl_outbox_events`); err != nil {
		t.Fatal(err)
	}
	res, err := lease.ClaimJobs(ctx, f.pool, lease.ClaimParams{OwnerID: "worker-group-1", Limit: 4, LeaseDuration: time.Minute})
	if err != nil || len(res.Claimed) != 4 {
		t.Fatalf("claim: %v %d", err, len(res.Claimed))
	}
	refs := []lease.Ref{res.Claimed[0].Ref, res.Claimed[1].Ref, res.Claimed[2].Ref}
	// The third claim is stale: it must not appear in the group.
	stale := refs[2]
	stale.ClaimID = uuid.New()
	refs[2] = stale
	won, err := lease.Succeed(ctx, f.pool, "worker-group-1", refs)
	if err != nil || len(won) != 2 {
		t.Fatalf("succeed: %v, won %d, want 2", err, len(won))
	}
	if n := f.count(t, "true"); n != 1 {
		t.Fatalf("outbox rows = %d, want 1 group row", n)
	}
	rows, err := f.pool.Query(ctx, `SELECT event_id, job_record_id, job_status, attempt_count FROM etl_outbox_job_events ORDER BY event_id`)
	if err != nil {
		t.Fatal(err)
	}
	type ev struct {
		id     string
		job    uuid.UUID
		status string
		att    int
	}
	got, err := pgx.CollectRows(rows, func(r pgx.CollectableRow) (ev, error) {
		var e ev
		return e, r.Scan(&e.id, &e.job, &e.status, &e.att)
	})
	if err != nil {
		t.Fatal(err)
	}
	wonIDs := map[uuid.UUID]bool{won[0].JobID: true, won[1].JobID: true}
	if len(got) != 2 || !wonIDs[got[0].job] || !wonIDs[got[1].job] || got[0].job == got[1].job {
		t.Fatalf("group events %+v, want the two winners", got)
	}
	for i, e := range got {
		if !strings.HasSuffix(e.id, "-"+strconv.Itoa(i)) || e.status != "SUCCEEDED" || e.att != 1 {
			t.Errorf("event %+v", e)
		}
	}
	// A group that wins nothing writes no row.
	if won, err := lease.Succeed(ctx, f.pool, "worker-group-1", []lease.Ref{stale}); err != nil || len(won) != 0 {
		t.Fatalf("succeed stale: %v %d", err, len(won))
	}
	if n := f.count(t, "true"); n != 1 {
		t.Fatalf("outbox rows = %d after an all-stale finish, want still 1", n)
	}
}

// TestAnnounceAvailablePublishesTheWakeupWithoutARow: the direct
// announcement is the same empty message on the same subject as a relayed
// job_available row, counted the same way; it touches no outbox row, and
// with the connection closed it is dropped (counted), never queued.
func TestAnnounceAvailablePublishesTheWakeupWithoutARow(t *testing.T) {
	t.Parallel()
	f := newFixture(t, "")
	sub := f.subscribeAvailable(t)
	m := metrics.NewOutbox(nil)
	r := f.relay(t, m, Options{})
	r.AnnounceAvailable()
	r.AnnounceAvailable()
	sentinel(t, f.nc, f.subjects.JobsAvailable())
	emptyWakeups(t, collect(t, sub), 2)
	if got := testutil.ToFloat64(m.Published.WithLabelValues(metrics.OutboxKindAvailable, metrics.OutboxPublished)); got != 2 {
		t.Fatalf("published = %v, want 2", got)
	}
	if n := f.count(t, "true"); n != 0 {
		t.Fatalf("outbox rows = %d, want 0", n)
	}
	f.nc.Close()
	r.AnnounceAvailable()
	if got := testutil.ToFloat64(m.Published.WithLabelValues(metrics.OutboxKindAvailable, metrics.OutboxDropped)); got != 1 {
		t.Fatalf("dropped = %v, want 1", got)
	}
}
