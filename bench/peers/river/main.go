// Command river runs River's equivalent of the mightyETL bench scenarios
// burndown, continuous and pickup on its own database of the same
// PostgreSQL server, and prints the results as JSON on stdout (the shape of
// the root harness's Result). It is a separate Go module: the product never
// imports it, and River is used only as a module dependency.
//
//	cd bench/peers/river && go run . -n 200000 -duration 30s
package main

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"log/slog"
	"os"
	"sort"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/mightyetl/mightyetl/bench/feed"
	"github.com/riverqueue/river"
	"github.com/riverqueue/river/riverdriver/riverpgxv5"
	"github.com/riverqueue/river/rivermigrate"
)

// Result mirrors the root harness's Result.
type Result struct {
	System   string             `json:"system"`
	Scenario string             `json:"scenario"`
	Variant  string             `json:"variant,omitempty"`
	Metrics  map[string]float64 `json:"metrics"`
	Settings map[string]string  `json:"settings,omitempty"`
	Notes    []string           `json:"notes,omitempty"`
}

type options struct {
	databaseURL    string
	scenarios      []string
	n              int
	duration       time.Duration
	pickupDuration time.Duration
	rate           float64
	maxWorkers     int
	// feed is how continuous inserts, as the mightyETL harness does
	// (bench/feed).
	feed feed.Config
	// fetchCooldown and fetchPollInterval are River's producer settings for
	// burndown and continuous. The defaults are those of River's own published
	// benchmark (riverbench): 2 ms and 20 ms. River's library defaults (100 ms,
	// 1 s) cap a producer at MaxWorkers jobs per 100 ms, which measures the
	// cooldown, not River; -river-defaults runs them for a labelled extra row.
	fetchCooldown     time.Duration
	fetchPollInterval time.Duration
}

func main() {
	var o options
	scen := flag.String("scenarios", "burndown,continuous,pickup", "burndown,continuous,pickup")
	flag.StringVar(&o.databaseURL, "database-url", "postgres://postgres@127.0.0.1:5432/mightyetl_bench_river", "River database URL (DROPPED and re-created)")
	flag.IntVar(&o.n, "n", 20000, "burndown jobs")
	flag.DurationVar(&o.duration, "duration", 5*time.Second, "continuous run time")
	flag.DurationVar(&o.pickupDuration, "pickup-duration", 2*time.Second, "pickup submission time per variant")
	flag.Float64Var(&o.rate, "rate", 50, "pickup submissions per second")
	o.feed.AddFlags(flag.CommandLine, "InsertManyFast")
	flag.IntVar(&o.maxWorkers, "max-workers", 2000, "burndown/continuous MaxWorkers of the default queue (River's benchmark: 2,000)")
	flag.DurationVar(&o.fetchCooldown, "fetch-cooldown", 2*time.Millisecond, "burndown/continuous FetchCooldown (River's benchmark: 2ms; library default 100ms)")
	flag.DurationVar(&o.fetchPollInterval, "fetch-poll-interval", 20*time.Millisecond, "burndown/continuous FetchPollInterval (River's benchmark: 20ms; library default 1s)")
	flag.Parse()
	if err := o.feed.Validate(); err != nil {
		fmt.Fprintf(os.Stderr, "river peer: %v\n", err)
		os.Exit(2)
	}
	for s := range strings.SplitSeq(*scen, ",") {
		if s = strings.TrimSpace(s); s != "" {
			o.scenarios = append(o.scenarios, s)
		}
	}
	ctx := context.Background()
	var out []Result
	var failed []string
	for _, s := range o.scenarios {
		fmt.Fprintf(os.Stderr, "river peer: running %s\n", s)
		var rs []Result
		var err error
		switch s {
		case "burndown":
			var r Result
			r, err = burndown(ctx, o)
			rs = []Result{r}
		case "continuous":
			var r Result
			r, err = continuous(ctx, o)
			rs = []Result{r}
		case "pickup":
			rs, err = pickup(ctx, o)
		default:
			err = fmt.Errorf("unknown scenario %q", s)
		}
		out = append(out, rs...)
		if err != nil {
			failed = append(failed, s+": "+err.Error())
			fmt.Fprintf(os.Stderr, "river peer: %s failed: %v\n", s, err)
		}
	}
	enc := json.NewEncoder(os.Stdout)
	enc.SetIndent("", "  ")
	_ = enc.Encode(out)
	if len(failed) > 0 {
		fmt.Fprintf(os.Stderr, "river peer: %s\n", strings.Join(failed, "; "))
		os.Exit(1)
	}
}

// throughputConfig is the client configuration of burndown and continuous:
// River's benchmark settings unless the flags say otherwise.
func (o options) throughputConfig() *river.Config {
	return &river.Config{
		FetchCooldown:     o.fetchCooldown,
		FetchPollInterval: o.fetchPollInterval,
		Queues:            map[string]river.QueueConfig{river.QueueDefault: {MaxWorkers: o.maxWorkers}},
	}
}

// throughputSettings labels a burndown or continuous result with the
// settings it ran with.
func (o options) throughputSettings() map[string]string {
	return map[string]string{"max_workers": strconv.Itoa(o.maxWorkers),
		"fetch_cooldown": o.fetchCooldown.String(), "fetch_poll_interval": o.fetchPollInterval.String()}
}

// noopArgs is the benchmark job: it does nothing.
type noopArgs struct{}

func (noopArgs) Kind() string { return "bench_noop" }

// noopWorker records when each job started (pickup only) and returns.
type noopWorker struct {
	river.WorkerDefaults[noopArgs]
	rec *recorder
}

func (w *noopWorker) Work(_ context.Context, job *river.Job[noopArgs]) error {
	if w.rec != nil {
		var avail time.Duration
		if job.AttemptedAt != nil {
			avail = job.AttemptedAt.Sub(job.ScheduledAt)
		}
		w.rec.record(job.ID, time.Now(), avail)
	}
	return nil
}

type recorder struct {
	mu     sync.Mutex
	starts map[int64]startRec
}

type startRec struct {
	at    time.Time
	avail time.Duration
}

func (r *recorder) record(id int64, at time.Time, avail time.Duration) {
	r.mu.Lock()
	r.starts[id] = startRec{at, avail}
	r.mu.Unlock()
}

func (r *recorder) get(id int64) (startRec, bool) {
	r.mu.Lock()
	defer r.mu.Unlock()
	s, ok := r.starts[id]
	return s, ok
}

// freshDatabase drops and re-creates the River database and runs River's
// migrations (river migrate-up) in code.
func freshDatabase(ctx context.Context, url string) (*pgxpool.Pool, error) {
	cfg, err := pgx.ParseConfig(url)
	if err != nil {
		return nil, err
	}
	name := cfg.Database
	if name == "" || name == "postgres" {
		return nil, errors.New("give the River peer its own database")
	}
	admin := cfg.Copy()
	admin.Database = "postgres"
	conn, err := pgx.ConnectConfig(ctx, admin)
	if err != nil {
		return nil, err
	}
	defer conn.Close(ctx)
	if _, err := conn.Exec(ctx, "DROP DATABASE IF EXISTS "+pgx.Identifier{name}.Sanitize()+" WITH (FORCE)"); err != nil {
		return nil, err
	}
	if _, err := conn.Exec(ctx, "CREATE DATABASE "+pgx.Identifier{name}.Sanitize()); err != nil {
		return nil, err
	}
	pcfg, err := pgxpool.ParseConfig(url)
	if err != nil {
		return nil, err
	}
	pool, err := pgxpool.NewWithConfig(ctx, pcfg)
	if err != nil {
		return nil, err
	}
	migrator, err := rivermigrate.New(riverpgxv5.New(pool), nil)
	if err != nil {
		pool.Close()
		return nil, err
	}
	if _, err := migrator.Migrate(ctx, rivermigrate.DirectionUp, nil); err != nil {
		pool.Close()
		return nil, fmt.Errorf("river migrate-up: %w", err)
	}
	return pool, nil
}

func newClient(pool *pgxpool.Pool, cfg *river.Config, rec *recorder) (*river.Client[pgx.Tx], error) {
	workers := river.NewWorkers()
	river.AddWorker(workers, &noopWorker{rec: rec})
	cfg.Workers = workers
	cfg.Logger = slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelWarn}))
	return river.NewClient(riverpgxv5.New(pool), cfg)
}

// completions counts completed-job events.
func completions(c *river.Client[pgx.Tx]) (*atomic.Int64, func()) {
	ch, cancel := c.SubscribeConfig(&river.SubscribeConfig{ChanSize: 1_000_000, Kinds: []river.EventKind{river.EventKindJobCompleted}})
	var n atomic.Int64
	go func() {
		for range ch {
			n.Add(1)
		}
	}()
	return &n, cancel
}

func insertMany(ctx context.Context, c *river.Client[pgx.Tx], n int) error {
	params := make([]river.InsertManyParams, n)
	for i := range params {
		params[i] = river.InsertManyParams{Args: noopArgs{}}
	}
	_, err := c.InsertManyFast(ctx, params)
	return err
}

func burndown(ctx context.Context, o options) (Result, error) {
	res := Result{System: "river", Scenario: "burndown", Variant: "n=" + strconv.Itoa(o.n), Metrics: map[string]float64{},
		Settings: o.throughputSettings()}
	res.Settings["insert"] = "InsertManyFast (COPY), 10,000 per call"
	pool, err := freshDatabase(ctx, o.databaseURL)
	if err != nil {
		return res, err
	}
	defer pool.Close()
	c, err := newClient(pool, o.throughputConfig(), nil)
	if err != nil {
		return res, err
	}
	// WAL per job as the mightyETL harness measures it: insert (with its
	// VACUUM ANALYZE) and run apart, each after a CHECKPOINT.
	walInsert0, err := checkpointLSN(ctx, pool)
	if err != nil {
		return res, err
	}
	t := time.Now()
	for lo := 0; lo < o.n; lo += 10_000 {
		if err := insertMany(ctx, c, min(10_000, o.n-lo)); err != nil {
			return res, fmt.Errorf("insert: %w", err)
		}
	}
	if _, err := pool.Exec(ctx, "VACUUM ANALYZE river_job"); err != nil {
		return res, err
	}
	res.Metrics["insert_s"] = time.Since(t).Seconds()
	walInsert1, err := currentLSN(ctx, pool)
	if err != nil {
		return res, err
	}
	walRun0, err := checkpointLSN(ctx, pool)
	if err != nil {
		return res, err
	}
	done, cancel := completions(c)
	defer cancel()
	cpu0 := selfCPU()
	start := time.Now()
	if err := c.Start(ctx); err != nil {
		return res, err
	}
	err = waitUntil(max(10*time.Minute, time.Duration(o.n/200)*time.Second), func() bool { return done.Load() >= int64(o.n) })
	elapsed := time.Since(start)
	cpu := selfCPU() - cpu0
	_ = c.Stop(ctx)
	if err != nil {
		return res, err
	}
	var completed int64
	if err := pool.QueryRow(ctx, `SELECT count(*) FROM river_job WHERE state = 'completed'`).Scan(&completed); err != nil {
		return res, err
	}
	if completed != int64(o.n) {
		return res, fmt.Errorf("%d of %d jobs completed", completed, o.n)
	}
	walRun1, err := currentLSN(ctx, pool)
	if err != nil {
		return res, err
	}
	res.Metrics["wal_insert_bytes_per_job"] = (walInsert1 - walInsert0) / float64(o.n)
	res.Metrics["wal_run_bytes_per_job"] = (walRun1 - walRun0) / float64(o.n)
	res.Metrics["wal_bytes_per_job"] = (walInsert1 - walInsert0 + walRun1 - walRun0) / float64(o.n)
	res.Metrics["jobs"] = float64(o.n)
	res.Metrics["elapsed_s"] = elapsed.Seconds()
	res.Metrics["jobs_per_s"] = float64(o.n) / elapsed.Seconds()
	res.Metrics["worker_cpu_cores"] = cpu.Seconds() / elapsed.Seconds()
	return res, nil
}

func continuous(ctx context.Context, o options) (Result, error) {
	res := Result{System: "river", Scenario: "continuous", Variant: "feed=" + o.feed.Mode, Metrics: map[string]float64{},
		Settings: o.throughputSettings()}
	res.Settings["duration"] = o.duration.String()
	res.Settings["insert"] = o.feed.Describe("InsertManyFast")
	pool, err := freshDatabase(ctx, o.databaseURL)
	if err != nil {
		return res, err
	}
	defer pool.Close()
	c, err := newClient(pool, o.throughputConfig(), nil)
	if err != nil {
		return res, err
	}
	done, cancel := completions(c)
	defer cancel()
	var inserted atomic.Int64
	insert := func(ctx context.Context, n int) error {
		if err := insertMany(ctx, c, n); err != nil {
			return err
		}
		inserted.Add(int64(n))
		return nil
	}
	// Inserted and not yet completed, from the inserter's and the client's
	// own counters, as the mightyETL harness counts them.
	left := func() int64 { return inserted.Load() - done.Load() }
	// riverbench inserts its first fill before it starts the client.
	if err := o.feed.Fill(ctx, left, insert); err != nil {
		return res, err
	}
	if err := c.Start(ctx); err != nil {
		return res, err
	}
	runCtx, stop := context.WithTimeout(ctx, o.duration)
	defer stop()
	inserted0, worked0 := inserted.Load(), done.Load()
	start := time.Now()
	fed := make(chan error, 1)
	go func() { fed <- o.feed.Run(runCtx, left, insert) }()
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
	worked := done.Load() - worked0
	insertedN := inserted.Load() - inserted0
	elapsed := time.Since(start)
	_ = c.Stop(ctx)
	if insErr != nil {
		return res, insErr
	}
	res.Metrics["elapsed_s"] = elapsed.Seconds()
	res.Metrics["inserted"] = float64(insertedN)
	res.Metrics["worked"] = float64(worked)
	res.Metrics["inserted_per_s"] = float64(insertedN) / elapsed.Seconds()
	res.Metrics["jobs_per_s"] = float64(worked) / elapsed.Seconds()
	feed.AddBacklogMetrics(res.Metrics, backlog)
	return res, nil
}

// pickup runs River with default fetch settings, with the fetch cooldown
// and poll interval tuned down, and poll-only.
func pickup(ctx context.Context, o options) ([]Result, error) {
	variants := []struct {
		name string
		cfg  river.Config
	}{
		{"default", river.Config{}},
		{"tuned", river.Config{FetchCooldown: time.Millisecond, FetchPollInterval: 50 * time.Millisecond}},
		{"poll-only", river.Config{PollOnly: true}},
	}
	var out []Result
	for _, v := range variants {
		r, err := pickupRun(ctx, o, v.name, v.cfg)
		out = append(out, r)
		if err != nil {
			return out, err
		}
	}
	return out, nil
}

func pickupRun(ctx context.Context, o options, variant string, cfg river.Config) (Result, error) {
	res := Result{System: "river", Scenario: "pickup", Variant: variant, Metrics: map[string]float64{},
		Settings: map[string]string{"rate_per_s": strconv.FormatFloat(o.rate, 'f', -1, 64), "duration": o.pickupDuration.String(),
			"fetch_cooldown":      cmpOr(cfg.FetchCooldown, river.FetchCooldownDefault).String(),
			"fetch_poll_interval": cmpOr(cfg.FetchPollInterval, river.FetchPollIntervalDefault).String(),
			"poll_only":           strconv.FormatBool(cfg.PollOnly), "max_workers": "100"}}
	pool, err := freshDatabase(ctx, o.databaseURL)
	if err != nil {
		return res, err
	}
	defer pool.Close()
	rec := &recorder{starts: map[int64]startRec{}}
	cfg.Queues = map[string]river.QueueConfig{river.QueueDefault: {MaxWorkers: 100}}
	c, err := newClient(pool, &cfg, rec)
	if err != nil {
		return res, err
	}
	if err := c.Start(ctx); err != nil {
		return res, err
	}
	defer func() { _ = c.Stop(ctx) }()
	// Warm-up, not measured.
	if _, err := submitPaced(ctx, c, rec, 5, 10*time.Millisecond); err != nil {
		return res, err
	}
	n := max(1, int(o.rate*o.pickupDuration.Seconds()))
	committed, err := submitPaced(ctx, c, rec, n, time.Duration(float64(time.Second)/o.rate))
	if err != nil {
		return res, err
	}
	var e2e, avail []time.Duration
	for id, at := range committed {
		s, _ := rec.get(id)
		e2e = append(e2e, max(s.at.Sub(at), 0))
		avail = append(avail, max(s.avail, 0))
	}
	percentiles("submit_to_start", e2e, res.Metrics)
	percentiles("available_to_claimed", avail, res.Metrics)
	res.Metrics["jobs"] = float64(n)
	return res, nil
}

func cmpOr(d, def time.Duration) time.Duration {
	if d == 0 {
		return def
	}
	return d
}

func submitPaced(ctx context.Context, c *river.Client[pgx.Tx], rec *recorder, n int, interval time.Duration) (map[int64]time.Time, error) {
	committed := make(map[int64]time.Time, n)
	start := time.Now()
	for i := range n {
		if d := time.Until(start.Add(time.Duration(i) * interval)); d > 0 {
			time.Sleep(d)
		}
		r, err := c.Insert(ctx, noopArgs{}, nil)
		if err != nil {
			return nil, fmt.Errorf("insert: %w", err)
		}
		committed[r.Job.ID] = time.Now()
	}
	err := waitUntil(30*time.Second, func() bool {
		for id := range committed {
			if _, ok := rec.get(id); !ok {
				return false
			}
		}
		return true
	})
	return committed, err
}

func waitUntil(timeout time.Duration, cond func() bool) error {
	deadline := time.Now().Add(timeout)
	for !cond() {
		if time.Now().After(deadline) {
			return fmt.Errorf("timed out after %s", timeout)
		}
		time.Sleep(10 * time.Millisecond)
	}
	return nil
}

func percentiles(prefix string, ds []time.Duration, into map[string]float64) {
	if len(ds) == 0 {
		return
	}
	s := append([]time.Duration(nil), ds...)
	sort.Slice(s, func(i, j int) bool { return s[i] < s[j] })
	at := func(q float64) float64 {
		i := int(q*float64(len(s))+0.5) - 1
		i = max(0, min(i, len(s)-1))
		return ms(s[i])
	}
	var sum time.Duration
	for _, d := range s {
		sum += d
	}
	into[prefix+"_p50_ms"] = at(0.50)
	into[prefix+"_p90_ms"] = at(0.90)
	into[prefix+"_p99_ms"] = at(0.99)
	into[prefix+"_max_ms"] = ms(s[len(s)-1])
	into[prefix+"_mean_ms"] = ms(sum / time.Duration(len(s)))
	into[prefix+"_samples"] = float64(len(s))
}

func ms(d time.Duration) float64 { return float64(d.Microseconds()) / 1000 }

func selfCPU() time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		return 0
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

// currentLSN is the server's current WAL position in bytes.
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
