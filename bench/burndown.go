package main

import (
	"context"
	"fmt"
	rtmetrics "runtime/metrics"
	"strconv"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/mightyetl/mightyetl/bench/feed"
	"github.com/mightyetl/mightyetl/internal/metrics"
	"github.com/mightyetl/mightyetl/internal/pg"
	"github.com/mightyetl/mightyetl/internal/worker"
)

// Burndown variants. Only "default" is the product as shipped; the others
// switch a safety feature off INSIDE THE BENCH DATABASE ONLY (a BEFORE INSERT
// trigger that drops the row), to price that feature. No product code changes.
const (
	variantDefault        = "default"
	variantNoOutbox       = "no-outbox"
	variantNoOutboxLedger = "no-outbox-no-ledger"
	// variantCustomPlans changes no SQL and no schema: the worker's pools
	// connect with plan_cache_mode=force_custom_plan (a connection setting
	// that wins over pg.PoolOptions.PinnedPlans), to price planning every
	// lease statement for its actual batch, as the worker did before.
	variantCustomPlans = "custom-plans"
)

// variantSQL is applied after migration for a variant.
var variantSQL = map[string]string{
	variantNoOutbox: `
CREATE FUNCTION bench_drop_row() RETURNS trigger LANGUAGE plpgsql AS $$ BEGIN RETURN NULL; END $$;
CREATE TRIGGER bench_drop_outbox_row BEFORE INSERT ON etl_outbox_events FOR EACH ROW EXECUTE FUNCTION bench_drop_row();
ALTER TABLE etl_outbox_events DISABLE TRIGGER etl_outbox_notify_relay_trigger;`,
	variantNoOutboxLedger: `
CREATE FUNCTION bench_drop_row() RETURNS trigger LANGUAGE plpgsql AS $$ BEGIN RETURN NULL; END $$;
CREATE TRIGGER bench_drop_outbox_row BEFORE INSERT ON etl_outbox_events FOR EACH ROW EXECUTE FUNCTION bench_drop_row();
ALTER TABLE etl_outbox_events DISABLE TRIGGER etl_outbox_notify_relay_trigger;
CREATE TRIGGER bench_drop_ledger_row BEFORE INSERT ON etl_idempotency_records FOR EACH ROW EXECUTE FUNCTION bench_drop_row();`,
}

// maxVariantN bounds the jobs of the cost variants so a 1M run stays affordable.
const maxVariantN = 100_000

func (h *harness) throughputConfig() worker.Config {
	// PollInterval matches the River peer's FetchPollInterval (20 ms).
	// Zero fields take the worker's defaults here, so the settings recorded
	// with each result are the ones that ran.
	return worker.Config{Concurrency: h.o.Concurrency, FinishBatch: h.o.FinishBatch, Completers: h.o.Completers,
		PollInterval: 20 * time.Millisecond, ClaimCooldown: h.o.ClaimCooldown, FinishLinger: h.o.FinishLinger}.WithDefaults()
}

func (h *harness) throughputSettings(cfg worker.Config, execConns int32) map[string]string {
	return map[string]string{
		"concurrency":  strconv.Itoa(cfg.Concurrency),
		"finish_batch": strconv.Itoa(cfg.FinishBatch),
		"completers":   strconv.Itoa(cfg.Completers),
		"exec_conns":   strconv.Itoa(int(execConns)),
		"lease":        "30s", "renew_interval": "10s", "poll_interval": cfg.PollInterval.String(),
		"fencing": "exact", "ledger": "on", "outbox": "on",
		"claim_cooldown": cfg.ClaimCooldown.String(), "finish_linger": cfg.FinishLinger.String(),
		"gc_percent": gcPercent(),
	}
}

// gcPercent is this process's collector target, as GOGC would spell it.
func gcPercent() string {
	s := []rtmetrics.Sample{{Name: "/gc/gogc:percent"}}
	rtmetrics.Read(s)
	if s[0].Value.Kind() != rtmetrics.KindUint64 {
		return "unknown"
	}
	return strconv.FormatUint(s[0].Value.Uint64(), 10)
}

// burndownAll runs the default burndown at -n and then each -variants
// variant at min(n, 100,000), preceded by a default run at that size when it
// differs from n, so the variants compare like with like.
func (h *harness) burndownAll(ctx context.Context) ([]Result, error) {
	var out []Result
	if len(h.o.BurndownClaimOwners) > 0 {
		// -burndown-claim-owners: the default burndown once per value.
		for _, co := range h.o.BurndownClaimOwners {
			r, err := h.burndown(ctx, variantDefault, h.o.N, co)
			out = append(out, r)
			if err != nil {
				return out, err
			}
		}
	} else {
		r, err := h.burndown(ctx, variantDefault, h.o.N, claimOwnersDefault)
		out = append(out, r)
		if err != nil {
			return out, err
		}
	}
	if len(h.o.Variants) == 0 {
		return out, nil
	}
	vn := min(h.o.N, maxVariantN)
	var variants []string
	if vn != h.o.N && !contains(h.o.Variants, variantDefault) {
		variants = append(variants, variantDefault)
	}
	for _, v := range h.o.Variants {
		if v != variantDefault || vn != h.o.N {
			variants = append(variants, v)
		}
	}
	for _, v := range variants {
		r, err := h.burndown(ctx, v, vn, claimOwnersDefault)
		out = append(out, r)
		if err != nil {
			return out, err
		}
	}
	return out, nil
}

// claimOwnersDefault leaves the worker's ClaimOwners at its default.
const claimOwnersDefault = -1

// burndown pre-inserts n zero-duration diagnostic jobs and times the real
// worker working all of them to SUCCEEDED. claimOwners is the worker's
// claim owners (0: first-come first-served, as MIGHTYETL_CLAIM_OWNERS=0;
// claimOwnersDefault: the worker's default, and no suffix on the variant).
func (h *harness) burndown(ctx context.Context, variant string, n, claimOwners int) (Result, error) {
	res := Result{System: "mightyetl", Scenario: "burndown", Variant: variant + "/n=" + strconv.Itoa(n), Metrics: map[string]float64{}}
	if claimOwners != claimOwnersDefault {
		res.Variant += "/claim-owners=" + strconv.Itoa(claimOwners)
	}
	if err := h.fresh(ctx); err != nil {
		return res, err
	}
	if sql := variantSQL[variant]; sql != "" {
		if _, err := h.pool.Exec(ctx, sql); err != nil {
			return res, fmt.Errorf("apply variant %s: %w", variant, err)
		}
	}
	// WAL per job (pg_current_wal_lsn deltas), insert and run apart, each
	// after a CHECKPOINT so both systems pay the full-page images of every
	// page they touch alike (the River peer measures the same way).
	walInsert0, err := checkpointLSN(ctx, h.pool)
	if err != nil {
		return res, err
	}
	ins, err := h.bulkInsert(ctx, n, zeroPayload)
	if err != nil {
		return res, err
	}
	walInsert1, err := currentLSN(ctx, h.pool)
	if err != nil {
		return res, err
	}
	res.Metrics["jobs"] = float64(n)
	res.Metrics["insert_s"] = ins.Seconds()
	walRun0, err := checkpointLSN(ctx, h.pool)
	if err != nil {
		return res, err
	}

	cfg := h.throughputConfig()
	switch {
	case claimOwners == 0:
		cfg.ClaimOwners = -1 // worker.Config's first-come first-served
	case claimOwners > 0:
		cfg.ClaimOwners = claimOwners
	}
	if variant == variantCustomPlans {
		h.workerURLParams = "plan_cache_mode=force_custom_plan"
		defer func() { h.workerURLParams = "" }()
	}
	xact0, _ := h.xactCommits(ctx)
	cpu0 := selfCPU()
	start := time.Now()
	rg, err := h.startWorker(ctx, cfg, nil, int32(h.o.ExecConns))
	if err != nil {
		return res, err
	}
	res.Settings = h.throughputSettings(cfg, rg.execConns)
	res.Settings["claim_owners"] = strconv.Itoa(max(cfg.ClaimOwners, 0))
	if variant != variantDefault {
		res.Settings["outbox"] = "off (bench trigger drops rows)"
	}
	if variant == variantNoOutboxLedger {
		res.Settings["ledger"] = "off (bench trigger drops rows)"
	}
	if variant == variantCustomPlans {
		res.Settings["worker_connection"] = "plan_cache_mode=force_custom_plan"
	}
	timeout := max(10*time.Minute, time.Duration(n/200)*time.Second)
	werr := waitUntil(ctx, timeout, 20*time.Millisecond, "burndown to finish", func() (bool, error) {
		return rg.outcomes(metrics.OutcomeSucceeded) >= float64(n), nil
	})
	elapsed := time.Since(start)
	cpu := selfCPU() - cpu0
	xact1, _ := h.xactCommits(ctx)
	stopCtx, cancel := context.WithTimeout(context.WithoutCancel(ctx), time.Minute)
	defer cancel()
	_ = rg.stop(stopCtx)
	if werr != nil {
		return res, werr
	}
	walRun1, err := currentLSN(ctx, h.pool)
	if err != nil {
		return res, err
	}
	res.Metrics["wal_insert_bytes_per_job"] = (walInsert1 - walInsert0) / float64(n)
	res.Metrics["wal_run_bytes_per_job"] = (walRun1 - walRun0) / float64(n)
	res.Metrics["wal_bytes_per_job"] = (walInsert1 - walInsert0 + walRun1 - walRun0) / float64(n)
	res.Metrics["elapsed_s"] = elapsed.Seconds()
	res.Metrics["jobs_per_s"] = float64(n) / elapsed.Seconds()
	res.Metrics["worker_cpu_cores"] = cpu.Seconds() / elapsed.Seconds()
	res.Metrics["db_commits_per_job"] = float64(xact1-xact0) / float64(n)
	counts, err := h.statusCounts(ctx)
	if err != nil {
		return res, err
	}
	if counts[pg.StatusSucceeded] != n {
		return res, fmt.Errorf("burndown: %d of %d jobs SUCCEEDED (%v)", counts[pg.StatusSucceeded], n, counts)
	}
	res.Metrics["succeeded"] = float64(counts[pg.StatusSucceeded])
	res.Metrics["claim_batch_mean"], res.Metrics["claims"] = histMean(rg.reg, "mightyetl_worker_claim_batch_size")
	res.Metrics["finish_batch_mean"], res.Metrics["finish_txs"] = histMean(rg.reg, "mightyetl_worker_finish_batch_size")
	res.Metrics["stale"] = rg.outcomes(metrics.OutcomeStale)
	if v, err := h.count(ctx, `SELECT count(*) FROM etl_outbox_events`); err == nil {
		res.Metrics["outbox_rows"] = float64(v)
	}
	if v, err := h.count(ctx, `SELECT count(*) FROM etl_idempotency_records`); err == nil {
		res.Metrics["ledger_rows"] = float64(v)
	}
	return res, nil
}

// continuous inserts through pg.InsertJobs (the intake's store call) while
// the worker works, for -duration: as riverbench feeds River (feed.Riverbench,
// the default) or back to back on -inserters goroutines (feed.Flood).
func (h *harness) continuous(ctx context.Context) (Result, error) {
	res := Result{System: "mightyetl", Scenario: "continuous", Variant: "feed=" + h.o.Feed.Mode, Metrics: map[string]float64{}}
	if err := h.fresh(ctx); err != nil {
		return res, err
	}
	var (
		inserted atomic.Int64
		rg       *rig
	)
	insert := func(ctx context.Context, n int) error {
		if err := h.insertJobs(ctx, h.newJobs(n, zeroPayload)); err != nil {
			return err
		}
		inserted.Add(int64(n))
		return nil
	}
	worked := func() float64 {
		if rg == nil {
			return 0
		}
		return rg.outcomes(metrics.OutcomeSucceeded)
	}
	// Jobs inserted and not yet completed (so running jobs too, at most the
	// slots), from the inserter's and the worker's own counters, as the River
	// peer counts them: no count(*) competing with the system under test.
	left := func() int64 { return inserted.Load() - int64(worked()) }
	if err := h.o.Feed.Fill(ctx, left, insert); err != nil {
		return res, fmt.Errorf("continuous first fill: %w", err)
	}
	cfg := h.throughputConfig()
	rg, err := h.startWorker(ctx, cfg, nil, int32(h.o.ExecConns))
	if err != nil {
		return res, err
	}
	res.Settings = h.throughputSettings(cfg, rg.execConns)
	res.Settings["duration"] = h.o.Duration.String()
	res.Settings["insert"] = h.o.Feed.Describe("pg.InsertJobs")
	res.Settings["wakeups"] = "none (poll " + cfg.PollInterval.String() + ")"
	if h.o.NATSURL != "" {
		// As deployed: the relay publishes job_available wake-ups and the
		// lifecycle events (and deletes their outbox rows) while we run.
		nw, err := h.wireNATS(ctx, rg.w)
		if err != nil {
			_ = rg.stop(ctx)
			return res, fmt.Errorf("wire NATS: %w", err)
		}
		defer nw.close(ctx)
		res.Settings["wakeups"] = "outbox relay -> NATS -> Worker.Wake; relay publishes lifecycle events"
	}

	runCtx, cancel := context.WithTimeout(ctx, h.o.Duration)
	defer cancel()
	inserted0, worked0 := inserted.Load(), worked()
	start := time.Now()
	fed := make(chan error, 1)
	go func() { fed <- h.o.Feed.Run(runCtx, left, insert) }()
	var backlog []float64
	tick := time.NewTicker(time.Second)
	for runCtx.Err() == nil {
		select {
		case <-tick.C:
			backlog = append(backlog, float64(left()))
		case <-runCtx.Done():
		}
	}
	tick.Stop()
	insErr := <-fed
	workedN := worked() - worked0
	insertedN := float64(inserted.Load() - inserted0)
	elapsed := time.Since(start)
	stopCtx, cancelStop := context.WithTimeout(context.WithoutCancel(ctx), time.Minute)
	defer cancelStop()
	_ = rg.stop(stopCtx)
	if insErr != nil {
		return res, fmt.Errorf("continuous insert: %w", insErr)
	}
	res.Metrics["elapsed_s"] = elapsed.Seconds()
	res.Metrics["inserted"] = insertedN
	res.Metrics["worked"] = workedN
	res.Metrics["inserted_per_s"] = insertedN / elapsed.Seconds()
	res.Metrics["jobs_per_s"] = workedN / elapsed.Seconds()
	res.Metrics["claim_batch_mean"], _ = histMean(rg.reg, "mightyetl_worker_claim_batch_size")
	res.Metrics["finish_batch_mean"], _ = histMean(rg.reg, "mightyetl_worker_finish_batch_size")
	feed.AddBacklogMetrics(res.Metrics, backlog)
	return res, nil
}

// histMean returns the mean and count of a histogram in reg.
func histMean(reg *prometheus.Registry, name string) (mean, count float64) {
	mfs, err := reg.Gather()
	if err != nil {
		return 0, 0
	}
	for _, mf := range mfs {
		if mf.GetName() != name || len(mf.GetMetric()) == 0 {
			continue
		}
		hg := mf.GetMetric()[0].GetHistogram()
		if hg.GetSampleCount() == 0 {
			return 0, 0
		}
		return hg.GetSampleSum() / float64(hg.GetSampleCount()), float64(hg.GetSampleCount())
	}
	return 0, 0
}

// xactCommits is the bench database's committed transaction count.
func (h *harness) xactCommits(ctx context.Context) (int64, error) {
	return h.count(ctx, `SELECT xact_commit FROM pg_stat_database WHERE datname = current_database()`)
}

// selfCPU is this process's user+system CPU time.
func selfCPU() time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		return 0
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

// currentLSN is the server's current WAL position in bytes. The stop is
// taken after the measured statements committed (the worker is stopped, the
// waits are over), so their WAL is before it.
func currentLSN(ctx context.Context, db *pgxpool.Pool) (float64, error) {
	var lsn float64
	if err := db.QueryRow(ctx, `SELECT (pg_current_wal_lsn() - '0/0'::pg_lsn)::float8`).Scan(&lsn); err != nil {
		return 0, fmt.Errorf("read WAL position: %w", err)
	}
	return lsn, nil
}

// checkpointLSN runs a CHECKPOINT, then returns the WAL position.
func checkpointLSN(ctx context.Context, db *pgxpool.Pool) (float64, error) {
	if _, err := db.Exec(ctx, `CHECKPOINT`); err != nil {
		return 0, fmt.Errorf("checkpoint: %w", err)
	}
	return currentLSN(ctx, db)
}
