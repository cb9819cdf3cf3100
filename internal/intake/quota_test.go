package intake

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/mightyetl/mightyetl/internal/metrics"
	"github.com/mightyetl/mightyetl/internal/pgtest"
	"github.com/mightyetl/mightyetl/internal/testclock"
	"github.com/prometheus/client_golang/prometheus"
)

func quotaSubmit(s *Service, principal string, i int) error {
	_, err := s.Submit(context.Background(), SubmitRequest{Principal: principal,
		IdempotencyKey: fmt.Sprintf("quota-unit-key-%08d", i), Body: []byte(body)})
	return err
}

// Concurrent submissions of one owner against a pending cap of 5, with
// the first count taken while they race: exactly 5 jobs, every other
// submission refused, because each admitted submission holds its place
// until its outcome is known and the owner's first submissions wait for
// the first count.
func TestPendingCapIsExactUnderConcurrency(t *testing.T) {
	t.Parallel()
	clock := testclock.New()
	s, pool := newService(t, func(o *Options) {
		o.Quotas = QuotaOptions{Default: OwnerLimits{MaxPendingJobs: 5}, Now: clock.Now}
	})
	const n = 24
	errs := make(chan error, n)
	start := make(chan struct{})
	var wg sync.WaitGroup
	for i := range n {
		wg.Add(1)
		go func() {
			defer wg.Done()
			<-start
			errs <- quotaSubmit(s, "racer", i)
		}()
	}
	close(start)
	wg.Wait()
	close(errs)
	admitted, refused := 0, 0
	for err := range errs {
		switch {
		case err == nil:
			admitted++
		case errors.Is(err, ErrOwnerQuotaExceeded):
			refused++
			var q *QuotaExceeded
			if !errors.As(err, &q) || q.Limit != QuotaLimitPending || q.RetryAfterSeconds() != 2 {
				t.Errorf("refusal %+v", q)
			}
		default:
			t.Fatal(err)
		}
	}
	if admitted != 5 || refused != n-5 {
		t.Fatalf("admitted %d refused %d, want 5 and %d", admitted, refused, n-5)
	}
	if c := pgtest.Count(t, pool, `SELECT count(*) FROM etl_job_records`); c != 5 {
		t.Fatalf("%d jobs, want 5", c)
	}
	// A new count (the window passed) agrees with the database.
	clock.Advance(DefaultPendingWindow)
	if err := quotaSubmit(s, "racer", 1000); !errors.Is(err, ErrOwnerQuotaExceeded) {
		t.Fatalf("after a recount: %v", err)
	}
}

// SetQuotas replaces the limits at run time: a raised cap admits at once
// (the owner is counted again), quotas switched off admit everything, and
// an invalid configuration is refused and changes nothing.
func TestSetQuotasReconfigures(t *testing.T) {
	t.Parallel()
	clock := testclock.New()
	s, _ := newService(t, func(o *Options) {
		o.Quotas = QuotaOptions{Default: OwnerLimits{MaxPendingJobs: 1}, Now: clock.Now}
	})
	if err := quotaSubmit(s, "owner", 1); err != nil {
		t.Fatal(err)
	}
	if err := quotaSubmit(s, "owner", 2); !errors.Is(err, ErrOwnerQuotaExceeded) {
		t.Fatalf("over the cap: %v", err)
	}
	if err := s.SetQuotas(QuotaOptions{Default: OwnerLimits{MaxPendingJobs: -1}}); err == nil {
		t.Fatal("a negative cap was accepted")
	}
	if err := quotaSubmit(s, "owner", 2); !errors.Is(err, ErrOwnerQuotaExceeded) {
		t.Fatalf("a refused configuration changed the quotas: %v", err)
	}
	if err := s.SetQuotas(QuotaOptions{Default: OwnerLimits{MaxPendingJobs: 2}, Now: clock.Now}); err != nil {
		t.Fatal(err)
	}
	if err := quotaSubmit(s, "owner", 2); err != nil {
		t.Fatalf("after raising the cap: %v", err)
	}
	if err := quotaSubmit(s, "owner", 3); !errors.Is(err, ErrOwnerQuotaExceeded) {
		t.Fatalf("over the raised cap: %v", err)
	}
	if err := s.SetQuotas(QuotaOptions{}); err != nil {
		t.Fatal(err)
	}
	if err := quotaSubmit(s, "owner", 3); err != nil {
		t.Fatalf("without quotas: %v", err)
	}
}

// OwnerLimits' burst default and validation.
func TestOwnerLimits(t *testing.T) {
	for _, c := range []struct {
		l     OwnerLimits
		burst int
	}{{OwnerLimits{SubmitRate: 0.5}, 1}, {OwnerLimits{SubmitRate: 2.5}, 3}, {OwnerLimits{SubmitRate: 2, SubmitBurst: 7}, 7}} {
		if b := c.l.burst(); b != c.burst {
			t.Errorf("%+v: burst %d, want %d", c.l, b, c.burst)
		}
	}
	for _, bad := range []OwnerLimits{{MaxPendingJobs: -1}, {SubmitRate: -1}, {SubmitBurst: -1}} {
		if bad.validate() == nil {
			t.Errorf("%+v accepted", bad)
		}
	}
	if (OwnerLimits{}).Limited() || !(OwnerLimits{SubmitRate: 1}).Limited() || (QuotaOptions{Overrides: map[string]OwnerLimits{"x": {}}}).Enabled() {
		t.Error("Limited/Enabled")
	}
}

// The precheck of an expensive request (an Object Store ingest) refuses
// what the quotas would refuse now, from this process's state alone, and
// takes nothing: an owner with a spent bucket or at its cap (counted within
// the window) is refused, an unknown owner or one with room is let through.
func TestPrecheckOwner(t *testing.T) {
	t.Parallel()
	clock := testclock.New()
	s, _ := newService(t, func(o *Options) {
		o.Quotas = QuotaOptions{
			Default:   OwnerLimits{SubmitRate: 0.5, SubmitBurst: 1},
			Overrides: map[string]OwnerLimits{"capped": {MaxPendingJobs: 1}},
			Now:       clock.Now,
		}
	})
	scope := func(p string) string { h, _ := s.scope(p); return h }
	if err := s.precheckOwner("rated", scope("rated")); err != nil {
		t.Fatalf("an owner not seen yet: %v", err)
	}
	if err := quotaSubmit(s, "rated", 1); err != nil {
		t.Fatal(err)
	}
	err := s.precheckOwner("rated", scope("rated"))
	var q *QuotaExceeded
	if !errors.As(err, &q) || q.Limit != QuotaLimitRate || q.RetryAfterSeconds() != 2 {
		t.Fatalf("spent bucket: %v (%+v), want rate with Retry-After 2", err, q)
	}
	clock.Advance(2 * time.Second)
	if err := s.precheckOwner("rated", scope("rated")); err != nil {
		t.Fatalf("refilled bucket: %v", err)
	}
	if err := quotaSubmit(s, "rated", 2); err != nil {
		t.Fatalf("the precheck took the token: %v", err)
	}

	if err := quotaSubmit(s, "capped", 1); err != nil {
		t.Fatal(err)
	}
	if err := s.precheckOwner("capped", scope("capped")); !errors.As(err, &q) || q.Limit != QuotaLimitPending {
		t.Fatalf("at the cap: %v", err)
	}
	clock.Advance(DefaultPendingWindow)
	if err := s.precheckOwner("capped", scope("capped")); err != nil {
		t.Fatalf("a count older than its window is not known: %v", err)
	}
}

// BenchmarkOwnerQuotaAdmit is the per-request cost of the quotas once an
// owner's pending count is in hand: the cap's reservation and settlement
// and a token from the bucket (the clock moves a microsecond per request
// at a rate of a million a second, so the bucket never runs dry), and,
// for comparison, a Service without quotas.
func BenchmarkOwnerQuotaAdmit(b *testing.B) {
	pool, _ := pgtest.NewDatabase(b)
	clock := testclock.New()
	for _, c := range []struct {
		name string
		q    QuotaOptions
	}{
		{"none", QuotaOptions{}},
		{"pending", QuotaOptions{Default: OwnerLimits{MaxPendingJobs: 1000}, PendingWindow: time.Hour, Now: clock.Now}},
		{"rate", QuotaOptions{Default: OwnerLimits{SubmitRate: 1e6, SubmitBurst: 1}, Now: clock.Now}},
		{"pending+rate", QuotaOptions{Default: OwnerLimits{MaxPendingJobs: 1000, SubmitRate: 1e6, SubmitBurst: 1}, PendingWindow: time.Hour, Now: clock.Now}},
	} {
		b.Run(c.name, func(b *testing.B) {
			s, err := New(Options{DB: pool, PrincipalHashKey: testKey, Quotas: c.q, Metrics: metrics.NewIntake(prometheus.NewRegistry())})
			if err != nil {
				b.Fatal(err)
			}
			scope, _ := s.scope("bench-owner")
			key := SubmissionKeyHash(scope, "bench-key-0000000001")
			ctx := context.Background()
			b.ReportAllocs()
			b.ResetTimer()
			for b.Loop() {
				clock.Advance(time.Microsecond)
				adm, err := s.admitOwner(ctx, "bench-owner", scope, key)
				if err != nil {
					b.Fatal(err)
				}
				adm.settle(false)
			}
		})
	}
}
