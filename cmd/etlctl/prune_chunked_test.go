package main_test

import (
	"context"
	"os/exec"
	"strings"
	"testing"

	"github.com/mightyetl/mightyetl/internal/pgtest"
)

// `etlctl prune` also prunes what large jobs leave behind, with no window:
// an expired OPEN upload with its part and chunks, and the target rows and
// queue row of a cancelled chunked job (its load row stays with the job,
// DISCARDED); it prints one line per kind that deleted rows.
func TestPruneDeletesLargeJobLeftovers(t *testing.T) {
	t.Parallel()
	pool, url := pgtest.NewDatabase(t)
	ctx := context.Background()
	for _, sql := range []string{
		`INSERT INTO etl_job_records (job_record_id, job_kind, principal_scope_hash, submission_key_hash, request_digest,
			job_status, max_attempts, cancellation_key_hash, cancellation_code, job_cancelled_at)
		VALUES ('00000000-0000-7000-8000-000000000001', 'etl_chunked', sha256('o'::bytea), sha256('k'::bytea), sha256('p'::bytea),
			'CANCELLED', 3, repeat('c', 64), 'etl_job_cancelled_by_owner', clock_timestamp())`,
		`INSERT INTO etl_chunked_job_queue (job_record_id) VALUES ('00000000-0000-7000-8000-000000000001')`,
		`INSERT INTO etl_chunked_loads (job_record_id, upload_id, load_format, payload_bytes)
		VALUES ('00000000-0000-7000-8000-000000000001', gen_random_uuid(), 'jsonl', 10)`,
		`INSERT INTO processed_data (job_record_id, data, normalized_record)
		SELECT '00000000-0000-7000-8000-000000000001', 'ID:r,', '{}' FROM generate_series(1, 3)`,
		`INSERT INTO etl_uploads (upload_id, principal_scope_hash, upload_format, expires_at)
		VALUES ('00000000-0000-7000-8000-0000000000aa', sha256('o'::bytea), 'jsonl', clock_timestamp() - interval '1 second')`,
		`INSERT INTO etl_upload_parts (upload_id, part_number, part_attempt_id, part_bytes, part_sha256, chunk_count)
		VALUES ('00000000-0000-7000-8000-0000000000aa', 1, '00000000-0000-7000-8000-0000000000bb', 2, sha256('x'::bytea), 2)`,
		`INSERT INTO etl_upload_chunks (upload_id, part_attempt_id, chunk_index, chunk_data)
		SELECT '00000000-0000-7000-8000-0000000000aa', '00000000-0000-7000-8000-0000000000bb', g, '\x00'::bytea
		FROM generate_series(0, 1) g`,
	} {
		if _, err := pool.Exec(ctx, sql); err != nil {
			t.Fatalf("fixture: %v\n%s", err, sql)
		}
	}
	out, err := exec.Command(buildEtlctl(t), "prune", "-database-url", url, "-batch", "1").CombinedOutput()
	if err != nil {
		t.Fatalf("prune: %v\n%s", err, out)
	}
	for _, line := range []string{
		"pruned 1 chunked-queue rows of finished jobs",
		"pruned 3 target rows of failed, cancelled or pruned large jobs",
		"pruned 1 expired uploads",
		"pruned 1 upload parts of pruned uploads",
		"pruned 2 unreferenced upload chunks",
	} {
		if !strings.Contains(string(out), line+"\n") {
			t.Errorf("no line %q in prune's output:\n%s", line, out)
		}
	}
	if strings.Contains(string(out), "load rows") || strings.Contains(string(out), "uploads of finished jobs") {
		t.Errorf("prune reports kinds that had nothing to delete:\n%s", out)
	}
	for sql, want := range map[string]int{
		`SELECT count(*) FROM processed_data`:                                   0,
		`SELECT count(*) FROM etl_chunked_loads WHERE load_state = 'DISCARDED'`: 1,
		`SELECT count(*) FROM etl_uploads`:                                      0,
		`SELECT count(*) FROM etl_upload_chunks`:                                0,
		`SELECT count(*) FROM etl_chunked_job_queue`:                            0,
		`SELECT count(*) FROM etl_job_records WHERE job_status = 'CANCELLED'`:   1,
	} {
		if got := pgtest.Count(t, pool, sql); got != want {
			t.Errorf("%s: %d, want %d", sql, got, want)
		}
	}
}
