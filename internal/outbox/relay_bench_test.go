package outbox

import (
	"log/slog"
	"strconv"
	"testing"
	"time"

	"github.com/mightyetl/mightyetl/internal/events"
	"github.com/mightyetl/mightyetl/internal/natstest"
	"github.com/mightyetl/mightyetl/internal/pgtest"
)

// BenchmarkRelayBatchWhileNATSDown is the cost of one relay batch (one
// wake-up: the whole RunOnce transaction) while NATS is down, with an empty
// outbox and with a 100,000-row lifecycle backlog. While NATS is down the
// relay runs only its advisory batch, which must not walk the lifecycle
// backlog (issue 12, defect 5). docs/performance.md has the figures.
//
//	go test -run '^$' -bench 'RelayBatchWhileNATSDown|BacklogMeasurement' ./internal/outbox/
func BenchmarkRelayBatchWhileNATSDown(b *testing.B) {
	for _, backlog := range []int{0, largeBacklog} {
		b.Run("backlog="+strconv.Itoa(backlog), func(b *testing.B) {
			ctx := b.Context()
			pool, _ := pgtest.NewDatabase(b)
			fillBacklog(b, ctx, pool, backlog, 0)
			if _, err := pool.Exec(ctx, "VACUUM ANALYZE etl_outbox_events"); err != nil {
				b.Fatal(err)
			}
			srv := natstest.StartServer(b)
			nc, err := events.Connect(ctx, events.Options{URL: srv.URL(), Name: "outbox-bench", ReconnectWait: time.Second}, nil, nil)
			if err != nil {
				b.Fatal(err)
			}
			b.Cleanup(nc.Close)
			srv.Stop()
			for deadline := time.Now().Add(10 * time.Second); nc.IsConnected(); time.Sleep(10 * time.Millisecond) {
				if time.Now().After(deadline) {
					b.Fatal("the connection did not notice the outage")
				}
			}
			r, err := New(pool, nc, natstest.Prefix(b), slog.New(slog.DiscardHandler), nil, Options{})
			if err != nil {
				b.Fatal(err)
			}
			for b.Loop() {
				if _, err := r.RunOnce(ctx); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}

// BenchmarkBacklogMeasurement is the cost of one refresh of the backlog
// gauges, with an empty outbox and with a 100,000-row lifecycle backlog.
func BenchmarkBacklogMeasurement(b *testing.B) {
	for _, backlog := range []int{0, largeBacklog} {
		b.Run("backlog="+strconv.Itoa(backlog), func(b *testing.B) {
			ctx := b.Context()
			pool, _ := pgtest.NewDatabase(b)
			fillBacklog(b, ctx, pool, backlog, 0)
			if _, err := pool.Exec(ctx, "VACUUM ANALYZE etl_outbox_events"); err != nil {
				b.Fatal(err)
			}
			for b.Loop() {
				n, _, err := measureBacklog(ctx, pool)
				if err != nil {
					b.Fatal(err)
				}
				if n != int64(backlog) {
					b.Fatalf("measured %d rows, want %d", n, backlog)
				}
			}
		})
	}
}
