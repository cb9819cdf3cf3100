package httpapi

import (
	"strings"
	"testing"

	"github.com/mightyetl/mightyetl/internal/pg"
)

// POST /api/ops/jobs/{id}/replays pins every outcome through the real
// handler and database: 202 new then replayed (same job) for the same key
// and body, 422 for the same key with another body and for a wrong body
// (nothing created), 409 for PENDING and SUCCEEDED sources, 400 without a
// key, 404, 403 for a non-operator and 401 without credentials. The log
// lines name the action and outcome only.
func TestOpsReplayStatuses(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	failed := finishJob(t, e, "alice", "key-opsreplay-0000001", pg.StatusFailed)
	succeeded := finishJob(t, e, "alice", "key-opsreplay-0000002", pg.StatusSucceeded)
	pending, _ := e.submit("alice", "key-opsreplay-0000003", sampleBody)
	path := func(id string) string { return "/api/ops/jobs/" + id + "/replays" }

	first := e.do(req{Method: "POST", Path: path(failed), Principal: "operator", Key: "ops-replay-test-0001", Body: sampleBody})
	var created submitted
	if first.Status != 202 || first.Header.Get("Idempotency-Replayed") != "false" {
		t.Fatalf("first: %d %s", first.Status, first.Body)
	}
	first.json(t, &created)
	if first.Header.Get("Location") != "/api/ops/jobs/"+created.JobRecordID || created.JobStatus != pg.StatusPending {
		t.Fatalf("first: %v %+v", first.Header, created)
	}
	// The owner sees the new job as theirs.
	if res := e.do(req{Method: "GET", Path: "/api/etl/jobs/" + created.JobRecordID, Principal: "alice"}); res.Status != 200 {
		t.Fatalf("owner's view of the operator's replay: %d", res.Status)
	}
	again := e.do(req{Method: "POST", Path: path(failed), Principal: "operator", Key: "ops-replay-test-0001", Body: sampleBody})
	var same submitted
	again.json(t, &same)
	if again.Status != 202 || again.Header.Get("Idempotency-Replayed") != "true" || same.JobRecordID != created.JobRecordID {
		t.Fatalf("repeat: %d %s", again.Status, again.Body)
	}

	var before int
	if err := e.pool.QueryRow(t.Context(), `SELECT count(*) FROM etl_job_records`).Scan(&before); err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		r    req
		code string
	}{
		{req{Method: "POST", Path: path(failed), Principal: "operator", Key: "ops-replay-test-0001", Body: "[]"}, "etl_job_replay_key_reused"},
		{req{Method: "POST", Path: path(failed), Principal: "operator", Key: "ops-replay-test-0002", Body: "[]"}, "etl_job_replay_payload_mismatch"},
		{req{Method: "POST", Path: path(succeeded), Principal: "operator", Key: "ops-replay-test-0003", Body: sampleBody}, "etl_job_replay_source_succeeded"},
		{req{Method: "POST", Path: path(pending.JobRecordID), Principal: "operator", Key: "ops-replay-test-0004", Body: sampleBody}, "etl_job_replay_source_active"},
		{req{Method: "POST", Path: path(failed), Principal: "operator", Body: sampleBody}, "etl_job_replay_key_required"},
		{req{Method: "POST", Path: path("not-a-uuid"), Principal: "operator", Key: "ops-replay-test-0005", Body: sampleBody}, "etl_job_not_found"},
		{req{Method: "POST", Path: path(failed), Principal: "alice", Key: "ops-replay-test-0006", Body: sampleBody}, "etl_operator_required"},
	} {
		res := e.do(c.r)
		if !strings.Contains(string(res.Body), `"errorCode":"`+c.code+`"`) {
			t.Errorf("%s %s: %d %s, want %s", c.r.Principal, c.r.Path, res.Status, res.Body, c.code)
		}
	}
	if res := e.do(req{Method: "POST", Path: path(failed), Key: "ops-replay-test-0007", Body: sampleBody}); res.Status != 401 {
		t.Errorf("no credentials: %d", res.Status)
	}
	var after int
	if err := e.pool.QueryRow(t.Context(), `SELECT count(*) FROM etl_job_records`).Scan(&after); err != nil || after != before {
		t.Fatalf("refused replays changed the job count %d -> %d (%v)", before, after, err)
	}
	logs := e.logs.String()
	if !strings.Contains(logs, `"action":"replay","outcome":"created"`) ||
		!strings.Contains(logs, `"action":"replay","outcome":"etl_job_replay_payload_mismatch"`) {
		t.Errorf("replay log lines missing: %s", logs)
	}
	for _, leak := range []string{failed, created.JobRecordID, sampleBody} {
		if strings.Contains(logs, leak) {
			t.Errorf("log carries %q", leak)
		}
	}
}
