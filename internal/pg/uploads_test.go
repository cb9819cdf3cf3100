package pg_test

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"io"
	"strconv"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/mightyetl/mightyetl/internal/pg"
	"github.com/mightyetl/mightyetl/internal/pgtest"
)

// uploadLimits are generous bounds for tests that do not probe them.
var uploadLimits = pg.PutPartParams{MaxPartBytes: 64 << 20, MaxUploadBytes: 1 << 30, OwnerMaxStagedBytes: 1 << 30, Expiry: time.Hour}

func hexSum(b []byte) string {
	s := sha256.Sum256(b)
	return hex.EncodeToString(s[:])
}

// patterned returns n bytes that differ from chunk to chunk.
func patterned(n int, seed byte) []byte {
	b := make([]byte, n)
	for i := range b {
		b[i] = seed + byte(i/1000)
	}
	return b
}

func newUpload(t *testing.T, db pg.DBTX, owner, format string) pg.Upload {
	t.Helper()
	u, err := pg.CreateUpload(context.Background(), db, pg.NewUpload{PrincipalScopeHash: pgtest.SHA(owner), Format: format, Expiry: time.Hour})
	if err != nil {
		t.Fatal(err)
	}
	if u.State != pg.UploadOpen || u.StagedBytes != 0 || u.JobID != uuid.Nil || u.Expired || !u.ExpiresAt.After(u.CreatedAt) {
		t.Fatalf("new upload: %+v", u)
	}
	return u
}

func putPart(ctx context.Context, db pg.UploadDB, owner string, id uuid.UUID, n int64, body []byte, limits pg.PutPartParams) (pg.UploadPart, error) {
	p := limits
	p.PrincipalScopeHash, p.UploadID, p.PartNumber, p.SHA256, p.Body = pgtest.SHA(owner), id, n, hexSum(body), bytes.NewReader(body)
	return pg.PutPart(ctx, db, p)
}

func mustPut(t *testing.T, db pg.UploadDB, owner string, id uuid.UUID, n int64, body []byte) {
	t.Helper()
	part, err := putPart(context.Background(), db, owner, id, n, body, uploadLimits)
	if err != nil {
		t.Fatalf("put part %d: %v", n, err)
	}
	if part.Number != n || part.Bytes != int64(len(body)) || part.SHA256 != hexSum(body) {
		t.Fatalf("put part %d: %+v", n, part)
	}
}

func chunkCount(t *testing.T, db pg.DBTX, id uuid.UUID) int {
	t.Helper()
	return pgtest.Count(t, db, `SELECT count(*) FROM etl_upload_chunks WHERE upload_id = $1`, id)
}

// failingReader yields r's bytes, then err.
type failingReader struct {
	r   io.Reader
	err error
}

func (f *failingReader) Read(p []byte) (int, error) {
	n, err := f.r.Read(p)
	if err == io.EOF {
		return n, f.err
	}
	return n, err
}

// TestPutPartStoresChunksAndResumes: a part is stored as chunks of at most
// 1 MiB; GET lists the committed parts with their digests; an interrupted
// PUT (the body breaks after more than one batch was copied) leaves no
// chunk and no part; sending a part again replaces it (the replaced
// attempt's chunks go, staged bytes follow); the stream is the parts in
// order.
func TestPutPartStoresChunksAndResumes(t *testing.T) {
	t.Parallel()
	pool, _ := pgtest.NewDatabase(t)
	ctx := context.Background()
	u := newUpload(t, pool, "owner", pg.UploadFormatJSONL)
	first := patterned(2*pg.MaxUploadChunkBytes+500, 'a')
	mustPut(t, pool, "owner", u.UploadID, 1, first)
	if n := chunkCount(t, pool, u.UploadID); n != 3 {
		t.Fatalf("%d chunks for 2 MiB + 500 bytes, want 3", n)
	}
	if n := pgtest.Count(t, pool, `SELECT count(*) FROM etl_upload_chunks WHERE octet_length(chunk_data) > $1`, pg.MaxUploadChunkBytes); n != 0 {
		t.Fatalf("%d chunks above 1 MiB", n)
	}
	// Stored lz4-compressed where the server has lz4 (PostgreSQL 14+ built
	// with it), which costs about half of pglz's time for the same size.
	var lz4 bool
	if err := pool.QueryRow(ctx, `SELECT 'lz4' = ANY(enumvals) FROM pg_settings WHERE name = 'default_toast_compression'`).Scan(&lz4); err != nil {
		t.Fatal(err)
	}
	// (The last chunk, 500 bytes, stays below the TOAST threshold: never
	// compressed.)
	if n := pgtest.Count(t, pool, `SELECT count(*) FROM etl_upload_chunks WHERE pg_column_compression(chunk_data) = 'lz4'`); lz4 && n != 2 {
		t.Fatalf("%d chunks lz4-compressed, want the two 1 MiB ones", n)
	}

	// Part 2 breaks after 5 MiB (more than one batch): nothing of it stays.
	broken := &failingReader{r: bytes.NewReader(patterned(5<<20, 'x')), err: io.ErrUnexpectedEOF}
	p := uploadLimits
	p.PrincipalScopeHash, p.UploadID, p.PartNumber, p.SHA256, p.Body = pgtest.SHA("owner"), u.UploadID, 2, hexSum([]byte("whatever")), broken
	var bodyErr *pg.UploadBodyError
	if _, err := pg.PutPart(ctx, pool, p); !errors.As(err, &bodyErr) || !errors.Is(err, io.ErrUnexpectedEOF) {
		t.Fatalf("broken body: %v", err)
	}
	got, err := pg.GetUpload(ctx, pool, pgtest.SHA("owner"), u.UploadID)
	if err != nil {
		t.Fatal(err)
	}
	if len(got.Parts) != 1 || got.Parts[0] != (pg.UploadPart{Number: 1, Bytes: int64(len(first)), SHA256: hexSum(first)}) ||
		got.StagedBytes != int64(len(first)) {
		t.Fatalf("after the broken part: %+v", got)
	}
	if n := chunkCount(t, pool, u.UploadID); n != 3 {
		t.Fatalf("%d chunks after the broken part, want 3", n)
	}

	// The client resumes: part 2, then part 1 again with other bytes.
	second := []byte("{\"id\":\"2\"}\n")
	mustPut(t, pool, "owner", u.UploadID, 2, second)
	again := []byte("{\"id\":\"1\"}\n")
	mustPut(t, pool, "owner", u.UploadID, 1, again)
	got, err = pg.GetUpload(ctx, pool, pgtest.SHA("owner"), u.UploadID)
	if err != nil {
		t.Fatal(err)
	}
	want := []pg.UploadPart{{Number: 1, Bytes: int64(len(again)), SHA256: hexSum(again)}, {Number: 2, Bytes: int64(len(second)), SHA256: hexSum(second)}}
	if len(got.Parts) != 2 || got.Parts[0] != want[0] || got.Parts[1] != want[1] || got.StagedBytes != int64(len(again)+len(second)) {
		t.Fatalf("after the replacement: %+v", got)
	}
	if n := chunkCount(t, pool, u.UploadID); n != 2 {
		t.Fatalf("%d chunks after the replacement, want 2", n)
	}
	all, err := io.ReadAll(pg.StreamPayload(ctx, pool, u.UploadID, 1, 0))
	if err != nil || string(all) != string(again)+string(second) {
		t.Fatalf("stream: %q %v", all, err)
	}
}

// TestPutPartRefusals: a wrong digest, a part beyond its limit, an upload
// beyond its limit and an owner beyond the staged-bytes bound are refused
// and leave no chunk; another owner's upload is absent; an expired upload
// takes no part.
func TestPutPartRefusals(t *testing.T) {
	t.Parallel()
	pool, _ := pgtest.NewDatabase(t)
	ctx := context.Background()
	u := newUpload(t, pool, "owner", pg.UploadFormatJSONL)
	body := patterned(3000, 'a')

	p := uploadLimits
	p.PrincipalScopeHash, p.UploadID, p.PartNumber, p.SHA256, p.Body = pgtest.SHA("owner"), u.UploadID, 1, hexSum([]byte("other")), bytes.NewReader(body)
	if _, err := pg.PutPart(ctx, pool, p); !errors.Is(err, pg.ErrUploadDigestMismatch) {
		t.Errorf("wrong digest: %v", err)
	}
	limits := uploadLimits
	limits.MaxPartBytes = 2999
	if _, err := putPart(ctx, pool, "owner", u.UploadID, 1, body, limits); !errors.Is(err, pg.ErrUploadTooLarge) {
		t.Errorf("part beyond its limit: %v", err)
	}
	mustPut(t, pool, "owner", u.UploadID, 1, body)
	limits = uploadLimits
	limits.MaxUploadBytes = 5999
	if _, err := putPart(ctx, pool, "owner", u.UploadID, 2, body, limits); !errors.Is(err, pg.ErrUploadTooLarge) {
		t.Errorf("upload beyond its limit: %v", err)
	}
	// Replacing part 1 by a part of the same size is not growth.
	if _, err := putPart(ctx, pool, "owner", u.UploadID, 1, patterned(3000, 'b'), limits); err != nil {
		t.Errorf("same-size replacement under a low upload limit: %v", err)
	}
	other := newUpload(t, pool, "owner", pg.UploadFormatJSONL)
	limits = uploadLimits
	limits.OwnerMaxStagedBytes = 5999
	if _, err := putPart(ctx, pool, "owner", other.UploadID, 1, body, limits); !errors.Is(err, pg.ErrUploadOwnerQuota) {
		t.Errorf("owner beyond the staged bound: %v", err)
	}
	limits.OwnerMaxStagedBytes = 6000
	if _, err := putPart(ctx, pool, "owner", other.UploadID, 1, body, limits); err != nil {
		t.Errorf("owner at the staged bound: %v", err)
	}
	if _, err := putPart(ctx, pool, "stranger", u.UploadID, 2, body, uploadLimits); !errors.Is(err, pg.ErrNotFound) {
		t.Errorf("another owner's upload: %v", err)
	}
	if _, err := pg.GetUpload(ctx, pool, pgtest.SHA("stranger"), u.UploadID); !errors.Is(err, pg.ErrNotFound) {
		t.Errorf("another owner's GET: %v", err)
	}
	if err := pg.AbortUpload(ctx, pool, pgtest.SHA("stranger"), u.UploadID); !errors.Is(err, pg.ErrNotFound) {
		t.Errorf("another owner's abort: %v", err)
	}
	if n := chunkCount(t, pool, u.UploadID); n != 1 {
		t.Errorf("%d chunks of the upload, want 1", n)
	}
	if _, err := pool.Exec(ctx, `UPDATE etl_uploads SET expires_at = clock_timestamp() - interval '1 second' WHERE upload_id = $1`, u.UploadID); err != nil {
		t.Fatal(err)
	}
	if _, err := putPart(ctx, pool, "owner", u.UploadID, 2, body, uploadLimits); !errors.Is(err, pg.ErrUploadExpired) {
		t.Errorf("expired upload: %v", err)
	}
	if got, err := pg.GetUpload(ctx, pool, pgtest.SHA("owner"), u.UploadID); err != nil || !got.Expired {
		t.Errorf("expired GET: %+v %v", got, err)
	}
	if _, err := submit(ctx, pool, "owner", u.UploadID, "key-expired", hexSum(body), uuid.Nil); !errors.Is(err, pg.ErrUploadExpired) {
		t.Errorf("expired submit: %v", err)
	}
	// Abort takes an expired upload too; its chunks go in batches.
	if err := pg.AbortUpload(ctx, pool, pgtest.SHA("owner"), u.UploadID); err != nil {
		t.Fatal(err)
	}
	if n, err := pg.DeleteUploadChunks(ctx, pool, u.UploadID, 1); err != nil || n != 1 {
		t.Errorf("delete chunks: %d %v", n, err)
	}
	if _, err := pg.GetUpload(ctx, pool, pgtest.SHA("owner"), u.UploadID); !errors.Is(err, pg.ErrNotFound) {
		t.Errorf("aborted upload: %v", err)
	}
	if n := pgtest.Count(t, pool, `SELECT count(*) FROM etl_upload_parts WHERE upload_id = $1`, u.UploadID); n != 0 {
		t.Errorf("%d parts of the aborted upload", n)
	}
}

func submit(ctx context.Context, db pg.UploadDB, owner string, id uuid.UUID, key, digest string, replayOf uuid.UUID) (pg.SubmitUploadOutcome, error) {
	return pg.SubmitUpload(ctx, db, pg.SubmitUploadParams{PrincipalScopeHash: pgtest.SHA(owner), UploadID: id,
		SubmissionKeyHash: pgtest.SHA(owner + ":" + key), SHA256: digest, MaxBadRecords: 2, MaxAttempts: 3,
		MaxUploadBytes: 1 << 30, MaxRecords: 1000, ReplayOf: replayOf})
}

// TestSubmitUploadCreatesAChunkedJob: parts 1..N contiguous or
// etl_upload_incomplete; the whole digest verified from the stored bytes;
// then one transaction writes the job (kind etl_chunked, manifest payload,
// the whole digest), its chunked-queue row (never the claim queue), its
// load row with the record count, the job_available outbox row and the
// upload's SUBMITTED state. Same key and digest: the same job; same key,
// other digest: refused; the submitted upload takes no part, no second job
// and no abort.
func TestSubmitUploadCreatesAChunkedJob(t *testing.T) {
	t.Parallel()
	pool, _ := pgtest.NewDatabase(t)
	ctx := context.Background()
	u := newUpload(t, pool, "owner", pg.UploadFormatJSONL)
	parts := [][]byte{[]byte("{\"id\":\"1\"}\n\n{\"id\""), []byte(":\"2\"}\n  \n{\"id\":\"3\"}")}
	payload := append(append([]byte{}, parts[0]...), parts[1]...)
	digest := hexSum(payload)

	if _, err := submit(ctx, pool, "owner", u.UploadID, "key-1", digest, uuid.Nil); !errors.Is(err, pg.ErrUploadIncomplete) {
		t.Fatalf("no parts: %v", err)
	}
	mustPut(t, pool, "owner", u.UploadID, 2, parts[1])
	if _, err := submit(ctx, pool, "owner", u.UploadID, "key-1", digest, uuid.Nil); !errors.Is(err, pg.ErrUploadIncomplete) {
		t.Fatalf("part 1 missing: %v", err)
	}
	mustPut(t, pool, "owner", u.UploadID, 1, parts[0])
	if _, err := submit(ctx, pool, "owner", u.UploadID, "key-1", hexSum(parts[0]), uuid.Nil); !errors.Is(err, pg.ErrUploadDigestMismatch) {
		t.Fatalf("wrong whole digest: %v", err)
	}
	if _, err := submit(ctx, pool, "stranger", u.UploadID, "key-1", digest, uuid.Nil); !errors.Is(err, pg.ErrNotFound) {
		t.Fatalf("another owner: %v", err)
	}
	out, err := submit(ctx, pool, "owner", u.UploadID, "key-1", digest, uuid.Nil)
	if err != nil {
		t.Fatal(err)
	}
	if !out.Created || out.Job.Kind != pg.KindETLChunked || out.Job.Status != pg.StatusPending || out.Job.RequestDigest != digest || out.Job.Lineage != nil {
		t.Fatalf("submitted: %+v", out)
	}
	id := out.Job.JobID
	var manifest pg.UploadManifest
	var raw string
	if err := pool.QueryRow(ctx, `SELECT request_payload FROM etl_job_records WHERE job_record_id = $1`, id).Scan(&raw); err != nil {
		t.Fatal(err)
	}
	if err := json.Unmarshal([]byte(raw), &manifest); err != nil ||
		manifest != (pg.UploadManifest{UploadID: u.UploadID, Format: pg.UploadFormatJSONL, Bytes: int64(len(payload)), Parts: 2, MaxBadRecords: 2}) {
		t.Fatalf("manifest %s: %+v %v", raw, manifest, err)
	}
	for _, c := range []struct {
		what  string
		query string
		want  int
	}{
		{"chunked queue row", `SELECT count(*) FROM etl_chunked_job_queue WHERE job_record_id = $1`, 1},
		{"claim queue row", `SELECT count(*) FROM etl_job_claim_queue WHERE job_record_id = $1`, 0},
		{"load row (3 records)", `SELECT count(*) FROM etl_chunked_loads WHERE job_record_id = $1 AND load_state = 'LOADING'
			AND records_total = 3 AND payload_bytes = ` + strconv.Itoa(len(payload)) + ` AND max_bad_records = 2 AND next_part_number = 1`, 1},
		{"job_available event", `SELECT count(*) FROM etl_outbox_job_events WHERE event_kind = 'job_available' AND job_record_id = $1`, 1},
		{"submitted upload", `SELECT count(*) FROM etl_uploads WHERE upload_state = 'SUBMITTED' AND job_record_id = $1`, 1},
	} {
		if n := pgtest.Count(t, pool, c.query, id); n != c.want {
			t.Errorf("%s: %d, want %d", c.what, n, c.want)
		}
	}
	again, err := submit(ctx, pool, "owner", u.UploadID, "key-1", digest, uuid.Nil)
	if err != nil || again.Created || again.Job.JobID != id {
		t.Fatalf("same key and digest: %+v %v", again, err)
	}
	if _, err := submit(ctx, pool, "owner", u.UploadID, "key-1", hexSum([]byte("other")), uuid.Nil); !errors.Is(err, pg.ErrUploadKeyReused) {
		t.Fatalf("same key, other digest: %v", err)
	}
	if _, err := submit(ctx, pool, "owner", u.UploadID, "key-2", digest, uuid.Nil); !errors.Is(err, pg.ErrUploadSubmitted) {
		t.Fatalf("second job from the upload: %v", err)
	}
	if _, err := putPart(ctx, pool, "owner", u.UploadID, 3, []byte("x"), uploadLimits); !errors.Is(err, pg.ErrUploadSubmitted) {
		t.Fatalf("part after the submission: %v", err)
	}
	if err := pg.AbortUpload(ctx, pool, pgtest.SHA("owner"), u.UploadID); !errors.Is(err, pg.ErrUploadSubmitted) {
		t.Fatalf("abort after the submission: %v", err)
	}
	if got, err := pg.GetUpload(ctx, pool, pgtest.SHA("owner"), u.UploadID); err != nil || got.State != pg.UploadSubmitted || got.JobID != id {
		t.Fatalf("submitted upload: %+v %v", got, err)
	}
}

// TestSubmitUploadConcurrentIdenticalSubmissionsConverge: submissions of
// one upload with one key and digest racing each other make one job.
func TestSubmitUploadConcurrentIdenticalSubmissionsConverge(t *testing.T) {
	t.Parallel()
	pool, _ := pgtest.NewDatabase(t)
	ctx := context.Background()
	u := newUpload(t, pool, "owner", pg.UploadFormatJSONArray)
	body := []byte(`[{"id":"1"},{"id":"2","x":[1,2,{"y":"],"}]}]`)
	mustPut(t, pool, "owner", u.UploadID, 1, body)
	const n = 4
	outs := make(chan pg.SubmitUploadOutcome, n)
	errs := make(chan error, n)
	for range n {
		go func() {
			o, err := submit(ctx, pool, "owner", u.UploadID, "key-race", hexSum(body), uuid.Nil)
			outs <- o
			errs <- err
		}()
	}
	created := 0
	var id uuid.UUID
	for range n {
		o, err := <-outs, <-errs
		if err != nil {
			t.Fatal(err)
		}
		if o.Created {
			created++
		}
		if id != uuid.Nil && o.Job.JobID != id {
			t.Fatalf("two jobs: %v %v", id, o.Job.JobID)
		}
		id = o.Job.JobID
	}
	if created != 1 {
		t.Fatalf("%d created, want 1", created)
	}
	if n := pgtest.Count(t, pool, `SELECT count(*) FROM etl_chunked_loads WHERE job_record_id = $1 AND records_total = 2`, id); n != 1 {
		t.Fatalf("load row with 2 records: %d", n)
	}
}

// TestSubmitUploadReplaysAFailedChunkedJob: replayOf makes a replay of the
// owner's FAILED chunked job (lineage as /replays) when the new upload's
// digest is the source's; another digest, an active source or a key reused
// are refused.
func TestSubmitUploadReplaysAFailedChunkedJob(t *testing.T) {
	t.Parallel()
	pool, _ := pgtest.NewDatabase(t)
	ctx := context.Background()
	body := []byte("{\"id\":\"1\"}\n")
	first := newUpload(t, pool, "owner", pg.UploadFormatJSONL)
	mustPut(t, pool, "owner", first.UploadID, 1, body)
	src, err := submit(ctx, pool, "owner", first.UploadID, "key-src", hexSum(body), uuid.Nil)
	if err != nil {
		t.Fatal(err)
	}
	second := newUpload(t, pool, "owner", pg.UploadFormatJSONL)
	mustPut(t, pool, "owner", second.UploadID, 1, body)
	if _, err := submit(ctx, pool, "owner", second.UploadID, "key-replay", hexSum(body), src.Job.JobID); !errors.Is(err, pg.ErrReplaySourceActive) {
		t.Fatalf("active source: %v", err)
	}
	if _, err := pool.Exec(ctx, `UPDATE etl_job_records SET job_status = 'FAILED', request_payload = NULL,
		failure_code = 'etl_invalid_record', updated_at = clock_timestamp() WHERE job_record_id = $1`, src.Job.JobID); err != nil {
		t.Fatal(err)
	}
	other := newUpload(t, pool, "owner", pg.UploadFormatJSONL)
	mustPut(t, pool, "owner", other.UploadID, 1, []byte("{}\n"))
	if _, err := submit(ctx, pool, "owner", other.UploadID, "key-replay", hexSum([]byte("{}\n")), src.Job.JobID); !errors.Is(err, pg.ErrReplayPayloadMismatch) {
		t.Fatalf("other payload: %v", err)
	}
	if _, err := submit(ctx, pool, "stranger", second.UploadID, "key-replay", hexSum(body), src.Job.JobID); !errors.Is(err, pg.ErrNotFound) {
		t.Fatalf("another owner: %v", err)
	}
	out, err := submit(ctx, pool, "owner", second.UploadID, "key-replay", hexSum(body), src.Job.JobID)
	if err != nil {
		t.Fatal(err)
	}
	want := pg.Lineage{SourceJobID: src.Job.JobID, RootJobID: src.Job.JobID, Generation: 1}
	if !out.Created || out.Job.Lineage == nil || *out.Job.Lineage != want {
		t.Fatalf("replay: %+v", out)
	}
	again, err := submit(ctx, pool, "owner", second.UploadID, "key-replay", hexSum(body), src.Job.JobID)
	if err != nil || again.Created || again.Job.JobID != out.Job.JobID {
		t.Fatalf("replay again: %+v %v", again, err)
	}
	if _, err := submit(ctx, pool, "owner", second.UploadID, "key-replay", hexSum(body), uuid.Nil); !errors.Is(err, pg.ErrUploadKeyReused) {
		t.Fatalf("replay key as a plain submission: %v", err)
	}
	var gen int
	if err := pool.QueryRow(ctx, `SELECT replay_generation_count FROM etl_job_records WHERE job_record_id = $1`, out.Job.JobID).Scan(&gen); err != nil || gen != 1 {
		t.Fatalf("stored generation %d %v", gen, err)
	}
}

// TestRecordCounter pins the cheap record counts: JSON Lines count the
// lines holding anything but blanks (the last one without its newline
// too); a JSON array its top-level elements, whatever brackets, commas and
// escaped quotes its strings hold, split across writes anywhere; a JSON
// array that is not one counts as unknown.
func TestRecordCounter(t *testing.T) {
	for _, c := range []struct {
		format, payload string
		want            int64 // -1: unknown
	}{
		{pg.UploadFormatJSONL, "", 0},
		{pg.UploadFormatJSONL, "{}", 1},
		{pg.UploadFormatJSONL, "{}\n", 1},
		{pg.UploadFormatJSONL, "{}\n\n \t\r\n{}\r\n{}", 3},
		{pg.UploadFormatJSONArray, "[]", 0},
		{pg.UploadFormatJSONArray, " [ {} ] \n", 1},
		{pg.UploadFormatJSONArray, `[{"a":"],[{\"x"},{"b":[1,2,[3]]},"s",1]`, 4},
		{pg.UploadFormatJSONArray, `{"a":1}`, -1},
		{pg.UploadFormatJSONArray, `[{}`, -1},
		{pg.UploadFormatJSONArray, `[{}] x`, -1},
		{pg.UploadFormatJSONArray, ``, -1},
	} {
		for split := 0; split <= len(c.payload); split++ {
			rc := pg.NewRecordCounter(c.format)
			_, _ = rc.Write([]byte(c.payload[:split]))
			_, _ = rc.Write([]byte(c.payload[split:]))
			got := int64(-1)
			if n := rc.Records(); n != nil {
				got = *n
			}
			if got != c.want {
				t.Errorf("%s %q split at %d: %d, want %d", c.format, c.payload, split, got, c.want)
			}
		}
	}
}

// TestSubmitUploadRereadsPartsThatChangedWhileVerifying: a part committed
// between the submission's verification and its transaction (here: while
// the transaction waits for the upload's lock) is seen under the lock; the
// submission reads the payload again and judges the parts as they are now
// (the declared digest no longer matches: refused, no job).
func TestSubmitUploadRereadsPartsThatChangedWhileVerifying(t *testing.T) {
	t.Parallel()
	pool, _ := pgtest.NewDatabase(t)
	ctx := context.Background()
	u := newUpload(t, pool, "owner", pg.UploadFormatJSONL)
	before := []byte("{\"id\":\"1\"}\n")
	mustPut(t, pool, "owner", u.UploadID, 1, before)

	holder, err := pool.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = holder.Rollback(ctx) }()
	if _, err := holder.Exec(ctx, `SELECT 1 FROM etl_uploads WHERE upload_id = $1 FOR UPDATE`, u.UploadID); err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() {
		_, err := submit(ctx, pool, "owner", u.UploadID, "key-race", hexSum(before), uuid.Nil)
		done <- err
	}()
	pgtest.WaitForLockWait(t, pool, "\nSELECT upload_state, upload_format")
	// Part 1 is replaced while the submission waits (as PutPart's commit
	// would: a new attempt's chunk, the part row pointed at it).
	attempt := uuid.Must(uuid.NewV7())
	after := []byte("{\"id\":\"2\"}\n")
	if _, err := holder.Exec(ctx, `INSERT INTO etl_upload_chunks VALUES ($1, $2, 0, $3)`, u.UploadID, attempt, after); err != nil {
		t.Fatal(err)
	}
	if _, err := holder.Exec(ctx, `UPDATE etl_upload_parts SET part_attempt_id = $2, part_sha256 = sha256($3::bytea)
		WHERE upload_id = $1 AND part_number = 1`, u.UploadID, attempt, after); err != nil {
		t.Fatal(err)
	}
	if err := holder.Commit(ctx); err != nil {
		t.Fatal(err)
	}
	if err := <-done; !errors.Is(err, pg.ErrUploadDigestMismatch) {
		t.Fatalf("submission across a part change: %v, want ErrUploadDigestMismatch", err)
	}
	if n := pgtest.Count(t, pool, `SELECT count(*) FROM etl_job_records`); n != 0 {
		t.Fatalf("%d jobs", n)
	}
	if out, err := submit(ctx, pool, "owner", u.UploadID, "key-race", hexSum(after), uuid.Nil); err != nil || !out.Created {
		t.Fatalf("submission of the parts as they are: %+v %v", out, err)
	}
}
