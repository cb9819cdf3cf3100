package httpapi

import (
	"bufio"
	"bytes"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"strings"
	"testing"

	"github.com/mightyetl/mightyetl/internal/intake"
)

// TestUploadInterruptedPartResumesAndSubmits is the resumable upload over
// real HTTP: a part whose connection breaks after more than one stored
// batch leaves nothing (GET lists only the committed parts); the client
// sends it again (gzip), replaces another part, and submits with the whole
// digest: 202 like submit, with Location and Idempotency-Replayed; the same
// key and digest answer the same job (replayed), another digest is 422.
func TestUploadInterruptedPartResumesAndSubmits(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	u := e.createUpload("alice", "jsonl")
	if u.State != "OPEN" || u.Format != "jsonl" || u.StagedBytes != 0 || len(u.Parts) != 0 || u.MaxPartBytes != intake.DefaultUploadMaxPartBytes || u.JobID != "" {
		t.Fatalf("new upload: %+v", u)
	}
	part1 := strings.Repeat("{\"id\":\"a\"}\n", 10)
	e.putPart("alice", u.UploadID, "1", part1)

	// Part 2: 6 MiB declared, 5 MiB sent (more than one 4 MiB batch), then
	// the connection closes.
	big := strings.Repeat("{\"id\":\"b\"}\n", 6<<20/11)
	addr, _ := url.Parse(e.srv.URL)
	conn, err := net.Dial("tcp", addr.Host)
	if err != nil {
		t.Fatal(err)
	}
	fmt.Fprintf(conn, "PUT /api/etl/uploads/%s/parts/2 HTTP/1.1\r\nHost: %s\r\nAuthorization: Test alice\r\n"+
		"Content-Type: application/x-ndjson\r\nX-Part-SHA256: %s\r\nContent-Length: %d\r\n\r\n", u.UploadID, addr.Host, sha256Hex(big), len(big))
	if _, err := io.WriteString(conn, big[:5<<20]); err != nil {
		t.Fatal(err)
	}
	_ = conn.Close()
	waitFor(t, "the broken part's rejection", func() bool {
		return strings.Contains(e.metricsText(), `mightyetl_upload_requests_total{operation="part",outcome="rejected"} 1`)
	})
	if n := e.count(`SELECT count(*) FROM etl_upload_chunks WHERE upload_id = $1`, u.UploadID); n != 1 {
		t.Fatalf("%d chunks after the broken part, want part 1's only", n)
	}
	var got uploadView
	e.do(req{Method: "GET", Path: "/api/etl/uploads/" + u.UploadID, Principal: "alice"}).json(t, &got)
	if len(got.Parts) != 1 || got.Parts[0].PartNumber != 1 || got.Parts[0].SHA256 != sha256Hex(part1) || got.StagedBytes != int64(len(part1)) {
		t.Fatalf("after the broken part: %+v", got)
	}

	// Resume: part 2 gzipped, then part 1 replaced.
	if res := e.do(partReq("alice", u.UploadID, "2", gzipped(t, big), sha256Hex(big), map[string]string{"Content-Encoding": "gzip"})); res.Status != http.StatusOK {
		t.Fatalf("gzip part: %d %s", res.Status, res.Body)
	} else {
		var p struct {
			PartNumber int64  `json:"partNumber"`
			Bytes      int64  `json:"bytes"`
			SHA256     string `json:"sha256"`
		}
		res.json(t, &p)
		if p.PartNumber != 2 || p.Bytes != int64(len(big)) || p.SHA256 != sha256Hex(big) {
			t.Fatalf("gzip part: %+v", p)
		}
	}
	part1 = "{\"id\":\"c\"}\n"
	e.putPart("alice", u.UploadID, "1", part1)
	e.do(req{Method: "GET", Path: "/api/etl/uploads/" + u.UploadID, Principal: "alice"}).json(t, &got)
	if len(got.Parts) != 2 || got.Parts[0].SHA256 != sha256Hex(part1) || got.Parts[1].Bytes != int64(len(big)) ||
		got.StagedBytes != int64(len(part1)+len(big)) {
		t.Fatalf("after the resume: %+v", got)
	}

	whole := sha256Hex(part1 + big)
	body := `{"sha256":"` + whole + `"}`
	res := e.do(req{Method: "POST", Path: "/api/etl/uploads/" + u.UploadID + "/jobs", Principal: "alice", Key: "upload-key-000000001", Body: body})
	if res.Status != http.StatusAccepted || res.Header.Get("Idempotency-Replayed") != "false" {
		t.Fatalf("submit: %d %v %s", res.Status, res.Header, res.Body)
	}
	var s submitted
	res.json(t, &s)
	if s.JobStatus != "PENDING" || res.Header.Get("Location") != "/api/etl/jobs/"+s.JobRecordID || s.StatusURL != res.Header.Get("Location") {
		t.Fatalf("submit: %+v Location %q", s, res.Header.Get("Location"))
	}
	if n := e.count(`SELECT count(*) FROM etl_job_records WHERE job_record_id = $1 AND job_kind = 'etl_chunked'`, s.JobRecordID); n != 1 {
		t.Fatalf("chunked job rows: %d", n)
	}
	if n := e.count(`SELECT count(*) FROM etl_chunked_loads WHERE job_record_id = $1 AND records_total = $2`, s.JobRecordID, 1+len(big)/11); n != 1 {
		t.Fatalf("load row with the record count: %d", n)
	}
	again := e.do(req{Method: "POST", Path: "/api/etl/uploads/" + u.UploadID + "/jobs", Principal: "alice", Key: "upload-key-000000001", Body: body})
	var s2 submitted
	again.json(t, &s2)
	if again.Status != http.StatusAccepted || again.Header.Get("Idempotency-Replayed") != "true" || s2.JobRecordID != s.JobRecordID {
		t.Fatalf("same key and digest: %d %v %+v", again.Status, again.Header, s2)
	}
	other := e.do(req{Method: "POST", Path: "/api/etl/uploads/" + u.UploadID + "/jobs", Principal: "alice", Key: "upload-key-000000001",
		Body: `{"sha256":"` + sha256Hex("other") + `"}`})
	checkProblem(t, other, "/api/etl/uploads/"+u.UploadID+"/jobs", 422, "etl_job_submission_key_reused")
	e.do(req{Method: "GET", Path: "/api/etl/uploads/" + u.UploadID, Principal: "alice"}).json(t, &got)
	if got.State != "SUBMITTED" || got.JobID != s.JobRecordID {
		t.Fatalf("submitted upload: %+v", got)
	}
	if res := e.do(req{Method: "GET", Path: "/api/etl/jobs/" + s.JobRecordID, Principal: "alice"}); res.Status != http.StatusOK {
		t.Fatalf("job status: %d %s", res.Status, res.Body)
	}
	logs := e.logs.String()
	for _, secret := range []string{u.UploadID, s.JobRecordID, whole, sha256Hex(big), "upload-key-000000001"} {
		if strings.Contains(logs, secret) {
			t.Errorf("the log holds an id, key or digest %q", secret)
		}
	}
}

// TestUploadDigestsFormatsAndOwners: a part or a whole payload whose bytes
// do not match the declared SHA-256 is 400 etl_upload_digest_mismatch and
// nothing of the part stays; both formats are accepted (records counted:
// JSON Lines' non-empty lines, a JSON array's elements); another owner's
// upload is 404 on every route; parts must be 1..N.
func TestUploadDigestsFormatsAndOwners(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	arr := e.createUpload("alice", "json_array")
	path := "/api/etl/uploads/" + arr.UploadID
	checkProblem(t, e.do(partReq("alice", arr.UploadID, "1", `[{"id":"a"},`, sha256Hex("x"), nil)), path+"/parts/1", 400, "etl_upload_digest_mismatch")
	if n := e.count(`SELECT count(*) FROM etl_upload_chunks WHERE upload_id = $1`, arr.UploadID); n != 0 {
		t.Fatalf("%d chunks of a refused part", n)
	}
	e.putPart("alice", arr.UploadID, "1", `[{"id":"a"},`)
	submit := func(principal, id, key, body string) response {
		return e.do(req{Method: "POST", Path: "/api/etl/uploads/" + id + "/jobs", Principal: principal, Key: key, Body: body})
	}
	checkProblem(t, submit("alice", arr.UploadID, "upload-key-000000010", `{"sha256":"`+sha256Hex(`[{"id":"a"}]`)+`"}`), path+"/jobs", 400, "etl_upload_digest_mismatch")
	e.putPart("alice", arr.UploadID, "3", `{"id":"c"}]`)
	checkProblem(t, submit("alice", arr.UploadID, "upload-key-000000010", `{"sha256":"`+sha256Hex(`[{"id":"a"},{"id":"c"}]`)+`"}`), path+"/jobs", 409, "etl_upload_incomplete")
	e.putPart("alice", arr.UploadID, "2", `{"id":"b","n":[1,2]},`)
	whole := sha256Hex(`[{"id":"a"},{"id":"b","n":[1,2]},{"id":"c"}]`)

	for _, r := range []req{
		{Method: "GET", Path: path, Principal: "bob"},
		{Method: "DELETE", Path: path, Principal: "bob"},
		partReq("bob", arr.UploadID, "4", "x", sha256Hex("x"), nil),
		{Method: "POST", Path: path + "/jobs", Principal: "bob", Key: "upload-key-000000011", Body: `{"sha256":"` + whole + `"}`},
	} {
		checkProblem(t, e.do(r), r.Path, 404, "etl_upload_not_found")
	}
	res := submit("alice", arr.UploadID, "upload-key-000000011", `{"sha256":"`+whole+`","maxBadRecords":5}`)
	if res.Status != http.StatusAccepted {
		t.Fatalf("json array submit: %d %s", res.Status, res.Body)
	}
	var s submitted
	res.json(t, &s)
	if n := e.count(`SELECT count(*) FROM etl_chunked_loads WHERE job_record_id = $1 AND records_total = 3 AND max_bad_records = 5
		AND load_format = 'json_array'`, s.JobRecordID); n != 1 {
		t.Fatalf("json array load row: %d", n)
	}

	lines := e.createUpload("alice", "")
	e.putPart("alice", lines.UploadID, "1", "{\"id\":\"a\"}\n\n{\"id\":\"b\"}\n  \n{\"id\":\"c\"}")
	res = submit("alice", lines.UploadID, "upload-key-000000012", `{"sha256":"`+sha256Hex("{\"id\":\"a\"}\n\n{\"id\":\"b\"}\n  \n{\"id\":\"c\"}")+`"}`)
	if res.Status != http.StatusAccepted {
		t.Fatalf("jsonl submit: %d %s", res.Status, res.Body)
	}
	res.json(t, &s)
	if n := e.count(`SELECT count(*) FROM etl_chunked_loads WHERE job_record_id = $1 AND records_total = 3 AND load_format = 'jsonl'`, s.JobRecordID); n != 1 {
		t.Fatalf("jsonl load row: %d", n)
	}
}

// TestUploadExpiryAndAbort: an OPEN upload past its expiry (database
// clock) is 410 for GET, parts and submission; DELETE removes an upload,
// expired or not, with its parts and chunks (204, then 404); a submitted
// upload cannot be deleted (409).
func TestUploadExpiryAndAbort(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	u := e.createUpload("alice", "")
	e.putPart("alice", u.UploadID, "1", "{}\n")
	e.expireUpload(u.UploadID)
	path := "/api/etl/uploads/" + u.UploadID
	checkProblem(t, e.do(req{Method: "GET", Path: path, Principal: "alice"}), path, 410, "etl_upload_expired")
	checkProblem(t, e.do(partReq("alice", u.UploadID, "2", "{}\n", sha256Hex("{}\n"), nil)), path+"/parts/2", 410, "etl_upload_expired")
	checkProblem(t, e.do(req{Method: "POST", Path: path + "/jobs", Principal: "alice", Key: "upload-key-000000020", Body: `{"sha256":"` + sha256Hex("{}\n") + `"}`}),
		path+"/jobs", 410, "etl_upload_expired")
	if res := e.do(req{Method: "DELETE", Path: path, Principal: "alice"}); res.Status != http.StatusNoContent {
		t.Fatalf("delete: %d %s", res.Status, res.Body)
	}
	checkProblem(t, e.do(req{Method: "GET", Path: path, Principal: "alice"}), path, 404, "etl_upload_not_found")
	if n := e.count(`SELECT (SELECT count(*) FROM etl_upload_chunks WHERE upload_id = $1) + (SELECT count(*) FROM etl_upload_parts WHERE upload_id = $1)`, u.UploadID); n != 0 {
		t.Fatalf("%d chunks and parts of a deleted upload", n)
	}

	done := e.createUpload("alice", "")
	e.putPart("alice", done.UploadID, "1", "{}\n")
	if res := e.do(req{Method: "POST", Path: "/api/etl/uploads/" + done.UploadID + "/jobs", Principal: "alice", Key: "upload-key-000000021",
		Body: `{"sha256":"` + sha256Hex("{}\n") + `"}`}); res.Status != http.StatusAccepted {
		t.Fatalf("submit: %d %s", res.Status, res.Body)
	}
	checkProblem(t, e.do(req{Method: "DELETE", Path: "/api/etl/uploads/" + done.UploadID, Principal: "alice"}), "/api/etl/uploads/"+done.UploadID, 409, "etl_upload_already_submitted")
}

// unreadBody fails the test when the handler reads it.
type unreadBody struct{ t *testing.T }

func (b unreadBody) Read([]byte) (int, error) {
	b.t.Error("the body of a refused part was read")
	return 0, io.EOF
}

// TestUploadLimits: with small limits, a declared Content-Length beyond the
// part limit is 413 etl_upload_too_large before any byte is read; a
// streamed body beyond it, and a gzip body that decompresses beyond it,
// are 413 as soon as the limit is passed; an owner whose OPEN uploads
// would stage more than the bound is 413 etl_upload_owner_quota_exceeded;
// a payload with more records than the limit is refused at submission.
func TestUploadLimits(t *testing.T) {
	t.Parallel()
	e := newEnv(t, func(_ *Options, so *intake.Options) {
		so.Uploads = intake.UploadOptions{MaxBytes: 4 << 20, MaxPartBytes: 1 << 20, OwnerMaxStagedBytes: 3 << 19, MaxRecords: 2}
	})
	h, err := NewHandler(e.opts)
	if err != nil {
		t.Fatal(err)
	}
	u := e.createUpload("alice", "")
	path := "/api/etl/uploads/" + u.UploadID + "/parts/1"
	put := func(body io.Reader, length int64, digest string, gzip bool) *recorder {
		hr, _ := http.NewRequest("PUT", path, body)
		hr.ContentLength = length
		hr.Header.Set("Authorization", "Test alice")
		hr.Header.Set("X-Part-SHA256", digest)
		if gzip {
			hr.Header.Set("Content-Encoding", "gzip")
		}
		rec := newRecorder()
		h.ServeHTTP(rec, hr)
		return rec
	}
	tooLarge := func(what string, rec *recorder, code string) {
		t.Helper()
		mw := rec.ResponseWriter.(*memoryWriter)
		if rec.status != http.StatusRequestEntityTooLarge || !strings.Contains(mw.body.String(), `"errorCode":"`+code+`"`) {
			t.Errorf("%s: %d %s", what, rec.status, mw.body.String())
		}
	}
	over := bytes.Repeat([]byte{'x'}, 1<<20+1)
	tooLarge("declared length", put(unreadBody{t}, 1<<20+1, sha256Hex(string(over)), false), "etl_upload_too_large")
	tooLarge("streamed body", put(bufio.NewReader(bytes.NewReader(over)), -1, sha256Hex(string(over)), false), "etl_upload_too_large")
	tooLarge("decompressed body", put(strings.NewReader(gzipped(t, string(over))), -1, sha256Hex(string(over)), true), "etl_upload_too_large")
	if rec := put(strings.NewReader(gzipped(t, string(over[:1<<20]))), -1, sha256Hex(string(over[:1<<20])), true); rec.status != http.StatusOK {
		t.Fatalf("a part at the limit: %d %s", rec.status, rec.ResponseWriter.(*memoryWriter).body.String())
	}
	// The owner stages 1 MiB; another upload's part of 1 MiB would make 2 MiB > 1.5 MiB.
	other := e.createUpload("alice", "")
	res := e.do(partReq("alice", other.UploadID, "1", string(over[:1<<20]), sha256Hex(string(over[:1<<20])), nil))
	checkProblem(t, res, "/api/etl/uploads/"+other.UploadID+"/parts/1", 413, "etl_upload_owner_quota_exceeded")
	e.putPart("bob", e.createUpload("bob", "").UploadID, "1", string(over[:1<<20])) // another owner's bound is its own

	small := e.createUpload("alice", "")
	e.putPart("alice", small.UploadID, "1", "{}\n{}\n{}\n")
	checkProblem(t, e.do(req{Method: "POST", Path: "/api/etl/uploads/" + small.UploadID + "/jobs", Principal: "alice", Key: "upload-key-000000030",
		Body: `{"sha256":"` + sha256Hex("{}\n{}\n{}\n") + `"}`}), "/api/etl/uploads/"+small.UploadID+"/jobs", 413, "etl_upload_too_large")
	if n := e.count(`SELECT count(*) FROM etl_job_records`); n != 0 {
		t.Fatalf("%d jobs after refusals", n)
	}
	if strings.Contains(e.logs.String(), u.UploadID) {
		t.Error("the log holds an upload id")
	}
}
