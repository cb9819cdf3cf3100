package httpapi

import (
	"encoding/json"
	"fmt"
	"net/url"
	"strings"
	"testing"

	"github.com/mightyetl/mightyetl/internal/pg"
	"github.com/mightyetl/mightyetl/internal/pgtest"
)

// TestChunkedJobProgress: GET, the list and conditional polling of a
// chunked job. The representation carries progress (optional members only
// when known); a new checkpoint changes the ETag, so If-None-Match answers
// 304 until the next chunk commits and 200 with the new counts after it; a
// small job's representation has no progress member.
func TestChunkedJobProgress(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	total := int64(30000)
	id := pgtest.InsertChunkedJob(t, e.pool, pgtest.ChunkedJob{Owner: intakeScope("alice"), Status: pg.StatusRunning,
		RecordsTotal: &total, PartBytes: []int64{4 << 20, 2 << 20}})
	small, _ := e.submit("alice", "key-progress-0000001", sampleBody)
	path := "/api/etl/jobs/" + id.String()
	type progress struct {
		RecordsLoaded      int64  `json:"recordsLoaded"`
		RecordsTotal       *int64 `json:"recordsTotal"`
		ChunksDone         int64  `json:"chunksDone"`
		BadRecords         int64  `json:"badRecords"`
		FailedRecordNumber *int64 `json:"failedRecordNumber"`
		LastCheckpointAt   string `json:"lastCheckpointAt"`
		PayloadBytes       int64  `json:"payloadBytes"`
	}
	get := func(inm string) (response, *progress) {
		t.Helper()
		r := req{Method: "GET", Path: path, Principal: "alice"}
		if inm != "" {
			r.Header = map[string]string{"If-None-Match": inm}
		}
		res := e.do(r)
		if res.Status != 200 {
			return res, nil
		}
		var v struct {
			JobStatus string    `json:"jobStatus"`
			Progress  *progress `json:"progress"`
		}
		res.json(t, &v)
		return res, v.Progress
	}
	r1, p1 := get("")
	if p1 == nil || p1.RecordsLoaded != 0 || p1.ChunksDone != 0 || p1.RecordsTotal == nil || *p1.RecordsTotal != total ||
		p1.PayloadBytes != 6<<20 || p1.LastCheckpointAt != "" || r1.Header.Get("Retry-After") == "" {
		t.Fatalf("before the first chunk: %s", r1.Body)
	}
	if strings.Contains(string(r1.Body), "lastCheckpointAt") || strings.Contains(string(r1.Body), "failedRecordNumber") {
		t.Errorf("unset members present: %s", r1.Body)
	}
	etag := r1.Header.Get("ETag")
	if r, _ := get(etag); r.Status != 304 {
		t.Errorf("unchanged: %d", r.Status)
	}
	pgtest.SetChunkedCheckpoint(t, e.pool, id, pgtest.ChunkedCheckpoint{ChunksDone: 1, RecordsLoaded: 9999, BadRecords: 1,
		NextPartNumber: 1, NextPartOffset: 1 << 20})
	r2, p2 := get(etag)
	if r2.Status != 200 || p2 == nil || p2.RecordsLoaded != 9999 || p2.BadRecords != 1 || p2.ChunksDone != 1 ||
		len(p2.LastCheckpointAt) != len("2026-01-02T03:04:05.000006Z") || !strings.HasSuffix(p2.LastCheckpointAt, "Z") {
		t.Fatalf("after a chunk: %d %s", r2.Status, r2.Body)
	}
	if r2.Header.Get("ETag") == etag {
		t.Error("the tag did not change with the checkpoint")
	}
	if r, _ := get(r2.Header.Get("ETag")); r.Status != 304 {
		t.Errorf("unchanged after the chunk: %d", r.Status)
	}
	// The operator's view adds the load's state, allowance and byte position.
	var ops struct {
		Progress struct {
			RecordsLoaded int64  `json:"recordsLoaded"`
			BytesDone     *int64 `json:"bytesDone"`
			LoadState     string `json:"loadState"`
			MaxBadRecords *int64 `json:"maxBadRecords"`
		} `json:"progress"`
	}
	e.do(req{Method: "GET", Path: "/api/ops/jobs/" + id.String(), Principal: "operator"}).json(t, &ops)
	if p := ops.Progress; p.RecordsLoaded != 9999 || p.BytesDone == nil || *p.BytesDone != 1<<20 || p.LoadState != "LOADING" ||
		p.MaxBadRecords == nil || *p.MaxBadRecords != 0 {
		t.Errorf("operator's progress: %+v", p)
	}
	var page struct {
		Jobs []json.RawMessage `json:"jobs"`
	}
	e.do(req{Method: "GET", Path: "/api/etl/jobs", Principal: "alice"}).json(t, &page)
	var withProgress, without int
	for _, raw := range page.Jobs {
		var v struct {
			ID       string    `json:"jobRecordId"`
			Progress *progress `json:"progress"`
		}
		if err := json.Unmarshal(raw, &v); err != nil {
			t.Fatal(err)
		}
		switch {
		case v.ID == id.String() && v.Progress != nil && v.Progress.RecordsLoaded == 9999:
			withProgress++
		case v.ID == small.JobRecordID && v.Progress == nil:
			without++
		}
	}
	if withProgress != 1 || without != 1 {
		t.Errorf("list: %d chunked with progress, %d small without (of %d)", withProgress, without, len(page.Jobs))
	}
	if r := e.do(req{Method: "GET", Path: "/api/etl/jobs/" + small.JobRecordID, Principal: "alice"}); strings.Contains(string(r.Body), "progress") {
		t.Errorf("small job: %s", r.Body)
	}
	// Cancel answers with the progress and the same tag a GET then gives.
	c := e.do(req{Method: "POST", Path: path + "/cancellation", Principal: "alice", Key: "cancel-progress-00001"})
	if c.Status != 200 || !strings.Contains(string(c.Body), `"recordsLoaded":9999`) {
		t.Fatalf("cancel: %d %s", c.Status, c.Body)
	}
	if r, _ := get(c.Header.Get("ETag")); r.Status != 304 {
		t.Errorf("GET after cancel with the cancel's tag: %d", r.Status)
	}
}

// TestBadRecordsRoute: keyset pages with Link and nextCursor, every item
// a record number and code only; the owner check (foreign and malformed
// ids 404), the limit and cursor problems, another job's cursor refused,
// an empty page for a job without bad records, 405 for other methods.
func TestBadRecordsRoute(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	var bad []int64
	for i := range 7 {
		bad = append(bad, int64(10*i+3))
	}
	id := pgtest.InsertChunkedJob(t, e.pool, pgtest.ChunkedJob{Owner: intakeScope("alice"), Status: pg.StatusRunning,
		MaxBadRecords: 10, BadRecords: bad})
	other := pgtest.InsertChunkedJob(t, e.pool, pgtest.ChunkedJob{Owner: intakeScope("alice"), BadRecords: []int64{1}})
	base := "/api/etl/jobs/" + id.String() + "/bad-records"
	type page struct {
		Items []struct {
			RecordNumber int64  `json:"recordNumber"`
			ErrorCode    string `json:"errorCode"`
		} `json:"items"`
		NextCursor string `json:"nextCursor"`
	}
	var got []int64
	path, pages := base+"?limit=3", 0
	var firstCursor string
	for path != "" {
		res := e.do(req{Method: "GET", Path: path, Principal: "alice"})
		if res.Status != 200 || res.Header.Get("Cache-Control") != "no-store" {
			t.Fatalf("page: %d %s", res.Status, res.Body)
		}
		var p page
		res.json(t, &p)
		pages++
		for _, it := range p.Items {
			if it.ErrorCode != "etl_invalid_record" {
				t.Errorf("item %+v", it)
			}
			got = append(got, it.RecordNumber)
		}
		link := res.Header.Get("Link")
		if p.NextCursor == "" {
			if link != "" {
				t.Errorf("last page with Link %q", link)
			}
			path = ""
			continue
		}
		if firstCursor == "" {
			firstCursor = p.NextCursor
		}
		want := "<" + base + "?" + url.Values{"cursor": {p.NextCursor}, "limit": {"3"}}.Encode() + `>; rel="next"`
		if link != want {
			t.Errorf("Link %q, want %q", link, want)
		}
		path = base + "?limit=3&cursor=" + url.QueryEscape(p.NextCursor)
	}
	if pages != 3 || fmt.Sprint(got) != fmt.Sprint(bad) {
		t.Errorf("%d pages %v, want 3 pages %v", pages, got, bad)
	}
	for _, c := range []struct {
		path, principal string
		status          int
		code            string
	}{
		{base, "bob", 404, "etl_job_not_found"},
		{"/api/etl/jobs/not-a-uuid/bad-records", "alice", 404, "etl_job_not_found"},
		{base + "?limit=0", "alice", 400, "etl_invalid_job_page_limit"},
		{base + "?limit=101", "alice", 400, "etl_invalid_job_page_limit"},
		{base + "?limit=1&limit=2", "alice", 400, "etl_invalid_job_page_limit"},
		{base + "?cursor=", "alice", 400, "etl_invalid_job_page_cursor"},
		{base + "?cursor=%zz", "alice", 400, "etl_invalid_job_page_cursor"},
		{"/api/etl/jobs/" + other.String() + "/bad-records?cursor=" + firstCursor, "alice", 400, "etl_invalid_job_page_cursor"},
		{base + "?cursor=" + firstCursor, "bob", 400, "etl_invalid_job_page_cursor"},
		{base, "", 401, "etl_authentication_required"},
	} {
		res := e.do(req{Method: "GET", Path: c.path, Principal: c.principal})
		if res.Status != c.status || res.problemCode(t) != c.code {
			t.Errorf("%s as %q: %d %s", c.path, c.principal, res.Status, res.Body)
		}
	}
	small, _ := e.submit("alice", "key-badrec-00000001", sampleBody)
	if res := e.do(req{Method: "GET", Path: "/api/etl/jobs/" + small.JobRecordID + "/bad-records", Principal: "alice"}); res.Status != 200 ||
		string(res.Body) != `{"items":[]}` {
		t.Errorf("small job: %d %s", res.Status, res.Body)
	}
	if res := e.do(req{Method: "POST", Path: base, Principal: "alice", Body: "{}"}); res.Status != 405 ||
		res.Header.Get("Allow") != "GET, HEAD" || res.problemCode(t) != "etl_method_not_allowed" {
		t.Errorf("POST: %d %v %s", res.Status, res.Header, res.Body)
	}
}

// openAPIChunkedCases inserts alice's chunked job (with a checkpoint and
// bad records) and returns TestOpenAPIContract's requests about it: the
// job with progress (and, through the list, in a page), bad-record pages
// and their problems.
func openAPIChunkedCases(t *testing.T, e *env) []req {
	t.Helper()
	total, failed := int64(100), int64(61)
	id := pgtest.InsertChunkedJob(t, e.pool, pgtest.ChunkedJob{Owner: intakeScope("alice"), Status: pg.StatusFailed,
		RecordsTotal: &total, MaxBadRecords: 2, BadRecords: []int64{7, 19},
		Checkpoint: &pgtest.ChunkedCheckpoint{ChunksDone: 6, RecordsLoaded: 58, BadRecords: 2, FailedRecordNumber: &failed}})
	running := pgtest.InsertChunkedJob(t, e.pool, pgtest.ChunkedJob{Owner: intakeScope("alice"), Status: pg.StatusRunning})
	path := "/api/etl/jobs/" + id.String()
	return []req{
		{Method: "GET", Path: path, Principal: "alice"},
		{Method: "GET", Path: "/api/etl/jobs/" + running.String(), Principal: "alice"},
		{Method: "GET", Path: "/api/etl/jobs?limit=5", Principal: "alice"},
		{Method: "GET", Path: path + "/bad-records?limit=1", Principal: "alice"},
		{Method: "GET", Path: path + "/bad-records", Principal: "alice"},
		{Method: "GET", Path: path + "/bad-records?limit=0", Principal: "alice"},
		{Method: "GET", Path: path + "/bad-records?cursor=x", Principal: "alice"},
		{Method: "GET", Path: path + "/bad-records", Principal: "bob"},
		{Method: "GET", Path: path + "/bad-records"},
		{Method: "GET", Path: "/api/ops/jobs/" + id.String(), Principal: "operator"},
		{Method: "GET", Path: "/api/ops/jobs/" + running.String(), Principal: "operator"},
	}
}
