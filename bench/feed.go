package main

import (
	"context"
	"time"
)

// Continuous feeds. River's own benchmark (riverbench, `river bench` without
// -n) does not insert back to back: every 50 ms it looks at how many jobs are
// inserted and not yet worked, and only when that backlog is below 50,000 it
// inserts batches of 2,000 until it is not, "keeping the total number of jobs
// being inserted roughly matched with the rate at which the benchmark can work
// them". It starts measuring once the first fill is in. feedRiverbench runs
// that loop on both sides; feedFlood keeps the back-to-back inserters, where
// the side whose inserter is cheaper takes more of the shared cores for its
// inserter and the worked rate measures that split as much as the worker.
const (
	feedRiverbench = "riverbench"
	feedFlood      = "flood"

	// riverbench's insertJobsContinuously: its tick, batch and backlog floor.
	riverbenchFeedInterval = 50 * time.Millisecond
	riverbenchFeedBatch    = 2_000
	riverbenchFeedBacklog  = 50_000
)

// topUp inserts batches of batch jobs while fewer than backlog jobs are
// inserted and not yet worked (left), as one riverbench tick does.
func topUp(ctx context.Context, batch, backlog int, left func() int64, insert func(context.Context, int) error) error {
	for left() < int64(backlog) {
		if err := insert(ctx, batch); err != nil {
			return err
		}
	}
	return nil
}

// feedEvery runs topUp every interval until ctx ends. An insert error after
// ctx ended is the end of the run, not a failure.
func feedEvery(ctx context.Context, interval time.Duration, batch, backlog int, left func() int64, insert func(context.Context, int) error) error {
	t := time.NewTicker(interval)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return nil
		case <-t.C:
		}
		if err := topUp(ctx, batch, backlog, left, insert); err != nil {
			if ctx.Err() != nil {
				return nil
			}
			return err
		}
	}
}
