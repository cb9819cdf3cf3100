package httpapi

import (
	"context"
	"sync"
	"testing"

	"github.com/mightyetl/mightyetl/internal/intake"
)

func TestProcess(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	res := e.do(req{Method: "POST", Path: "/api/etl/process", Principal: "alice", Body: sampleBody})
	if res.Status != 200 || string(res.Body) != "Processed: a1\nProcessed: a2" ||
		res.Header.Get("Content-Type") != "text/plain; charset=utf-8" || res.Header.Get("Idempotency-Replayed") != "" {
		t.Fatalf("process: %d %q %v", res.Status, res.Body, res.Header)
	}
	var data string
	if err := e.pool.QueryRow(context.Background(), "SELECT data FROM processed_data WHERE job_record_id IS NULL ORDER BY processed_data_id LIMIT 1").Scan(&data); err != nil || data != "ID:a1,NAME:JANE,AMOUNT:999.90," {
		t.Errorf("row %q %v", data, err)
	}
	// With a key: concurrent identical requests load once; the rest replay.
	const n = 10
	var wg sync.WaitGroup
	out := make([]response, n)
	for i := range n {
		wg.Go(func() {
			out[i] = e.do(req{Method: "POST", Path: "/api/etl/process", Principal: "alice", Key: "sync-key-00000000001", Body: sampleBody})
		})
	}
	wg.Wait()
	fresh := 0
	for _, r := range out {
		if r.Status != 200 || string(r.Body) != "Processed: a1\nProcessed: a2" {
			t.Fatalf("keyed: %d %s", r.Status, r.Body)
		}
		if r.Header.Get("Idempotency-Replayed") == "false" {
			fresh++
		}
	}
	if fresh != 1 {
		t.Errorf("%d fresh keyed requests", fresh)
	}
	if k := e.count("SELECT count(*) FROM processed_data"); k != 4 {
		t.Errorf("processed rows %d, want 4", k)
	}
	if k := e.count("SELECT count(*) FROM etl_idempotency_records WHERE job_record_id IS NULL AND idempotency_key_hash = $1",
		intake.SyncProcessKeyHash(intakeScope("alice"), "sync-key-00000000001")); k != 1 {
		t.Errorf("ledger rows %d", k)
	}
	// An invalid record writes nothing, with or without a key.
	r := req{Method: "POST", Path: "/api/etl/process", Principal: "alice", Key: "sync-key-00000000002", Body: `[{"id":"ok"},{"nope":1}]`}
	second := 1
	checkProblemAt(t, e.do(r), r.Path, 422, "etl_invalid_record", &second)
	r.Key = "bad"
	checkProblem(t, e.do(r), r.Path, 400, "etl_invalid_idempotency_key")
	if k := e.count("SELECT count(*) FROM processed_data"); k != 4 {
		t.Errorf("processed rows %d after rejects", k)
	}
}

func TestDiagnosticJobs(t *testing.T) {
	t.Parallel()
	off := newEnv(t, func(o *Options, _ *intake.Options) { o.DiagnosticJobsEnabled = false })
	r := req{Method: "POST", Path: "/api/etl/diagnostic-jobs", Principal: "alice", Key: "key-diag-00000000001", Body: `{}`}
	checkProblem(t, off.do(r), r.Path, 404, "etl_route_not_found")

	e := newEnv(t)
	body := `{"durationMillis": 10, "records": [{"id":"d1"}], "failWith": null}`
	r.Body = body
	res := e.do(r)
	if res.Status != 202 || res.Header.Get("Idempotency-Replayed") != "false" {
		t.Fatalf("diagnostic: %d %s", res.Status, res.Body)
	}
	var s submitted
	res.json(t, &s)
	if res.Header.Get("Location") != "/api/etl/jobs/"+s.JobRecordID {
		t.Errorf("location %q", res.Header.Get("Location"))
	}
	if again := e.do(r); again.Header.Get("Idempotency-Replayed") != "true" {
		t.Errorf("replay: %d %v", again.Status, again.Header)
	}
	var kind string
	if err := e.pool.QueryRow(context.Background(), "SELECT job_kind FROM etl_job_records").Scan(&kind); err != nil || kind != "diagnostic" {
		t.Errorf("kind %q %v", kind, err)
	}
	// The same key and body on the ETL route is another kind: key reused.
	r2 := req{Method: "POST", Path: "/api/etl/jobs", Principal: "alice", Key: r.Key, Body: body}
	if res := e.do(r2); res.Status != 400 { // not an array: invalid for the ETL route first
		t.Errorf("diagnostic body on the ETL route: %d", res.Status)
	}
	for name, tc := range map[string]struct {
		body, code string
	}{
		"negative duration": {`{"durationMillis": -1}`, "etl_invalid_json"},
		"too long":          {`{"durationMillis": 86400001}`, "etl_invalid_json"},
		"bad failWith":      {`{"failWith": "sometimes"}`, "etl_invalid_json"},
		"unknown member":    {`{"sleep": 1}`, "etl_invalid_json"},
		"duplicate member":  {`{"durationMillis": 1, "durationMillis": 2}`, "etl_invalid_json"},
		"bad record":        {`{"records": [{"id": ""}]}`, "etl_invalid_record"},
		"not an object":     {`[]`, "etl_invalid_json"},
	} {
		r := req{Method: "POST", Path: "/api/etl/diagnostic-jobs", Principal: "alice", Key: "key-diag-00000000002", Body: tc.body}
		if res := e.do(r); res.Status == 202 || res.problemCode(t) != tc.code {
			t.Errorf("%s: %d %s", name, res.Status, res.Body)
		}
	}
}
