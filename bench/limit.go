package main

import (
	"context"
	"embed"
	"errors"
	"flag"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"sort"
	"strconv"
	"strings"
	"time"

	"github.com/mightyetl/mightyetl/internal/etl"
	"github.com/mightyetl/mightyetl/internal/pg"
)

// The limit scenario (issue 34, "distance to the limit"): the job life
// cycle the service runs (insert, claim, finish with its target rows and
// its lifecycle outbox row) as hand-written batched SQL in a pgbench script
// against the real schema, at several batch sizes, on a fresh database of
// the same server. Its best jobs/s is what this server can do for that life
// cycle with none of the service around it: no Go, HTTP, NATS, renewal,
// fair claim, or fencing check beyond the SQL's own predicates. The
// burndown's jobs/s is reported as a ratio of it (limitRatios).
//
// Two variants:
//
//   - drain: N jobs pre-loaded exactly as the burndown loads them
//     (bulkInsert, then VACUUM ANALYZE), then every pgbench client claims
//     and finishes batches (claim.sql, finish.sql: two transactions per
//     batch) until all are SUCCEEDED. The burndown's work, so
//     burndown ÷ drain is like for like.
//   - lifecycle: each client inserts a batch (insert.sql), claims a batch
//     and finishes it, three transactions, for -limit-duration on an empty
//     queue. The row as written; the burndown does not count its
//     insert, so burndown ÷ lifecycle flatters the service.
//
// The scripts are bench/limit/*.sql (their comments say what each step
// writes and what it leaves out), joined per variant into one pgbench
// script and run with -M prepared (the service's statements are prepared
// too) and -r (per-statement latencies).

//go:embed limit/insert.sql limit/claim.sql limit/finish.sql
var limitScripts embed.FS

// Limit variants.
const (
	limitDrain     = "drain"
	limitLifecycle = "lifecycle"
)

// limitOptions are the limit scenario's settings.
type limitOptions struct {
	// BatchSizes are the jobs per insert, claim and finish, one run each.
	BatchSizes []int `json:"batch_sizes"`
	// Clients are the pgbench client counts, one run per batch size each.
	Clients []int `json:"clients"`
	// Duration is each lifecycle run's pgbench -T (default 10s, -quick 2s).
	Duration time.Duration `json:"duration_ns"`
	// Records is the target rows per job (0: none, the burndown's
	// diagnostic job without records).
	Records int `json:"records"`
	// DrainN is the pre-loaded backlog of each drain run (0: -n).
	DrainN int `json:"drain_n"`
	// Variants are drain and/or lifecycle, in run order.
	Variants []string `json:"variants"`
}

func addLimitFlags(fs *flag.FlagSet, o *limitOptions) {
	fs.Func("limit-batch-sizes", "limit: jobs per insert, claim and finish, one run per value (default 100,500,1000,2000)", func(s string) error {
		v, err := parseIntList(s, 1, 10_000)
		o.BatchSizes = v
		return err
	})
	fs.Func("limit-clients", "limit: pgbench clients (-c), one run per value and batch size (default 2,4)", func(s string) error {
		v, err := parseIntList(s, 1, 256)
		o.Clients = v
		return err
	})
	fs.DurationVar(&o.Duration, "limit-duration", 0, "limit: each lifecycle run's pgbench -T (default 10s, -quick 2s; whole seconds)")
	fs.IntVar(&o.Records, "limit-records", 0, "limit: processed_data rows per job (0: none, as the burndown's diagnostic jobs; the payload then carries as many records)")
	fs.IntVar(&o.DrainN, "limit-drain-n", 0, "limit: jobs pre-loaded for each drain run (0: -n)")
	fs.Func("limit-variants", "limit: drain (claim+finish of a pre-loaded backlog, the burndown's work) and/or lifecycle (insert+claim+finish) (default drain,lifecycle)", func(s string) error {
		o.Variants = nil
		for v := range strings.SplitSeq(s, ",") {
			v = strings.TrimSpace(v)
			if v != limitDrain && v != limitLifecycle {
				return fmt.Errorf("%q: want drain or lifecycle", v)
			}
			o.Variants = append(o.Variants, v)
		}
		return nil
	})
}

// parseIntList parses a comma-separated list of integers in [lo, hi].
func parseIntList(s string, lo, hi int) ([]int, error) {
	var out []int
	for f := range strings.SplitSeq(s, ",") {
		n, err := strconv.Atoi(strings.TrimSpace(f))
		if err != nil || n < lo || n > hi {
			return nil, fmt.Errorf("%q: want an integer in %d..%d", f, lo, hi)
		}
		out = append(out, n)
	}
	return out, nil
}

// defaults fills the zero settings (idempotent).
func (o *limitOptions) defaults(quick bool, n int) {
	if len(o.BatchSizes) == 0 {
		o.BatchSizes = []int{100, 500, 1000, 2000}
	}
	if len(o.Clients) == 0 {
		o.Clients = []int{2, 4}
	}
	if len(o.Variants) == 0 {
		o.Variants = []string{limitDrain, limitLifecycle}
	}
	if o.Duration == 0 {
		o.Duration = 10 * time.Second
		if quick {
			o.Duration = 2 * time.Second
		}
	}
	if o.DrainN == 0 {
		o.DrainN = n
	}
}

// limitRecord is the record of a job with -limit-records above 0 (the
// intake scenarios' record).
const limitRecord = `{"id":"r1","name":"ada","email":"ADA@EXAMPLE.COM","amount":"1.005"}`

// limitJob is the payload of the scenario's jobs and the processed_data
// row of each of its records, as the transform makes it.
type limitJob struct {
	payload          string
	data, normalized string
}

func newLimitJob(records int) (limitJob, error) {
	if records == 0 {
		// No target row is written; pgbench still needs the variables
		// defined, and refuses an empty -D value.
		return limitJob{payload: zeroPayload, data: "unused", normalized: "{}"}, nil
	}
	recs := strings.Repeat(limitRecord+",", records)
	rows, err := etl.Process([]byte("["+limitRecord+"]"), 1)
	if err != nil || len(rows) != 1 {
		return limitJob{}, fmt.Errorf("transform the limit record: %v", err)
	}
	return limitJob{payload: `{"durationMillis":0,"records":[` + strings.TrimSuffix(recs, ",") + `],"failWith":null}`,
		data: rows[0].Data, normalized: string(rows[0].Normalized)}, nil
}

// limit runs every variant at every batch size and client count, then adds
// one "best/<variant>" result per variant: the run with the most jobs/s.
func (h *harness) limit(ctx context.Context) ([]Result, error) {
	bin, err := findPgbench()
	if err != nil {
		return nil, err
	}
	h.o.Limit.defaults(h.o.Quick, h.o.N)
	job, err := newLimitJob(h.o.Limit.Records)
	if err != nil {
		return nil, err
	}
	var out []Result
	for _, variant := range h.o.Limit.Variants {
		best := -1
		for _, c := range h.o.Limit.Clients {
			for _, b := range h.o.Limit.BatchSizes {
				if ctx.Err() != nil {
					return out, ctx.Err()
				}
				r, err := h.limitRun(ctx, bin, variant, b, c, job)
				out = append(out, r)
				if err != nil {
					return out, err
				}
				if best < 0 || r.Metrics["jobs_per_s"] > out[best].Metrics["jobs_per_s"] {
					best = len(out) - 1
				}
			}
		}
		if best >= 0 {
			b := out[best]
			out = append(out, Result{System: "pgbench", Scenario: "limit", Variant: "best/" + variant,
				Metrics:  map[string]float64{"jobs_per_s": b.Metrics["jobs_per_s"], "batch": b.Metrics["batch"], "clients": b.Metrics["clients"]},
				Settings: map[string]string{"of": b.Variant}})
		}
	}
	return out, nil
}

// findPgbench is pgbench on PATH, else the newest of Debian's
// /usr/lib/postgresql/*/bin/pgbench.
func findPgbench() (string, error) {
	if p, err := exec.LookPath("pgbench"); err == nil {
		return p, nil
	}
	if m, _ := filepath.Glob("/usr/lib/postgresql/*/bin/pgbench"); len(m) > 0 {
		sort.Strings(m)
		return m[len(m)-1], nil
	}
	return "", errors.New("limit: pgbench not found on PATH or in /usr/lib/postgresql/*/bin: install PostgreSQL's pgbench (Debian: postgresql-15, which .ci/run installs)")
}

// limitRun is one pgbench run of variant at batch size b with c clients on
// a fresh database. It checks what the scripts must leave behind: every
// finished job SUCCEEDED once with its outbox event and target rows, every
// other job still queued.
func (h *harness) limitRun(ctx context.Context, bin, variant string, b, c int, job limitJob) (Result, error) {
	res := Result{System: "pgbench", Scenario: "limit", Variant: fmt.Sprintf("%s/batch=%d/clients=%d", variant, b, c),
		Metrics: map[string]float64{"batch": float64(b), "clients": float64(c)}}
	if err := h.takeFresh(ctx); err != nil {
		return res, err
	}
	steps := []string{"claim.sql", "finish.sql"}
	if variant == limitLifecycle {
		steps = append([]string{"insert.sql"}, steps...)
	}
	script, err := writeLimitScript(steps)
	if err != nil {
		return res, err
	}
	defer os.Remove(script)
	threads := min(2, c)
	args := []string{"-n", "-M", "prepared", "-r", "-c", strconv.Itoa(c), "-j", strconv.Itoa(threads)}
	var preloaded int
	runCtx := ctx
	if variant == limitDrain {
		preloaded = h.o.Limit.DrainN
		if _, err := h.bulkInsert(ctx, preloaded, job.payload); err != nil {
			return res, err
		}
		// Enough claims for the whole backlog: a claim is short only when
		// fewer than b unlocked jobs are left, so the last rounds may come
		// back empty (and are timed).
		perClient := (preloaded + c*b - 1) / (c * b)
		args = append(args, "-t", strconv.Itoa(perClient))
		res.Metrics["jobs"] = float64(preloaded)
		var cancel context.CancelFunc
		runCtx, cancel = context.WithTimeout(ctx, max(10*time.Minute, time.Duration(preloaded/200)*time.Second))
		defer cancel()
	} else {
		secs := max(1, int(h.o.Limit.Duration.Round(time.Second).Seconds()))
		args = append(args, "-T", strconv.Itoa(secs))
	}
	args = append(append(args, limitVars(job, b, h.o.Limit.Records)...), "-f", script, h.url)
	res.Settings = map[string]string{
		"command": "pgbench " + strings.Join(limitShownArgs(args), " "),
		"script":  strings.Join(steps, " + ") + " (bench/limit/), one transaction each",
		"server":  "the same PostgreSQL, fresh bench database, the connection as -database-url gives it (sslmode too)",
		"records": strconv.Itoa(h.o.Limit.Records) + " processed_data rows per job",
	}
	if variant == limitDrain {
		res.Settings["backlog"] = strconv.Itoa(preloaded) + " jobs pre-loaded as the burndown's (bulkInsert, VACUUM ANALYZE)"
	}
	wal0, err := checkpointLSN(ctx, h.pool)
	if err != nil {
		return res, err
	}
	out, err := exec.CommandContext(runCtx, bin, args...).CombinedOutput()
	if err != nil {
		return res, fmt.Errorf("limit %s: pgbench: %v: %s", res.Variant, err, lastLinesOf(out, 10))
	}
	if err := parsePgbench(out, res.Metrics); err != nil {
		return res, err
	}
	if res.Metrics["failed_transactions"] > 0 {
		return res, fmt.Errorf("limit %s: %v failed pgbench transactions: %s", res.Variant, res.Metrics["failed_transactions"], lastLinesOf(out, 10))
	}
	wal1, err := currentLSN(ctx, h.pool)
	if err != nil {
		return res, err
	}
	for step, ms := range parseLimitLatencies(out) {
		res.Metrics[step+"_ms"] = ms
		res.Metrics[step+"_us_per_job"] = ms * 1000 / float64(b)
	}
	st, err := h.limitState(ctx)
	if err != nil {
		return res, err
	}
	res.Metrics["finished"] = float64(st.succeeded)
	res.Metrics["left"] = float64(st.jobs - st.succeeded)
	tx, tps := res.Metrics["transactions"], res.Metrics["tps"]
	if tx == 0 || tps == 0 || st.succeeded == 0 {
		return res, fmt.Errorf("limit %s: pgbench ran %v transactions at %v tps, %d jobs finished", res.Variant, tx, tps, st.succeeded)
	}
	// pgbench's own time base (without its connection set-up).
	elapsed := tx / tps
	res.Metrics["elapsed_s"] = elapsed
	res.Metrics["jobs_per_s"] = float64(st.succeeded) / elapsed
	res.Metrics["wal_bytes_per_job"] = (wal1 - wal0) / float64(st.succeeded)
	if err := st.check(h.o.Limit.Records); err != nil {
		return res, fmt.Errorf("limit %s: %w", res.Variant, err)
	}
	if variant == limitDrain && st.succeeded != int64(preloaded) {
		return res, fmt.Errorf("limit %s: %d of %d pre-loaded jobs finished", res.Variant, st.succeeded, preloaded)
	}
	return res, nil
}

// limitVars are the scripts' variables as pgbench -D arguments.
func limitVars(job limitJob, batch, records int) []string {
	var out []string
	for _, v := range [][2]string{{"batch", strconv.Itoa(batch)}, {"records", strconv.Itoa(records)},
		{"payload", job.payload}, {"digest", sha(job.payload)}, {"principal", benchPrincipal},
		{"data", job.data}, {"normalized", job.normalized}} {
		out = append(out, "-D", v[0]+"="+v[1])
	}
	return out
}

// limitShownArgs is args for the settings, with the long -D values and
// the database URL elided.
func limitShownArgs(args []string) []string {
	shown := make([]string, 0, len(args))
	for i, a := range args {
		switch {
		case i > 0 && args[i-1] == "-D" && !strings.HasPrefix(a, "batch=") && !strings.HasPrefix(a, "records="):
			name, _, _ := strings.Cut(a, "=")
			shown = append(shown, name+"=…")
		case i == len(args)-1:
			shown = append(shown, "<bench database>")
		case i > 0 && args[i-1] == "-f":
			shown = append(shown, "<script>")
		default:
			shown = append(shown, a)
		}
	}
	return shown
}

// writeLimitScript joins the named scripts of bench/limit into one
// temporary pgbench script and returns its path.
func writeLimitScript(steps []string) (string, error) {
	var b strings.Builder
	for _, s := range steps {
		sql, err := limitScripts.ReadFile("limit/" + s)
		if err != nil {
			return "", err
		}
		b.Write(sql)
		b.WriteString("\n")
	}
	f, err := os.CreateTemp("", "mightyetl-bench-limit-*.sql")
	if err != nil {
		return "", err
	}
	if _, err := f.WriteString(b.String()); err != nil {
		f.Close()
		os.Remove(f.Name())
		return "", err
	}
	if err := f.Close(); err != nil {
		os.Remove(f.Name())
		return "", err
	}
	return f.Name(), nil
}

// pgbenchStatement is one line of pgbench -r's per-statement latencies:
// the average in ms, the failures and the statement's first line.
var pgbenchStatement = regexp.MustCompile(`(?m)^\s+([0-9.]+)\s+[0-9]+\s+(WITH (?:ins|candidates|won) AS)`)

// parseLimitLatencies maps each step (insert, claim, finish) to its
// statement's average latency in ms. The finish has one statement in each
// branch of its \if; the branch not taken shows 0.
func parseLimitLatencies(out []byte) map[string]float64 {
	steps := map[string]string{"WITH ins AS": "insert", "WITH candidates AS": "claim", "WITH won AS": "finish"}
	lat := map[string]float64{}
	for _, m := range pgbenchStatement.FindAllSubmatch(out, -1) {
		v, err := strconv.ParseFloat(string(m[1]), 64)
		if err != nil {
			continue
		}
		step := steps[string(m[2])]
		lat[step] = max(lat[step], v)
	}
	return lat
}

// limitState is what a limit run left in the bench database.
type limitState struct {
	jobs, succeeded, queued, events, targets int64
	// pending and running are the jobs not finished.
	pending, running int64
}

func (h *harness) limitState(ctx context.Context) (limitState, error) {
	var st limitState
	err := h.pool.QueryRow(ctx, `SELECT
    (SELECT count(*) FROM etl_job_records),
    (SELECT count(*) FROM etl_job_records WHERE job_status = $1),
    (SELECT count(*) FROM etl_job_records WHERE job_status = $2),
    (SELECT count(*) FROM etl_job_records WHERE job_status = $3),
    (SELECT count(*) FROM etl_job_claim_queue),
    (SELECT count(*) FROM etl_outbox_job_events WHERE event_kind = 'job_lifecycle' AND job_status = $1),
    (SELECT count(*) FROM processed_data)`, pg.StatusSucceeded, pg.StatusPending, pg.StatusRunning).
		Scan(&st.jobs, &st.succeeded, &st.pending, &st.running, &st.queued, &st.events, &st.targets)
	if err != nil {
		return st, fmt.Errorf("read the limit run's tables: %w", err)
	}
	return st, nil
}

// check holds the state to the life cycle the scripts claim to run: each
// SUCCEEDED job has its one lifecycle event and records target rows, and
// left the queue; every other job is PENDING or RUNNING and still queued.
func (st limitState) check(records int) error {
	switch {
	case st.events != st.succeeded:
		return fmt.Errorf("%d SUCCEEDED jobs but %d lifecycle events", st.succeeded, st.events)
	case st.targets != st.succeeded*int64(records):
		return fmt.Errorf("%d SUCCEEDED jobs with %d records each but %d processed_data rows", st.succeeded, records, st.targets)
	case st.pending+st.running+st.succeeded != st.jobs:
		return fmt.Errorf("%d jobs: %d SUCCEEDED, %d PENDING, %d RUNNING (no other state expected)", st.jobs, st.succeeded, st.pending, st.running)
	case st.queued != st.pending+st.running:
		return fmt.Errorf("%d claim-queue rows for %d unfinished jobs", st.queued, st.pending+st.running)
	}
	return nil
}

// limitRatios reports each default burndown's jobs/s of the same run (one
// per -burndown-claim-owners value) as a ratio of the limit's best, for
// each variant run (issue 34's target: at least 0.7x).
func limitRatios(rs []Result) []Ratio {
	var out []Ratio
	for _, bd := range rs {
		if bd.Scenario != "burndown" || !strings.HasPrefix(bd.Variant, variantDefault+"/") || bd.Metrics["jobs_per_s"] == 0 {
			continue
		}
		for _, v := range []string{limitDrain, limitLifecycle} {
			best, ok := find(rs, "limit", "best/"+v)
			if !ok || best.Metrics["jobs_per_s"] == 0 {
				continue
			}
			out = append(out, Ratio{Scenario: "limit",
				Metric: fmt.Sprintf("jobs_per_s [burndown %s vs limit %s]", bd.Variant, best.Settings["of"]),
				Mighty: bd.Metrics["jobs_per_s"], Peer: best.Metrics["jobs_per_s"], PeerName: "pgbench",
				Ratio: bd.Metrics["jobs_per_s"] / best.Metrics["jobs_per_s"], Direction: "higher", Target: 0.7})
		}
	}
	return out
}
