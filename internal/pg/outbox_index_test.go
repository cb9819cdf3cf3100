package pg_test

import (
	"context"
	"testing"

	"github.com/mightyetl/mightyetl/internal/pg"
	"github.com/mightyetl/mightyetl/internal/pgtest"
)

// Migration 00008 adds one partial index per class of outbox rows, each on
// exactly the rows of its class (the relay's batch predicates); down drops
// both and keeps the rows.
func TestMigration00008OutboxPendingIndexesAndDown(t *testing.T) {
	t.Parallel()
	pool, _ := pgtest.NewDatabase(t, pgtest.Options{Empty: true})
	ctx := context.Background()
	if err := pg.MigrateTo(ctx, pool, 8); err != nil {
		t.Fatalf("up to 8: %v", err)
	}
	if _, err := pool.Exec(ctx, `
		INSERT INTO etl_outbox_events (event_kind, job_record_id, job_status, attempt_count)
		VALUES ('job_lifecycle', gen_random_uuid(), 'SUCCEEDED', 1),
		       ('job_available', gen_random_uuid(), 'PENDING', 0),
		       ('lease_revoked', gen_random_uuid(), 'CANCELLED', 1),
		       ('job_lifecycle', gen_random_uuid(), 'FAILED', 1)`); err != nil {
		t.Fatal(err)
	}
	validIndexes := func(index string) int {
		t.Helper()
		var n int
		if err := pool.QueryRow(ctx, `
			SELECT count(*) FROM pg_index i JOIN pg_class c ON c.oid = i.indexrelid
			WHERE c.relname = $1 AND i.indisvalid AND i.indisready`, index).Scan(&n); err != nil {
			t.Fatal(err)
		}
		return n
	}
	for _, idx := range []string{"etl_outbox_advisory_pending_index", "etl_outbox_lifecycle_pending_index"} {
		if validIndexes(idx) != 1 {
			t.Fatalf("%s missing or not valid at version 8", idx)
		}
	}
	// Each index holds only its class: its predicate is the relay's WHERE.
	var predicates []string
	rows, err := pool.Query(ctx, `
		SELECT pg_get_expr(i.indpred, i.indrelid) FROM pg_index i JOIN pg_class c ON c.oid = i.indexrelid
		WHERE c.relname IN ('etl_outbox_advisory_pending_index', 'etl_outbox_lifecycle_pending_index')
		ORDER BY c.relname`)
	if err != nil {
		t.Fatal(err)
	}
	for rows.Next() {
		var p string
		if err := rows.Scan(&p); err != nil {
			t.Fatal(err)
		}
		predicates = append(predicates, p)
	}
	if err := rows.Err(); err != nil {
		t.Fatal(err)
	}
	want := []string{
		"(event_kind = ANY (ARRAY['job_available'::text, 'lease_revoked'::text]))",
		"(event_kind = 'job_lifecycle'::text)",
	}
	if len(predicates) != 2 || predicates[0] != want[0] || predicates[1] != want[1] {
		t.Fatalf("index predicates %q, want %q", predicates, want)
	}

	if err := pg.MigrateTo(ctx, pool, 7); err != nil {
		t.Fatalf("down to 7: %v", err)
	}
	for _, idx := range []string{"etl_outbox_advisory_pending_index", "etl_outbox_lifecycle_pending_index"} {
		if validIndexes(idx) != 0 {
			t.Fatalf("%s survived the down migration", idx)
		}
	}
	var n int
	if err := pool.QueryRow(ctx, `SELECT count(*) FROM etl_outbox_events`).Scan(&n); err != nil || n != 4 {
		t.Fatalf("outbox rows after down = %d, %v; want 4", n, err)
	}
	if err := pg.MigrateTo(ctx, pool, 8); err != nil {
		t.Fatalf("up to 8 again: %v", err)
	}
}
