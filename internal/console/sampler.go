package console

import (
	"context"
	"sync"
	"time"

	"github.com/mightyetl/mightyetl/internal/pg"
)

// Sample records a rate sample when the last one is older than SampleEvery
// (the overview calls it; Run calls it on a ticker).
func (c *Console) Sample(ctx context.Context) error {
	if !c.sampler.due(time.Now()) {
		return nil
	}
	cnt, err := pg.ReadOpsCounters(ctx, c.opts.DB)
	if err != nil {
		return err
	}
	c.sampler.add(time.Now(), cnt)
	return nil
}

// Run samples the rates every SampleEvery until ctx ends, so the chart has
// history before anyone opens the overview. Errors are skipped (the next
// tick retries).
func (c *Console) Run(ctx context.Context) {
	t := time.NewTicker(c.opts.SampleEvery)
	defer t.Stop()
	_ = c.Sample(ctx)
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
			_ = c.Sample(ctx)
		}
	}
}

// RatePoint is claims and finishes per minute between two samples.
type RatePoint struct {
	At              time.Time `json:"at"`
	ClaimsPerMin    float64   `json:"claimsPerMinute"`
	FinishesPerMin  float64   `json:"finishesPerMinute"`
	intervalSeconds float64
}

// sampler keeps the counters' samples of the last 15 minutes.
type sampler struct {
	every time.Duration
	mu    sync.Mutex
	s     []sample
}

type sample struct {
	at       time.Time // host clock: only differences are used
	counters pg.OpsCounters
}

const rateWindow = 15 * time.Minute

func (s *sampler) due(now time.Time) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	return len(s.s) == 0 || now.Sub(s.s[len(s.s)-1].at) >= s.every
}

func (s *sampler) add(now time.Time, c pg.OpsCounters) {
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
func (s *sampler) rates(dbNow time.Time) []RatePoint {
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
