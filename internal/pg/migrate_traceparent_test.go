package pg_test

import (
	"context"
	"testing"

	"github.com/google/uuid"
	"github.com/mightyetl/mightyetl/internal/pg"
	"github.com/mightyetl/mightyetl/internal/pgtest"
)

// Migration 00012 adds submit_traceparent: InsertJobs stores a job's
// traceparent only when it has one (NULL otherwise, in the same batch), the
// CHECK refuses anything longer than a traceparent, and down drops the column
// (a job without it still inserts; by SQL of that version, as InsertJobs
// speaks the bytea digests of 00014).
func TestMigration00012SubmitTraceparent(t *testing.T) {
	pool, _ := pgtest.NewDatabase(t)
	ctx := context.Background()
	const tp = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"
	newJob := func(key, traceparent string) pg.NewJob {
		return pg.NewJob{Kind: pg.KindETLRecords, PrincipalScopeHash: pgtest.SHA("mig-12-owner"), SubmissionKeyHash: pgtest.SHA(key),
			RequestDigest: pgtest.SHA("[]"), Payload: "[]", MaxAttempts: 3, SubmitTraceparent: traceparent}
	}
	ins, err := pg.InsertJobs(ctx, pool, []pg.NewJob{newJob("traced", tp), newJob("untraced", "")})
	if err != nil {
		t.Fatal(err)
	}
	read := func(id uuid.UUID) *string {
		var v *string
		if err := pool.QueryRow(ctx, `SELECT submit_traceparent FROM etl_job_records WHERE job_record_id = $1`, id).Scan(&v); err != nil {
			t.Fatal(err)
		}
		return v
	}
	if v := read(ins[0].Job.JobID); v == nil || *v != tp {
		t.Errorf("traced job stored %v, want %s", v, tp)
	}
	if v := read(ins[1].Job.JobID); v != nil {
		t.Errorf("untraced job stored %q, want NULL", *v)
	}
	if _, err := pg.InsertJobs(ctx, pool, []pg.NewJob{newJob("too-long", tp+"-x")}); err == nil {
		t.Error("a 57-character traceparent was stored")
	}
	if _, err := pg.InsertJobs(ctx, pool, []pg.NewJob{newJob("plain", "")}); err != nil {
		t.Fatal(err)
	}

	if err := pg.MigrateTo(ctx, pool, 11); err != nil {
		t.Fatalf("down from 00012: %v", err)
	}
	if migColumnExists(t, pool, "etl_job_records", "submit_traceparent") {
		t.Fatal("submit_traceparent left after down from 00012")
	}
	migInsertJob(t, pool, pgtest.SHA("mig-12-owner"), "[]")
	migUp(t, pool)
	if !migColumnExists(t, pool, "etl_job_records", "submit_traceparent") {
		t.Fatal("submit_traceparent missing after up")
	}
}
