package pg_test

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"testing"
	"time"

	"github.com/google/uuid"

	"github.com/mightyetl/mightyetl/internal/chunked"
	"github.com/mightyetl/mightyetl/internal/codes"
	"github.com/mightyetl/mightyetl/internal/lease"
	"github.com/mightyetl/mightyetl/internal/pg"
	"github.com/mightyetl/mightyetl/internal/pgtest"
)

// TestLargeJobRolesRunTheirPathsAndNothingMore runs a large job's whole
// path under the grant script's roles: the intake role creates an upload,
// stores parts (COPY, replacement), reads and verifies them, submits the
// chunked job (job, queue, load and outbox rows), reads its progress,
// replays it and aborts another upload; the worker role claims it from the
// chunked queue, loads it chunk by chunk from the stored parts (target
// rows, checkpoints), succeeds one job and fails another, and purges the
// failed one's rows and both jobs' chunks. Neither role can do the other's
// part or read the visible-rows view.
func TestLargeJobRolesRunTheirPathsAndNothingMore(t *testing.T) {
	admin, url := grantsSetup(t)
	ctx := context.Background()
	ip := rolePool(t, url, "mightyetl_intake_role")
	wp := rolePool(t, url, "mightyetl_worker_role")
	owner := pgtest.SHA("large-owner")
	limits := pg.PutPartParams{MaxPartBytes: 8 << 20, MaxUploadBytes: 1 << 30, OwnerMaxStagedBytes: 1 << 30, Expiry: time.Hour}

	// Two uploads of the same two-part payload (the second is the replay's).
	var lines bytes.Buffer
	for i := range 3000 {
		fmt.Fprintf(&lines, "{\"id\":\"r%d\",\"name\":\"n%d\"}\n", i, i)
	}
	payload := lines.Bytes()
	cut := len(payload)/2 + 7 // a record spans the parts
	upload := func() uuid.UUID {
		u, err := pg.CreateUpload(ctx, ip, pg.NewUpload{PrincipalScopeHash: owner, Format: pg.UploadFormatJSONL, Expiry: time.Hour})
		if err != nil {
			t.Fatalf("create upload as intake: %v", err)
		}
		for i, part := range [][]byte{payload[:cut], []byte("replaced"), payload[cut:]} {
			p := limits
			n := int64(i + 1)
			if i == 2 {
				n = 2 // replaces the second part
			}
			p.PrincipalScopeHash, p.UploadID, p.PartNumber, p.SHA256, p.Body = owner, u.UploadID, n, hexSum(part), bytes.NewReader(part)
			if _, err := pg.PutPart(ctx, ip, p); err != nil {
				t.Fatalf("put part as intake: %v", err)
			}
		}
		got, err := pg.GetUpload(ctx, ip, owner, u.UploadID)
		if err != nil || len(got.Parts) != 2 {
			t.Fatalf("get upload as intake: %+v %v", got, err)
		}
		if all, err := io.ReadAll(pg.StreamPayload(ctx, ip, u.UploadID, 1, 0)); err != nil || !bytes.Equal(all, payload) {
			t.Fatalf("stream as intake: %d bytes, %v", len(all), err)
		}
		return u.UploadID
	}
	submit := func(id uuid.UUID, key string, replayOf uuid.UUID) pg.Job {
		out, err := pg.SubmitUpload(ctx, ip, pg.SubmitUploadParams{PrincipalScopeHash: owner, UploadID: id,
			SubmissionKeyHash: pgtest.SHA(key), SHA256: hexSum(payload), MaxAttempts: 2, MaxUploadBytes: 1 << 30,
			MaxRecords: 1 << 20, ReplayOf: replayOf})
		if err != nil || !out.Created {
			t.Fatalf("submit upload as intake: %+v %v", out, err)
		}
		return out.Job
	}
	first := submit(upload(), "large-1", uuid.Nil)
	if j, err := pg.GetJob(ctx, ip, owner, first.JobID); err != nil || j.Kind != pg.KindETLChunked {
		t.Fatalf("status of the large job as intake: %+v %v", j, err)
	}
	aborted := upload()
	if err := pg.AbortUpload(ctx, ip, owner, aborted); err != nil {
		t.Fatalf("abort as intake: %v", err)
	}
	if _, err := pg.DeleteUploadChunks(ctx, ip, aborted, 0); err != nil {
		t.Fatalf("delete chunks as intake: %v", err)
	}

	// The worker loads the first job and fails it, so its rows are purged;
	// the replay is loaded and succeeds.
	loader := chunked.NewLoader(wp, chunked.Config{ChunkRecords: 1000})
	claimAndLoad := func() lease.Ref {
		res, err := lease.ClaimChunkedJobs(ctx, wp, lease.ClaimParams{OwnerID: "grant-chunked-worker", Limit: 1, LeaseDuration: time.Minute})
		if err != nil || len(res.Claimed) != 1 {
			t.Fatalf("claim chunked as worker: %+v %v", res, err)
		}
		ref := res.Claimed[0].Ref
		if err := loader.Load(ctx, ref); err != nil {
			t.Fatalf("load as worker: %v", err)
		}
		return ref
	}
	ref := claimAndLoad()
	if err := lease.FailChunked(ctx, wp, ref, codes.InvalidRecord, 7); err != nil {
		t.Fatalf("fail chunked as worker: %v", err)
	}
	if res, err := chunked.Purge(ctx, wp, ref.JobID, 500, 4); err != nil || res.Rows == 0 {
		t.Fatalf("purge as worker: %+v %v", res, err)
	}
	replay := submit(upload(), "large-replay", first.JobID)
	if replay.Lineage == nil || replay.Lineage.SourceJobID != first.JobID {
		t.Fatalf("replay as intake: %+v", replay)
	}
	ref = claimAndLoad()
	if err := lease.SucceedChunked(ctx, wp, ref); err != nil {
		t.Fatalf("succeed chunked as worker: %v", err)
	}
	if _, err := chunked.Purge(ctx, wp, ref.JobID, 500, 4); err != nil {
		t.Fatalf("purge chunks as worker: %v", err)
	}
	var visible int
	if err := admin.QueryRow(ctx, `SELECT count(*) FROM processed_data_visible WHERE job_record_id = $1`, ref.JobID).Scan(&visible); err != nil || visible != 3000 {
		t.Fatalf("visible rows of the replay: %d %v", visible, err)
	}
	if j, err := pg.GetJob(ctx, ip, owner, ref.JobID); err != nil || j.Status != pg.StatusSucceeded {
		t.Fatalf("the replay as intake: %+v %v", j, err)
	}

	assertDenied(t, ip, "mightyetl_intake_role", map[string]string{
		"write a checkpoint":         `UPDATE etl_chunked_loads SET records_loaded = 1`,
		"make a load visible":        `UPDATE etl_chunked_loads SET load_state = 'VISIBLE'`,
		"delete a load":              `DELETE FROM etl_chunked_loads`,
		"dequeue a large job":        `DELETE FROM etl_chunked_job_queue`,
		"write a bad record":         `INSERT INTO etl_chunked_load_bad_records VALUES (gen_random_uuid(), 1, 'etl_invalid_record')`,
		"move an upload to an owner": `UPDATE etl_uploads SET principal_scope_hash = decode(repeat('00', 32), 'hex')`,
		"change an upload's format":  `UPDATE etl_uploads SET upload_format = 'json_array'`,
		"read visible rows":          `SELECT * FROM processed_data_visible`,
	})
	assertDenied(t, wp, "mightyetl_worker_role", map[string]string{
		"read uploads":           `SELECT * FROM etl_uploads`,
		"write a chunk":          `INSERT INTO etl_upload_chunks VALUES (gen_random_uuid(), gen_random_uuid(), 0, 'x')`,
		"write a part":           `UPDATE etl_upload_parts SET part_bytes = 0`,
		"queue a large job":      `INSERT INTO etl_chunked_job_queue (job_record_id) VALUES (gen_random_uuid())`,
		"change a load's upload": `UPDATE etl_chunked_loads SET upload_id = gen_random_uuid()`,
		"raise the bad records":  `UPDATE etl_chunked_loads SET max_bad_records = 1000`,
		"create a load":          `INSERT INTO etl_chunked_loads (job_record_id, upload_id, load_format, payload_bytes) VALUES (gen_random_uuid(), gen_random_uuid(), 'jsonl', 0)`,
		"read visible rows":      `SELECT * FROM processed_data_visible`,
	})
}
