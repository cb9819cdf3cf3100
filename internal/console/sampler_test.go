package console

import (
	"context"
	"testing"
	"time"

	"github.com/mightyetl/mightyetl/internal/lease"
	"github.com/mightyetl/mightyetl/internal/pg"
	"github.com/mightyetl/mightyetl/internal/pgtest"
	"github.com/mightyetl/mightyetl/internal/startstop"
	"github.com/mightyetl/mightyetl/internal/startstop/startstoptest"
	"github.com/mightyetl/mightyetl/internal/testwait"
)

func (s *Sampler) count() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return len(s.s)
}

// TestSamplerStartStop: the sampler is a startstop part (Stop before Start,
// concurrent Starts and Stops, Start after Stop), and a started sampler
// takes its first sample from the database without anyone opening the
// overview.
func TestSamplerStartStop(t *testing.T) {
	pool, _ := pgtest.NewDatabase(t)
	newSampler := func(t *testing.T) startstop.Service {
		c, err := New(Options{DB: pool})
		if err != nil {
			t.Fatal(err)
		}
		return c.Sampler()
	}
	startstoptest.Stress(t, newSampler, 10*time.Second)

	s := newSampler(t).(*Sampler)
	ctx := context.Background()
	if err := s.Start(ctx); err != nil {
		t.Fatal(err)
	}
	testwait.For(t, 10*time.Second, "the first sample", func() bool { return s.count() == 1 })
	if err := s.Stop(ctx); err != nil {
		t.Fatalf("Stop: %v", err)
	}
	if err := s.Stop(ctx); err != nil {
		t.Fatalf("second Stop: %v", err)
	}
}

// TestSamplerRunOnceReadsTheDatabaseCounters: runOnce adds a sample of the
// database's counters when the last one is older than SampleEvery and not
// before; two samples around real claims give their rate.
func TestSamplerRunOnceReadsTheDatabaseCounters(t *testing.T) {
	pool, _ := pgtest.NewDatabase(t)
	ctx := context.Background()
	c, err := New(Options{DB: pool, SampleEvery: time.Hour})
	if err != nil {
		t.Fatal(err)
	}
	s := c.Sampler()
	if err := s.runOnce(ctx); err != nil {
		t.Fatal(err)
	}
	if err := s.runOnce(ctx); err != nil {
		t.Fatal(err)
	}
	if n := s.count(); n != 1 {
		t.Fatalf("%d samples after two runs within SampleEvery, want 1", n)
	}

	s.every = time.Nanosecond // every run is due from here on
	pgtest.InsertN(t, pool, 3, pg.NewJob{Kind: pg.KindETLRecords, Payload: `[{"id":"r1"}]`})
	res, err := lease.ClaimJobs(ctx, pool, lease.ClaimParams{OwnerID: "sampler-test-worker", Limit: 3, LeaseDuration: time.Minute})
	if err != nil {
		t.Fatal(err)
	}
	if len(res.Claimed) != 3 {
		t.Fatalf("claimed %d jobs, want 3", len(res.Claimed))
	}
	time.Sleep(time.Millisecond) // a measurable interval between the samples
	if err := s.runOnce(ctx); err != nil {
		t.Fatal(err)
	}
	if n := s.count(); n != 2 {
		t.Fatalf("%d samples, want 2", n)
	}
	rates := s.rates(time.Now())
	if len(rates) != 1 {
		t.Fatalf("%d rate points from two samples, want 1", len(rates))
	}
	want := 3 * 60 / rates[0].intervalSeconds
	if got := rates[0].ClaimsPerMin; got != want {
		t.Fatalf("claims per minute %v, want %v (3 claims over %vs)", got, want, rates[0].intervalSeconds)
	}
}

// TestSamplerNextIn: the wait for the next sample is SampleEvery without a
// sample, SampleEvery less the last sample's age, and never negative.
func TestSamplerNextIn(t *testing.T) {
	s := newSampler(nil, 30*time.Second, nil)
	now := time.Now()
	if got := s.nextIn(now); got != 30*time.Second {
		t.Fatalf("no sample: next in %v, want 30s", got)
	}
	s.add(now.Add(-10*time.Second), pg.OpsCounters{})
	if got := s.nextIn(now); got != 20*time.Second {
		t.Fatalf("a sample 10 s old: next in %v, want 20s", got)
	}
	if got := s.nextIn(now.Add(time.Minute)); got != 0 {
		t.Fatalf("a sample 70 s old: next in %v, want 0", got)
	}
}
