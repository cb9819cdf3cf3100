package httpapi

import (
	"context"
	"encoding/json"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/mightyetl/mightyetl/internal/intake"
	"github.com/mightyetl/mightyetl/internal/metrics"
	"github.com/mightyetl/mightyetl/internal/pg"
	"github.com/mightyetl/mightyetl/internal/pgtest"
	"github.com/mightyetl/mightyetl/internal/worker"
	"github.com/prometheus/client_golang/prometheus"
)

func replayReq(principal, id, key, body string) req {
	return req{Method: "POST", Path: "/api/etl/jobs/" + id + "/replays", Principal: principal, Key: key, Body: body}
}

// failBySQL ends a PENDING or RUNNING job as FAILED the way a worker would:
// failure code set, payload and lease cleared.
func failBySQL(t testing.TB, e *env, id string) {
	t.Helper()
	tag, err := e.pool.Exec(context.Background(), `UPDATE etl_job_records SET job_status = 'FAILED',
		failure_code = 'etl_target_failure', request_payload = NULL, lease_claim_id = NULL, lease_owner_id = NULL,
		lease_expires_at = NULL, lease_fencing_token = NULL, updated_at = clock_timestamp()
		WHERE job_record_id = $1 AND job_status IN ('PENDING', 'RUNNING')`, uuid.MustParse(id))
	if err != nil || tag.RowsAffected() != 1 {
		t.Fatalf("fail %s: %v %v", id, err, tag)
	}
}

// checkReplayAccepted pins a 202 replay response and returns its body.
func checkReplayAccepted(t *testing.T, res response, replayed string) submitted {
	t.Helper()
	if res.Status != http.StatusAccepted {
		t.Fatalf("replay: %d %s", res.Status, res.Body)
	}
	var s submitted
	res.json(t, &s)
	loc := "/api/etl/jobs/" + s.JobRecordID
	h := res.Header
	if h.Get("Location") != loc || s.StatusURL != loc || h.Get("Idempotency-Replayed") != replayed ||
		h.Get("Cache-Control") != "no-store" || !strings.HasPrefix(h.Get("Content-Type"), "application/json") {
		t.Errorf("replay headers %v body %+v (want replayed %s)", h, s, replayed)
	}
	return s
}

// jobView reads the status object of id for principal.
func jobView(t *testing.T, e *env, principal, id string) (intake.JobView, map[string]any, response) {
	t.Helper()
	res := e.do(req{Method: "GET", Path: "/api/etl/jobs/" + id, Principal: principal})
	if res.Status != 200 {
		t.Fatalf("status %s: %d %s", id, res.Status, res.Body)
	}
	var v intake.JobView
	res.json(t, &v)
	var raw map[string]any
	res.json(t, &raw)
	if res.Header.Get("ETag") != v.ETag() {
		t.Errorf("ETag %s, view computes %s", res.Header.Get("ETag"), v.ETag())
	}
	return v, raw, res
}

// insertChainEnd inserts by SQL a FAILED job of generation gen (>= 2) at the
// end of a chain rooted at root (via one generation-1 job) and returns it.
func insertChainEnd(t *testing.T, e *env, principal, root, body string, gen int) string {
	t.Helper()
	first, last := uuid.New(), uuid.New()
	_, err := e.pool.Exec(context.Background(), `
INSERT INTO etl_job_records (job_record_id, job_kind, principal_scope_hash, submission_key_hash, request_digest,
    request_payload, job_status, failure_code, max_attempts,
    replay_source_job_record_id, replay_root_job_record_id, replay_generation_count)
VALUES ($1, 'etl_records', decode($3, 'hex'), decode($5, 'hex'), decode($7, 'hex'), NULL, 'FAILED', 'etl_target_failure', 3, $4, $4, 1),
       ($2, 'etl_records', decode($3, 'hex'), decode($6, 'hex'), decode($7, 'hex'), NULL, 'FAILED', 'etl_target_failure', 3, $1, $4, $8)`,
		first, last, intakeScope(principal), uuid.MustParse(root),
		intake.RequestDigest([]byte(uuid.NewString())), intake.RequestDigest([]byte(uuid.NewString())),
		intake.RequestDigest([]byte(body)), gen)
	if err != nil {
		t.Fatal(err)
	}
	return last.String()
}

// TestReplayContract pins every replay row of the contract through the real
// handler: the success shape, the idempotent replay and every problem.
func TestReplayContract(t *testing.T) {
	t.Parallel()
	e := newEnv(t, func(o *Options, _ *intake.Options) { o.MaxPayloadBytes = 4 << 10 })
	ctx := context.Background()
	const alice, bob = "alice", "bob"
	otherBody := `[{"id":"other"}]`

	// Sources in each state. RUNNING first: claimOne takes the oldest PENDING job.
	running, _ := e.submit(alice, "key-replay-running01", sampleBody)
	claimOne(t, e)
	succeeded := finishJob(t, e, alice, "key-replay-succeed01", pg.StatusSucceeded)
	pending, _ := e.submit(alice, "key-replay-pending01", sampleBody)
	failed, _ := e.submit(alice, "key-replay-failed001", sampleBody)
	failBySQL(t, e, failed.JobRecordID)
	cancelled, _ := e.submit(alice, "key-replay-cancel001", otherBody)
	if res := e.do(cancelReq(alice, cancelled.JobRecordID, "cancel-key-000000001")); res.Status != 200 {
		t.Fatalf("cancel: %d %s", res.Status, res.Body)
	}
	root, _ := e.submit(alice, "key-replay-root00001", sampleBody)
	failBySQL(t, e, root.JobRecordID)
	at100 := insertChainEnd(t, e, alice, root.JobRecordID, sampleBody, 100)
	at99 := insertChainEnd(t, e, alice, root.JobRecordID, sampleBody, 99)
	sourceBefore, _, sourceRes := jobView(t, e, alice, failed.JobRecordID)

	// A new replay, then the same key again (raw and sf-string).
	first := checkReplayAccepted(t, e.do(replayReq(alice, failed.JobRecordID, "replay-key-00000001", sampleBody)), "false")
	if first.JobStatus != "PENDING" || first.JobRecordID == failed.JobRecordID {
		t.Fatalf("replay body %+v", first)
	}
	again := checkReplayAccepted(t, e.do(replayReq(alice, failed.JobRecordID, `"replay-key-00000001"`, sampleBody)), "true")
	if again != first {
		t.Errorf("same key: %+v, want %+v", again, first)
	}
	// A CANCELLED source replays too; generation 99 makes generation 100.
	checkReplayAccepted(t, e.do(replayReq(alice, cancelled.JobRecordID, "replay-key-00000002", otherBody)), "false")
	last := checkReplayAccepted(t, e.do(replayReq(alice, at99, "replay-key-00000003", sampleBody)), "false")
	if v, _, _ := jobView(t, e, alice, last.JobRecordID); v.ReplayGenerationCount != 100 || v.ReplayRootJobRecordID != root.JobRecordID {
		t.Errorf("generation 100 view %+v", v)
	}
	jobsBefore := e.count(`SELECT count(*) FROM etl_job_records`)
	outboxBefore := e.count(`SELECT count(*) FROM etl_outbox_events`)

	path := func(id string) string { return "/api/etl/jobs/" + id + "/replays" }
	big := "[" + strings.Repeat(`{"id":"x"},`, 500) + `{"id":"y"}]`
	cases := []struct {
		name   string
		r      req
		status int
		code   string
	}{
		{"key missing", replayReq(alice, failed.JobRecordID, "", sampleBody), 400, "etl_job_replay_key_required"},
		{"key invalid", replayReq(alice, failed.JobRecordID, "bad key", sampleBody), 400, "etl_job_replay_key_required"},
		{"key short sf-string", replayReq(alice, failed.JobRecordID, `"short"`, sampleBody), 400, "etl_job_replay_key_required"},
		{"malformed id", replayReq(alice, "not-a-uuid", "replay-key-00000009", sampleBody), 404, "etl_job_not_found"},
		{"absent id", replayReq(alice, uuid.NewString(), "replay-key-00000009", sampleBody), 404, "etl_job_not_found"},
		{"foreign id", replayReq(bob, failed.JobRecordID, "replay-key-00000009", sampleBody), 404, "etl_job_not_found"},
		{"foreign id, owner's key", replayReq(bob, failed.JobRecordID, "replay-key-00000001", sampleBody), 404, "etl_job_not_found"},
		{"payload mismatch", replayReq(alice, failed.JobRecordID, "replay-key-00000009", otherBody), 422, "etl_job_replay_payload_mismatch"},
		{"payload reformatted", replayReq(alice, failed.JobRecordID, "replay-key-00000009", sampleBody+"\n"), 422, "etl_job_replay_payload_mismatch"},
		{"payload absent", replayReq(alice, failed.JobRecordID, "replay-key-00000009", ""), 422, "etl_job_replay_payload_mismatch"},
		{"key reused, other source", replayReq(alice, root.JobRecordID, "replay-key-00000001", sampleBody), 422, "etl_job_replay_key_reused"},
		{"key reused, other payload", replayReq(alice, failed.JobRecordID, "replay-key-00000001", otherBody), 422, "etl_job_replay_key_reused"},
		{"source pending", replayReq(alice, pending.JobRecordID, "replay-key-00000009", sampleBody), 409, "etl_job_replay_source_active"},
		{"source running", replayReq(alice, running.JobRecordID, "replay-key-00000009", sampleBody), 409, "etl_job_replay_source_active"},
		{"source succeeded", replayReq(alice, succeeded, "replay-key-00000009", sampleBody), 409, "etl_job_replay_source_succeeded"},
		{"generation exhausted", replayReq(alice, at100, "replay-key-00000009", sampleBody), 409, "etl_job_replay_generation_exhausted"},
		{"payload too large", replayReq(alice, failed.JobRecordID, "replay-key-00000009", big), 413, "etl_payload_too_large"},
		{"no credentials", replayReq("", failed.JobRecordID, "replay-key-00000009", sampleBody), 401, "etl_authentication_required"},
		{"wrong method", req{Method: "GET", Path: path(failed.JobRecordID), Principal: alice}, 405, "etl_method_not_allowed"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			res := e.do(tc.r)
			checkProblem(t, res, tc.r.Path, tc.status, tc.code)
			if tc.status == 405 && res.Header.Get("Allow") != "POST" {
				t.Errorf("Allow %q", res.Header.Get("Allow"))
			}
		})
	}
	// No refusal wrote anything, and the source never changed.
	if n := e.count(`SELECT count(*) FROM etl_job_records`); n != jobsBefore {
		t.Errorf("refusals created %d jobs", n-jobsBefore)
	}
	if n := e.count(`SELECT count(*) FROM etl_outbox_events`); n != outboxBefore {
		t.Errorf("refusals wrote %d outbox rows", n-outboxBefore)
	}
	sourceAfter, _, sourceRes2 := jobView(t, e, alice, failed.JobRecordID)
	if sourceAfter.ETag() != sourceBefore.ETag() || string(sourceRes.Body) != string(sourceRes2.Body) {
		t.Errorf("source changed: %+v -> %+v", sourceBefore, sourceAfter)
	}

	// The replay job: lineage in the status object and its ETag, same kind,
	// payload and max attempts, the replay key hash, one job_available row.
	v, raw, res := jobView(t, e, alice, first.JobRecordID)
	if v.ReplaySourceJobRecordID != failed.JobRecordID || v.ReplayRootJobRecordID != failed.JobRecordID || v.ReplayGenerationCount != 1 {
		t.Errorf("lineage %+v", v)
	}
	if res.Header.Get("Retry-After") == "" {
		t.Error("PENDING replay without Retry-After")
	}
	plain := v
	plain.ReplaySourceJobRecordID, plain.ReplayRootJobRecordID, plain.ReplayGenerationCount = "", "", 0
	if plain.ETag() == v.ETag() {
		t.Error("lineage is not part of the ETag")
	}
	if _, ok := raw["replayGenerationCount"]; !ok {
		t.Errorf("raw %v", raw)
	}
	if _, _, src := jobView(t, e, alice, failed.JobRecordID); strings.Contains(string(src.Body), "replay") {
		t.Errorf("a job without lineage shows replay fields: %s", src.Body)
	}
	if res := e.do(req{Method: "GET", Path: "/api/etl/jobs/" + first.JobRecordID, Principal: alice,
		Header: map[string]string{"If-None-Match": v.ETag()}}); res.Status != 304 || res.Header.Get("ETag") != v.ETag() {
		t.Errorf("conditional poll: %d %v", res.Status, res.Header)
	}
	var payload, keyHash, digest, kind string
	var maxAttempts int
	if err := e.pool.QueryRow(ctx, `SELECT request_payload, encode(submission_key_hash, 'hex'), encode(request_digest, 'hex'), job_kind, max_attempts
		FROM etl_job_records WHERE job_record_id = $1`, uuid.MustParse(first.JobRecordID)).
		Scan(&payload, &keyHash, &digest, &kind, &maxAttempts); err != nil {
		t.Fatal(err)
	}
	if payload != sampleBody || keyHash != intake.ReplayKeyHash(intakeScope(alice), "replay-key-00000001") ||
		digest != intake.RequestDigest([]byte(sampleBody)) || kind != pg.KindETLRecords || maxAttempts != intake.DefaultMaxAttempts {
		t.Errorf("replay row: payload ok %v key ok %v digest ok %v kind %s max %d", payload == sampleBody,
			keyHash == intake.ReplayKeyHash(intakeScope(alice), "replay-key-00000001"), digest == intake.RequestDigest([]byte(sampleBody)), kind, maxAttempts)
	}
	if n := e.count(`SELECT count(*) FROM etl_outbox_job_events WHERE job_record_id = $1 AND event_kind = 'job_available'`, uuid.MustParse(first.JobRecordID)); n != 1 {
		t.Errorf("job_available rows %d", n)
	}
	// The list shows the same representation.
	var page listResponse
	e.do(req{Method: "GET", Path: "/api/etl/jobs?limit=100", Principal: alice}).json(t, &page)
	found := false
	for _, j := range page.Jobs {
		if j.JobRecordID == first.JobRecordID {
			found = j.ETag() == v.ETag()
		}
	}
	if !found {
		t.Errorf("list lacks the replay view %+v", v)
	}
}

// TestReplayLineageThreeGenerations replays a failure three times, failing
// each generation by SQL, and walks the chain by its root.
func TestReplayLineageThreeGenerations(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	root, _ := e.submit("alice", "key-lineage-00000001", sampleBody)
	failBySQL(t, e, root.JobRecordID)
	source := root.JobRecordID
	var chain []string
	for gen := 1; gen <= 3; gen++ {
		s := checkReplayAccepted(t, e.do(replayReq("alice", source, "lineage-key-0000000"+string(rune('0'+gen)), sampleBody)), "false")
		v, _, _ := jobView(t, e, "alice", s.JobRecordID)
		if v.ReplaySourceJobRecordID != source || v.ReplayRootJobRecordID != root.JobRecordID || v.ReplayGenerationCount != gen {
			t.Fatalf("generation %d: %+v", gen, v)
		}
		// Only a FAILED or CANCELLED job can be replayed: the new one is PENDING.
		checkProblem(t, e.do(replayReq("alice", s.JobRecordID, "lineage-key-0000000x", sampleBody)),
			"/api/etl/jobs/"+s.JobRecordID+"/replays", 409, "etl_job_replay_source_active")
		failBySQL(t, e, s.JobRecordID)
		chain = append(chain, s.JobRecordID)
		source = s.JobRecordID
	}
	// The lineage query of docs/operations/replay.md.
	rows, err := e.pool.Query(context.Background(), `SELECT job_record_id::text, replay_generation_count
		FROM etl_job_records WHERE replay_root_job_record_id = $1 ORDER BY replay_generation_count`, uuid.MustParse(root.JobRecordID))
	if err != nil {
		t.Fatal(err)
	}
	var got []string
	for rows.Next() {
		var id string
		var gen int
		if err := rows.Scan(&id, &gen); err != nil {
			t.Fatal(err)
		}
		if gen != len(got)+1 {
			t.Errorf("generation %d at position %d", gen, len(got))
		}
		got = append(got, id)
	}
	rows.Close()
	if strings.Join(got, ",") != strings.Join(chain, ",") {
		t.Errorf("chain %v, want %v", got, chain)
	}
	// The root itself has no lineage.
	if v, _, _ := jobView(t, e, "alice", root.JobRecordID); v.ReplayGenerationCount != 0 || v.ReplaySourceJobRecordID != "" {
		t.Errorf("root view %+v", v)
	}
}

// TestConcurrentReplays: 20 replays of one source with one key, released
// together, make one job: one false, nineteen true, one outbox row.
func TestConcurrentReplays(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	src, _ := e.submit("alice", "key-concurrent-00001", sampleBody)
	failBySQL(t, e, src.JobRecordID)
	const n = 20
	out := make([]response, n)
	start := make(chan struct{})
	var wg sync.WaitGroup
	for i := range n {
		wg.Go(func() {
			<-start
			out[i] = e.do(replayReq("alice", src.JobRecordID, "replay-conc-key-0001", sampleBody))
		})
	}
	close(start)
	wg.Wait()
	fresh, ids := 0, map[string]bool{}
	for _, res := range out {
		replayed := res.Header.Get("Idempotency-Replayed")
		s := checkReplayAccepted(t, res, replayed)
		if replayed == "false" {
			fresh++
		}
		ids[s.JobRecordID] = true
	}
	if fresh != 1 || len(ids) != 1 {
		t.Fatalf("%d new, %d distinct jobs", fresh, len(ids))
	}
	if k := e.count(`SELECT count(*) FROM etl_job_records WHERE replay_source_job_record_id = $1`, uuid.MustParse(src.JobRecordID)); k != 1 {
		t.Errorf("replay jobs %d", k)
	}
	if k := e.count(`SELECT count(*) FROM etl_outbox_events WHERE event_kind = 'job_available'`); k != 2 {
		t.Errorf("job_available rows %d, want submit + one replay", k)
	}
}

// TestReplayedJobRunsOnce: a replay job is claimed, transformed and loaded
// by a real worker exactly once, and its ledger row is keyed by the replay key.
func TestReplayedJobRunsOnce(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	ctx := context.Background()
	src, _ := e.submit("alice", "key-runs-once-000001", sampleBody)
	failBySQL(t, e, src.JobRecordID) // before any worker could run it
	s := checkReplayAccepted(t, e.do(replayReq("alice", src.JobRecordID, "replay-runs-key-0001", sampleBody)), "false")
	id := uuid.MustParse(s.JobRecordID)

	exec := pgtest.NewPool(t, e.url, 8)
	renew := pgtest.NewPool(t, e.url, 2)
	w := worker.New(worker.Config{OwnerID: "replay-test-worker", Concurrency: 4, PollInterval: 20 * time.Millisecond,
		LeaseDuration: 30 * time.Second, RenewInterval: 10 * time.Second, SafetyMargin: 5 * time.Second,
		RetryBaseDelay: time.Millisecond, RetryMaxDelay: time.Millisecond, ShutdownGrace: 5 * time.Second},
		exec, renew, worker.DefaultHandlers(1000), metrics.NewWorker(prometheus.NewRegistry()), nil)
	if err := w.Start(ctx); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = w.Stop(context.Background()) })
	waitFor(t, "the replay job to succeed", func() bool {
		return e.count(`SELECT count(*) FROM etl_job_records WHERE job_record_id = $1 AND job_status = 'SUCCEEDED'`, id) == 1
	})
	if err := w.Stop(ctx); err != nil {
		t.Fatal(err)
	}
	if n := e.count(`SELECT count(*) FROM processed_data WHERE job_record_id = $1`, id); n != 2 {
		t.Errorf("replay loaded %d rows, want 2", n)
	}
	if n := e.count(`SELECT count(*) FROM processed_data`); n != 2 {
		t.Errorf("target holds %d rows, want 2 (the failed source loaded nothing)", n)
	}
	var data string
	if err := e.pool.QueryRow(ctx, `SELECT string_agg(data, '|' ORDER BY processed_data_id) FROM processed_data`).Scan(&data); err != nil {
		t.Fatal(err)
	}
	if data != "ID:a1,NAME:JANE,AMOUNT:999.90,|ID:a2,EMAIL:x@y.z," {
		t.Errorf("target rows %q", data)
	}
	// A durable job writes no response-ledger row (migration 00005): its
	// key lives on the job row, its evidence in processed_data.
	if n := e.count(`SELECT count(*) FROM etl_idempotency_records`); n != 0 {
		t.Errorf("ledger rows %d, want 0", n)
	}
	v, _, res := jobView(t, e, "alice", s.JobRecordID)
	if v.JobStatus != "SUCCEEDED" || v.AttemptCount != 1 || v.ReplaySourceJobRecordID != src.JobRecordID || res.Header.Get("Retry-After") != "" {
		t.Errorf("after run: %+v", v)
	}
	// A SUCCEEDED replay is not replayable; its FAILED source still is, under a new key.
	checkProblem(t, e.do(replayReq("alice", s.JobRecordID, "replay-runs-key-0002", sampleBody)),
		"/api/etl/jobs/"+s.JobRecordID+"/replays", 409, "etl_job_replay_source_succeeded")
	var body map[string]any
	if err := json.Unmarshal(e.do(req{Method: "GET", Path: "/api/etl/jobs/" + src.JobRecordID, Principal: "alice"}).Body, &body); err != nil || body["jobStatus"] != "FAILED" {
		t.Errorf("source after the replay ran: %v %v", body, err)
	}
}
