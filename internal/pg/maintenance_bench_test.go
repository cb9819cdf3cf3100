package pg_test

import (
	"context"
	"testing"
	"time"

	"github.com/mightyetl/mightyetl/internal/pg"
	"github.com/mightyetl/mightyetl/internal/pgtest"
)

// BenchmarkPruneOutbox compares one retention pass over 10,000 old outbox
// rows (batches of 1000) unfenced, as `etlctl prune` runs it, and fenced, as
// the elected maintainer runs it (one more statement per batch to set the
// batch's settings and one to fence and extend the term, in each batch's
// transaction). ns/op is one pass; the rows are written again, untimed,
// before each.
func BenchmarkPruneOutbox(b *testing.B) {
	pool, _ := pgtest.NewDatabase(b)
	ctx := context.Background()
	const rows, batch = 10000, 1000
	fill := func() {
		b.StopTimer()
		if _, err := pool.Exec(ctx, `INSERT INTO etl_outbox_events (event_kind, job_record_id, job_status, attempt_count, occurred_at)
			SELECT 'job_lifecycle', gen_random_uuid(), 'SUCCEEDED', 1, clock_timestamp() - interval '40 days'
			FROM generate_series(1, $1::int)`, rows); err != nil {
			b.Fatal(err)
		}
		b.StartTimer()
	}
	term, held, err := pg.TakeLeadership(ctx, pool, testLeader, "bench", time.Hour)
	if err != nil || !held {
		b.Fatal(held, err)
	}
	fenced := pg.FencedPrune{Term: term, TTL: time.Hour, StatementTimeout: time.Minute}
	for _, c := range []struct {
		name  string
		prune func() (int64, error)
	}{
		{"unfenced", func() (int64, error) { return pg.PruneOutbox(ctx, pool, 720*time.Hour, batch) }},
		{"fenced", func() (int64, error) { return fenced.Prune(ctx, pool, pg.PruneKindOutbox, 720*time.Hour, batch) }},
	} {
		b.Run(c.name, func(b *testing.B) {
			for b.Loop() {
				fill()
				if n, err := c.prune(); err != nil || n != rows {
					b.Fatalf("pruned %d, %v", n, err)
				}
			}
		})
	}
}
