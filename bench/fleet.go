package main

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"net/http"
	"os"
	"slices"
	"sort"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/google/uuid"
	"github.com/nats-io/nats.go"

	"github.com/mightyetl/mightyetl/internal/events"
	"github.com/mightyetl/mightyetl/internal/pg"
	"github.com/mightyetl/mightyetl/internal/pgbouncertest"
)

// The fleet scenario: many real cmd/worker and cmd/intake processes on one
// database (docs/performance.md, "Many processes"). Opt-in: it starts up
// to ten binaries at once.
//
//	go run ./bench -scenarios fleet -nats-url nats://127.0.0.1:4222 -json fleet.json
//	go run ./bench -scenarios fleet -fleet-parts mixed -fleet-pooler pgbouncer
const (
	fleetPartWorkers = "workers" // the same slots over 1, 2, 4, 8 worker processes
	fleetPartIntakes = "intakes" // HTTP intake throughput with 1 vs 2 intakes
	fleetPartMixed   = "mixed"   // 8 workers + 2 intakes under HTTP load, direct (and through PgBouncer)
	// fleetPickupPayload runs 2 s, so every job is seen RUNNING by the
	// harness's 25 ms poll, and ends before its first renewal (10 s).
	fleetPickupPayload = `{"durationMillis":2000,"records":[],"failWith":null}`
	// fleetLease is the binaries' lease (their default): the claim set
	// lease_expires_at to its clock plus this.
	fleetLease = 30 * time.Second
)

// fleetOptions are the fleet scenario's settings.
type fleetOptions struct {
	Parts          []string      `json:"parts"`
	Procs          []int         `json:"procs"`
	Intakes        []int         `json:"intakes"`
	Rounds         int           `json:"rounds"`
	Warmup         time.Duration `json:"warmup_ns"`
	Window         time.Duration `json:"window_ns"`
	PickupDuration time.Duration `json:"pickup_duration_ns"`
	Backlog        int           `json:"backlog"`
	// PoolSizes and IntakePoolSizes, when set, run each worker (intake)
	// count once per MIGHTYETL_WORKER_POOL_SIZE (MIGHTYETL_INTAKE_POOL_SIZE)
	// in the list, in the same round; empty: the binaries' default.
	PoolSizes       []int `json:"pool_sizes,omitempty"`
	IntakePoolSizes []int `json:"intake_pool_sizes,omitempty"`
	MixedWorkers    int   `json:"mixed_workers"`
	MixedIntakes    int   `json:"mixed_intakes"`
	// Pooler "pgbouncer" adds a PgBouncer (internal/pgbouncertest,
	// transaction mode, PoolerSize server connections) to the mixed part,
	// run against direct connections in the same round.
	Pooler     string `json:"pooler,omitempty"`
	PoolerSize int    `json:"pooler_size"`
	// PoolerEnv are the settings the binaries get behind the pooler.
	PoolerEnv []string `json:"pooler_env"`
	// BinaryDatabaseURL is the binaries' DATABASE_URL (the harness keeps
	// -database-url); empty: the bench database.
	BinaryDatabaseURL string `json:"-"`
	// BinaryEnv are extra settings of every binary the harness starts.
	BinaryEnv []string `json:"binary_env,omitempty"`
}

func addFleetFlags(fs *flag.FlagSet, o *fleetOptions) {
	o.Parts = []string{fleetPartWorkers, fleetPartIntakes, fleetPartMixed}
	o.Procs = []int{1, 2, 4, 8}
	o.Intakes = []int{1, 2}
	o.PoolerEnv = []string{"MIGHTYETL_DATABASE_POOLER=transaction"}
	fs.Func("fleet-parts", "fleet: parts to run, of workers,intakes,mixed (default all)", func(s string) error {
		o.Parts = nil
		for p := range strings.SplitSeq(s, ",") {
			if p = strings.TrimSpace(p); !slices.Contains([]string{fleetPartWorkers, fleetPartIntakes, fleetPartMixed}, p) {
				return fmt.Errorf("unknown part %q", p)
			}
			o.Parts = append(o.Parts, p)
		}
		return nil
	})
	ints := func(dst *[]int) func(string) error {
		return func(s string) error {
			*dst = nil
			for f := range strings.SplitSeq(s, ",") {
				n, err := strconv.Atoi(strings.TrimSpace(f))
				if err != nil || n < 1 || n > 32 {
					return fmt.Errorf("%q: want process counts 1..32", f)
				}
				*dst = append(*dst, n)
			}
			return nil
		}
	}
	fs.Func("fleet-procs", "fleet: worker process counts sharing -concurrency slots (default 1,2,4,8)", ints(&o.Procs))
	fs.Func("fleet-intakes", "fleet: intake process counts sharing the HTTP clients (default 1,2)", ints(&o.Intakes))
	fs.IntVar(&o.Rounds, "fleet-rounds", 3, "fleet: rounds; each runs every count, in reverse order every other round")
	fs.DurationVar(&o.Warmup, "fleet-warmup", 5*time.Second, "fleet: load before the measured window")
	fs.DurationVar(&o.Window, "fleet-window", 20*time.Second, "fleet: measured window")
	fs.DurationVar(&o.PickupDuration, "fleet-pickup-duration", 10*time.Second, "fleet: pickup submissions (one at a time at -rate) per worker count; needs -nats-url")
	sizes := func(dst *[]int) func(string) error {
		return func(s string) error {
			*dst = nil
			for f := range strings.SplitSeq(s, ",") {
				n, err := strconv.Atoi(strings.TrimSpace(f))
				if err != nil || n < 2 || n > 1000 {
					return fmt.Errorf("%q: want pool sizes 2..1000", f)
				}
				*dst = append(*dst, n)
			}
			return nil
		}
	}
	fs.Func("fleet-pool-sizes", "fleet workers: run each count once per MIGHTYETL_WORKER_POOL_SIZE of this list (default: the binary's default only)", sizes(&o.PoolSizes))
	fs.Func("fleet-intake-pool-sizes", "fleet intakes: run each count once per MIGHTYETL_INTAKE_POOL_SIZE of this list (default: the binary's default only)", sizes(&o.IntakePoolSizes))
	fs.IntVar(&o.Backlog, "fleet-backlog", 600_000, "fleet workers: jobs inserted before the throughput window (must outlast warm-up and window)")
	fs.IntVar(&o.MixedWorkers, "fleet-mixed-workers", 8, "fleet mixed: worker processes")
	fs.IntVar(&o.MixedIntakes, "fleet-mixed-intakes", 2, "fleet mixed: intake processes")
	fs.StringVar(&o.Pooler, "fleet-pooler", "", "fleet mixed: also run through this pooler (pgbouncer: internal/pgbouncertest, transaction mode)")
	fs.IntVar(&o.PoolerSize, "fleet-pooler-size", 40, "fleet mixed: PgBouncer default_pool_size (server connections)")
	fs.Func("fleet-pooler-env", "fleet mixed: comma-separated KEY=VALUE settings of the binaries behind the pooler (default MIGHTYETL_DATABASE_POOLER=transaction)", func(s string) error {
		o.PoolerEnv = splitEnv(s)
		return nil
	})
	fs.StringVar(&o.BinaryDatabaseURL, "binary-database-url", "", "DATABASE_URL of the worker and intake binaries the harness starts (a pooler's, say); empty: -database-url")
	fs.Func("binary-env", "comma-separated KEY=VALUE settings of every worker and intake binary the harness starts", func(s string) error {
		o.BinaryEnv = splitEnv(s)
		return nil
	})
}

func splitEnv(s string) []string {
	var out []string
	for kv := range strings.SplitSeq(s, ",") {
		if kv = strings.TrimSpace(kv); kv != "" {
			out = append(out, kv)
		}
	}
	return out
}

// fleet runs the parts of -fleet-parts -fleet-rounds times, then adds a
// summary of medians and ratios.
func (h *harness) fleet(ctx context.Context) ([]Result, error) {
	o := h.o.Fleet
	var out []Result
	if o.Pooler != "" && o.Pooler != "pgbouncer" {
		return nil, fmt.Errorf("-fleet-pooler: unknown pooler %q (pgbouncer)", o.Pooler)
	}
	for round := 1; round <= o.Rounds; round++ {
		order := func(ns []int) []int {
			s := slices.Clone(ns)
			if round%2 == 0 {
				slices.Reverse(s)
			}
			return s
		}
		if slices.Contains(o.Parts, fleetPartWorkers) {
			for _, n := range order(o.Procs) {
				for _, ps := range orderSizes(o.PoolSizes, round) {
					r, err := h.fleetWorkers(ctx, n, ps, round)
					out = append(out, r)
					if err != nil {
						return out, err
					}
				}
			}
		}
		if slices.Contains(o.Parts, fleetPartIntakes) {
			for _, n := range order(o.Intakes) {
				for _, ps := range orderSizes(o.IntakePoolSizes, round) {
					r, err := h.fleetIntakes(ctx, n, ps, round)
					out = append(out, r)
					if err != nil {
						return out, err
					}
				}
			}
		}
		if slices.Contains(o.Parts, fleetPartMixed) {
			vias := []string{"direct"}
			if o.Pooler != "" {
				vias = append(vias, "pgbouncer")
				if round%2 == 0 {
					slices.Reverse(vias)
				}
			}
			for _, via := range vias {
				r, err := h.fleetMixed(ctx, via, round)
				out = append(out, r)
				if err != nil {
					return out, err
				}
			}
		}
	}
	return append(out, fleetSummary(out)), nil
}

// orderSizes is sizes (reversed every other round), or one 0 (the
// binary's default) when there are none.
func orderSizes(sizes []int, round int) []int {
	if len(sizes) == 0 {
		return []int{0}
	}
	s := slices.Clone(sizes)
	if round%2 == 0 {
		slices.Reverse(s)
	}
	return s
}

// variantName is base, "/pool=<size>" when size is set, and the round.
func variantName(base string, size, round int) string {
	if size > 0 {
		base += "/pool=" + itoa(size)
	}
	return fmt.Sprintf("%s/round=%d", base, round)
}

// fleetProc is one started binary and its metrics address (workers).
type fleetProc struct {
	*workerProc
	metricsAddr string
}

// startFleetWorkers starts n worker binaries, each with slots slots and
// env, one after the other.
func (h *harness) startFleetWorkers(ctx context.Context, n, slots int, env []string) ([]*fleetProc, error) {
	var procs []*fleetProc
	env = append([]string{"MIGHTYETL_WORKER_CONCURRENCY=" + itoa(slots), "MIGHTYETL_SHUTDOWN_GRACE_PERIOD=10s"}, env...)
	for i := range n {
		p, err := h.startBinary(ctx, fmt.Sprintf("bench-fleet-%d-%s", i, randomHex(4)), env...)
		if err != nil {
			stopFleet(procs)
			return nil, err
		}
		addr, err := readyMetricsAddr(p.Output())
		if err != nil {
			p.Kill()
			stopFleet(procs)
			return nil, err
		}
		procs = append(procs, &fleetProc{workerProc: p, metricsAddr: addr})
	}
	return procs, nil
}

// readyMetricsAddr is metrics_addr of the worker's "worker ready" log line.
func readyMetricsAddr(out string) (string, error) {
	for line := range strings.SplitSeq(out, "\n") {
		var m struct {
			Msg  string `json:"msg"`
			Addr string `json:"metrics_addr"`
		}
		if json.Unmarshal([]byte(line), &m) == nil && m.Msg == "worker ready" && m.Addr != "" {
			return m.Addr, nil
		}
	}
	return "", errors.New("worker binary logged no metrics address")
}

// stopFleet stops every process with SIGTERM (SIGKILL after 20 s), at once.
func stopFleet(procs []*fleetProc) {
	var wg sync.WaitGroup
	for _, p := range procs {
		wg.Go(func() { _ = p.Terminate(20 * time.Second) })
	}
	wg.Wait()
}

// The worker series the fleet reads from each process's /metrics.
const (
	seriesSucceeded    = `mightyetl_worker_outcomes_total{outcome="succeeded"}`
	seriesExecWait     = `mightyetl_db_pool_acquire_wait_seconds_total{pool="exec"}`
	seriesExecEmpty    = `mightyetl_db_pool_empty_acquires_total{pool="exec"}`
	seriesExecAcquires = `mightyetl_db_pool_acquires_total{pool="exec"}`
)

var fleetSeries = []string{seriesSucceeded, seriesExecWait, seriesExecEmpty, seriesExecAcquires}

var scrapeClient = &http.Client{Timeout: 20 * time.Second}

// scrape reads fleetSeries from one /metrics (absent series read 0),
// trying three times: a worker starved of CPU on a shared machine may not
// answer within the client's timeout.
func scrape(ctx context.Context, addr string) (m map[string]float64, err error) {
	for range 3 {
		if m, err = scrapeOnce(ctx, addr); err == nil || ctx.Err() != nil {
			return m, err
		}
	}
	return m, err
}

func scrapeOnce(ctx context.Context, addr string) (map[string]float64, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, "http://"+addr+"/metrics", nil)
	if err != nil {
		return nil, err
	}
	resp, err := scrapeClient.Do(req)
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	out := map[string]float64{}
	sc := bufio.NewScanner(resp.Body)
	sc.Buffer(make([]byte, 64<<10), 1<<20)
	for sc.Scan() {
		line := sc.Text()
		for _, s := range fleetSeries {
			if strings.HasPrefix(line, s+" ") {
				v, _ := strconv.ParseFloat(strings.TrimSpace(line[len(s):]), 64)
				out[s] = v
			}
		}
	}
	_, _ = io.Copy(io.Discard, resp.Body)
	return out, sc.Err()
}

// scrapeAll sums fleetSeries over procs.
func scrapeAll(ctx context.Context, procs []*fleetProc) (map[string]float64, error) {
	sum := map[string]float64{}
	for _, p := range procs {
		m, err := scrape(ctx, p.metricsAddr)
		if err != nil {
			return nil, fmt.Errorf("scrape %s: %w", p.id, err)
		}
		for k, v := range m {
			sum[k] += v
		}
	}
	return sum, nil
}

// procSample is one process's CPU time at a moment.
type procSample struct {
	cpu time.Duration
	at  time.Time
}

func sampleCPU(pids []int) []procSample {
	out := make([]procSample, len(pids))
	for i, pid := range pids {
		c, _ := procCPU(pid)
		out[i] = procSample{cpu: c, at: time.Now()}
	}
	return out
}

// addProcMetrics records per-process CPU (cores, over the samples) and RSS
// now, as prefix_cpu_cores_{mean,max}, prefix_rss_mib_{mean,max} and
// prefix_rss_peak_mib_max.
func addProcMetrics(prefix string, pids []int, before, after []procSample, into map[string]float64) {
	var cpuSum, cpuMax, rssSum, rssMax, hwmMax float64
	for i, pid := range pids {
		cores := (after[i].cpu - before[i].cpu).Seconds() / after[i].at.Sub(before[i].at).Seconds()
		cpuSum += cores
		cpuMax = max(cpuMax, cores)
		rss, hwm, err := procStatus(pid)
		if err != nil {
			continue
		}
		rssSum += float64(rss) / (1 << 20)
		rssMax = max(rssMax, float64(rss)/(1<<20))
		hwmMax = max(hwmMax, float64(hwm)/(1<<20))
	}
	n := float64(len(pids))
	into[prefix+"_cpu_cores_mean"] = cpuSum / n
	into[prefix+"_cpu_cores_max"] = cpuMax
	into[prefix+"_cpu_cores_sum"] = cpuSum
	into[prefix+"_rss_mib_mean"] = rssSum / n
	into[prefix+"_rss_mib_max"] = rssMax
	into[prefix+"_rss_peak_mib_max"] = hwmMax
}

func pidsOf(procs []*fleetProc) []int {
	out := make([]int, len(procs))
	for i, p := range procs {
		out[i] = p.Pid()
	}
	return out
}

// serverConns counts the bench database's client backends other than the
// harness's own (every binary, through a pooler its server connections).
func (h *harness) serverConns(ctx context.Context) (int64, error) {
	return h.count(ctx, `SELECT count(*) FROM pg_stat_activity WHERE datname = current_database()
		AND backend_type = 'client backend' AND application_name <> 'mightyetl-bench'`)
}

// fleetNATS is the harness's NATS connection and the run's subjects; the
// zero value (no -nats-url) publishes nothing.
type fleetNATS struct {
	nc      *nats.Conn
	subject string
	prefix  string
}

func (h *harness) fleetNATS() (fleetNATS, error) {
	f := fleetNATS{prefix: "benchfleet" + randomHex(4)}
	if h.o.NATSURL == "" {
		return f, nil
	}
	s, err := events.NewSubjects(f.prefix)
	if err != nil {
		return f, err
	}
	f.subject = s.JobsAvailable()
	f.nc, err = nats.Connect(h.o.NATSURL, nats.Name("mightyetl-bench"))
	return f, err
}

// env is what a worker needs to get the run's wake-ups.
func (f fleetNATS) env(natsURL string) []string {
	if f.nc == nil {
		return nil
	}
	return []string{"NATS_URL=" + natsURL, "MIGHTYETL_NATS_SUBJECT_PREFIX=" + f.prefix}
}

// wake publishes one wake-up, as the intake does after its commit.
func (f fleetNATS) wake() {
	if f.nc != nil {
		_ = f.nc.Publish(f.subject, nil)
	}
}

func (f fleetNATS) close() {
	if f.nc != nil {
		f.nc.Close()
	}
}

// fleetWorkers runs -concurrency slots split over n worker binaries (with
// NATS wake-ups when -nats-url is set): first pickup, one job at a time at
// -rate on the idle fleet, then a backlog of -fleet-backlog jobs, measuring
// worked jobs/s over -fleet-window after -fleet-warmup (as burndown does,
// but over a window: the rate of the fleet, not of an inserter).
func (h *harness) fleetWorkers(ctx context.Context, n, poolSize, round int) (Result, error) {
	o := h.o.Fleet
	slots := h.o.Concurrency / n
	res := Result{System: "mightyetl", Scenario: "fleet", Variant: variantName(fmt.Sprintf("workers=%d", n), poolSize, round), Metrics: map[string]float64{},
		Settings: map[string]string{"worker_processes": itoa(n), "slots_per_process": itoa(slots), "slots_total": itoa(slots * n),
			"process": "go build ./cmd/worker, product defaults but MIGHTYETL_WORKER_CONCURRENCY (and the binary env)",
			"window":  o.Window.String(), "warmup": o.Warmup.String(), "binary_env": strings.Join(h.binaryEnv(), " ")}}
	fmt.Fprintf(os.Stderr, "bench: fleet %s\n", res.Variant)
	if err := h.fresh(ctx); err != nil {
		return res, err
	}
	fn, err := h.fleetNATS()
	if err != nil {
		return res, err
	}
	defer fn.close()
	env := fn.env(h.o.NATSURL)
	if poolSize > 0 {
		env = append(env, "MIGHTYETL_WORKER_POOL_SIZE="+itoa(poolSize))
		res.Settings["pool_size"] = itoa(poolSize)
	}
	if fn.nc != nil {
		res.Settings["pickup"] = fmt.Sprintf("%s at %g/s, 2 s jobs, NATS wake-up after each commit; available -> claimed by the database clock", o.PickupDuration, h.o.Rate)
		procs, err := h.startFleetWorkers(ctx, n, slots, env)
		if err != nil {
			return res, err
		}
		err = h.fleetPickup(ctx, fn, &res)
		stopFleet(procs)
		if err != nil {
			return res, err
		}
	} else {
		res.Notes = append(res.Notes, "no -nats-url: pickup not measured")
	}

	// The backlog goes in while no worker runs, then VACUUM ANALYZE: the
	// window measures claiming and finishing, not a race with the insert
	// (an insert transaction open for seconds holds back the cleanup of the
	// claim queue's dead entries, and every claim then reads them all).
	res.Settings["backlog"] = fmt.Sprintf("%d zero-duration jobs inserted before the workers start, in statements of 100,000 (bulkInsertSQL), then VACUUM ANALYZE; no feed", o.Backlog)
	tag := "bench-fleet-" + uuid.NewString()
	for lo := 1; lo <= o.Backlog; lo += 100_000 {
		if _, err := h.pool.Exec(ctx, bulkInsertSQL, benchPrincipal, tag, zeroPayload, lo, min(lo+100_000-1, o.Backlog)); err != nil {
			return res, fmt.Errorf("insert the backlog: %w", err)
		}
	}
	if _, err := h.pool.Exec(ctx, `VACUUM ANALYZE`); err != nil {
		return res, fmt.Errorf("vacuum the backlog: %w", err)
	}
	procs, err := h.startFleetWorkers(ctx, n, slots, env)
	if err != nil {
		return res, err
	}
	defer stopFleet(procs)
	fn.wake()
	if err := sleepCtx(ctx, o.Warmup); err != nil {
		return res, err
	}
	pids := pidsOf(procs)
	s0, err := scrapeAll(ctx, procs)
	if err != nil {
		return res, err
	}
	c0, t0 := sampleCPU(pids), time.Now()
	var connsMax, oldestXactMs, queueDeadMax int64
	deadline := t0.Add(o.Window)
	for time.Now().Before(deadline) {
		if c, err := h.serverConns(ctx); err == nil {
			connsMax = max(connsMax, c)
		}
		// What makes claims slow when it grows: the oldest open transaction
		// (it holds back the cleanup of dead queue entries) and those entries.
		if c, err := h.count(ctx, `SELECT coalesce(max(extract(epoch FROM clock_timestamp() - xact_start) * 1000), 0)::bigint
			FROM pg_stat_activity WHERE datname = current_database() AND xact_start IS NOT NULL AND pid <> pg_backend_pid()`); err == nil {
			oldestXactMs = max(oldestXactMs, c)
		}
		if c, err := h.count(ctx, `SELECT coalesce(n_dead_tup, 0) FROM pg_stat_user_tables WHERE relname = 'etl_job_claim_queue'`); err == nil {
			queueDeadMax = max(queueDeadMax, c)
		}
		if err := sleepCtx(ctx, min(time.Second, time.Until(deadline))); err != nil {
			return res, err
		}
	}
	s1, err := scrapeAll(ctx, procs)
	if err != nil {
		return res, err
	}
	c1, elapsed := sampleCPU(pids), time.Since(t0)
	pending, err := h.count(ctx, `SELECT count(*) FROM etl_job_claim_queue WHERE claimable_at <= clock_timestamp()`)
	if err != nil {
		return res, err
	}
	res.Metrics["backlog_left_at_window_end"] = float64(pending)
	if s1[seriesSucceeded] == s0[seriesSucceeded] {
		// A fleet idle beside a backlog: keep what its logs said last.
		for _, p := range procs {
			res.Notes = append(res.Notes, fmt.Sprintf("no job worked in the window; %s last logged: %s", p.id, p.Tail(5)))
		}
	}
	if pending == 0 {
		return res, fmt.Errorf("fleet %s: the backlog ran out within the window; raise -fleet-backlog", res.Variant)
	}
	m := res.Metrics
	m["window_s"] = elapsed.Seconds()
	m["worked"] = s1[seriesSucceeded] - s0[seriesSucceeded]
	m["jobs_per_s"] = m["worked"] / elapsed.Seconds()
	m["server_connections_max"] = float64(connsMax)
	m["oldest_transaction_ms_max"] = float64(oldestXactMs)
	m["claim_queue_dead_tuples_max"] = float64(queueDeadMax)
	m["exec_acquires_per_s"] = (s1[seriesExecAcquires] - s0[seriesExecAcquires]) / elapsed.Seconds()
	m["exec_empty_acquires_per_s"] = (s1[seriesExecEmpty] - s0[seriesExecEmpty]) / elapsed.Seconds()
	// Seconds spent waiting for an execution connection per second of the
	// window, over all processes (1.0: one caller always waiting).
	m["exec_acquire_wait_s_per_s"] = (s1[seriesExecWait] - s0[seriesExecWait]) / elapsed.Seconds()
	addProcMetrics("worker", pids, c0, c1, m)
	return res, nil
}

// fleetPickup submits jobs one at a time at -rate for
// -fleet-pickup-duration, each followed by a NATS wake-up, and records each
// job's available -> claimed delay by the database clock: the claim set
// lease_expires_at to its clock_timestamp() plus the lease, and the jobs
// run 2 s, so a 25 ms poll of RUNNING rows sees each before it ends and
// before its first renewal.
func (h *harness) fleetPickup(ctx context.Context, fn fleetNATS, res *Result) error {
	const warm = 10
	n := max(1, int(h.o.Rate*h.o.Fleet.PickupDuration.Seconds()))
	ids := make(map[uuid.UUID]bool, n)
	seen := map[uuid.UUID]time.Duration{}
	pollCtx, stopPoll := context.WithCancel(ctx)
	defer stopPoll()
	var mu sync.Mutex
	polled := make(chan error, 1)
	go func() {
		t := time.NewTicker(25 * time.Millisecond)
		defer t.Stop()
		for {
			rows, err := h.pool.Query(pollCtx, `SELECT job_record_id,
				(extract(epoch FROM lease_expires_at - available_at) * 1000000)::bigint
				FROM etl_job_records WHERE job_status = 'RUNNING' AND attempt_count = 1`)
			if err == nil {
				for rows.Next() {
					var id uuid.UUID
					var us int64
					if rows.Scan(&id, &us) == nil {
						mu.Lock()
						if _, ok := seen[id]; !ok {
							seen[id] = time.Duration(us)*time.Microsecond - fleetLease
						}
						mu.Unlock()
					}
				}
				rows.Close()
				err = rows.Err()
			}
			if pollCtx.Err() != nil {
				polled <- nil
				return
			}
			if err != nil {
				polled <- err
				return
			}
			select {
			case <-pollCtx.Done():
			case <-t.C:
			}
		}
	}()
	interval := time.Duration(float64(time.Second) / h.o.Rate)
	start := time.Now()
	for i := range warm + n {
		if err := sleepCtx(ctx, time.Until(start.Add(time.Duration(i)*interval))); err != nil {
			return err
		}
		jobs := h.newJobs(1, fleetPickupPayload)
		if _, err := pg.InsertJobsUnannounced(ctx, h.pool, jobs); err != nil {
			return fmt.Errorf("pickup submit: %w", err)
		}
		fn.wake()
		if i >= warm {
			ids[jobs[0].JobID] = true
		}
	}
	if err := waitUntil(ctx, 30*time.Second, 25*time.Millisecond, "every pickup job to be seen running", func() (bool, error) {
		mu.Lock()
		defer mu.Unlock()
		for id := range ids {
			if _, ok := seen[id]; !ok {
				return false, nil
			}
		}
		return true, nil
	}); err != nil {
		return err
	}
	stopPoll()
	if err := <-polled; err != nil {
		return err
	}
	var lat []time.Duration
	for id := range ids {
		lat = append(lat, max(seen[id], 0))
	}
	percentiles("pickup", lat, res.Metrics)
	// The pickup jobs end 2 s after their claim: let them, so the
	// throughput part starts with every slot free.
	return waitUntil(ctx, 30*time.Second, 50*time.Millisecond, "the pickup jobs to end", func() (bool, error) {
		c, err := h.count(ctx, `SELECT count(*) FROM etl_job_records WHERE job_status IN ('PENDING', 'RUNNING')`)
		return c == 0, err
	})
}

// fleetIntakes has intakeConcurrency HTTP clients, spread over n intake
// binaries, POST jobs for -fleet-window (after -fleet-warmup of the same
// load); no worker runs.
func (h *harness) fleetIntakes(ctx context.Context, n, poolSize, round int) (Result, error) {
	o := h.o.Fleet
	res := Result{System: "mightyetl", Scenario: "fleet", Variant: variantName(fmt.Sprintf("intakes=%d", n), poolSize, round), Metrics: map[string]float64{},
		Settings: map[string]string{"intake_processes": itoa(n), "clients": itoa(intakeConcurrency) + " raw keep-alive clients, client c on intake c mod n",
			"process": "go build ./cmd/intake, product defaults, basic auth (4 principals, bcrypt cost 4)", "window": o.Window.String(),
			"warmup": o.Warmup.String(), "body": "1 ETL record", "binary_env": strings.Join(h.binaryEnv(), " ")}}
	fmt.Fprintf(os.Stderr, "bench: fleet %s\n", res.Variant)
	if err := h.fresh(ctx); err != nil {
		return res, err
	}
	var env []string
	if poolSize > 0 {
		env = []string{"MIGHTYETL_INTAKE_POOL_SIZE=" + itoa(poolSize)}
		res.Settings["pool_size"] = itoa(poolSize)
	}
	intakes, addrs, creds, _, stop, err := h.startFleetIntakes(ctx, n, env...)
	if err != nil {
		return res, err
	}
	defer stop()
	authz := func(c int) string { return creds.headers[c%len(creds.headers)] }
	_ = rawPostLoadTo(ctx, addrs, "/api/etl/jobs", []byte(intakeBody), o.Warmup, authz)
	pids := make([]int, len(intakes))
	for i, p := range intakes {
		pids[i] = p.Pid()
	}
	c0 := sampleCPU(pids)
	load := rawPostLoadTo(ctx, addrs, "/api/etl/jobs", []byte(intakeBody), o.Window, authz)
	c1 := sampleCPU(pids)
	load.report(&res)
	addProcMetrics("intake", pids, c0, c1, res.Metrics)
	return res, nil
}

// startFleetIntakes starts n intake binaries (Basic auth, NATS relay when
// -nats-url is set) and warms each principal on each, so no bcrypt
// verification falls into a window. stop stops them all.
func (h *harness) startFleetIntakes(ctx context.Context, n int, env ...string) (procs []*workerProc, addrs []string, creds benchCredentials, prefix string, stop func(), err error) {
	dir, err := os.MkdirTemp("", "mightyetl-bench-fleet")
	if err != nil {
		return nil, nil, creds, "", nil, err
	}
	creds, err = writeBenchCredentials(dir, intakeBinaryPrincipals)
	if err != nil {
		os.RemoveAll(dir)
		return nil, nil, creds, "", nil, err
	}
	subjects, err := events.NewSubjects("benchfleet" + randomHex(6))
	if err != nil {
		os.RemoveAll(dir)
		return nil, nil, creds, "", nil, err
	}
	hashKey := randomHex(32)
	stop = func() {
		var wg sync.WaitGroup
		for _, p := range procs {
			wg.Go(func() { _ = p.Terminate(intakeStopGrace) })
		}
		wg.Wait()
		if h.o.NATSURL != "" {
			dctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 10*time.Second)
			defer cancel()
			_ = deleteStreams(dctx, h.o.NATSURL, subjects.RequestsStream(), subjects.LifecycleStream())
		}
		os.RemoveAll(dir)
	}
	client, closeClient := newLoadClient()
	defer closeClient()
	for range n {
		p, base, err := h.startIntake(ctx, creds.path, subjects.Prefix(), hashKey, env...)
		if err != nil {
			stop()
			return nil, nil, creds, "", nil, err
		}
		procs = append(procs, p)
		addrs = append(addrs, strings.TrimPrefix(base, "http://"))
		for i, hdr := range creds.headers {
			status, err := postJob(ctx, client, base+"/api/etl/jobs", []byte(intakeBody), func(r *http.Request) { r.Header.Set("Authorization", hdr) })
			if err == nil && status != http.StatusAccepted {
				err = fmt.Errorf("status %d, want 202", status)
			}
			if err != nil {
				stop()
				return nil, nil, creds, "", nil, fmt.Errorf("warm-up request of principal %d: %w", i, err)
			}
		}
	}
	return procs, addrs, creds, subjects.Prefix(), stop, nil
}

// fleetMixed runs -fleet-mixed-workers workers (-concurrency slots split)
// and -fleet-mixed-intakes intakes together: the HTTP clients post jobs to
// the intakes while the workers work them (NATS wake-ups through the
// intakes' relays when -nats-url is set). via "pgbouncer" connects every
// binary through the PgBouncer with -fleet-pooler-env.
func (h *harness) fleetMixed(ctx context.Context, via string, round int) (Result, error) {
	o := h.o.Fleet
	slots := h.o.Concurrency / o.MixedWorkers
	res := Result{System: "mightyetl", Scenario: "fleet", Variant: fmt.Sprintf("mixed-%s/round=%d", via, round), Metrics: map[string]float64{},
		Settings: map[string]string{"worker_processes": itoa(o.MixedWorkers), "slots_per_process": itoa(slots), "intake_processes": itoa(o.MixedIntakes),
			"clients": itoa(intakeConcurrency) + " raw keep-alive HTTP clients spread over the intakes", "window": o.Window.String(), "warmup": o.Warmup.String(),
			"connections": "direct"}}
	if err := h.fresh(ctx); err != nil {
		return res, err
	}
	if via == "pgbouncer" {
		// A PgBouncer of its own per run, started after the database was
		// re-created: one kept across runs holds server connections to the
		// dropped database, and its clients meet their errors.
		bouncer, err := pgbouncertest.Launch(ctx, pgbouncertest.Options{Upstream: h.url, PoolSize: o.PoolerSize})
		if err != nil {
			return res, err
		}
		defer func() { _ = bouncer.Stop() }()
		res.Settings["connections"] = fmt.Sprintf("PgBouncer 1.18 (internal/pgbouncertest), pool_mode transaction, default_pool_size %d; binaries with %s",
			o.PoolerSize, strings.Join(o.PoolerEnv, " "))
		saved := h.o.Fleet
		h.o.Fleet.BinaryDatabaseURL = bouncer.URL(h.url)
		h.o.Fleet.BinaryEnv = append(slices.Clone(saved.BinaryEnv), o.PoolerEnv...)
		defer func() { h.o.Fleet = saved }()
	}
	res.Settings["binary_env"] = strings.Join(h.binaryEnv(), " ")
	fmt.Fprintf(os.Stderr, "bench: fleet %s\n", res.Variant)
	intakes, addrs, creds, prefix, stopIntakes, err := h.startFleetIntakes(ctx, o.MixedIntakes)
	if err != nil {
		return res, err
	}
	defer stopIntakes()
	var wenv []string
	if h.o.NATSURL != "" {
		// The intakes' relay publishes the wake-ups under their prefix.
		wenv = []string{"NATS_URL=" + h.o.NATSURL, "MIGHTYETL_NATS_SUBJECT_PREFIX=" + prefix}
	}
	workers, err := h.startFleetWorkers(ctx, o.MixedWorkers, slots, wenv)
	if err != nil {
		return res, err
	}
	defer stopFleet(workers)
	authz := func(c int) string { return creds.headers[c%len(creds.headers)] }
	_ = rawPostLoadTo(ctx, addrs, "/api/etl/jobs", []byte(intakeBody), o.Warmup, authz)
	pids := pidsOf(workers)
	ipids := make([]int, len(intakes))
	for i, p := range intakes {
		ipids[i] = p.Pid()
	}
	s0, err := scrapeAll(ctx, workers)
	if err != nil {
		return res, err
	}
	c0, ic0 := sampleCPU(pids), sampleCPU(ipids)
	var connsMax atomic.Int64
	sampleCtx, stopSample := context.WithCancel(ctx)
	sampled := make(chan struct{})
	go func() {
		defer close(sampled)
		for sampleCtx.Err() == nil {
			if c, err := h.serverConns(sampleCtx); err == nil && c > connsMax.Load() {
				connsMax.Store(c)
			}
			_ = sleepCtx(sampleCtx, time.Second)
		}
	}()
	load := rawPostLoadTo(ctx, addrs, "/api/etl/jobs", []byte(intakeBody), o.Window, authz)
	stopSample()
	<-sampled
	s1, err := scrapeAll(ctx, workers)
	if err != nil {
		return res, err
	}
	c1, ic1 := sampleCPU(pids), sampleCPU(ipids)
	load.report(&res)
	m := res.Metrics
	m["worked"] = s1[seriesSucceeded] - s0[seriesSucceeded]
	m["jobs_per_s"] = m["worked"] / load.elapsed.Seconds()
	m["server_connections_max"] = float64(connsMax.Load())
	m["exec_acquire_wait_s_per_s"] = (s1[seriesExecWait] - s0[seriesExecWait]) / load.elapsed.Seconds()
	addProcMetrics("worker", pids, c0, c1, m)
	addProcMetrics("intake", ipids, ic0, ic1, m)
	return res, nil
}

// fleetSummary is the medians over rounds per variant and the floors'
// ratios: 8 (the largest count) vs 1 worker process, 2 vs 1 intake,
// PgBouncer vs direct.
func fleetSummary(rs []Result) Result {
	sum := Result{System: "mightyetl", Scenario: "fleet", Variant: "summary", Metrics: map[string]float64{},
		Notes: []string{"medians over the rounds above; ratios of medians"}}
	med := map[string]map[string][]float64{}
	for _, r := range rs {
		if r.Scenario != "fleet" {
			continue
		}
		v, _, _ := strings.Cut(r.Variant, "/round=")
		if med[v] == nil {
			med[v] = map[string][]float64{}
		}
		for k, x := range r.Metrics {
			med[v][k] = append(med[v][k], x)
		}
	}
	get := func(v, k string) float64 { return median(med[v][k]) }
	var variants []string
	for v := range med {
		variants = append(variants, v)
	}
	sort.Strings(variants)
	for _, v := range variants {
		for _, k := range []string{"jobs_per_s", "pickup_p50_ms", "pickup_p99_ms", "accepted_per_s", "request_p99_ms"} {
			if len(med[v][k]) > 0 {
				sum.Metrics[v+"_"+k+"_median"] = get(v, k)
			}
		}
	}
	ratio := func(name, a, b, k string) {
		if x, y := get(a, k), get(b, k); x > 0 && y > 0 {
			sum.Metrics[name] = x / y
		}
	}
	// Worker counts against 1, per pool size; pool sizes against each other
	// per count.
	type wv struct{ n, pool int }
	var ws []wv
	for _, v := range variants {
		var x wv
		if c, rest, _ := strings.Cut(v, "/pool="); strings.HasPrefix(c, "workers=") {
			x.n, _ = strconv.Atoi(strings.TrimPrefix(c, "workers="))
			x.pool, _ = strconv.Atoi(rest)
			ws = append(ws, x)
		}
	}
	name := func(x wv) string {
		if x.pool > 0 {
			return fmt.Sprintf("workers=%d/pool=%d", x.n, x.pool)
		}
		return fmt.Sprintf("workers=%d", x.n)
	}
	poolSuffix := func(p int) string {
		if p == 0 {
			return ""
		}
		return "_pool" + itoa(p)
	}
	for _, x := range ws {
		if x.n == 1 {
			continue
		}
		one := name(wv{1, x.pool})
		ratio(fmt.Sprintf("jobs_per_s_ratio_%d_vs_1%s", x.n, poolSuffix(x.pool)), name(x), one, "jobs_per_s")
		ratio(fmt.Sprintf("pickup_p99_ratio_%d_vs_1%s", x.n, poolSuffix(x.pool)), name(x), one, "pickup_p99_ms")
	}
	for _, x := range ws {
		for _, y := range ws {
			if x.n == y.n && x.pool > 0 && y.pool > 0 && x.pool < y.pool {
				ratio(fmt.Sprintf("jobs_per_s_ratio_workers%d_pool%d_vs_pool%d", x.n, x.pool, y.pool), name(x), name(y), "jobs_per_s")
			}
		}
	}
	ratio("accepted_per_s_ratio_2_vs_1_intakes", "intakes=2", "intakes=1", "accepted_per_s")
	for _, v := range variants {
		for _, w := range variants {
			c1, p1, ok1 := strings.Cut(v, "/pool=")
			c2, p2, ok2 := strings.Cut(w, "/pool=")
			a, _ := strconv.Atoi(p1)
			b, _ := strconv.Atoi(p2)
			if ok1 && ok2 && c1 == c2 && strings.HasPrefix(c1, "intakes=") && a < b {
				ratio(fmt.Sprintf("accepted_per_s_ratio_%s_pool%d_vs_pool%d", strings.ReplaceAll(c1, "=", ""), a, b), v, w, "accepted_per_s")
			}
			if ok1 && ok2 && p1 == p2 && c1 == "intakes=2" && c2 == "intakes=1" {
				ratio("accepted_per_s_ratio_2_vs_1_intakes_pool"+p1, v, w, "accepted_per_s")
			}
		}
	}
	ratio("jobs_per_s_ratio_pgbouncer_vs_direct", "mixed-pgbouncer", "mixed-direct", "jobs_per_s")
	ratio("accepted_per_s_ratio_pgbouncer_vs_direct", "mixed-pgbouncer", "mixed-direct", "accepted_per_s")
	return sum
}

func median(xs []float64) float64 {
	if len(xs) == 0 {
		return 0
	}
	s := slices.Clone(xs)
	sort.Float64s(s)
	if len(s)%2 == 1 {
		return s[len(s)/2]
	}
	return (s[len(s)/2-1] + s[len(s)/2]) / 2
}

func sleepCtx(ctx context.Context, d time.Duration) error {
	if d <= 0 {
		return ctx.Err()
	}
	select {
	case <-time.After(d):
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

// binaryEnv are the extra settings of every binary the harness starts
// (-binary-env, and the pooler's in the mixed part behind it).
func (h *harness) binaryEnv() []string { return h.o.Fleet.BinaryEnv }

// binaryURL is the binaries' DATABASE_URL: -binary-database-url, else the
// bench database.
func (h *harness) binaryURL() string {
	if h.o.Fleet.BinaryDatabaseURL != "" {
		return h.o.Fleet.BinaryDatabaseURL
	}
	return h.url
}
