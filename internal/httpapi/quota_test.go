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
	"github.com/mightyetl/mightyetl/internal/pgtest"
	"github.com/mightyetl/mightyetl/internal/testclock"
)

func withQuotas(q intake.QuotaOptions) envOption {
	return func(_ *Options, so *intake.Options) { so.Quotas = q }
}

// quotaRefused requires a 429 etl_owner_quota_exceeded problem with
// Retry-After retryAfter.
func quotaRefused(t *testing.T, res response, retryAfter string) {
	t.Helper()
	if res.Status != http.StatusTooManyRequests || res.problemCode(t) != codes.OwnerQuotaExceeded {
		t.Fatalf("status %d body %s, want 429 %s", res.Status, res.Body, codes.OwnerQuotaExceeded)
	}
	if got := res.Header.Get("Retry-After"); got != retryAfter {
		t.Fatalf("Retry-After %q, want %q", got, retryAfter)
	}
	if ct := res.Header.Get("Content-Type"); ct != "application/problem+json" {
		t.Fatalf("Content-Type %q", ct)
	}
}

func quotaKey(i int) string { return fmt.Sprintf("quota-key-%010d", i) }

// The pending cap over HTTP: with MIGHTYETL_OWNER_MAX_PENDING_JOBS=3 an
// owner's fourth pending job is 429 etl_owner_quota_exceeded with
// Retry-After and writes nothing; a retry of an admitted submission still
// replays its job; other owners are not affected; a RUNNING job still
// counts; once a job has succeeded and the count window has passed (the
// injected clock), the owner is admitted again.
func TestOwnerPendingCapOverHTTP(t *testing.T) {
	t.Parallel()
	clock := testclock.New()
	e := newEnv(t, withQuotas(intake.QuotaOptions{Default: intake.OwnerLimits{MaxPendingJobs: 3}, Now: clock.Now}))
	jobs := func() int { return e.count(`SELECT count(*) FROM etl_job_records`) }
	for i := 1; i <= 3; i++ {
		e.submit("alice", quotaKey(i), sampleBody)
	}
	res := e.do(req{Method: "POST", Path: "/api/etl/jobs", Principal: "alice", Key: quotaKey(4), Body: sampleBody})
	quotaRefused(t, res, "2")
	if n := jobs(); n != 3 {
		t.Fatalf("a refused submission wrote: %d jobs", n)
	}
	// The same key and body as an admitted job: its job, never a refusal.
	if _, res := e.submit("alice", quotaKey(2), sampleBody); res.Header.Get("Idempotency-Replayed") != "true" {
		t.Fatalf("resubmission not replayed: %v", res.Header)
	}
	// A diagnostic job and a replay are jobs too.
	quotaRefused(t, e.do(req{Method: "POST", Path: "/api/etl/diagnostic-jobs", Principal: "alice", Key: quotaKey(5),
		Body: `{"durationMillis":1}`}), "2")
	e.submit("bob", quotaKey(1), sampleBody)

	// A running job is still pending.
	ctx := context.Background()
	claimed, err := lease.ClaimJobs(ctx, e.pool, lease.ClaimParams{OwnerID: "quota-test-worker", Limit: 1, LeaseDuration: time.Minute})
	if err != nil || len(claimed.Claimed) != 1 {
		t.Fatalf("claim: %+v, %v", claimed, err)
	}
	clock.Advance(intake.DefaultPendingWindow)
	quotaRefused(t, e.do(req{Method: "POST", Path: "/api/etl/jobs", Principal: "alice", Key: quotaKey(4), Body: sampleBody}), "2")

	// It succeeds: seen once the count is older than its window.
	if _, err := pgtest.SucceedOne(ctx, e.pool, claimed.Claimed[0].Ref); err != nil {
		t.Fatal(err)
	}
	quotaRefused(t, e.do(req{Method: "POST", Path: "/api/etl/jobs", Principal: "alice", Key: quotaKey(4), Body: sampleBody}), "2")
	clock.Advance(intake.DefaultPendingWindow)
	e.submit("alice", quotaKey(4), sampleBody)
	quotaRefused(t, e.do(req{Method: "POST", Path: "/api/etl/jobs", Principal: "alice", Key: quotaKey(6), Body: sampleBody}), "2")
	if n := jobs(); n != 5 {
		t.Fatalf("%d jobs, want 5 (alice 4, bob 1)", n)
	}
	m := e.metricsText()
	for _, want := range []string{
		`mightyetl_owner_quota_decisions_total{outcome="admitted"} 5`,
		`mightyetl_owner_quota_decisions_total{outcome="pending_limited"} 5`,
		`mightyetl_owner_quota_decisions_total{outcome="resubmitted"} 1`,
		`mightyetl_owner_quota_decisions_total{outcome="rate_limited"} 0`,
		`mightyetl_submission_rejections_total{code="etl_owner_quota_exceeded"} 5`,
	} {
		if !strings.Contains(m, want) {
			t.Errorf("metrics lack %s", want)
		}
	}
	if strings.Contains(m, "alice") {
		t.Error("a principal appears in the metrics")
	}
}

// The submission rate over HTTP: an owner with rate 1/s and burst 2 gets
// two submissions, then 429 with Retry-After 1 (the bucket's delay), and
// one more a second later; an override gives another principal its own
// bucket (rate 0.25/s: Retry-After 4) and an override of zeros makes a
// principal unlimited.
func TestOwnerSubmitRateOverHTTP(t *testing.T) {
	t.Parallel()
	clock := testclock.New()
	e := newEnv(t, withQuotas(intake.QuotaOptions{
		Default: intake.OwnerLimits{SubmitRate: 1, SubmitBurst: 2},
		Overrides: map[string]intake.OwnerLimits{
			"slow": {SubmitRate: 0.25, SubmitBurst: 1},
			"vip":  {},
		},
		Now: clock.Now,
	}))
	e.submit("alice", quotaKey(1), sampleBody)
	e.submit("alice", quotaKey(2), sampleBody)
	quotaRefused(t, e.do(req{Method: "POST", Path: "/api/etl/jobs", Principal: "alice", Key: quotaKey(3), Body: sampleBody}), "1")
	clock.Advance(time.Second)
	e.submit("alice", quotaKey(3), sampleBody)
	quotaRefused(t, e.do(req{Method: "POST", Path: "/api/etl/jobs", Principal: "alice", Key: quotaKey(4), Body: sampleBody}), "1")

	e.submit("slow", quotaKey(1), sampleBody)
	quotaRefused(t, e.do(req{Method: "POST", Path: "/api/etl/jobs", Principal: "slow", Key: quotaKey(2), Body: sampleBody}), "4")
	for i := 1; i <= 5; i++ {
		e.submit("vip", quotaKey(i), sampleBody)
	}
	if n := e.count(`SELECT count(*) FROM etl_job_records`); n != 9 {
		t.Fatalf("%d jobs, want 9", n)
	}
	m := e.metricsText()
	for _, want := range []string{
		`mightyetl_owner_quota_decisions_total{outcome="admitted"} 4`,
		`mightyetl_owner_quota_decisions_total{outcome="rate_limited"} 3`,
	} {
		if !strings.Contains(m, want) {
			t.Errorf("metrics lack %s", want)
		}
	}
}
