package main

import (
	"context"
	"fmt"
	"strings"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"

	"github.com/mightyetl/mightyetl/internal/lease"
	"github.com/mightyetl/mightyetl/internal/pg"
)

// crashJobs is how many long-running jobs the killed worker holds.
const crashJobs = 20

// longPayload is a diagnostic job that runs for 10 minutes.
const longPayload = `{"durationMillis":600000,"records":[],"failWith":null}`

// leaseSchedule is the renewal interval and safety margin the crash and
// resources runs use with a lease: the defaults (10s, 5s) for a 30s lease,
// lease/5 and a margin that passes configuration validation otherwise.
func leaseSchedule(l time.Duration) (interval, margin time.Duration) {
	if l == 30*time.Second {
		return 10 * time.Second, 5 * time.Second
	}
	interval = l / 5
	return interval, min(5*time.Second, (l-interval)/2)
}

// crash runs one kill-and-reclaim per lease in -crash leases.
func (h *harness) crash(ctx context.Context) ([]Result, error) {
	var out []Result
	for _, l := range h.o.CrashLeases {
		r, err := h.crashRun(ctx, l)
		out = append(out, r)
		if err != nil {
			return out, err
		}
	}
	return out, nil
}

// crashRun starts worker A (the real binary), lets it claim crashJobs
// long-running jobs, starts worker B, SIGKILLs A and measures the time until
// B has every job RUNNING under its own lease.
func (h *harness) crashRun(ctx context.Context, leaseDur time.Duration) (Result, error) {
	interval, margin := leaseSchedule(leaseDur)
	res := Result{System: "mightyetl", Scenario: "crash", Variant: "lease=" + leaseDur.String(), Metrics: map[string]float64{},
		Settings: map[string]string{"lease": leaseDur.String(), "renew_interval": interval.String(),
			"safety_margin": margin.String(), "poll_interval": "1s", "jobs": itoa(crashJobs), "process": "go build ./cmd/worker, 2 processes"}}
	if err := h.fresh(ctx); err != nil {
		return res, err
	}
	if _, err := pg.InsertJobs(ctx, h.pool, h.newJobs(crashJobs, longPayload)); err != nil {
		return res, err
	}
	env := []string{"MIGHTYETL_LEASE_DURATION=" + leaseDur.String(), "MIGHTYETL_LEASE_RENEW_INTERVAL=" + interval.String(),
		"MIGHTYETL_LEASE_SAFETY_MARGIN=" + margin.String(), "MIGHTYETL_WORKER_CONCURRENCY=64"}
	suffix := strings.ReplaceAll(uuid.NewString()[:8], "-", "")
	a, err := h.startBinary(ctx, "bench-crash-a-"+suffix, env...)
	if err != nil {
		return res, err
	}
	defer a.Kill()
	held := func(owner string) (int64, error) {
		return h.count(ctx, `SELECT count(*) FROM etl_job_records WHERE job_status = 'RUNNING' AND lease_owner_id = $1`, owner)
	}
	if err := waitUntil(ctx, 30*time.Second, 10*time.Millisecond, "worker A to run every job", func() (bool, error) {
		n, err := held(a.id)
		return n == crashJobs, err
	}); err != nil {
		return res, err
	}
	b, err := h.startBinary(ctx, "bench-crash-b-"+suffix, env...)
	if err != nil {
		return res, err
	}
	defer b.Kill()
	// Let A renew at least once so the kill lands at a random point of its
	// renewal cycle rather than right after the claim.
	time.Sleep(interval + interval/3)

	var remaining float64
	if err := h.pool.QueryRow(ctx, `SELECT extract(epoch FROM max(lease_expires_at) - clock_timestamp())::float8
		FROM etl_job_records WHERE lease_owner_id = $1`, a.id).Scan(&remaining); err != nil {
		return res, err
	}
	killed := time.Now()
	a.Kill()
	var first time.Duration
	err = waitUntil(ctx, leaseDur+20*time.Second, 5*time.Millisecond, "worker B to run every job", func() (bool, error) {
		n, err := held(b.id)
		if n > 0 && first == 0 {
			first = time.Since(killed)
		}
		return n == crashJobs, err
	})
	all := time.Since(killed)
	if err != nil {
		return res, err
	}
	var attempts int64
	if err := h.pool.QueryRow(ctx, `SELECT min(attempt_count) FROM etl_job_records`).Scan(&attempts); err != nil && err != pgx.ErrNoRows {
		return res, err
	}
	target := leaseDur + time.Second
	res.Metrics["lease_remaining_at_kill_s"] = remaining
	res.Metrics["reclaim_first_s"] = first.Seconds()
	res.Metrics["reclaim_all_s"] = all.Seconds()
	res.Metrics["target_s"] = target.Seconds()
	res.Metrics["within_target"] = boolf(all <= target)
	res.Metrics["min_attempt_after"] = float64(attempts)
	return res, nil
}

// resources measures the real worker binary holding -running-jobs running
// diagnostic jobs: resident memory, and the cost of renewal (database
// commits/s, worker CPU) with the default 10s interval and a 1s interval.
func (h *harness) resources(ctx context.Context) ([]Result, error) {
	var out []Result
	for _, interval := range []time.Duration{10 * time.Second, time.Second} {
		r, err := h.resourcesRun(ctx, interval)
		out = append(out, r)
		if err != nil {
			return out, err
		}
	}
	return out, nil
}

func (h *harness) resourcesRun(ctx context.Context, interval time.Duration) (Result, error) {
	n := h.o.RunningJobs
	res := Result{System: "mightyetl", Scenario: "resources", Variant: "renew=" + interval.String(), Metrics: map[string]float64{},
		Settings: map[string]string{"running_jobs": itoa(n), "concurrency": itoa(n), "lease": "30s",
			"renew_interval": interval.String(), "window": h.o.ResourcesWindow.String(), "process": "go build ./cmd/worker"}}
	if err := h.fresh(ctx); err != nil {
		return res, err
	}
	for lo := 0; lo < n; lo += 500 {
		if _, err := pg.InsertJobs(ctx, h.pool, h.newJobs(min(500, n-lo), longPayload)); err != nil {
			return res, err
		}
	}
	id := "bench-resources-" + strings.ReplaceAll(uuid.NewString()[:8], "-", "")
	p, err := h.startBinary(ctx, id, "MIGHTYETL_WORKER_CONCURRENCY="+itoa(n),
		"MIGHTYETL_LEASE_DURATION=30s", "MIGHTYETL_LEASE_RENEW_INTERVAL="+interval.String())
	if err != nil {
		return res, err
	}
	defer p.Kill()
	if err := waitUntil(ctx, time.Minute, 50*time.Millisecond, "every job running", func() (bool, error) {
		c, err := h.count(ctx, `SELECT count(*) FROM etl_job_records WHERE job_status = 'RUNNING'`)
		return c == int64(n), err
	}); err != nil {
		return res, err
	}
	time.Sleep(time.Second) // let the claim burst settle
	pid := p.Pid()
	x0, err := h.xactCommits(ctx)
	if err != nil {
		return res, err
	}
	c0, _ := procCPU(pid)
	t0 := time.Now()
	select {
	case <-time.After(h.o.ResourcesWindow):
	case <-ctx.Done():
		return res, ctx.Err()
	}
	// pg_stat_database is flushed by backends at most once a second; wait
	// for the last renewals to be counted before reading.
	c1, _ := procCPU(pid)
	window := time.Since(t0)
	time.Sleep(1500 * time.Millisecond)
	x1, err := h.xactCommits(ctx)
	if err != nil {
		return res, err
	}
	rss, hwm, err := procStatus(pid)
	if err != nil {
		return res, err
	}
	res.Metrics["rss_mib"] = float64(rss) / (1 << 20)
	res.Metrics["rss_peak_mib"] = float64(hwm) / (1 << 20)
	res.Metrics["worker_cpu_pct"] = 100 * (c1 - c0).Seconds() / window.Seconds()
	// Two of the commits are this harness's own pg_stat_database reads.
	res.Metrics["db_commits_per_s"] = float64(x1-x0-2) / window.Seconds()

	// The renewal statement itself at this size: the worker's exact
	// statement (lease.Renew) for all n claims, timed from here.
	refs, err := h.liveRefs(ctx, id)
	if err != nil {
		return res, err
	}
	var lat []time.Duration
	for range 10 {
		t := time.Now()
		rs, err := lease.Renew(ctx, h.pool, id, refs, 30*time.Second)
		if err != nil {
			return res, err
		}
		lat = append(lat, time.Since(t))
		// Busy: the worker's own renewal (or finish) held the row at that
		// instant; neither renewed nor lost (lease.Renewal).
		renewed, busy := 0, 0
		for _, r := range rs {
			switch {
			case r.Renewed:
				renewed++
			case r.Busy:
				busy++
			}
		}
		if renewed+busy != n {
			return res, fmt.Errorf("renewal statement renewed %d of %d (%d busy)", renewed, n, busy)
		}
	}
	percentiles("renew_statement", lat, res.Metrics)
	return res, nil
}

func (h *harness) liveRefs(ctx context.Context, owner string) ([]lease.Ref, error) {
	rows, err := h.pool.Query(ctx, `SELECT job_record_id, lease_claim_id FROM etl_job_records
		WHERE job_status = 'RUNNING' AND lease_owner_id = $1`, owner)
	if err != nil {
		return nil, err
	}
	return pgx.CollectRows(rows, func(r pgx.CollectableRow) (lease.Ref, error) {
		ref := lease.Ref{OwnerID: owner}
		err := r.Scan(&ref.JobID, &ref.ClaimID)
		return ref, err
	})
}

func boolf(b bool) float64 {
	if b {
		return 1
	}
	return 0
}
