package natsbridge_test

import (
	"context"
	"encoding/json"
	"errors"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/prometheus/client_golang/prometheus"
	"go.uber.org/goleak"

	"github.com/mightyetl/mightyetl/internal/events"
	"github.com/mightyetl/mightyetl/internal/intake"
	"github.com/mightyetl/mightyetl/internal/natsbridge"
	"github.com/mightyetl/mightyetl/internal/natstest"
	"github.com/mightyetl/mightyetl/internal/outbox"
	"github.com/mightyetl/mightyetl/internal/pg"
	"github.com/mightyetl/mightyetl/internal/pgtest"
	"github.com/mightyetl/mightyetl/internal/testwait"
)

func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m, goleak.IgnoreTopFunction("github.com/jackc/pgx/v5/pgxpool.(*Pool).backgroundHealthCheck"))
}

const hashKey = "0123456789abcdef0123456789abcdef-test"

func service(t *testing.T, pool *pgxpool.Pool) *intake.Service {
	t.Helper()
	svc, err := intake.New(intake.Options{DB: pool, PrincipalHashKey: []byte(hashKey), MaxBatchRecords: 10})
	if err != nil {
		t.Fatal(err)
	}
	if err := svc.Start(context.Background()); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = svc.Stop(context.Background()) })
	return svc
}

func jobs(t *testing.T, pool *pgxpool.Pool) int {
	t.Helper()
	var n int
	if err := pool.QueryRow(context.Background(), `SELECT count(*) FROM etl_job_records`).Scan(&n); err != nil {
		t.Fatal(err)
	}
	return n
}

func publish(t *testing.T, js jetstream.JetStream, subject, key, body string, header ...string) {
	t.Helper()
	msg := nats.NewMsg(subject)
	msg.Data = []byte(body)
	if key != "" {
		msg.Header.Set(events.IdempotencyKeyHeader, key)
	}
	for i := 0; i+1 < len(header); i += 2 {
		msg.Header.Set(header[i], header[i+1])
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if _, err := js.PublishMsg(ctx, msg); err != nil {
		t.Fatal(err)
	}
}

// The real request consumer in front of the real intake: duplicates make one
// job, poison messages are terminated with a payload-free rejection and make
// no job, and a reply subject gets the job representation.
func TestRequestConsumerWithRealIntake(t *testing.T) {
	t.Parallel()
	b := setup(t)
	pool, url, prefix, nc, js := b.pool, b.url, b.prefix, b.nc, b.js
	rejections := make(chan events.Rejection, 16)
	sub, err := nc.Subscribe(prefix+".rejections", func(m *nats.Msg) {
		var r events.Rejection
		if json.Unmarshal(m.Data, &r) == nil {
			rejections <- r
		}
	})
	if err != nil {
		t.Fatal(err)
	}
	defer sub.Unsubscribe()
	startRequestBridge(t, pool, js, url, prefix, "bridge-test")
	subject := prefix + ".requests.alice"

	// Duplicates (same key, same body) converge on one job: JetStream
	// deduplicates nothing (requests carry no Nats-Msg-Id), the database
	// decides.
	publish(t, js, subject, "nats-key-0000000001", `[{"id":"a1","name":"jane"}]`)
	testwait.For(t, 30*time.Second, "first job", func() bool { return jobs(t, pool) == 1 })
	inbox := events.NewReplyInbox("alice")
	replies, err := nc.SubscribeSync(inbox)
	if err != nil {
		t.Fatal(err)
	}
	publish(t, js, subject, "nats-key-0000000001", `[{"id":"a1","name":"jane"}]`, events.ReplyToHeader, inbox)
	reply, err := replies.NextMsg(30 * time.Second)
	if err != nil {
		t.Fatal(err)
	}
	var rep intake.RequestReply
	if err := json.Unmarshal(reply.Data, &rep); err != nil || rep.JobRecordID == "" || !rep.Replayed || rep.JobStatus != "PENDING" {
		t.Fatalf("reply %s: %v", reply.Data, err)
	}
	if n := jobs(t, pool); n != 1 {
		t.Fatalf("duplicate made %d jobs", n)
	}

	// Poison messages: terminated, one rejection each with the problem code, no job.
	poison := []struct{ key, body, code string }{
		{"nats-key-0000000002", `not json`, "etl_invalid_json"},
		{"short", `[{"id":"x"}]`, "etl_invalid_idempotency_key"},
		{"nats-key-0000000003", `[{"id":"  padded  "}]`, "etl_invalid_record"},
		{"nats-key-0000000004", `[{"id":"1"},{"id":"2"},{"id":"3"},{"id":"4"},{"id":"5"},{"id":"6"},{"id":"7"},{"id":"8"},{"id":"9"},{"id":"10"},{"id":"11"}]`, "etl_batch_too_large"},
		{"nats-key-0000000001", `[{"id":"other body"}]`, "etl_job_submission_key_reused"},
	}
	for _, p := range poison {
		publish(t, js, subject, p.key, p.body)
		select {
		case r := <-rejections:
			if r.ErrorCode != p.code {
				t.Fatalf("rejection %q, want %q", r.ErrorCode, p.code)
			}
		case <-time.After(30 * time.Second):
			t.Fatalf("no rejection for %s", p.code)
		}
	}
	if n := jobs(t, pool); n != 1 {
		t.Fatalf("poison messages made jobs: %d", n)
	}
	// Terminated, not redelivered: the work-queue stream is empty.
	testwait.For(t, 30*time.Second, "stream drained", func() bool {
		s, err := js.Stream(context.Background(), strings.ToUpper(prefix)+"_REQUESTS")
		if err != nil {
			return false
		}
		info, err := s.Info(context.Background())
		return err == nil && info.State.Msgs == 0
	})
}

// crashAfterCommit commits the job through the real intake and then fails
// as if the process died before the ack: the message is redelivered.
type crashAfterCommit struct {
	inner   intake.NATSRequests
	crashed atomic.Int32
}

func (c *crashAfterCommit) HandleRequest(ctx context.Context, req events.Request) ([]byte, string, error) {
	reply, code, err := c.inner.HandleRequest(ctx, intake.NATSRequest(req))
	if err == nil && code == "" && c.crashed.CompareAndSwap(0, 1) {
		return nil, "", errors.New("simulated crash between commit and ack")
	}
	return reply, code, err
}

// Ack happens only after commit; a message whose handler committed but was
// not acked comes back and converges on the same job.
func TestRedeliveryAfterCommitConverges(t *testing.T) {
	t.Parallel()
	b := setup(t)
	pool, prefix, nc, js := b.pool, b.prefix, b.nc, b.js
	h := &crashAfterCommit{inner: intake.NATSRequests{Service: service(t, pool)}}
	c, err := events.NewRequestConsumer(nc, prefix, h, nil, nil, events.RequestConsumerOptions{RetryDelay: 50 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	if err := c.Start(context.Background()); err != nil {
		t.Fatal(err)
	}
	defer c.Stop(context.Background())
	testwait.For(t, 30*time.Second, "request stream", func() bool {
		_, err := js.Stream(context.Background(), strings.ToUpper(prefix)+"_REQUESTS")
		return err == nil
	})
	publish(t, js, prefix+".requests.bob", "nats-key-redelivery-1", `[{"id":"r1"}]`)
	testwait.For(t, 30*time.Second, "redelivered and acked", func() bool {
		s, err := js.Stream(context.Background(), strings.ToUpper(prefix)+"_REQUESTS")
		if err != nil {
			return false
		}
		info, err := s.Info(context.Background())
		return err == nil && info.State.Msgs == 0 && h.crashed.Load() == 1
	})
	if n := jobs(t, pool); n != 1 {
		t.Fatalf("redelivery made %d jobs, want 1", n)
	}
}

// startRequestBridge starts a bridge with the request consumer on prefix,
// stopped when the test ends, and waits until its request stream exists.
// bundle is what a bridge test starts from: its own database, the shared
// NATS server under a prefix of its own, a connection and JetStream on it.
type bundle struct {
	pool   *pgxpool.Pool
	url    string
	prefix string
	nc     *nats.Conn
	js     jetstream.JetStream
}

func setup(t *testing.T) bundle {
	t.Helper()
	pool, _ := pgtest.NewDatabase(t)
	url := natstest.URL(t)
	nc := natstest.Connect(t, url)
	js, err := jetstream.New(nc)
	if err != nil {
		t.Fatal(err)
	}
	return bundle{pool: pool, url: url, prefix: natstest.Prefix(t), nc: nc, js: js}
}

func startRequestBridge(t *testing.T, pool *pgxpool.Pool, js jetstream.JetStream, url, prefix, name string) {
	t.Helper()
	b := natsbridge.New(natsbridge.Options{
		Conn: events.Options{URL: url, Name: name}, SubjectPrefix: prefix, ConsumeRequests: true,
		Relay: outbox.Options{PollInterval: time.Second, BatchSize: 100}, Requests: events.RequestConsumerOptions{MaxRequestBytes: 64 << 10},
		Pool: pool, Service: service(t, pool),
		Registry: prometheus.NewRegistry(),
	})
	if err := b.Start(context.Background()); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { b.Stop(context.Background()) })
	testwait.For(t, 30*time.Second, "request stream", func() bool {
		_, err := js.Stream(context.Background(), strings.ToUpper(prefix)+"_REQUESTS")
		return err == nil
	})
}

// TestRelayWokenByItsProcess: while the bridge runs, the intake's commits
// wake its relay directly (the poll is an hour, so only a wake-up can
// publish the job_available message); once the bridge stopped, they NOTIFY
// the outbox channel again for the relays of other processes.
func TestRelayWokenByItsProcess(t *testing.T) {
	t.Parallel()
	b := setup(t)
	ctx := context.Background()
	svc := service(t, b.pool)
	available, err := b.nc.SubscribeSync(b.prefix + ".jobs.available")
	if err != nil {
		t.Fatal(err)
	}
	defer available.Unsubscribe()
	if err := b.nc.Flush(); err != nil {
		t.Fatal(err)
	}
	bridge := natsbridge.New(natsbridge.Options{
		Conn: events.Options{URL: b.url, Name: "bridge-wake-test"}, SubjectPrefix: b.prefix,
		Relay: outbox.Options{PollInterval: time.Hour, BatchSize: 100},
		Pool:  b.pool, Service: svc, Registry: prometheus.NewRegistry(),
	})
	if err := bridge.Start(ctx); err != nil {
		t.Fatal(err)
	}
	defer bridge.Stop(ctx)
	if _, err := svc.Submit(ctx, intake.SubmitRequest{Principal: "alice", IdempotencyKey: "wake-key-0000000001", Body: []byte(`[{"id":"a"}]`)}); err != nil {
		t.Fatal(err)
	}
	if _, err := available.NextMsg(30 * time.Second); err != nil {
		t.Fatalf("no job_available wake-up: %v", err)
	}
	// The relay's connection announced it: the submission wrote no
	// job_available row for a relay to select and delete.
	availableRows := func() int {
		t.Helper()
		var n int
		if err := b.pool.QueryRow(ctx, `SELECT count(*) FROM etl_outbox_events WHERE event_kind = 'job_available'`).Scan(&n); err != nil {
			t.Fatal(err)
		}
		return n
	}
	if n := availableRows(); n != 0 {
		t.Fatalf("a submission through a running bridge wrote %d job_available rows", n)
	}

	conn, err := b.pool.Acquire(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Release()
	if _, err := conn.Exec(ctx, "LISTEN "+pg.OutboxNotifyChannel); err != nil {
		t.Fatal(err)
	}
	if err := bridge.Stop(ctx); err != nil {
		t.Fatal(err)
	}
	if _, err := svc.Submit(ctx, intake.SubmitRequest{Principal: "alice", IdempotencyKey: "wake-key-0000000002", Body: []byte(`[{"id":"b"}]`)}); err != nil {
		t.Fatal(err)
	}
	wctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	if _, err := conn.Conn().WaitForNotification(wctx); err != nil {
		t.Fatalf("no NOTIFY after the bridge stopped: %v", err)
	}
	// Without the connection, the submission's row is back for the relays
	// of other processes to announce.
	if n := availableRows(); n != 1 {
		t.Fatalf("after the bridge stopped, job_available rows = %d, want 1", n)
	}
}
