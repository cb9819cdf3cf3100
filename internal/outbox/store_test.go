package outbox

import (
	"context"
	"encoding/json"
	"fmt"
	"strconv"
	"strings"
	"testing"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/mightyetl/mightyetl/internal/pgtest"
)

// largeBacklog is the lifecycle backlog of the work tests and benchmarks:
// what piles up while NATS is down (issue 12, defect 5).
const largeBacklog = 100_000

// fillBacklog inserts lifecycle rows plain lifecycle rows and then
// advisory job_available rows, all in two statements.
func fillBacklog(tb testing.TB, ctx context.Context, db *pgxpool.Pool, lifecycle, advisory int) {
	tb.Helper()
	if _, err := db.Exec(ctx, `
		INSERT INTO etl_outbox_events (event_kind, job_record_id, job_status, attempt_count)
		SELECT 'job_lifecycle', gen_random_uuid(), 'SUCCEEDED', 1 FROM generate_series(1, $1)`, lifecycle); err != nil {
		tb.Fatalf("insert lifecycle backlog: %v", err)
	}
	if _, err := db.Exec(ctx, `
		INSERT INTO etl_outbox_events (event_kind, job_record_id, job_status, attempt_count)
		SELECT 'job_available', gen_random_uuid(), 'PENDING', 0 FROM generate_series(1, $1)`, advisory); err != nil {
		tb.Fatalf("insert advisory rows: %v", err)
	}
}

// work is what one execution of a statement cost the database, read from
// EXPLAIN (ANALYZE, BUFFERS): rows the scans produced or filtered out, and
// shared buffers touched (hit or read; a buffer touched twice counts twice).
type work struct {
	rowsExamined int64
	buffers      int64
	plan         string // node types, outermost first, for failure messages
}

func (w work) String() string {
	return fmt.Sprintf("%d rows examined, %d buffers [%s]", w.rowsExamined, w.buffers, w.plan)
}

// planNode is the part of an EXPLAIN (FORMAT JSON) node the tests read.
type planNode struct {
	NodeType           string     `json:"Node Type"`
	IndexName          string     `json:"Index Name"`
	ActualRows         float64    `json:"Actual Rows"`
	ActualLoops        float64    `json:"Actual Loops"`
	RowsRemovedFilter  float64    `json:"Rows Removed by Filter"`
	RowsRemovedRecheck float64    `json:"Rows Removed by Index Recheck"`
	HeapFetches        float64    `json:"Heap Fetches"`
	SharedHit          int64      `json:"Shared Hit Blocks"`
	SharedRead         int64      `json:"Shared Read Blocks"`
	Plans              []planNode `json:"Plans"`
}

func (n planNode) add(w *work) {
	if strings.Contains(n.NodeType, "Scan") {
		w.rowsExamined += int64(n.ActualRows*n.ActualLoops + n.RowsRemovedFilter + n.RowsRemovedRecheck)
	}
	label := n.NodeType
	if n.IndexName != "" {
		label += " on " + n.IndexName
	}
	if w.plan != "" {
		w.plan += ", "
	}
	w.plan += label
	for _, c := range n.Plans {
		c.add(w)
	}
}

// literal renders an argument of a relay statement as an SQL literal, for
// EXECUTE.
func literal(tb testing.TB, v any) string {
	tb.Helper()
	switch v := v.(type) {
	case int:
		return strconv.Itoa(v)
	case []string:
		quoted := make([]string, len(v))
		for i, s := range v {
			quoted[i] = `"` + s + `"`
		}
		return "'{" + strings.Join(quoted, ",") + "}'"
	default:
		tb.Fatalf("no literal for %T", v)
		return ""
	}
}

// measure runs st exactly as given, as a prepared statement under the plan
// cache mode (force_custom_plan or force_generic_plan: pgx prepares the
// relay's statements, and PostgreSQL may switch a prepared statement to its
// generic plan after five executions), inside a transaction it rolls back
// (the batch statements lock rows), and returns the work it did.
func measure(tb testing.TB, ctx context.Context, db *pgxpool.Pool, st statement, planCacheMode string) work {
	tb.Helper()
	var w work
	err := pgx.BeginFunc(ctx, db, func(tx pgx.Tx) error {
		if _, err := tx.Exec(ctx, "SET LOCAL plan_cache_mode = "+planCacheMode); err != nil {
			return err
		}
		if _, err := tx.Exec(ctx, "PREPARE measured_statement AS "+st.sql); err != nil {
			return err
		}
		args := make([]string, len(st.args))
		for i, a := range st.args {
			args[i] = literal(tb, a)
		}
		exec := "EXECUTE measured_statement"
		if len(args) > 0 {
			exec += "(" + strings.Join(args, ", ") + ")"
		}
		var out []byte
		if err := tx.QueryRow(ctx, "EXPLAIN (ANALYZE, BUFFERS, FORMAT JSON) "+exec).Scan(&out); err != nil {
			return err
		}
		var plans []struct {
			Plan planNode `json:"Plan"`
		}
		if err := json.Unmarshal(out, &plans); err != nil || len(plans) != 1 {
			return fmt.Errorf("parse plan: %v (%d plans)", err, len(plans))
		}
		plans[0].Plan.add(&w)
		w.buffers = plans[0].Plan.SharedHit + plans[0].Plan.SharedRead
		_, err := tx.Exec(ctx, "DEALLOCATE measured_statement")
		if err == nil {
			err = errRollback
		}
		return err
	})
	if err != errRollback {
		tb.Fatalf("measure statement: %v", err)
	}
	return w
}

var errRollback = fmt.Errorf("roll back")

// Issue 12, defect 5: with a 100,000-row lifecycle backlog (NATS down), each
// batch statement the relay runs and the backlog measurement read a number
// of rows and buffers bounded by the batch size (the measurement: by its
// fixed count limit), not by the backlog. Deterministic: it counts the
// database's work, it does not time it. Checked under the relay's own plan
// cache mode on fresh rows (no statistics, no visibility map) and after
// ANALYZE, and with custom plans once statistics exist (a client that cannot
// use prepared statements).
func TestBatchAndBacklogWorkStaysBoundedWithALargeBacklog(t *testing.T) {
	t.Parallel()
	ctx := t.Context()
	pool, _ := pgtest.NewDatabase(t)
	const batch = DefaultBatchSize
	// Advisory rows arrive after the backlog, as wake-ups do during an
	// outage; twice a batch, so the advisory batch fills.
	fillBacklog(t, ctx, pool, largeBacklog, 2*batch)

	type bound struct{ rows, buffers int64 }
	cases := []struct {
		name string
		st   statement
		max  bound
	}{
		// A batch: its own rows plus as many again (dead or skipped entries);
		// about one buffer per row locked and a few index pages.
		{"advisory batch", advisoryBatch(batch), bound{2*batch + 16, 4*batch + 64}},
		{"lifecycle batch", lifecycleBatch(batch), bound{2*batch + 16, 4*batch + 64}},
		// The measurement: at most its limit per class; index-only, so a
		// few hundred entries per buffer.
		{"backlog measurement", backlog(), bound{2*backlogMeasureLimit + 16, backlogMeasureLimit/10 + 64}},
	}
	check := func(state, mode string) {
		for _, c := range cases {
			w := measure(t, ctx, pool, c.st, mode)
			t.Logf("%s, %s, %s: %v", state, mode, c.name, w)
			if w.rowsExamined > c.max.rows || w.buffers > c.max.buffers {
				t.Errorf("%s, %s: %s did %v with a %d-row backlog; want at most %d rows and %d buffers",
					state, mode, c.name, w, largeBacklog, c.max.rows, c.max.buffers)
			}
		}
	}
	check("fresh rows", planCacheMode)
	if _, err := pool.Exec(ctx, "ANALYZE etl_outbox_events"); err != nil {
		t.Fatal(err)
	}
	check("analyzed", planCacheMode)
	check("analyzed", "force_custom_plan")

	// The gauge still tells the size: exact here, where the ids are dense.
	rows, _, err := measureBacklog(ctx, pool)
	if err != nil {
		t.Fatal(err)
	}
	if want := int64(largeBacklog + 2*batch); rows != want {
		t.Errorf("measured backlog = %d, want %d", rows, want)
	}
}
