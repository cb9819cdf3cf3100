package pg_test

import (
	"context"
	"errors"
	"testing"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5/pgconn"

	"github.com/mightyetl/mightyetl/internal/pgtest"
)

// lineageInsertSQL inserts a replay job of owner $1 with key $2, source $3
// and root $3, generation 1.
const lineageInsertSQL = `INSERT INTO etl_job_records (job_record_id, job_kind, principal_scope_hash, submission_key_hash,
	request_digest, request_payload, max_attempts, replay_source_job_record_id, replay_root_job_record_id, replay_generation_count)
	VALUES (gen_random_uuid(), 'etl_records', decode($1, 'hex'), decode($2, 'hex'), sha256(convert_to('[]', 'UTF8')), '[]', 3, $3, $3, 1)`

// constraintOf returns the SQLSTATE and constraint name of a PostgreSQL
// error, empty strings for any other error.
func constraintOf(err error) (code, constraint string) {
	var pgErr *pgconn.PgError
	if errors.As(err, &pgErr) {
		return pgErr.Code, pgErr.ConstraintName
	}
	return "", ""
}

// Migration 00017 keeps replay lineage with triggers instead of foreign
// keys. Pinned here, with the races the keys' row locks used to decide,
// driven by the database's lock waits:
//   - no foreign key is left on etl_job_records;
//   - a replay inserted and not yet committed holds its source: a delete of
//     the source waits for it and then fails (23503, etl_job_replay_source_fk);
//   - a source being deleted makes the replay insert wait, and once the
//     delete commits the insert fails (23503, etl_job_replay_owner_check);
//   - a root cannot be deleted while a replay chain points at it;
//   - one statement may delete a replay with its source;
//   - a job's id never changes.
func TestReplayLineageGuardsReplaceTheForeignKeys(t *testing.T) {
	t.Parallel()
	pool, _ := pgtest.NewDatabase(t)
	ctx := context.Background()
	owner := repeatHex("c")
	const payload = `[{"id":"l1"}]`
	var keys int
	if err := pool.QueryRow(ctx, `SELECT count(*) FROM pg_constraint WHERE conrelid = 'etl_job_records'::regclass AND contype = 'f'`).Scan(&keys); err != nil || keys != 0 {
		t.Fatalf("foreign keys on etl_job_records: %d, %v; want none", keys, err)
	}

	// An uncommitted replay holds its source.
	source := failedJob(t, pool, owner, payload)
	tx, err := pool.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := tx.Exec(ctx, lineageInsertSQL, owner, pgtest.SHA("lineage-1"), source); err != nil {
		t.Fatal(err)
	}
	deleted := make(chan error, 1)
	go func() {
		_, err := pool.Exec(ctx, `DELETE FROM etl_job_records WHERE job_record_id = $1`, source)
		deleted <- err
	}()
	pgtest.WaitForLockWait(t, pool, "DELETE FROM etl_job_records")
	if err := tx.Commit(ctx); err != nil {
		t.Fatal(err)
	}
	if code, name := constraintOf(<-deleted); code != "23503" || name != "etl_job_replay_source_fk" {
		t.Fatalf("delete of a source whose replay committed meanwhile: %s %s, want 23503 etl_job_replay_source_fk", code, name)
	}
	if n := pgtest.Count(t, pool, `SELECT count(*) FROM etl_job_records WHERE job_record_id = $1`, source); n != 1 {
		t.Fatalf("source rows after the refused delete: %d", n)
	}

	// A source being deleted: the replay waits, then finds it gone.
	doomed := failedJob(t, pool, owner, payload)
	tx, err = pool.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := tx.Exec(ctx, `DELETE FROM etl_job_records WHERE job_record_id = $1`, doomed); err != nil {
		t.Fatal(err)
	}
	inserted := make(chan error, 1)
	go func() {
		_, err := pool.Exec(ctx, lineageInsertSQL, owner, pgtest.SHA("lineage-2"), doomed)
		inserted <- err
	}()
	pgtest.WaitForLockWait(t, pool, "INSERT INTO etl_job_records")
	if err := tx.Commit(ctx); err != nil {
		t.Fatal(err)
	}
	if code, name := constraintOf(<-inserted); code != "23503" || name != "etl_job_replay_owner_check" {
		t.Fatalf("replay of a source deleted meanwhile: %s %s, want 23503 etl_job_replay_owner_check", code, name)
	}

	// A root stays while a chain points at it: generation 2 of the chain
	// rooted at source, then the generation-1 replay goes first.
	var gen1 uuid.UUID
	if err := pool.QueryRow(ctx, `SELECT job_record_id FROM etl_job_records WHERE replay_source_job_record_id = $1`, source).Scan(&gen1); err != nil {
		t.Fatal(err)
	}
	setTerminal(t, pool, gen1, "FAILED")
	var gen2 uuid.UUID
	if err := pool.QueryRow(ctx, `INSERT INTO etl_job_records (job_record_id, job_kind, principal_scope_hash, submission_key_hash,
		request_digest, request_payload, max_attempts, replay_source_job_record_id, replay_root_job_record_id, replay_generation_count)
		VALUES (gen_random_uuid(), 'etl_records', decode($1, 'hex'), decode($2, 'hex'), sha256(convert_to('[]', 'UTF8')), '[]', 3, $3, $4, 2)
		RETURNING job_record_id`, owner, pgtest.SHA("lineage-3"), gen1, source).Scan(&gen2); err != nil {
		t.Fatal(err)
	}
	// Deleting the root and its direct replay together still leaves gen2
	// pointing at both: the source check names the first broken reference.
	_, err = pool.Exec(ctx, `DELETE FROM etl_job_records WHERE job_record_id = ANY($1)`, []uuid.UUID{source, gen1})
	if code, name := constraintOf(err); code != "23503" || name != "etl_job_replay_source_fk" {
		t.Fatalf("delete of a chain's root and middle: %s %s, want 23503 etl_job_replay_source_fk", code, name)
	}
	// Only the root: gen1 (source) and gen2 (root) still point at it.
	_, err = pool.Exec(ctx, `DELETE FROM etl_job_records WHERE job_record_id = $1`, source)
	if code, _ := constraintOf(err); code != "23503" {
		t.Fatalf("delete of a chain's root: %v, want 23503", err)
	}
	// The whole chain in one statement goes.
	tag, err := pool.Exec(ctx, `DELETE FROM etl_job_records WHERE job_record_id = ANY($1)`, []uuid.UUID{source, gen1, gen2})
	if err != nil || tag.RowsAffected() != 3 {
		t.Fatalf("delete of a whole chain: %v %v", tag, err)
	}

	// A job's id never changes.
	plain := failedJob(t, pool, owner, payload)
	_, err = pool.Exec(ctx, `UPDATE etl_job_records SET job_record_id = gen_random_uuid() WHERE job_record_id = $1`, plain)
	if code, _ := constraintOf(err); code != "23000" {
		t.Fatalf("job id change: %v, want 23000", err)
	}
}
