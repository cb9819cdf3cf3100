package feed

import (
	"context"
	"errors"
	"flag"
	"sync/atomic"
	"testing"
	"time"
)

// TopUp inserts whole batches until the backlog reaches its floor, and not
// one batch more: riverbench's inner loop.
func TestTopUpFillsToTheBacklogInWholeBatches(t *testing.T) {
	var inserted, worked atomic.Int64
	var calls int
	insert := func(_ context.Context, n int) error {
		calls++
		inserted.Add(int64(n))
		return nil
	}
	left := func() int64 { return inserted.Load() - worked.Load() }
	if err := TopUp(context.Background(), 2_000, 5_000, left, insert); err != nil {
		t.Fatal(err)
	}
	if calls != 3 || inserted.Load() != 6_000 {
		t.Fatalf("first fill: %d calls, %d inserted; want 3 calls, 6000", calls, inserted.Load())
	}
	// At or above the floor: nothing.
	if err := TopUp(context.Background(), 2_000, 5_000, left, insert); err != nil || calls != 3 {
		t.Fatalf("full backlog: %d calls, err %v; want no insert", calls, err)
	}
	// Work 2,000 of them: one batch brings it back over the floor.
	worked.Add(2_000)
	if err := TopUp(context.Background(), 2_000, 5_000, left, insert); err != nil || calls != 4 || left() != 6_000 {
		t.Fatalf("after work: %d calls, backlog %d, err %v; want 4 calls, 6000", calls, left(), err)
	}
	boom := errors.New("insert failed")
	worked.Add(6_000)
	if err := TopUp(context.Background(), 2_000, 5_000, left, func(context.Context, int) error { return boom }); !errors.Is(err, boom) {
		t.Fatalf("insert error: got %v", err)
	}
}

// Every tops up on each tick, stops when its context ends, and reports
// an insert error only while the run is live.
func TestFeedEveryTopsUpOnEachTickUntilTheRunEnds(t *testing.T) {
	var inserted, worked atomic.Int64
	left := func() int64 { return inserted.Load() - worked.Load() }
	ticks := make(chan struct{}, 16)
	insert := func(_ context.Context, n int) error {
		inserted.Add(int64(n))
		select {
		case ticks <- struct{}{}:
		default:
		}
		return nil
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- Every(ctx, time.Millisecond, 10, 10, left, insert) }()
	deadline := time.After(30 * time.Second)
	for round := range 3 {
		worked.Add(10) // the worker drains the backlog; the next tick refills it
		select {
		case <-ticks:
		case <-deadline:
			t.Fatalf("round %d: no top-up", round)
		}
	}
	cancel()
	if err := <-done; err != nil {
		t.Fatalf("feedEvery after its run ended: %v", err)
	}
	if inserted.Load() < 30 {
		t.Fatalf("inserted %d, want at least 30", inserted.Load())
	}

	// An insert error while the run is live ends the feed with that error.
	boom := errors.New("insert failed")
	err := Every(context.Background(), time.Millisecond, 10, 10, func() int64 { return 0 },
		func(context.Context, int) error { return boom })
	if !errors.Is(err, boom) {
		t.Fatalf("live insert error: got %v", err)
	}
}

// AddBacklogMetrics records first, last, max and the per-second slope, and
// nothing for a run without samples.
func TestAddBacklogMetrics(t *testing.T) {
	m := map[string]float64{}
	AddBacklogMetrics(m, nil)
	if len(m) != 0 {
		t.Fatalf("no samples: got %v", m)
	}
	AddBacklogMetrics(m, []float64{10, 40, 20, 30})
	want := map[string]float64{"backlog_first": 10, "backlog_last": 30, "backlog_max": 40, "backlog_slope_per_s": 4}
	for k, v := range want {
		if m[k] != v {
			t.Errorf("%s = %v, want %v", k, m[k], v)
		}
	}
	if s := Slope([]float64{5}); s != 0 {
		t.Errorf("slope of one sample = %v, want 0", s)
	}
}

// Flood runs its inserters back to back until the run ends and reports the
// first insert error met while it was live; Fill does nothing for it.
func TestFloodRunsItsInsertersUntilTheRunEnds(t *testing.T) {
	c := Config{Mode: Flood, Interval: time.Millisecond, Batch: 1, Backlog: 1, Inserters: 3}
	if err := c.Validate(); err != nil {
		t.Fatal(err)
	}
	var inserted atomic.Int64
	never := func() int64 { t.Error("flood read the backlog"); return 0 }
	if err := c.Fill(context.Background(), never, nil); err != nil {
		t.Fatalf("flood fill: %v", err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	insert := func(ctx context.Context, n int) error {
		if n != FloodBatch {
			t.Errorf("flood inserted %d per call, want %d", n, FloodBatch)
		}
		if inserted.Add(int64(n)) >= 30*FloodBatch {
			cancel()
		}
		return ctx.Err()
	}
	if err := c.Run(ctx, never, insert); err != nil {
		t.Fatalf("flood after its run ended: %v", err)
	}
	boom := errors.New("insert failed")
	if err := c.Run(context.Background(), never, func(context.Context, int) error { return boom }); !errors.Is(err, boom) {
		t.Fatalf("live insert error: got %v", err)
	}
}

func TestConfigValidateRefusesWhatTheFlagsCannotMean(t *testing.T) {
	good := Config{Mode: Riverbench, Interval: RiverbenchInterval, Batch: RiverbenchBatch, Backlog: RiverbenchBacklog, Inserters: 1}
	if err := good.Validate(); err != nil {
		t.Fatalf("riverbench defaults: %v", err)
	}
	for name, c := range map[string]Config{
		"unknown mode": {Mode: "trickle", Interval: 1, Batch: 1, Backlog: 1, Inserters: 1},
		"zero batch":   {Mode: Riverbench, Interval: 1, Batch: 0, Backlog: 1, Inserters: 1},
		"no interval":  {Mode: Riverbench, Interval: 0, Batch: 1, Backlog: 1, Inserters: 1},
	} {
		if err := c.Validate(); err == nil {
			t.Errorf("%s: accepted %+v", name, c)
		}
	}
}

// Args, parsed by the flags AddFlags registers, give back the same Config:
// what the harness passes the River peer is what it ran itself.
func TestArgsRoundTripThroughAddFlags(t *testing.T) {
	want := Config{Mode: Flood, Interval: 250 * time.Millisecond, Batch: 5_000, Backlog: 75_000, Inserters: 3}
	var got Config
	fs := flag.NewFlagSet("peer", flag.ContinueOnError)
	got.AddFlags(fs, "InsertManyFast")
	if err := fs.Parse(want.Args()); err != nil {
		t.Fatal(err)
	}
	if got != want {
		t.Fatalf("round trip: got %+v, want %+v", got, want)
	}
}
