package main

import (
	"context"
	"time"
)

// The continuous feeds of the mightyETL harness (bench/feed.go), here for
// River's client: riverbench (River's own benchmark's insertJobsContinuously)
// and flood (back to back).
const (
	feedRiverbench = "riverbench"
	feedFlood      = "flood"
)

// topUp inserts batches of batch jobs while fewer than backlog jobs are
// inserted and not yet worked.
func topUp(ctx context.Context, batch, backlog int, left func() int64, insert func(context.Context, int) error) error {
	for left() < int64(backlog) {
		if err := insert(ctx, batch); err != nil {
			return err
		}
	}
	return nil
}

// feedEvery runs topUp every interval until ctx ends.
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

func maxOf(v []float64) float64 {
	m := v[0]
	for _, x := range v[1:] {
		m = max(m, x)
	}
	return m
}
