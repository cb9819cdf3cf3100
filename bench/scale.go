package main

import (
	"context"
	"fmt"
	"strconv"
	"time"

	"github.com/mightyetl/mightyetl/internal/lease"
)

// scale measures lease.ClaimJobs (limit 10) latency with a small and a large
// PENDING backlog in the same table: the small one first, then rows added
// up to the large size. Each claim is released at once (not timed) so the
// backlog size stays constant.
func (h *harness) scale(ctx context.Context) (Result, error) {
	small, large := h.o.ScaleSmall, h.o.ScaleLarge
	res := Result{System: "mightyetl", Scenario: "scale", Metrics: map[string]float64{},
		Settings: map[string]string{"limit": "10", "rounds": strconv.Itoa(h.o.ScaleRounds),
			"small": strconv.Itoa(small), "large": strconv.Itoa(large)}}
	if err := h.fresh(ctx); err != nil {
		return res, err
	}
	if _, err := h.bulkInsert(ctx, small, zeroPayload); err != nil {
		return res, err
	}
	p50s, err := h.claimLatency(ctx, "small", res.Metrics)
	if err != nil {
		return res, err
	}
	if _, err := h.bulkInsert(ctx, large-small, zeroPayload); err != nil {
		return res, err
	}
	p50l, err := h.claimLatency(ctx, "large", res.Metrics)
	if err != nil {
		return res, err
	}
	res.Metrics["p50_ratio_large_vs_small"] = p50l / p50s
	res.Metrics["p99_ratio_large_vs_small"] = res.Metrics["large_claim_p99_ms"] / res.Metrics["small_claim_p99_ms"]
	return res, nil
}

func (h *harness) claimLatency(ctx context.Context, label string, into map[string]float64) (float64, error) {
	pending, err := h.count(ctx, `SELECT count(*) FROM etl_job_records WHERE job_status = 'PENDING'`)
	if err != nil {
		return 0, err
	}
	into[label+"_pending_rows"] = float64(pending)
	conn, err := h.pool.Acquire(ctx)
	if err != nil {
		return 0, err
	}
	defer conn.Release()
	owner := "bench-scale-claimer"
	var lat []time.Duration
	for i := range h.o.ScaleRounds + 20 {
		t := time.Now()
		res, err := lease.ClaimJobs(ctx, conn, lease.ClaimParams{OwnerID: owner, Limit: 10, LeaseDuration: 30 * time.Second})
		d := time.Since(t)
		if err != nil {
			return 0, err
		}
		if len(res.Claimed) != 10 {
			return 0, fmt.Errorf("claimed %d of 10", len(res.Claimed))
		}
		if i >= 20 { // the first rounds warm the plan cache and buffers
			lat = append(lat, d)
		}
		for _, c := range res.Claimed {
			if err := lease.Release(ctx, conn, c.Ref); err != nil {
				return 0, err
			}
		}
	}
	percentiles(label+"_claim", lat, into)
	return into[label+"_claim_p50_ms"], nil
}
