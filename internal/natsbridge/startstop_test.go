package natsbridge_test

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/mightyetl/mightyetl/internal/events"
	"github.com/mightyetl/mightyetl/internal/natsbridge"
	"github.com/mightyetl/mightyetl/internal/natstest"
	"github.com/mightyetl/mightyetl/internal/outbox"
	"github.com/mightyetl/mightyetl/internal/pgtest"
	"github.com/mightyetl/mightyetl/internal/startstop"
	"github.com/mightyetl/mightyetl/internal/startstop/startstoptest"
	"github.com/mightyetl/mightyetl/internal/testwait"
)

// TestBridgeStartStop runs the shared start/stop stress test against real
// bridges (connection, relay and request consumer; every round on one
// database and prefix, whose streams natstest.Prefix deletes at the end),
// and against bridges without NATS configured.
func TestBridgeStartStop(t *testing.T) {
	t.Parallel()
	pool, _ := pgtest.NewDatabase(t)
	url := natstest.URL(t)
	prefix := natstest.Prefix(t)
	svc := service(t, pool)
	t.Run("Configured", func(t *testing.T) {
		startstoptest.Stress(t, func(t *testing.T) startstop.Service {
			return natsbridge.New(natsbridge.Options{
				Conn: events.Options{URL: url, Name: "bridge-startstop-test"}, SubjectPrefix: prefix, ConsumeRequests: true,
				Relay: outbox.Options{PollInterval: time.Second, BatchSize: 100}, Requests: events.RequestConsumerOptions{MaxRequestBytes: 64 << 10},
				Pool: pool, Service: svc,
			})
		}, 30*time.Second)
	})
	t.Run("NotConfigured", func(t *testing.T) {
		startstoptest.Stress(t, func(t *testing.T) startstop.Service {
			b := natsbridge.New(natsbridge.Options{Pool: pool, Service: svc})
			if b.Enabled() || b.RelayState() != "not configured" {
				t.Fatalf("bridge without NATS_URL: enabled %v, relay state %q", b.Enabled(), b.RelayState())
			}
			return b
		}, 10*time.Second)
	})
}

// TestBridgeStopKeepsTheConnectionForARequestInFlight: a Stop whose context
// ends while a request is still in its transaction returns ctx.Err(), but
// the connection stays open until the consumer finished, so the request
// commits and is acknowledged (it leaves the work-queue stream). The
// hand-written Stop closed the connection as soon as the consumer's Stop
// returned ctx.Err(), under the request still running: its ack failed and
// the committed request stayed in the stream to be delivered again.
func TestBridgeStopKeepsTheConnectionForARequestInFlight(t *testing.T) {
	t.Parallel()
	pool, _ := pgtest.NewDatabase(t)
	url := natstest.URL(t)
	prefix := natstest.Prefix(t)
	js, err := jetstream.New(natstest.Connect(t, url))
	if err != nil {
		t.Fatal(err)
	}
	b := natsbridge.New(natsbridge.Options{
		Conn: events.Options{URL: url, Name: "bridge-inflight-test"}, SubjectPrefix: prefix, ConsumeRequests: true,
		Relay: outbox.Options{PollInterval: time.Second, BatchSize: 100}, Requests: events.RequestConsumerOptions{MaxRequestBytes: 64 << 10},
		Pool: pool, Service: service(t, pool),
	})
	if err := b.Start(t.Context()); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = b.Stop(context.Background()) })
	stream := strings.ToUpper(prefix) + "_REQUESTS"
	testwait.For(t, 30*time.Second, "request stream", func() bool {
		_, err := js.Stream(t.Context(), stream)
		return err == nil
	})

	// Hold the job table so the request's insert waits inside the intake.
	blocker, err := pool.Begin(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = blocker.Rollback(context.Background()) }()
	if _, err := blocker.Exec(t.Context(), "LOCK TABLE etl_job_records IN ACCESS EXCLUSIVE MODE"); err != nil {
		t.Fatal(err)
	}
	publish(t, js, prefix+".requests.alice", "nats-key-inflight-01", `[{"id":"a1"}]`)
	testwait.For(t, 30*time.Second, "the request waits on the job table", func() bool {
		var n int
		err := pool.QueryRow(t.Context(), `SELECT count(*) FROM pg_locks l JOIN pg_class c ON c.oid = l.relation
			WHERE NOT l.granted AND c.relname = 'etl_job_records'`).Scan(&n)
		return err == nil && n > 0
	})

	ended, cancel := context.WithCancel(context.Background())
	cancel()
	if err := b.Stop(ended); !errors.Is(err, context.Canceled) {
		t.Fatalf("Stop with an ended context while a request runs = %v, want context.Canceled", err)
	}
	if err := blocker.Rollback(t.Context()); err != nil {
		t.Fatal(err)
	}
	testwait.For(t, 30*time.Second, "the request committed and was acknowledged", func() bool {
		s, err := js.Stream(context.Background(), stream)
		if err != nil {
			return false
		}
		info, err := s.Info(context.Background())
		return err == nil && info.State.Msgs == 0
	})
	if n := jobs(t, pool); n != 1 {
		t.Fatalf("jobs %d, want 1", n)
	}
	stopCtx, stopCancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer stopCancel()
	if err := b.Stop(stopCtx); err != nil {
		t.Fatalf("Stop after the request finished: %v", err)
	}
}
