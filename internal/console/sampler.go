package console

import (
	"context"
	"log/slog"
	"sync"
	"time"

	"github.com/mightyetl/mightyetl/internal/pg"
	"github.com/mightyetl/mightyetl/internal/startstop"
)

// Sampler is the console's rate sampler, a long-running part of the intake
// process (internal/startstop): it reads the claim and finish counters
// every SampleEvery so the overview's rate chart has history before anyone
// opens it, and keeps the samples of the last 15 minutes. The overview also
// samples on demand when the last sample is older than SampleEvery, so a
// console whose sampler never started still charts from its first view.
//
// Start launches the loop (it takes its first sample at once) and returns;
// Stop cancels a read in flight and waits for the loop; both follow
// startstop (Stop is safe twice and before Start, a part runs once). A failed
// read is logged (its error class only) and retried at the next tick. Safe
// for concurrent use.
type Sampler struct {
	db    DB
	every time.Duration
	log   *slog.Logger
	base  startstop.Base

	mu sync.Mutex
	s  []sample
}

func newSampler(db DB, every time.Duration, log *slog.Logger) *Sampler {
	return &Sampler{db: db, every: every, log: log}
}

// Sampler is the console's rate sampler. The process that serves the
// console starts and stops it (internal/app does so with the intake).
func (c *Console) Sampler() *Sampler { return c.sampler }

// Start launches the sampling loop on a goroutine of its own and returns at
// once: there is nothing to check before the first read. ctx is not kept:
// the loop runs until Stop. A second Start returns startstop.ErrAlreadyStarted,
// a Start after Stop startstop.ErrStopped.
func (s *Sampler) Start(ctx context.Context) error {
	return s.base.Start(ctx, func(ctx context.Context) (startstop.StopFunc, error) {
		runCtx, cancel := context.WithCancel(context.WithoutCancel(ctx))
		done := make(chan struct{})
		go func() {
			defer close(done)
			s.loop(runCtx)
		}()
		return func(context.Context) error {
			cancel() // ends a read in flight as well as the wait for the next tick
			<-done
			return nil
		}, nil
	})
}

// Stop stops the loop and waits for it, or returns ctx.Err() when ctx ends
// first (startstop semantics).
func (s *Sampler) Stop(ctx context.Context) error { return s.base.Stop(ctx) }

// loop samples at once, then every s.every, until ctx ends.
func (s *Sampler) loop(ctx context.Context) {
	t := time.NewTicker(s.every)
	defer t.Stop()
	for {
		if err := s.runOnce(ctx); err != nil && ctx.Err() == nil {
			s.log.LogAttrs(ctx, slog.LevelWarn, "console rate sample failed", slog.String("error_class", pg.ErrorClass(err)))
		}
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
	}
}

// runOnce records a sample of the database's claim and finish counters
// when the last sample is older than SampleEvery (or there is none), and
// does nothing otherwise. The overview calls it too, so two calls in the
// same interval read the counters once.
func (s *Sampler) runOnce(ctx context.Context) error {
	if !s.due(time.Now()) {
		return nil
	}
	cnt, err := pg.ReadOpsCounters(ctx, s.db)
	if err != nil {
		return err
	}
	s.add(time.Now(), cnt)
	return nil
}

// nextIn is how long until the next sample is due: SampleEvery less the
// last sample's age (at least 0), or SampleEvery when there is none.
func (s *Sampler) nextIn(now time.Time) time.Duration {
	s.mu.Lock()
	defer s.mu.Unlock()
	if len(s.s) == 0 {
		return s.every
	}
	return max(0, s.every-now.Sub(s.s[len(s.s)-1].at))
}

// RatePoint is claims and finishes per minute between two samples.
type RatePoint struct {
	At              time.Time `json:"at"`
	ClaimsPerMin    float64   `json:"claimsPerMinute"`
	FinishesPerMin  float64   `json:"finishesPerMinute"`
	intervalSeconds float64
}

type sample struct {
	at       time.Time // host clock: only differences are used
	counters pg.OpsCounters
}

const rateWindow = 15 * time.Minute

func (s *Sampler) due(now time.Time) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	return len(s.s) == 0 || now.Sub(s.s[len(s.s)-1].at) >= s.every
}

func (s *Sampler) add(now time.Time, c pg.OpsCounters) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.s = append(s.s, sample{at: now, counters: c})
	cut := 0
	for cut < len(s.s)-1 && now.Sub(s.s[cut].at) > rateWindow {
		cut++
	}
	s.s = s.s[cut:]
}

// rates turns consecutive samples into per-minute rates, stamped on the
// database clock (dbNow minus the sample's age on the host clock).
func (s *Sampler) rates(dbNow time.Time) []RatePoint {
	s.mu.Lock()
	defer s.mu.Unlock()
	var out []RatePoint
	hostNow := time.Now()
	for i := 1; i < len(s.s); i++ {
		a, b := s.s[i-1], s.s[i]
		dt := b.at.Sub(a.at).Seconds()
		if dt <= 0 {
			continue
		}
		claims := float64(b.counters.Claims - a.counters.Claims)
		finishes := float64(b.counters.Finishes - a.counters.Finishes)
		if claims < 0 || finishes < 0 { // statistics reset
			continue
		}
		out = append(out, RatePoint{At: dbNow.Add(-hostNow.Sub(b.at)), ClaimsPerMin: claims * 60 / dt,
			FinishesPerMin: finishes * 60 / dt, intervalSeconds: dt})
	}
	return out
}
