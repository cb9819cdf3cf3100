package pg_test

import (
	"context"
	"errors"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/mightyetl/mightyetl/internal/lease"
	"github.com/mightyetl/mightyetl/internal/pg"
	"github.com/mightyetl/mightyetl/internal/pgtest"
)

// applyGrantScript runs deploy/postgres/least-privilege.sql (without its psql
// meta-commands) on the test database.
func applyGrantScript(t *testing.T, ctx context.Context, conn *pgx.Conn) {
	t.Helper()
	raw, err := os.ReadFile("../../deploy/postgres/least-privilege.sql")
	if err != nil {
		t.Fatal(err)
	}
	var sql strings.Builder
	for _, line := range strings.Split(string(raw), "\n") {
		if !strings.HasPrefix(strings.TrimSpace(line), `\`) {
			sql.WriteString(line + "\n")
		}
	}
	if _, err := conn.Exec(ctx, sql.String()); err != nil {
		t.Fatalf("grant script: %v", err)
	}
}

func isInsufficientPrivilege(err error) bool {
	var pgErr *pgconn.PgError
	return errors.As(err, &pgErr) && pgErr.Code == "42501"
}

// The worker role of the grant script can run the whole lease life cycle and
// nothing else: it cannot rewrite ownership, hashes or digests, nor delete
// jobs.
func TestWorkerRoleRunsLeasesAndNothingMore(t *testing.T) {
	pool, url := pgtest.NewDatabase(t)
	ctx := context.Background()
	conn, err := pgx.Connect(ctx, url)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close(ctx)
	applyGrantScript(t, ctx, conn)
	applyGrantScript(t, ctx, conn) // idempotent

	payload := `[{"id":"g1"}]`
	if _, err := pg.InsertJobs(ctx, pool, []pg.NewJob{{Kind: pg.KindETLRecords, PrincipalScopeHash: sha("owner"),
		SubmissionKeyHash: sha("grant-key"), RequestDigest: sha(payload), Payload: payload, MaxAttempts: 2}}); err != nil {
		t.Fatal(err)
	}
	asWorker := func(fn func(tx pgx.Tx) error) error {
		return pg.WithTx(ctx, conn, func(tx pgx.Tx) error {
			if _, err := tx.Exec(ctx, "SET LOCAL ROLE mightyetl_worker_role"); err != nil {
				return err
			}
			return fn(tx)
		})
	}
	var c lease.Claim
	err = asWorker(func(tx pgx.Tx) error {
		res, err := lease.ClaimJobs(ctx, tx, lease.ClaimParams{OwnerID: "grant-worker", Limit: 1, LeaseDuration: time.Minute})
		if err == nil && len(res.Claimed) == 1 {
			c = res.Claimed[0]
		}
		return err
	})
	if err != nil || c.ClaimID.String() == "" {
		t.Fatalf("claim as worker role: %v", err)
	}
	if err := asWorker(func(tx pgx.Tx) error {
		ren, err := lease.Renew(ctx, tx, c.OwnerID, []lease.Ref{c.Ref}, time.Minute)
		if err == nil && !ren[0].Renewed {
			t.Error("renewal did not renew")
		}
		return err
	}); err != nil {
		t.Fatalf("renew as worker role: %v", err)
	}
	if err := asWorker(func(tx pgx.Tx) error {
		won, err := lease.SucceedOne(ctx, tx, c.Ref)
		if err != nil {
			return err
		}
		_, err = tx.Exec(ctx, `INSERT INTO processed_data (job_record_id, data, normalized_record) VALUES ($1, 'ID:g1,', '{"ID":"g1"}')`, won.JobID)
		return err
	}); err != nil {
		t.Fatalf("finish as worker role: %v", err)
	}
	for name, stmt := range map[string]string{
		"rewrite owner":  `UPDATE etl_job_records SET principal_scope_hash = repeat('0', 64)`,
		"rewrite digest": `UPDATE etl_job_records SET request_digest = repeat('0', 64)`,
		"delete jobs":    `DELETE FROM etl_job_records`,
		"delete ledger":  `DELETE FROM etl_idempotency_records`,
		"delete outbox":  `DELETE FROM etl_outbox_events`,
		"write ledger": `INSERT INTO etl_idempotency_records (principal_scope_hash, idempotency_key_hash, request_digest, response_text)
			VALUES (repeat('0', 64), repeat('0', 64), repeat('0', 64), 'x')`,
		"queue a job": `INSERT INTO etl_job_claim_queue (job_record_id, claimable_at) SELECT job_record_id, clock_timestamp() FROM etl_job_records LIMIT 1`,
	} {
		err := asWorker(func(tx pgx.Tx) error { _, err := tx.Exec(ctx, stmt); return err })
		if !isInsufficientPrivilege(err) {
			t.Errorf("%s as worker role: %v, want insufficient_privilege", name, err)
		}
	}
}
