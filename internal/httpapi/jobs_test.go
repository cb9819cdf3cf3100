package httpapi

import (
	"context"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"strings"
	"sync"
	"testing"

	"github.com/google/uuid"
	"github.com/mightyetl/mightyetl/internal/auth"
	"github.com/mightyetl/mightyetl/internal/codes"
	"github.com/mightyetl/mightyetl/internal/intake"
	"github.com/mightyetl/mightyetl/internal/lease"
	"github.com/mightyetl/mightyetl/internal/pg"
	"github.com/mightyetl/mightyetl/internal/pgtest"
)

func TestSubmitAccepted(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	s, res := e.submit("alice", "key-accepted-0000001", sampleBody)
	if s.JobStatus != "PENDING" || s.StatusURL != "/api/etl/jobs/"+s.JobRecordID {
		t.Errorf("body %+v", s)
	}
	if res.Header.Get("Location") != s.StatusURL || res.Header.Get("Idempotency-Replayed") != "false" ||
		res.Header.Get("Cache-Control") != "no-store" || res.Header.Get("Content-Type") != "application/json" {
		t.Errorf("headers %v", res.Header)
	}
	var payload string
	if err := e.pool.QueryRow(context.Background(), "SELECT request_payload FROM etl_job_records").Scan(&payload); err != nil || payload != sampleBody {
		t.Errorf("payload %q %v", payload, err)
	}
	if n := e.count("SELECT count(*) FROM etl_outbox_events WHERE event_kind = 'job_available'"); n != 1 {
		t.Errorf("outbox rows %d", n)
	}
	// Empty batch accepted; raw and sf-string keys are the same key.
	e.submit("alice", "key-empty-batch-0001", "[]")
	_, res = e.submit("alice", `"key-empty-batch-0001"`, "[]")
	if res.Header.Get("Idempotency-Replayed") != "true" {
		t.Error("sf-string key not normalised to the raw key")
	}
}

func TestIdempotency(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	first, _ := e.submit("alice", "key-idem-00000000001", sampleBody)

	// Replay gives the same job with its current status.
	c := claimOne(t, e)
	if c.JobID.String() != first.JobRecordID {
		t.Fatal("claimed another job")
	}
	again, res := e.submit("alice", "key-idem-00000000001", sampleBody)
	if again.JobRecordID != first.JobRecordID || again.JobStatus != "RUNNING" || res.Header.Get("Idempotency-Replayed") != "true" {
		t.Errorf("replay %+v %v", again, res.Header)
	}
	if res.Header.Get("Location") != "/api/etl/jobs/"+first.JobRecordID {
		t.Errorf("replay location %q", res.Header.Get("Location"))
	}

	// Same key, other body.
	r := e.do(req{Method: "POST", Path: "/api/etl/jobs", Principal: "alice", Key: "key-idem-00000000001", Body: sampleBody + " "})
	checkProblem(t, r, "/api/etl/jobs", 422, "etl_job_submission_key_reused")

	// Another principal with the same key gets its own job.
	other, res := e.submit("bob", "key-idem-00000000001", sampleBody)
	if other.JobRecordID == first.JobRecordID || res.Header.Get("Idempotency-Replayed") != "false" {
		t.Errorf("bob got %+v", other)
	}

	// 50 concurrent identical submissions make one job.
	const n = 50
	var wg sync.WaitGroup
	start := make(chan struct{})
	results := make([]response, n)
	for i := range n {
		wg.Go(func() {
			<-start
			results[i] = e.do(req{Method: "POST", Path: "/api/etl/jobs", Principal: "carol", Key: "key-concurrent-00001", Body: sampleBody})
		})
	}
	close(start)
	wg.Wait()
	fresh, ids := 0, map[string]bool{}
	for _, r := range results {
		if r.Status != 202 {
			t.Fatalf("concurrent: %d %s", r.Status, r.Body)
		}
		if r.Header.Get("Idempotency-Replayed") == "false" {
			fresh++
		}
		var s submitted
		r.json(t, &s)
		ids[s.JobRecordID] = true
	}
	if fresh != 1 || len(ids) != 1 {
		t.Errorf("concurrent identical: %d fresh, %d jobs", fresh, len(ids))
	}
	if n := e.count("SELECT count(*) FROM etl_job_records"); n != 3 {
		t.Errorf("jobs %d, want 3", n)
	}
	m := e.metricsText()
	for _, want := range []string{
		`mightyetl_jobs_submitted_total{outcome="accepted"} 3`,
		`mightyetl_jobs_submitted_total{outcome="replayed"} 50`,
		`mightyetl_jobs_submitted_total{outcome="rejected"} 1`,
	} {
		if !strings.Contains(m, want) {
			t.Errorf("metrics lack %s", want)
		}
	}
}

func TestOwnership(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	a, _ := e.submit("alice", "key-owner-0000000001", sampleBody)
	e.submit("alice", "key-owner-0000000002", sampleBody)
	e.submit("bob", "key-owner-0000000003", sampleBody)
	for _, m := range []req{
		{Method: "GET", Path: "/api/etl/jobs/" + a.JobRecordID, Principal: "bob"},
		{Method: "GET", Path: "/api/etl/jobs/" + a.JobRecordID, Principal: "bob", Header: map[string]string{"If-None-Match": "*"}},
	} {
		checkProblem(t, e.do(m), m.Path, 404, "etl_job_not_found")
	}
	var page listResponse
	e.do(req{Method: "GET", Path: "/api/etl/jobs", Principal: "bob"}).json(t, &page)
	if len(page.Jobs) != 1 || page.Jobs[0].JobRecordID == a.JobRecordID {
		t.Errorf("bob sees %+v", page.Jobs)
	}
	var alicePage listResponse
	e.do(req{Method: "GET", Path: "/api/etl/jobs?limit=1", Principal: "alice"}).json(t, &alicePage)
	if alicePage.NextCursor == "" {
		t.Fatal("no cursor")
	}
	r := req{Method: "GET", Path: "/api/etl/jobs?cursor=" + alicePage.NextCursor, Principal: "bob"}
	checkProblem(t, e.do(r), r.Path, 400, "etl_invalid_job_page_cursor")
}

func TestConditionalPolling(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	// A second, independent API instance on the same database.
	e2 := newEnvOn(t, e.pool, e.url)
	s, _ := e.submit("alice", "key-poll-00000000001", sampleBody)
	path := "/api/etl/jobs/" + s.JobRecordID
	get := func(e *env, inm string) response {
		r := req{Method: "GET", Path: path, Principal: "alice"}
		if inm != "" {
			r.Header = map[string]string{"If-None-Match": inm}
		}
		return e.do(r)
	}
	r1, r2 := get(e, ""), get(e2, "")
	etag := r1.Header.Get("ETag")
	if r1.Status != 200 || !strings.HasPrefix(etag, `W/"`) || etag != r2.Header.Get("ETag") {
		t.Fatalf("etags %q %q", etag, r2.Header.Get("ETag"))
	}
	if r1.Header.Get("Retry-After") != "2" || r1.Header.Get("Cache-Control") != "no-store" {
		t.Errorf("pending headers %v", r1.Header)
	}
	var v intake.JobView
	r1.json(t, &v)
	if v.JobStatus != "PENDING" || v.AttemptCount != 0 || v.FailureCode != nil || !strings.HasSuffix(v.CreatedAt, "Z") || len(v.CreatedAt) != 27 {
		t.Errorf("view %+v", v)
	}
	if strings.Contains(string(r1.Body), "failureCode") {
		t.Error("failureCode present while unset")
	}
	for _, inm := range []string{etag, strings.TrimPrefix(etag, "W/"), `"x", ` + etag, "*"} {
		r := get(e2, inm)
		if r.Status != 304 || len(r.Body) != 0 || r.Header.Get("ETag") != etag || r.Header.Get("Cache-Control") != "no-store" {
			t.Errorf("If-None-Match %s: %d %v %q", inm, r.Status, r.Header, r.Body)
		}
	}
	if r := get(e, `W/"other"`); r.Status != 200 {
		t.Errorf("non-matching tag: %d", r.Status)
	}
	// A state change changes the tag; a terminal job gets no Retry-After.
	c := claimOne(t, e)
	r3 := get(e, etag)
	if r3.Status != 200 || r3.Header.Get("ETag") == etag || r3.Header.Get("Retry-After") == "" {
		t.Errorf("running: %d %v", r3.Status, r3.Header)
	}
	if err := pgFail(e, c); err != nil {
		t.Fatal(err)
	}
	r4 := get(e2, "")
	var failed intake.JobView
	r4.json(t, &failed)
	if r4.Header.Get("Retry-After") != "" || failed.FailureCode == nil || r4.Header.Get("ETag") != get(e, "").Header.Get("ETag") {
		t.Errorf("failed: %v %s", r4.Header, r4.Body)
	}
}

func pgFail(e *env, c lease.Claim) error {
	return lease.Fail(context.Background(), e.pool, c.Ref, codes.TargetFailure)
}

func intakeScope(principal string) string { return auth.ScopeHash(testHashKey, principal) }

func TestPagination(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	var jobs []pg.NewJob
	for i := range 250 {
		jobs = append(jobs, newTestJob(t, "alice", fmt.Sprintf("key-page-%011d", i)))
	}
	pgtest.InsertJobs(t, e.pool, jobs...)
	seen := map[string]int{}
	var order []intake.JobView
	path := "/api/etl/jobs?limit=100"
	pages := 0
	for path != "" {
		res := e.do(req{Method: "GET", Path: path, Principal: "alice"})
		if res.Status != 200 || res.Header.Get("Cache-Control") != "no-store" {
			t.Fatalf("page: %d %s", res.Status, res.Body)
		}
		var page listResponse
		res.json(t, &page)
		pages++
		if pages == 2 {
			// Jobs inserted while paging sort before the cursor.
			for i := range 5 {
				e.submit("alice", fmt.Sprintf("key-late-%011d", i), sampleBody)
			}
		}
		for _, j := range page.Jobs {
			seen[j.JobRecordID]++
			order = append(order, j)
		}
		link := res.Header.Get("Link")
		if page.NextCursor == "" {
			if link != "" {
				t.Errorf("last page has Link %q", link)
			}
			path = ""
			continue
		}
		want := `</api/etl/jobs?cursor=` + page.NextCursor + `&limit=100>; rel="next"`
		if link != want {
			t.Errorf("Link %q, want %q", link, want)
		}
		path = strings.TrimSuffix(strings.TrimPrefix(link, "<"), `>; rel="next"`)
	}
	if pages != 3 || len(seen) != 250 || len(order) != 250 {
		t.Fatalf("pages %d, jobs %d/%d", pages, len(seen), len(order))
	}
	for id, n := range seen {
		if n != 1 {
			t.Errorf("job %s seen %d times", id, n)
		}
	}
	for i := 1; i < len(order); i++ {
		a, b := order[i-1], order[i]
		if a.CreatedAt < b.CreatedAt || (a.CreatedAt == b.CreatedAt && a.JobRecordID < b.JobRecordID) {
			t.Fatalf("order broken at %d", i)
		}
	}
	// Status filter.
	var filtered listResponse
	e.do(req{Method: "GET", Path: "/api/etl/jobs?status=RUNNING", Principal: "alice"}).json(t, &filtered)
	if len(filtered.Jobs) != 0 {
		t.Errorf("RUNNING filter: %d jobs", len(filtered.Jobs))
	}
	r := req{Method: "GET", Path: "/api/etl/jobs?status=running", Principal: "alice"}
	checkProblem(t, e.do(r), r.Path, 400, "etl_invalid_job_status_filter")

	// Malformed and non-canonical cursors.
	var first listResponse
	e.do(req{Method: "GET", Path: "/api/etl/jobs?limit=1", Principal: "alice"}).json(t, &first)
	raw, _ := base64.RawURLEncoding.DecodeString(first.NextCursor)
	parts := strings.Split(string(raw), "|")
	enc := base64.RawURLEncoding.EncodeToString
	for name, c := range map[string]string{
		"padded":          first.NextCursor + "%3D%3D",
		"std alphabet":    strings.NewReplacer("-", "+", "_", "/").Replace(first.NextCursor) + "+",
		"upper uuid":      enc([]byte(parts[0] + "|" + strings.ToUpper(parts[1]) + "|" + parts[2])),
		"millis":          enc([]byte(parts[0][:23] + "Z|" + parts[1] + "|" + parts[2])),
		"offset":          enc([]byte(strings.TrimSuffix(parts[0], "Z") + "+00:00|" + parts[1] + "|" + parts[2])),
		"no mac":          enc([]byte(parts[0] + "|" + parts[1])),
		"forged mac":      enc([]byte(parts[0] + "|" + parts[1] + "|0000000000000000")),
		"too long":        strings.Repeat("A", 193),
		"empty":           "",
		"trailing bits":   first.NextCursor[:len(first.NextCursor)-1] + "B",
		"other position":  enc([]byte(parts[0] + "|" + uuid.NewString() + "|" + parts[2])),
		"non-base64 char": first.NextCursor + "*",
	} {
		r := req{Method: "GET", Path: "/api/etl/jobs?cursor=" + c, Principal: "alice"}
		if res := e.do(r); res.Status != 400 || res.problemCode(t) != "etl_invalid_job_page_cursor" {
			t.Errorf("cursor %s: status %d", name, res.Status)
		}
	}
}

func newTestJob(t testing.TB, principal, key string) pg.NewJob {
	scope := intakeScope(principal)
	return pg.NewJob{
		Kind: pg.KindETLRecords, PrincipalScopeHash: scope,
		SubmissionKeyHash: intake.SubmissionKeyHash(scope, key),
		RequestDigest:     intake.RequestDigest([]byte(sampleBody)), Payload: sampleBody, MaxAttempts: 3,
	}
}

func TestLimits(t *testing.T) {
	t.Parallel()
	e := newEnv(t) // 64 KiB payload limit
	t.Run("declared length refused before reading", func(t *testing.T) {
		gate := &blockingReader{done: make(chan struct{})}
		defer close(gate.done)
		hr, _ := http.NewRequest("POST", e.srv.URL+"/api/etl/jobs", gate)
		hr.ContentLength = 10 << 20
		hr.Header.Set("Authorization", "Test alice")
		hr.Header.Set("Idempotency-Key", "key-limit-0000000001")
		hr.Header.Set("Content-Type", "application/json")
		res := e.send(hr) // a server reading the body would block forever
		checkProblem(t, res, "/api/etl/jobs", 413, "etl_payload_too_large")
	})
	t.Run("streamed body cut at limit+1", func(t *testing.T) {
		body := &countingReader{remaining: 1 << 20}
		hr, _ := http.NewRequest("POST", "/api/etl/jobs", body)
		hr.ContentLength = -1
		hr.Header.Set("Authorization", "Test alice")
		hr.Header.Set("Idempotency-Key", "key-limit-0000000002")
		hr.Header.Set("Content-Type", "application/json")
		rec := newRecorder()
		h, _ := NewHandler(e.opts)
		h.ServeHTTP(rec, hr)
		if rec.status != 413 || body.read > e.opts.MaxPayloadBytes+1 {
			t.Errorf("status %d after reading %d bytes", rec.status, body.read)
		}
		// And over the wire, chunked.
		hr2, _ := http.NewRequest("POST", e.srv.URL+"/api/etl/jobs", &countingReader{remaining: 1 << 20})
		hr2.Header.Set("Authorization", "Test alice")
		hr2.Header.Set("Idempotency-Key", "key-limit-0000000002")
		hr2.Header.Set("Content-Type", "application/json")
		checkProblem(t, e.send(hr2), "/api/etl/jobs", 413, "etl_payload_too_large")
	})
	t.Run("batch size", func(t *testing.T) {
		body := "[" + strings.Repeat(`{"id":"x"},`, 1000) + `{"id":"y"}]`
		r := req{Method: "POST", Path: "/api/etl/jobs", Principal: "alice", Key: "key-limit-0000000003", Body: body}
		checkProblem(t, e.do(r), r.Path, 413, "etl_batch_too_large")
	})
	t.Run("duplicate member names", func(t *testing.T) {
		r := req{Method: "POST", Path: "/api/etl/jobs", Principal: "alice", Key: "key-limit-0000000004", Body: `[{"id":"a","n":{"x":1,"x":2}}]`}
		checkProblem(t, e.do(r), r.Path, 400, "etl_invalid_json")
	})
	if n := e.count("SELECT count(*) FROM etl_job_records"); n != 0 {
		t.Errorf("rejected requests created %d jobs", n)
	}
}

// blockingReader yields no data until done is closed.
type blockingReader struct{ done chan struct{} }

func (b *blockingReader) Read([]byte) (int, error) {
	<-b.done
	return 0, io.EOF
}

// countingReader yields remaining bytes of a JSON-ish stream, counting reads.
type countingReader struct {
	mu        sync.Mutex
	remaining int64
	read      int64
}

func (c *countingReader) Read(p []byte) (int, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.remaining == 0 {
		return 0, io.EOF
	}
	n := min(int64(len(p)), c.remaining)
	for i := range n {
		p[i] = ' '
	}
	c.remaining -= n
	c.read += n
	return int(n), nil
}

// newRecorder is a minimal in-process ResponseWriter.
func newRecorder() *recorder { return &recorder{ResponseWriter: &memoryWriter{h: http.Header{}}} }

type memoryWriter struct {
	h    http.Header
	body strings.Builder
}

func (m *memoryWriter) Header() http.Header         { return m.h }
func (m *memoryWriter) Write(b []byte) (int, error) { return m.body.Write(b) }
func (m *memoryWriter) WriteHeader(int)             {}

// TestWriteAcceptedBody pins that the 202 body written without reflection
// is byte for byte what json.Marshal makes of submitResponse, also for a
// status or base that needs escaping (which takes json.Marshal's path), and
// that the shared header values come out right.
func TestWriteAcceptedBody(t *testing.T) {
	t.Parallel()
	id := uuid.MustParse("0190f3a4-5b6c-7d8e-9fa0-b1c2d3e4f506")
	for _, tc := range []struct {
		base, status string
		replayed     bool
	}{
		{jobsPath, pg.StatusPending, false},
		{"/api/ops/jobs", pg.StatusCancelled, true},
		{jobsPath, `A<B>&"\` + "\u2028\x01é", false},
		{"/a&b", pg.StatusRunning, true},
	} {
		w := &benchResponse{header: http.Header{}}
		var body []byte
		w2 := &recordingResponse{benchResponse: w, body: &body}
		writeAccepted(w2, tc.base, pg.Job{JobID: id, Status: tc.status}, tc.replayed)
		loc := tc.base + "/" + id.String()
		want, err := json.Marshal(submitResponse{JobRecordID: id.String(), JobStatus: tc.status, StatusURL: loc})
		if err != nil {
			t.Fatal(err)
		}
		if string(body) != string(want) {
			t.Errorf("body %s, want %s", body, want)
		}
		h := w.Header()
		if w.status != http.StatusAccepted || h.Get("Location") != loc || h.Get("Content-Type") != "application/json" ||
			h.Get("Idempotency-Replayed") != fmt.Sprint(tc.replayed) {
			t.Errorf("status %d, header %v", w.status, h)
		}
	}
}

// recordingResponse is a benchResponse that keeps the body.
type recordingResponse struct {
	*benchResponse
	body *[]byte
}

func (w *recordingResponse) Write(b []byte) (int, error) {
	*w.body = append(*w.body, b...)
	return w.benchResponse.Write(b)
}
