package httpapi

import (
	"context"
	"encoding/hex"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"github.com/mightyetl/mightyetl/internal/codes"
	"github.com/mightyetl/mightyetl/internal/etl"
	"github.com/mightyetl/mightyetl/internal/intake"
	"github.com/mightyetl/mightyetl/internal/lease"
	"github.com/mightyetl/mightyetl/internal/pg"
	"github.com/mightyetl/mightyetl/internal/pgtest"
)

func cancelReq(principal, id, key string) req {
	return req{Method: "POST", Path: "/api/etl/jobs/" + id + "/cancellation", Principal: principal, Key: key}
}

// checkCancelled pins a 200 cancellation response.
func checkCancelled(t *testing.T, res response, id, replayed string) intake.JobView {
	t.Helper()
	if res.Status != 200 {
		t.Fatalf("cancel: %d %s", res.Status, res.Body)
	}
	var v intake.JobView
	res.json(t, &v)
	if v.JobRecordID != id || v.JobStatus != "CANCELLED" {
		t.Errorf("view %+v", v)
	}
	h := res.Header
	if h.Get("Cache-Control") != "no-store" || h.Get("Idempotency-Replayed") != replayed || h.Get("ETag") != v.ETag() || h.Get("Retry-After") != "" {
		t.Errorf("headers %v (want replayed %s)", h, replayed)
	}
	return v
}

// TestCancellationContract pins every row of the cancellation section.
func TestCancellationContract(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	ctx := context.Background()
	pending, _ := e.submit("alice", "key-cancel-000000001", sampleBody)

	// Missing and invalid key, after the owner's id is known to parse.
	for _, k := range []string{"", "bad key", `"short"`} {
		r := cancelReq("alice", pending.JobRecordID, k)
		checkProblem(t, e.do(r), r.Path, 400, "etl_job_cancellation_key_required")
	}
	// Another owner: 404, job untouched.
	r := cancelReq("bob", pending.JobRecordID, "cancel-key-000000001")
	checkProblem(t, e.do(r), r.Path, 404, "etl_job_not_found")

	// PENDING -> CANCELLED: payload and lease cleared, key hash, code and time stored.
	first := checkCancelled(t, e.do(cancelReq("alice", pending.JobRecordID, "cancel-key-000000001")), pending.JobRecordID, "false")
	var payload, code *string
	var keyHash string
	var cancelledAt *time.Time
	err := e.pool.QueryRow(ctx, `SELECT request_payload, cancellation_code, cancellation_key_hash, job_cancelled_at
		FROM etl_job_records WHERE job_record_id = $1`, uuid.MustParse(pending.JobRecordID)).Scan(&payload, &code, &keyHash, &cancelledAt)
	if err != nil {
		t.Fatal(err)
	}
	wantHash := intake.CancellationKeyHash(intakeScope("alice"), pending.JobRecordID, "cancel-key-000000001")
	if payload != nil || code == nil || *code != "etl_job_cancelled_by_owner" || keyHash != wantHash || cancelledAt == nil {
		t.Errorf("row: payload %v code %v hash ok %v at %v", payload, code, keyHash == wantHash, cancelledAt)
	}
	// Same key (raw or sf-string): replay, identical representation.
	again := checkCancelled(t, e.do(cancelReq("alice", pending.JobRecordID, `"cancel-key-000000001"`)), pending.JobRecordID, "true")
	if again != first {
		t.Errorf("replay %+v != %+v", again, first)
	}
	// Other key: 422.
	r = cancelReq("alice", pending.JobRecordID, "cancel-key-000000002")
	checkProblem(t, e.do(r), r.Path, 422, "etl_job_cancellation_key_reused")
	// Terminal states.
	succeeded := finishJob(t, e, "alice", "key-cancel-000000002", pg.StatusSucceeded)
	r = cancelReq("alice", succeeded, "cancel-key-000000003")
	checkProblem(t, e.do(r), r.Path, 409, "etl_job_already_succeeded")
	failed := finishJob(t, e, "alice", "key-cancel-000000003", pg.StatusFailed)
	r = cancelReq("alice", failed, "cancel-key-000000003")
	checkProblem(t, e.do(r), r.Path, 409, "etl_job_already_failed")
	// Absent and malformed.
	r = cancelReq("alice", uuid.NewString(), "cancel-key-000000003")
	checkProblem(t, e.do(r), r.Path, 404, "etl_job_not_found")
	r = cancelReq("alice", "nope", "cancel-key-000000003")
	checkProblem(t, e.do(r), r.Path, 404, "etl_job_not_found")

	// Outbox: one lifecycle row for the PENDING cancel and no revocation.
	id := uuid.MustParse(pending.JobRecordID)
	if n := e.count(`SELECT count(*) FROM etl_outbox_events WHERE job_record_id = $1 AND event_kind = 'job_lifecycle'
		AND job_status = 'CANCELLED' AND event_code = 'etl_job_cancelled_by_owner'`, id); n != 1 {
		t.Errorf("lifecycle rows %d", n)
	}
	if n := e.count(`SELECT count(*) FROM etl_outbox_events WHERE job_record_id = $1 AND event_kind = 'lease_revoked'`, id); n != 0 {
		t.Errorf("revocation rows for a pending job: %d", n)
	}
	// A later claim never takes the cancelled job.
	res, err := lease.ClaimJobs(ctx, e.pool, lease.ClaimParams{OwnerID: "test-worker-1", Limit: 10, LeaseDuration: time.Minute})
	if err != nil || len(res.Claimed) != 0 {
		t.Errorf("claimed after cancel: %v %+v", err, res)
	}
	m := e.metricsText()
	for _, want := range []string{
		`mightyetl_job_cancellations_total{outcome="cancelled"} 1`,
		`mightyetl_job_cancellations_total{outcome="replayed"} 1`,
		`mightyetl_job_cancellations_total{outcome="conflict"} 3`,
		`mightyetl_job_cancellations_total{outcome="not_found"} 3`,
	} {
		if !strings.Contains(m, want) {
			t.Errorf("metrics lack %s", want)
		}
	}
}

// TestCancelRunning: cancelling a RUNNING job revokes the lease; the old
// holder's renewal matches nothing and its fenced success rolls back with
// its target and ledger rows.
func TestCancelRunning(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	ctx := context.Background()
	s, _ := e.submit("alice", "key-running-00000001", sampleBody)
	c := claimOne(t, e)
	checkCancelled(t, e.do(cancelReq("alice", s.JobRecordID, "cancel-key-000000001")), s.JobRecordID, "false")
	var leaseCols int
	if err := e.pool.QueryRow(ctx, `SELECT num_nonnulls(lease_claim_id, lease_owner_id, lease_expires_at, lease_fencing_token, request_payload)
		FROM etl_job_records WHERE job_record_id = $1`, c.JobID).Scan(&leaseCols); err != nil || leaseCols != 0 {
		t.Errorf("lease/payload columns left: %d %v", leaseCols, err)
	}
	ren, err := lease.Renew(ctx, e.pool, c.OwnerID, []lease.Ref{c.Ref}, time.Minute)
	if err != nil || ren[0].Renewed {
		t.Errorf("renew after cancel: %v %+v", err, ren)
	}
	rows, err := etl.Process([]byte(sampleBody), 100)
	if err != nil {
		t.Fatal(err)
	}
	err = pg.WithTx(ctx, e.pool, func(tx pgx.Tx) error {
		// Target and ledger writes first, then the fence: the fence must roll them back.
		target := []etl.TargetRow{{JobID: c.JobID, Data: rows[0].Data, Normalized: rows[0].Normalized}}
		if err := etl.LoadRows(ctx, tx, target); err != nil {
			return err
		}
		if _, _, err := pg.ClaimLedgerEntry(ctx, tx, pg.LedgerEntry{
			PrincipalScopeHash: intakeScope("alice"), IdempotencyKeyHash: strings.Repeat("a", 64),
			RequestDigest: strings.Repeat("b", 64), ResponseText: etl.ResponseText(rows), JobID: c.JobID,
		}); err != nil {
			return err
		}
		_, err := pgtest.SucceedOne(ctx, tx, c.Ref)
		return err
	})
	if err != lease.ErrLost {
		t.Fatalf("succeed after cancel: %v", err)
	}
	if n := e.count("SELECT count(*) FROM processed_data") + e.count("SELECT count(*) FROM etl_idempotency_records"); n != 0 {
		t.Errorf("rows of a cancelled job survived: %d", n)
	}
	if n := e.count(`SELECT count(*) FROM etl_outbox_events WHERE job_record_id = $1 AND event_kind = 'lease_revoked'
		AND event_code = 'etl_job_cancelled_by_owner'`, c.JobID); n != 1 {
		t.Errorf("revocation rows %d", n)
	}
	if n := e.count(`SELECT count(*) FROM etl_outbox_events WHERE job_record_id = $1 AND event_kind = 'job_lifecycle' AND attempt_count = 1`, c.JobID); n != 1 {
		t.Errorf("lifecycle rows %d", n)
	}
	// An expired or superseded holder cannot overwrite CANCELLED either.
	if err := lease.Fail(ctx, e.pool, c.Ref, codes.TargetFailure); err != lease.ErrLost {
		t.Errorf("fail after cancel: %v", err)
	}
	if err := lease.Retry(ctx, e.pool, c.Ref, 0); err != lease.ErrLost {
		t.Errorf("retry after cancel: %v", err)
	}
	if st, _ := lease.InspectLost(ctx, e.pool, c.JobID); st.Status != "CANCELLED" {
		t.Errorf("status %s", st)
	}
}

// TestCancelAfterSuccess: a success committed first wins; the cancel is 409
// and the job stays SUCCEEDED with its rows.
func TestCancelAfterSuccess(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	ctx := context.Background()
	s, _ := e.submit("alice", "key-success-00000001", sampleBody)
	c := claimOne(t, e)
	// The worker's finish transaction holds the row lock while the cancel waits.
	tx, err := e.pool.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := pgtest.SucceedOne(ctx, tx, c.Ref); err != nil {
		t.Fatal(err)
	}
	done := make(chan response, 1)
	go func() { done <- e.do(cancelReq("alice", s.JobRecordID, "cancel-key-000000001")) }()
	waitFor(t, "cancel to wait on the row lock", func() bool {
		return e.count(`SELECT count(*) FROM pg_stat_activity WHERE wait_event_type = 'Lock' AND datname = current_database()`) > 0
	})
	if err := tx.Commit(ctx); err != nil {
		t.Fatal(err)
	}
	res := <-done
	checkProblem(t, res, "/api/etl/jobs/"+s.JobRecordID+"/cancellation", 409, "etl_job_already_succeeded")
	if st, _ := lease.InspectLost(ctx, e.pool, c.JobID); st.Status != "SUCCEEDED" {
		t.Errorf("status %s", st)
	}
}

func TestConcurrentCancellations(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	const n = 20
	run := func(id string, key func(i int) string) []response {
		var wg sync.WaitGroup
		start := make(chan struct{})
		out := make([]response, n)
		for i := range n {
			wg.Go(func() {
				<-start
				out[i] = e.do(cancelReq("alice", id, key(i)))
			})
		}
		close(start)
		wg.Wait()
		return out
	}
	t.Run("one key", func(t *testing.T) {
		s, _ := e.submit("alice", "key-conc-one-0000001", sampleBody)
		claimOne(t, e) // RUNNING: the cancel also revokes
		res := run(s.JobRecordID, func(int) string { return "cancel-key-same-0001" })
		fresh, bodies := 0, map[string]bool{}
		for _, r := range res {
			replayed := r.Header.Get("Idempotency-Replayed")
			checkCancelled(t, r, s.JobRecordID, replayed)
			if replayed == "false" {
				fresh++
			}
			bodies[string(r.Body)] = true
		}
		if fresh != 1 || len(bodies) != 1 {
			t.Errorf("%d transitions, %d distinct bodies", fresh, len(bodies))
		}
		id := uuid.MustParse(s.JobRecordID)
		if k := e.count(`SELECT count(*) FROM etl_outbox_events WHERE job_record_id = $1 AND job_status = 'CANCELLED'`, id); k != 2 {
			t.Errorf("outbox rows %d, want lifecycle + revocation", k)
		}
	})
	t.Run("different keys", func(t *testing.T) {
		s, _ := e.submit("alice", "key-conc-diff-000001", sampleBody)
		key := func(i int) string { return fmt.Sprintf("cancel-key-diff-%04d", i) }
		res := run(s.JobRecordID, key)
		winner := -1
		for i, r := range res {
			if r.Status == 200 {
				if winner >= 0 {
					t.Fatal("two winners")
				}
				winner = i
				checkCancelled(t, r, s.JobRecordID, "false")
				continue
			}
			checkProblem(t, r, "/api/etl/jobs/"+s.JobRecordID+"/cancellation", 422, "etl_job_cancellation_key_reused")
		}
		if winner < 0 {
			t.Fatal("no winner")
		}
		// Stable: the losers stay 422, the winner replays.
		again := run(s.JobRecordID, key)
		for i, r := range again {
			if i == winner {
				checkCancelled(t, r, s.JobRecordID, "true")
			} else if r.Status != 422 {
				t.Errorf("loser %d now %d", i, r.Status)
			}
		}
		if k := e.count(`SELECT count(*) FROM etl_outbox_events WHERE job_record_id = $1 AND job_status = 'CANCELLED'`, uuid.MustParse(s.JobRecordID)); k != 1 {
			t.Errorf("outbox rows %d", k)
		}
	})
}

// TestNoSecretsInLogsOrMetrics drives every route, including failures, and
// searches the captured logs and the metrics exposition for anything a
// request carried or the database stored about it.
func TestNoSecretsInLogsOrMetrics(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	const principal, key = "principal-secret-xyz", "key-secret-value-0001"
	body := `[{"id":"payload-secret-id","name":"secret-name"}]`
	s, _ := e.submit(principal, key, body)
	e.do(req{Method: "POST", Path: "/api/etl/jobs", Principal: principal, Key: key, Body: `[{"id":"payload-other"}]`})
	e.do(req{Method: "GET", Path: "/api/etl/jobs/" + s.JobRecordID, Principal: principal})
	var page listResponse
	e.do(req{Method: "GET", Path: "/api/etl/jobs?limit=1", Principal: principal}).json(t, &page)
	e.submit(principal, key+"2", body)
	e.do(req{Method: "GET", Path: "/api/etl/jobs?limit=1", Principal: principal}).json(t, &page)
	e.do(cancelReq(principal, s.JobRecordID, "cancel-secret-key-0001"))
	e.do(cancelReq(principal, s.JobRecordID, "cancel-secret-key-0002"))
	e.do(req{Method: "POST", Path: "/api/etl/process", Principal: principal, Key: "sync-secret-key-00001", Body: body})
	e.do(req{Method: "POST", Path: "/api/etl/jobs", Principal: principal, Key: "key-secret-value-0003", Body: `[{"id":"bad `})
	e.pool.Close() // and a 5xx
	e.do(req{Method: "GET", Path: "/api/etl/jobs/" + s.JobRecordID, Principal: principal})

	scope := intakeScope(principal)
	secrets := []string{
		principal, key, "cancel-secret-key", "sync-secret-key", "payload-secret", "secret-name", "SECRET-NAME",
		s.JobRecordID, scope, intake.SubmissionKeyHash(scope, key), intake.RequestDigest([]byte(body)),
		hex.EncodeToString([]byte(principal)),
	}
	if page.NextCursor != "" {
		secrets = append(secrets, page.NextCursor)
	}
	logs, metrics := e.logs.String(), e.metricsText()
	if !strings.Contains(logs, `"route":"POST /api/etl/jobs"`) || !strings.Contains(logs, `"level":"ERROR"`) {
		t.Errorf("logs lack the expected fields:\n%s", logs)
	}
	for _, sec := range secrets {
		if strings.Contains(logs, sec) {
			t.Errorf("logs contain %q", sec)
		}
		if strings.Contains(metrics, sec) {
			t.Errorf("metrics contain %q", sec)
		}
	}
	for _, bad := range []string{"SELECT", "SQLSTATE", "closed pool", "error\":"} {
		if strings.Contains(logs, bad) {
			t.Errorf("logs contain %q", bad)
		}
	}
}
