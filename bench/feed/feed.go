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
	"errors"
	"flag"
	"fmt"
	"strconv"
	"sync"
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

// Config is one side's continuous feed, as its flags set it.
type Config struct {
	// Mode is Riverbench or Flood.
	Mode string `json:"mode"`
	// Interval, Batch and Backlog are the riverbench loop's tick, jobs per
	// insert call, and inserted-and-not-worked floor.
	Interval time.Duration `json:"interval_ns"`
	Batch    int           `json:"batch"`
	Backlog  int           `json:"backlog"`
	// Inserters is the number of back-to-back inserting goroutines of Flood,
	// each inserting FloodBatch jobs per call.
	Inserters int `json:"inserters"`
}

// FloodBatch is the jobs per insert call of the Flood feed.
const FloodBatch = 500

// AddFlags registers -continuous-feed, -feed-interval, -feed-batch,
// -feed-backlog and -inserters on fs, with River's benchmark values as
// defaults; insertCall names the side's insert call in the help text.
func (c *Config) AddFlags(fs *flag.FlagSet, insertCall string) {
	fs.StringVar(&c.Mode, "continuous-feed", Riverbench, "continuous: how to insert: riverbench (as River's own benchmark: a first fill, then every -feed-interval, batches of -feed-batch while fewer than -feed-backlog jobs are inserted and not worked) or flood (-inserters goroutines, 500 per call, back to back)")
	fs.DurationVar(&c.Interval, "feed-interval", RiverbenchInterval, "continuous riverbench feed: tick")
	fs.IntVar(&c.Batch, "feed-batch", RiverbenchBatch, "continuous riverbench feed: jobs per "+insertCall)
	fs.IntVar(&c.Backlog, "feed-backlog", RiverbenchBacklog, "continuous riverbench feed: inserted-and-not-worked floor it tops up to")
	fs.IntVar(&c.Inserters, "inserters", 1, "continuous flood feed: goroutines, each "+insertCall+" 500 at a time back to back")
}

// Args are the flags AddFlags registers, set to c: how one side passes its
// feed to the other's process.
func (c Config) Args() []string {
	return []string{"-continuous-feed", c.Mode, "-feed-interval", c.Interval.String(),
		"-feed-batch", strconv.Itoa(c.Batch), "-feed-backlog", strconv.Itoa(c.Backlog),
		"-inserters", strconv.Itoa(c.Inserters)}
}

// Validate reports a Config the flags could not have meant.
func (c Config) Validate() error {
	if c.Mode != Riverbench && c.Mode != Flood {
		return fmt.Errorf("-continuous-feed: unknown feed %q (riverbench, flood)", c.Mode)
	}
	if c.Interval <= 0 || c.Batch <= 0 || c.Backlog <= 0 || c.Inserters <= 0 {
		return errors.New("-feed-interval, -feed-batch, -feed-backlog and -inserters must be positive")
	}
	return nil
}

// Describe is the result's "insert" setting: what the feed did, with
// insertCall naming the side's insert call.
func (c Config) Describe(insertCall string) string {
	if c.Mode == Riverbench {
		return fmt.Sprintf("riverbench feed: a first fill of %d before work starts, then every %s, while fewer than %d jobs are inserted and not worked, %s batches of %d",
			c.Backlog, c.Interval, c.Backlog, insertCall, c.Batch)
	}
	return fmt.Sprintf("%d goroutine(s), %s batches of %d, back to back", c.Inserters, insertCall, FloodBatch)
}

// Fill inserts the riverbench feed's first fill (nothing for Flood); run it
// before the worker starts, as riverbench does.
func (c Config) Fill(ctx context.Context, left func() int64, insert func(context.Context, int) error) error {
	if c.Mode != Riverbench {
		return nil
	}
	return TopUp(ctx, c.Batch, c.Backlog, left, insert)
}

// Run inserts until ctx ends: the riverbench loop on one goroutine, or
// Inserters goroutines back to back. It returns once all of them have, with
// the first insert error met while ctx was live.
func (c Config) Run(ctx context.Context, left func() int64, insert func(context.Context, int) error) error {
	if c.Mode == Riverbench {
		return Every(ctx, c.Interval, c.Batch, c.Backlog, left, insert)
	}
	var (
		wg       sync.WaitGroup
		errOnce  sync.Once
		firstErr error
	)
	for range max(c.Inserters, 1) {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for ctx.Err() == nil {
				if err := insert(ctx, FloodBatch); err != nil {
					if ctx.Err() == nil {
						errOnce.Do(func() { firstErr = err })
					}
					return
				}
			}
		}()
	}
	wg.Wait()
	return firstErr
}
