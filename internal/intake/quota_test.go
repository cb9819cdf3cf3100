package intake

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/mightyetl/mightyetl/internal/pgtest"
)

// quotaClock is a clock moved by hand.
type quotaClock struct {
	mu  sync.Mutex
	now time.Time
}

func (c *quotaClock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.now
}

func (c *quotaClock) Advance(d time.Duration) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.now = c.now.Add(d)
}

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
	clock := &quotaClock{now: time.Unix(1e9, 0)}
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
	clock := &quotaClock{now: time.Unix(1e9, 0)}
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
