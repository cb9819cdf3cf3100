package pg_test

import (
	"context"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/mightyetl/mightyetl/internal/pg"
	"github.com/mightyetl/mightyetl/internal/pgtest"
)

// strictIsolations are the levels at which a transaction's snapshot is its
// first: the ones the lineage guard refuses a delete at (migration 00019).
var strictIsolations = []string{"repeatable read", "serializable"}

// isolationPool is a pool on url whose transactions begin at iso unless told
// otherwise (default_transaction_isolation, as ALTER ROLE ... SET or a
// postgresql.conf would set it).
func isolationPool(t *testing.T, url, iso string) *pgxpool.Pool {
	t.Helper()
	cfg, err := pgxpool.ParseConfig(url)
	if err != nil {
		t.Fatal(err)
	}
	cfg.ConnConfig.RuntimeParams["default_transaction_isolation"] = iso
	cfg.MaxConns = 2
	pool, err := pgxpool.NewWithConfig(context.Background(), cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(pool.Close)
	var got string
	if err := pool.QueryRow(context.Background(), `SELECT current_setting('transaction_isolation')`).Scan(&got); err != nil || got != iso {
		t.Fatalf("isolation of a plain statement: %q, %v; want %s", got, err, iso)
	}
	return pool
}

// hookedStarter is a pg.TxStarter that runs afterBegin right after it begins
// a transaction and beforeCommit right before that transaction commits: the
// barriers that order a concurrent replay against prune's snapshot and its
// commit. Each hook runs at most once.
type hookedStarter struct {
	db                    pg.TxStarter
	afterBegin            func(pgx.Tx)
	beforeCommit          func()
	beginOnce, commitOnce *sync.Once
}

func newHookedStarter(db pg.TxStarter, afterBegin func(pgx.Tx), beforeCommit func()) hookedStarter {
	return hookedStarter{db: db, afterBegin: afterBegin, beforeCommit: beforeCommit,
		beginOnce: new(sync.Once), commitOnce: new(sync.Once)}
}

func (h hookedStarter) BeginTx(ctx context.Context, opts pgx.TxOptions) (pgx.Tx, error) {
	tx, err := h.db.BeginTx(ctx, opts)
	if err != nil {
		return nil, err
	}
	if h.afterBegin != nil {
		h.beginOnce.Do(func() { h.afterBegin(tx) })
	}
	return hookedTx{Tx: tx, h: h}, nil
}

type hookedTx struct {
	pgx.Tx
	h hookedStarter
}

func (t hookedTx) Commit(ctx context.Context) error {
	if t.h.beforeCommit != nil {
		t.h.commitOnce.Do(t.h.beforeCommit)
	}
	return t.Tx.Commit(ctx)
}

// takeSnapshot runs a query in tx: the first query of a REPEATABLE READ or
// SERIALIZABLE transaction fixes its snapshot.
func takeSnapshot(t *testing.T, tx pgx.Tx) {
	t.Helper()
	var n int
	if err := tx.QueryRow(context.Background(), `SELECT count(*) FROM etl_job_records`).Scan(&n); err != nil {
		t.Fatal(err)
	}
}

func jobExists(t *testing.T, pool *pgxpool.Pool, id uuid.UUID) bool {
	t.Helper()
	return pgtest.Count(t, pool, `SELECT count(*) FROM etl_job_records WHERE job_record_id = $1`, id) == 1
}

// replayOf inserts and commits, on pool, a replay of source by owner under
// key, and returns its id.
func replayOf(t *testing.T, pool *pgxpool.Pool, owner string, source uuid.UUID, key string) uuid.UUID {
	t.Helper()
	var id uuid.UUID
	if err := pool.QueryRow(context.Background(), lineageInsertSQL+` RETURNING job_record_id`,
		owner, pgtest.SHA(key), source).Scan(&id); err != nil {
		t.Fatalf("insert a replay: %v", err)
	}
	return id
}

// Prune's own statement in a REPEATABLE READ or SERIALIZABLE transaction
// whose snapshot predates a replay's commit: the lineage guard read that
// snapshot, missed the replay and let the delete of its source through,
// leaving the replay pointing at a deleted job (replaying it then failed
// with 23503). Since migration 00019 the guard refuses the delete (40001)
// at any level but READ COMMITTED; the source stays and the replay can be
// replayed. At READ COMMITTED the same interleaving deletes nothing: the
// statement's snapshot sees the replay.
func TestLineageGuardRefusesDeletesOutsideReadCommitted(t *testing.T) {
	t.Parallel()
	pool, url := pgtest.NewDatabase(t)
	ctx := context.Background()
	owner := repeatHex("d")
	for _, iso := range append([]string{"read committed"}, strictIsolations...) {
		t.Run(strings.ReplaceAll(iso, " ", "_"), func(t *testing.T) {
			source := failedJob(t, pool, owner, `[{"id":"i1"}]`)
			conn, err := pgx.Connect(ctx, url)
			if err != nil {
				t.Fatal(err)
			}
			defer conn.Close(ctx)
			tx, err := conn.BeginTx(ctx, pgx.TxOptions{IsoLevel: pgx.TxIsoLevel(iso)})
			if err != nil {
				t.Fatal(err)
			}
			defer func() { _ = tx.Rollback(ctx) }()
			takeSnapshot(t, tx)
			replay := replayOf(t, pool, owner, source, "isolation-"+iso)

			tag, err := tx.Exec(ctx, pg.PruneTerminalJobsSQL, 1, 1000)
			if iso == "read committed" {
				if err != nil || tag.RowsAffected() != 0 {
					t.Fatalf("prune at %s after a replay committed: %v rows, %v; want 0 rows (the replay keeps its source)", iso, tag.RowsAffected(), err)
				}
			} else {
				code, _ := constraintOf(err)
				if code != "40001" || !strings.Contains(err.Error(), "only at READ COMMITTED") {
					t.Fatalf("prune at %s whose snapshot predates a replay: %v rows, %v; want 40001 naming READ COMMITTED", iso, tag.RowsAffected(), err)
				}
			}
			_ = tx.Rollback(ctx)
			if !jobExists(t, pool, source) {
				t.Fatalf("at %s the replay's source was deleted", iso)
			}
			// The replay can itself be replayed: its source and root exist.
			setTerminal(t, pool, replay, pg.StatusFailed)
			if _, err := pg.ReplayJob(ctx, pool, pg.ReplayParams{PrincipalScopeHash: owner, SourceJobID: replay,
				ReplayKeyHash: pgtest.SHA("isolation-again-" + iso), RequestDigest: pgtest.SHA("[]"), Payload: "[]"}); err != nil {
				t.Fatalf("replay of the replay at %s: %v", iso, err)
			}
		})
	}
	// A delete that deletes nothing is not refused at any level.
	tx, err := pool.BeginTx(ctx, pgx.TxOptions{IsoLevel: pgx.RepeatableRead})
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = tx.Rollback(ctx) }()
	if _, err := tx.Exec(ctx, `DELETE FROM etl_job_records WHERE job_record_id = $1`, uuid.New()); err != nil {
		t.Fatalf("empty delete at repeatable read: %v", err)
	}
}

// PruneTerminalJobs begins its transactions at READ COMMITTED whatever the
// session's default_transaction_isolation, so a replay racing it keeps its
// source in either order:
//   - the replay commits after prune's transaction began and took a
//     snapshot, before prune's delete: prune does not delete the source (at
//     REPEATABLE READ the guard would refuse the batch, or before 00019 the
//     source would be deleted);
//   - prune deletes the source first: the replay's insert waits on the
//     deleted row and, once prune commits, fails with 23503
//     (etl_job_replay_owner_check), so no replay points at a deleted job.
func TestPruneRunsAtReadCommittedWhateverTheDefault(t *testing.T) {
	t.Parallel()
	admin, url := pgtest.NewDatabase(t)
	ctx := context.Background()
	owner := repeatHex("e")
	for _, iso := range strictIsolations {
		t.Run(strings.ReplaceAll(iso, " ", "_"), func(t *testing.T) {
			pool := isolationPool(t, url, iso)

			// Order 1: the replay commits between prune's snapshot and its delete.
			source := failedJob(t, admin, owner, `[{"id":"p1"}]`)
			var replay uuid.UUID
			starter := newHookedStarter(pool, func(tx pgx.Tx) {
				takeSnapshot(t, tx)
				replay = replayOf(t, admin, owner, source, "prune-after-"+iso)
			}, nil)
			n, err := pg.PruneTerminalJobs(ctx, starter, time.Microsecond, 1000)
			if err != nil || n != 0 {
				t.Fatalf("prune with a replay committed after its snapshot (default %s): %d, %v; want 0 deleted", iso, n, err)
			}
			if !jobExists(t, admin, source) || !jobExists(t, admin, replay) {
				t.Fatalf("default %s: source kept %v, replay kept %v; want both", iso, jobExists(t, admin, source), jobExists(t, admin, replay))
			}

			// Order 2: prune deletes the source, then the replay comes.
			// The job and its replay of order 1 stay (the replay is PENDING).
			doomed := failedJob(t, admin, owner, `[{"id":"p2"}]`)
			inserted := make(chan error, 1)
			starter = newHookedStarter(pool, nil, func() {
				go func() {
					_, err := admin.Exec(ctx, lineageInsertSQL, owner, pgtest.SHA("prune-before-"+iso), doomed)
					inserted <- err
				}()
				pgtest.WaitForLockWait(t, admin, "INSERT INTO etl_job_records")
			})
			n, err = pg.PruneTerminalJobs(ctx, starter, time.Microsecond, 1000)
			if err != nil || n != 1 {
				t.Fatalf("prune of a source before its replay (default %s): %d, %v; want 1 deleted", iso, n, err)
			}
			if code, name := constraintOf(<-inserted); code != "23503" || name != "etl_job_replay_owner_check" {
				t.Fatalf("replay of a source prune deleted meanwhile (default %s): %s %s, want 23503 etl_job_replay_owner_check", iso, code, name)
			}
			if jobExists(t, admin, doomed) {
				t.Fatalf("default %s: the pruned source still exists", iso)
			}
			if n := pgtest.Count(t, admin, `SELECT count(*) FROM etl_job_records WHERE replay_source_job_record_id = $1`, doomed); n != 0 {
				t.Fatalf("default %s: %d replays point at the deleted source", iso, n)
			}
		})
	}
}
