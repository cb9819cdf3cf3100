// Package feed is how the bench's continuous scenario inserts, on both sides
// of a comparison: the mightyETL harness (bench) and the River peer
// (bench/peers/river, its own module) share it, so both feed the same way.
//
// River's own benchmark (riverbench, `river bench` without -n) does not
// insert back to back: every 50 ms it looks at how many jobs are inserted
// and not yet worked, and only when that backlog is below 50,000 it inserts
// batches of 2,000 until it is not, "keeping the total number of jobs being
// inserted roughly matched with the rate at which the benchmark can work
// them". It starts its client after the first fill. Riverbench runs that
// loop; Flood names the back-to-back inserters, where the side whose
// inserter is cheaper takes more of the shared cores for its inserter and the
// worked rate measures that split as much as the worker.
package feed

import (
	"context"
	"time"
)

// The feeds, as -continuous-feed spells them.
const (
	Riverbench = "riverbench"
	Flood      = "flood"
)

// riverbench's insertJobsContinuously: its tick, batch and backlog floor.
const (
	RiverbenchInterval = 50 * time.Millisecond
	RiverbenchBatch    = 2_000
	RiverbenchBacklog  = 50_000
)

// TopUp inserts batches of batch jobs while fewer than backlog jobs are
// inserted and not yet worked (left), as one riverbench tick does.
func TopUp(ctx context.Context, batch, backlog int, left func() int64, insert func(context.Context, int) error) error {
	for left() < int64(backlog) {
		if err := insert(ctx, batch); err != nil {
			return err
		}
	}
	return nil
}

// Every runs TopUp every interval until ctx ends. An insert error after ctx
// ended is the end of the run, not a failure.
func Every(ctx context.Context, interval time.Duration, batch, backlog int, left func() int64, insert func(context.Context, int) error) error {
	t := time.NewTicker(interval)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return nil
		case <-t.C:
		}
		if err := TopUp(ctx, batch, backlog, left, insert); err != nil {
			if ctx.Err() != nil {
				return nil
			}
			return err
		}
	}
}

// AddBacklogMetrics records the backlog samples (one per second) in m:
// first, last, max and the least-squares slope per second. Nothing for no
// samples.
func AddBacklogMetrics(m map[string]float64, samples []float64) {
	if len(samples) == 0 {
		return
	}
	m["backlog_first"] = samples[0]
	m["backlog_last"] = samples[len(samples)-1]
	hi := samples[0]
	for _, x := range samples[1:] {
		hi = max(hi, x)
	}
	m["backlog_max"] = hi
	m["backlog_slope_per_s"] = Slope(samples)
}

// Slope is the least-squares slope of v against its index (samples 1 s
// apart).
func Slope(v []float64) float64 {
	n := float64(len(v))
	if n < 2 {
		return 0
	}
	var sx, sy, sxy, sxx float64
	for i, y := range v {
		x := float64(i)
		sx, sy, sxy, sxx = sx+x, sy+y, sxy+x*y, sxx+x*x
	}
	return (n*sxy - sx*sy) / (n*sxx - sx*sx)
}
