package httpapi

import (
	"context"
	"fmt"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/mightyetl/mightyetl/internal/codes"
	"github.com/mightyetl/mightyetl/internal/intake"
	"github.com/mightyetl/mightyetl/internal/lease"
	"github.com/mightyetl/mightyetl/internal/pg"
)

// scheduled is the schedule part of a submit response or job
// representation.
type scheduled struct {
	JobRecordID string `json:"jobRecordId"`
	JobStatus   string `json:"jobStatus"`
	Priority    int    `json:"priority"`
	NotBefore   string `json:"notBefore"`
}

// dbNow is the database clock.
func (e *env) dbNow() time.Time {
	e.t.Helper()
	var now time.Time
	if err := e.pool.QueryRow(context.Background(), `SELECT clock_timestamp()`).Scan(&now); err != nil {
		e.t.Fatal(err)
	}
	return now
}

// submitScheduled posts sampleBody with the schedule headers (empty: not
// sent) and requires a 202.
func (e *env) submitScheduled(key, priority, notBefore string) scheduled {
	e.t.Helper()
	h := map[string]string{}
	if priority != "" {
		h[intake.PriorityHeader] = priority
	}
	if notBefore != "" {
		h[intake.NotBeforeHeader] = notBefore
	}
	res := e.do(req{Method: "POST", Path: "/api/etl/jobs", Principal: "alice", Key: key, Body: sampleBody, Header: h})
	if res.Status != http.StatusAccepted {
		e.t.Fatalf("submit: %d %s", res.Status, res.Body)
	}
	var s scheduled
	res.json(e.t, &s)
	return s
}

// getScheduled reads alice's job id.
func (e *env) getScheduled(id string) (scheduled, response) {
	e.t.Helper()
	res := e.do(req{Method: "GET", Path: "/api/etl/jobs/" + id, Principal: "alice"})
	if res.Status != http.StatusOK {
		e.t.Fatalf("get: %d %s", res.Status, res.Body)
	}
	var s scheduled
	res.json(e.t, &s)
	return s, res
}

// TestScheduleHeadersAreValidated: every malformed or repeated schedule
// header, and a notBefore past the horizon, is its 400 with nothing
// inserted, on submit, diagnostic submit and replay; a malformed priority
// filter is 400 etl_invalid_job_priority_filter. The submission rejections
// are counted by code.
func TestScheduleHeadersAreValidated(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	far := time.Now().Add(intake.DefaultMaxScheduleHorizon + time.Hour).UTC().Format(time.RFC3339)
	cases := []struct {
		name   string
		header http.Header
		code   string
	}{
		{"priority 0", http.Header{intake.PriorityHeader: {"0"}}, codes.InvalidPriority},
		{"priority 5", http.Header{intake.PriorityHeader: {"5"}}, codes.InvalidPriority},
		{"priority word", http.Header{intake.PriorityHeader: {"high"}}, codes.InvalidPriority},
		{"priority empty", http.Header{intake.PriorityHeader: {""}}, codes.InvalidPriority},
		{"priority twice", http.Header{intake.PriorityHeader: {"1", "1"}}, codes.InvalidPriority},
		{"not before garbage", http.Header{intake.NotBeforeHeader: {"tomorrow"}}, codes.InvalidNotBefore},
		{"not before without offset", http.Header{intake.NotBeforeHeader: {"2030-01-02T03:04:05"}}, codes.InvalidNotBefore},
		{"not before past the horizon", http.Header{intake.NotBeforeHeader: {far}}, codes.InvalidNotBefore},
		{"not before twice", http.Header{intake.NotBeforeHeader: {"2030-01-02T03:04:05Z", "2030-01-02T03:04:05Z"}}, codes.InvalidNotBefore},
	}
	for i, c := range cases {
		for _, path := range []string{"/api/etl/jobs", "/api/etl/diagnostic-jobs"} {
			body := sampleBody
			if strings.Contains(path, "diagnostic") {
				body = `{}`
			}
			hr := e.request(req{Method: "POST", Path: path, Principal: "alice", Key: fmt.Sprintf("schedule-bad-key-%04d", i), Body: body})
			for k, v := range c.header {
				hr.Header[k] = v
			}
			res := e.send(hr)
			if res.Status != http.StatusBadRequest || res.problemCode(t) != c.code {
				t.Errorf("%s %s: %d %s, want 400 %s", c.name, path, res.Status, res.Body, c.code)
			}
		}
	}
	if n := e.count(`SELECT count(*) FROM etl_job_records`); n != 0 {
		t.Fatalf("%d jobs inserted by refused submissions", n)
	}
	m := e.metricsText()
	for _, code := range []string{codes.InvalidPriority, codes.InvalidNotBefore} {
		if !strings.Contains(m, `mightyetl_submission_rejections_total{code="`+code+`"} `) ||
			strings.Contains(m, `mightyetl_submission_rejections_total{code="`+code+`"} 0`) {
			t.Errorf("rejections of %s not counted", code)
		}
	}

	// A replay's headers follow the same rules, after the body.
	src := e.submitScheduled("schedule-replay-src-01", "", "")
	if res := e.do(req{Method: "POST", Path: "/api/etl/jobs/" + src.JobRecordID + "/cancellation", Principal: "alice", Key: "schedule-cancel-key-01"}); res.Status != http.StatusOK {
		t.Fatalf("cancel: %d %s", res.Status, res.Body)
	}
	for _, c := range cases {
		hr := e.request(req{Method: "POST", Path: "/api/etl/jobs/" + src.JobRecordID + "/replays", Principal: "alice",
			Key: "schedule-replay-key-01", Body: sampleBody})
		for k, v := range c.header {
			hr.Header[k] = v
		}
		if res := e.send(hr); res.Status != http.StatusBadRequest || res.problemCode(t) != c.code {
			t.Errorf("replay %s: %d %s, want 400 %s", c.name, res.Status, res.Body, c.code)
		}
	}
	if n := e.count(`SELECT count(*) FROM etl_job_records`); n != 1 {
		t.Fatalf("%d jobs after refused replays, want the source only", n)
	}

	for _, q := range []string{"priority=0", "priority=5", "priority=01", "priority=x", "priority=", "priority=1&priority=2", "priority=%zz"} {
		res := e.do(req{Method: "GET", Path: "/api/etl/jobs?" + q, Principal: "alice"})
		if res.Status != http.StatusBadRequest || res.problemCode(t) != codes.InvalidPriorityFilter {
			t.Errorf("list %s: %d %s", q, res.Status, res.Body)
		}
	}
}

// TestPriorityIsStoredAndShown: a submission's priority is in the submit
// response, the status, the list (filtered by priority=, with the filter
// kept in the next link) and the database; a resubmission with another
// priority answers the first job as it is; a replay takes the source's
// priority unless it names its own.
func TestPriorityIsStoredAndShown(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	urgent := e.submitScheduled("priority-key-00000001", "1", "")
	if urgent.Priority != 1 || urgent.NotBefore != "" {
		t.Fatalf("submit response %+v", urgent)
	}
	for i := 2; i <= 4; i++ {
		if s := e.submitScheduled(fmt.Sprintf("priority-key-0000000%d", i), "", ""); s.Priority != pg.DefaultPriority {
			t.Fatalf("default priority %+v", s)
		}
	}
	again := e.submitScheduled("priority-key-00000001", "4", "")
	if again.JobRecordID != urgent.JobRecordID || again.Priority != 1 {
		t.Errorf("resubmission with priority 4: %+v, want the first job at priority 1", again)
	}
	got, res := e.getScheduled(urgent.JobRecordID)
	if got.Priority != 1 || got.NotBefore != "" {
		t.Errorf("status %+v", got)
	}
	if n := e.count(`SELECT count(*) FROM etl_job_records WHERE job_priority = 1`); n != 1 {
		t.Errorf("%d jobs of priority 1 in the database", n)
	}
	if res.Header.Get("ETag") == "" {
		t.Error("no ETag")
	}
	var page struct {
		Jobs       []scheduled `json:"jobs"`
		NextCursor string      `json:"nextCursor"`
	}
	list := e.do(req{Method: "GET", Path: "/api/etl/jobs?priority=1", Principal: "alice"})
	list.json(t, &page)
	if list.Status != http.StatusOK || len(page.Jobs) != 1 || page.Jobs[0].JobRecordID != urgent.JobRecordID || page.Jobs[0].Priority != 1 {
		t.Errorf("list priority=1: %d %s", list.Status, list.Body)
	}
	list = e.do(req{Method: "GET", Path: "/api/etl/jobs?priority=2&limit=1", Principal: "alice"})
	page.Jobs = nil
	list.json(t, &page)
	if len(page.Jobs) != 1 || page.Jobs[0].Priority != 2 || !strings.Contains(list.Header.Get("Link"), "priority=2") {
		t.Errorf("list priority=2&limit=1: %s, Link %q", list.Body, list.Header.Get("Link"))
	}

	// Replays of the cancelled urgent job.
	if r := e.do(req{Method: "POST", Path: "/api/etl/jobs/" + urgent.JobRecordID + "/cancellation", Principal: "alice", Key: "priority-cancel-key-01"}); r.Status != http.StatusOK {
		t.Fatalf("cancel: %d %s", r.Status, r.Body)
	}
	replay := func(key string, h map[string]string) scheduled {
		r := e.do(req{Method: "POST", Path: "/api/etl/jobs/" + urgent.JobRecordID + "/replays", Principal: "alice", Key: key, Body: sampleBody, Header: h})
		if r.Status != http.StatusAccepted {
			t.Fatalf("replay: %d %s", r.Status, r.Body)
		}
		var s scheduled
		r.json(t, &s)
		return s
	}
	if s := replay("priority-replay-key-01", nil); s.Priority != 1 || s.NotBefore != "" {
		t.Errorf("replay without headers %+v, want the source's priority 1 at once", s)
	}
	at := e.dbNow().Add(time.Hour).UTC()
	s := replay("priority-replay-key-02", map[string]string{intake.PriorityHeader: "3", intake.NotBeforeHeader: at.Format(time.RFC3339Nano)})
	if s.Priority != 3 || s.NotBefore != intake.FormatTime(at) {
		t.Errorf("replay with headers %+v, want priority 3 not before %s", s, intake.FormatTime(at))
	}
	if got, _ := e.getScheduled(s.JobRecordID); got.Priority != 3 || got.NotBefore != intake.FormatTime(at) {
		t.Errorf("replay status %+v", got)
	}
}

// TestScheduledJobIsNotClaimedEarly: a job submitted with
// Mightyetl-Not-Before = database now + 2 s is not claimed by a claim the
// database clock places before that time, shows its notBefore meanwhile,
// and is claimed afterwards (the claim's own clock at or after it), when
// the status no longer shows one.
func TestScheduledJobIsNotClaimedEarly(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	ctx := context.Background()
	claim := func() []lease.Claim {
		t.Helper()
		res, err := lease.ClaimJobs(ctx, e.pool, lease.ClaimParams{OwnerID: "schedule-test-worker", Limit: 10,
			LeaseDuration: time.Minute, Owners: 32})
		if err != nil {
			t.Fatal(err)
		}
		return res.Claimed
	}
	var job scheduled
	var claims []lease.Claim
	// A loaded machine may take longer than 2 s between the submit and the
	// claim: then that job proves nothing early, and another is scheduled
	// (every one is claimed below).
	for attempt := 1; ; attempt++ {
		if attempt > 10 {
			t.Fatal("no claim ran within 2 s of its job's submission in 10 attempts")
		}
		notBefore := e.dbNow().Add(2 * time.Second)
		job = e.submitScheduled(fmt.Sprintf("schedule-claim-key-%04d", attempt), "", notBefore.Format(time.RFC3339Nano))
		if job.NotBefore != intake.FormatTime(notBefore) {
			t.Fatalf("submit response %+v, want notBefore %s", job, intake.FormatTime(notBefore))
		}
		got, res := e.getScheduled(job.JobRecordID)
		claimed := claim()
		claims = append(claims, claimed...)
		if !e.dbNow().Before(notBefore) {
			continue
		}
		// The read and the claim ran before the notBefore by the database
		// clock.
		for _, c := range claimed {
			if c.JobID.String() == job.JobRecordID {
				t.Fatal("the job was claimed before its notBefore")
			}
		}
		if got.JobStatus != pg.StatusPending || got.NotBefore != intake.FormatTime(notBefore) || res.Header.Get("Retry-After") == "" {
			t.Fatalf("status before the notBefore %+v (Retry-After %q)", got, res.Header.Get("Retry-After"))
		}
		break
	}
	waitFor(t, "the scheduled jobs to be claimed", func() bool {
		claims = append(claims, claim()...)
		return e.count(`SELECT count(*) FROM etl_job_records WHERE job_status = 'PENDING'`) == 0
	})
	for _, c := range claims {
		var availableAt time.Time
		if err := e.pool.QueryRow(ctx, `SELECT available_at FROM etl_job_records WHERE job_record_id = $1`, c.JobID).Scan(&availableAt); err != nil {
			t.Fatal(err)
		}
		if claimedAt := c.ExpiresAt.Add(-time.Minute); claimedAt.Before(availableAt) {
			t.Errorf("job claimed at %v, before its notBefore %v", claimedAt, availableAt)
		}
	}
	got, _ := e.getScheduled(job.JobRecordID)
	if got.JobStatus != pg.StatusRunning || got.NotBefore != "" {
		t.Errorf("status after the claim %+v", got)
	}
}

// TestScheduledJobCanBeCancelled: a scheduled job is PENDING; the owner's
// cancellation moves it to CANCELLED (its queue row gone, so it never runs),
// keeps its priority and drops its notBefore, and the status shows that;
// the cancellation's ETag is the status's.
func TestScheduledJobCanBeCancelled(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	at := e.dbNow().Add(time.Hour).UTC()
	job := e.submitScheduled("schedule-cancel-job-01", "3", at.Format(time.RFC3339Nano))
	before, res := e.getScheduled(job.JobRecordID)
	if before.JobStatus != pg.StatusPending || before.Priority != 3 || before.NotBefore != intake.FormatTime(at) {
		t.Fatalf("scheduled status %+v", before)
	}
	pendingTag := res.Header.Get("ETag")
	c := e.do(req{Method: "POST", Path: "/api/etl/jobs/" + job.JobRecordID + "/cancellation", Principal: "alice", Key: "schedule-cancel-key-02"})
	var cancelled scheduled
	c.json(t, &cancelled)
	if c.Status != http.StatusOK || cancelled.JobStatus != pg.StatusCancelled || cancelled.Priority != 3 || cancelled.NotBefore != "" {
		t.Fatalf("cancel: %d %s", c.Status, c.Body)
	}
	after, res := e.getScheduled(job.JobRecordID)
	if after.JobStatus != pg.StatusCancelled || after.Priority != 3 || after.NotBefore != "" {
		t.Errorf("status after cancel %+v", after)
	}
	if tag := res.Header.Get("ETag"); tag != c.Header.Get("ETag") || tag == pendingTag {
		t.Errorf("ETag: cancel %q, status %q, before %q", c.Header.Get("ETag"), tag, pendingTag)
	}
	if n := e.count(`SELECT count(*) FROM etl_job_claim_queue`); n != 0 {
		t.Errorf("%d queue rows left after cancelling the scheduled job", n)
	}
}
