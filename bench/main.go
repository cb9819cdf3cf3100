// Command bench measures mightyETL against its targets (docs/performance.md):
// burndown and continuous throughput, pickup latency with and without NATS
// wake-ups, crash reclaim, claim latency versus backlog size, worker memory
// and renewal cost. It drops and re-creates its own database, migrates it,
// runs the real worker in-process (and the real cmd/worker binary for the
// crash and resources scenarios), prints a table and writes JSON.
//
//	go run ./bench -scenarios burndown,continuous,pickup,crash,scale,resources -quick
//	go run ./bench -peers river -nats-url nats://127.0.0.1:4222 -json results.json
//
// The lockprobe scenario runs only when named: it populates a database at
// the previous release's schema and measures how long each later migration
// blocks a claim, a renewal and a status read (docs/operations/upgrades.md):
//
//	go run ./bench -scenarios lockprobe -json lockprobe.json
//	go run ./bench -scenarios lockprobe -lockprobe-historic
//
// The large scenario (also only when named) uploads one job of -large-n
// records through cmd/intake and loads it with cmd/worker, against COPY:
//
//	go run ./bench -scenarios large -large-n 1000000 -json large.json
//
// The fairness scenario (also only when named) measures many owners on one
// fleet with the cmd/worker binary (issue 33): a light owner beside a heavy
// one's backlog, Zipf-skewed backlogs' shares, and the claim's latency at
// 1,000,000 rows over 10,000 owners; -burndown-claim-owners 32,0 runs the
// burndown with the fair and the first-come first-served claim:
//
//	go run ./bench -scenarios fairness -nats-url nats://127.0.0.1:4222 -json fairness.json
//	go run ./bench -scenarios burndown -burndown-claim-owners 32,0 -peers river
//
// The limit scenario (also only when named) runs the job life cycle as
// hand-written batched SQL in pgbench (bench/limit/*.sql) at each batch
// size, and reports the burndown of the same invocation as a ratio of the
// best (issue 34's distance to the limit):
//
//	go run ./bench -scenarios burndown,limit -n 100000 -limit-batch-sizes 100,500,1000,2000
//
// With -peers river it also runs bench/peers/river (a separate Go module,
// never imported here) against a sibling database on the same server and
// prints mightyETL/River ratios from the same run.
package main

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"os"
	"os/signal"
	"runtime"
	"runtime/pprof"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/mightyetl/mightyetl/bench/feed"
	"github.com/mightyetl/mightyetl/internal/app"
	"github.com/mightyetl/mightyetl/internal/tracing"
)

// defaultDatabaseURL is the bench database; it is dropped and re-created.
const defaultDatabaseURL = "postgres://postgres@127.0.0.1:5432/mightyetl_bench"

// allScenarios run by default, in this order.
var allScenarios = []string{"burndown", "continuous", "pickup", "crash", "scale", "resources", "intake", "intake-binary"}

// optInScenarios run only when named in -scenarios.
var optInScenarios = []string{"lockprobe", "fleet", "large", "fairness", "limit"}

// options are the command-line settings of one run.
type options struct {
	Scenarios      []string      `json:"scenarios"`
	Quick          bool          `json:"quick"`
	N              int           `json:"n"`
	Duration       time.Duration `json:"duration_ns"`
	PickupDuration time.Duration `json:"pickup_duration_ns"`
	Rate           float64       `json:"rate"`
	DatabaseURL    string        `json:"-"`
	NATSURL        string        `json:"-"`
	JSONPath       string        `json:"-"`
	Peers          []string      `json:"peers,omitempty"`
	CPUProfile     string        `json:"-"`
	// Burndown worker tuning.
	Concurrency int `json:"concurrency"`
	FinishBatch int `json:"finish_batch"`
	Completers  int `json:"completers"`
	ExecConns   int `json:"exec_conns"`
	// Feed is how continuous inserts, on both sides (bench/feed).
	Feed feed.Config `json:"feed"`
	// ClaimCooldown and FinishLinger override the worker's (0: its default).
	ClaimCooldown time.Duration `json:"claim_cooldown_ns,omitempty"`
	FinishLinger  time.Duration `json:"finish_linger_ns,omitempty"`
	// Variants are the burndown cost variants run besides the default.
	Variants []string `json:"variants"`
	// ScaleSizes are the PENDING backlog sizes compared by scale.
	ScaleSmall, ScaleLarge int
	// ScaleRounds is how many claims each backlog size measures.
	ScaleRounds int `json:"scale_rounds"`
	// CrashLeases are the lease durations of the crash runs.
	CrashLeases []time.Duration `json:"crash_leases_ns"`
	// ExplainSlower makes the server log plans of slower statements.
	ExplainSlower time.Duration `json:"-"`
	// IntakeClient is the HTTP load generator of the intake scenarios:
	// loadClientRaw or loadClientNetHTTP.
	IntakeClient string `json:"intake_client"`
	// ResourcesWindow is the renewal-cost sampling window.
	ResourcesWindow time.Duration `json:"resources_window_ns"`
	// RunningJobs is the number of concurrently running jobs for resources.
	RunningJobs int `json:"running_jobs"`
	// LockProbe are the lockprobe scenario's settings (bench/lockprobe.go).
	LockProbe lockProbeOptions `json:"lockprobe"`
	// Fleet are the fleet scenario's settings (bench/fleet.go).
	Fleet fleetOptions `json:"fleet"`
	// Large are the large scenario's settings (bench/large.go).
	Large largeOptions `json:"large"`
	// Fairness are the fairness scenario's settings (bench/fairness.go).
	Fairness fairnessOptions `json:"fairness"`
	// Limit are the limit scenario's settings (bench/limit.go).
	Limit limitOptions `json:"limit"`
	// BurndownClaimOwners, when set, runs the default burndown once per
	// value, in order, with the worker's ClaimOwners at it (0: the
	// first-come first-served claim, as MIGHTYETL_CLAIM_OWNERS=0).
	BurndownClaimOwners []int `json:"burndown_claim_owners,omitempty"`
	out                 io.Writer
}

func main() {
	// The in-process worker runs with cmd/worker's collector setting (and the
	// in-process intake shares it), unless GOGC is set.
	app.SetGCPercentDefault(os.Getenv, app.WorkerGCPercent)
	os.Exit(run(os.Args[1:], os.Stdout, os.Stderr))
}

func run(args []string, stdout, stderr io.Writer) int {
	o, err := parseFlags(args, stderr)
	if errors.Is(err, flag.ErrHelp) {
		return 0
	}
	if err != nil {
		fmt.Fprintf(stderr, "bench: %v\n", err)
		return 2
	}
	o.out = stdout
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGINT, syscall.SIGTERM)
	defer stop()
	// The in-process worker and intake trace exactly as the binaries do:
	// only when OTEL_EXPORTER_OTLP_ENDPOINT (or ..._TRACES_ENDPOINT) is set.
	tcfg, shutdownTracing, err := tracing.Setup(ctx, "mightyetl-bench")
	if err != nil {
		fmt.Fprintf(stderr, "bench: %v\n", err)
		return 2
	}
	defer func() { _ = shutdownTracing(context.WithoutCancel(ctx)) }()
	if tcfg.Enabled {
		fmt.Fprintf(stderr, "bench: tracing on (%s)\n", tcfg.Protocol)
	}
	if o.CPUProfile != "" {
		f, err := os.Create(o.CPUProfile)
		if err != nil {
			fmt.Fprintf(stderr, "bench: %v\n", err)
			return 1
		}
		defer f.Close()
		if err := pprof.StartCPUProfile(f); err != nil {
			fmt.Fprintf(stderr, "bench: %v\n", err)
			return 1
		}
		defer pprof.StopCPUProfile()
	}
	log := slog.New(slog.NewTextHandler(stderr, &slog.HandlerOptions{Level: slog.LevelWarn}))
	rep, err := execute(ctx, o, log)
	if rep != nil {
		printTable(stdout, rep)
		if o.JSONPath != "" {
			if werr := writeJSON(o.JSONPath, rep); werr != nil {
				fmt.Fprintf(stderr, "bench: %v\n", werr)
				return 1
			}
		}
	}
	if err != nil {
		fmt.Fprintf(stderr, "bench: %v\n", err)
		return 1
	}
	return 0
}

func parseFlags(args []string, stderr io.Writer) (options, error) {
	fs := flag.NewFlagSet("bench", flag.ContinueOnError)
	fs.SetOutput(stderr)
	var o options
	scen := fs.String("scenarios", strings.Join(allScenarios, ","), "comma-separated scenarios: "+strings.Join(allScenarios, ",")+
		" (default), "+strings.Join(optInScenarios, ",")+" (only when named)")
	fs.BoolVar(&o.Quick, "quick", false, "small sizes and short durations (seconds per scenario)")
	fs.IntVar(&o.N, "n", 0, "burndown jobs (default 1000000, -quick 20000)")
	fs.DurationVar(&o.Duration, "duration", 0, "continuous run time (default 30s, -quick 5s)")
	fs.DurationVar(&o.PickupDuration, "pickup-duration", 0, "pickup submission time per variant (default 20s, -quick 2s)")
	fs.Float64Var(&o.Rate, "rate", 50, "pickup submissions per second")
	fs.StringVar(&o.DatabaseURL, "database-url", defaultDatabaseURL, "bench database URL (DROPPED and re-created)")
	fs.StringVar(&o.NATSURL, "nats-url", os.Getenv("NATS_URL"), "NATS URL for wake-ups; empty: polling only")
	fs.StringVar(&o.JSONPath, "json", "", "write results as JSON to this file")
	peers := fs.String("peers", "", "comparison peers to run in the same run: river")
	fs.StringVar(&o.CPUProfile, "cpuprofile", "", "write a CPU profile of this process (worker included) to this file")
	fs.IntVar(&o.Concurrency, "concurrency", 2000, "burndown/continuous worker execution slots; also the River peer's MaxWorkers (River's benchmark: 2,000)")
	fs.IntVar(&o.FinishBatch, "finish-batch", 0, "burndown/continuous worker FinishBatch (0: the worker's default, as cmd/worker runs)")
	fs.IntVar(&o.Completers, "completers", 0, "burndown/continuous worker Completers (0: the worker's default, as cmd/worker runs)")
	o.Feed.AddFlags(fs, "pg.InsertJobs (River: InsertManyFast)")
	fs.DurationVar(&o.ClaimCooldown, "claim-cooldown", 0, "burndown/continuous worker ClaimCooldown (0: the worker's default)")
	fs.DurationVar(&o.FinishLinger, "finish-linger", 0, "burndown/continuous worker FinishLinger (0: the worker's default)")
	fs.IntVar(&o.ExecConns, "exec-conns", 0, "burndown/continuous worker execution pool size (0: as cmd/worker sizes it)")
	variants := fs.String("variants", "", "burndown cost variants at min(n,100000) (no-outbox, no-outbox-no-ledger, custom-plans, default); empty for none")
	fs.DurationVar(&o.ExplainSlower, "explain-slower-than", 0, "profiling: auto_explain (analyze, buffers) every statement slower than this into the server log")
	fs.StringVar(&o.IntakeClient, "intake-client", loadClientRaw, "intake scenarios' HTTP load generator: raw (one keep-alive connection per client, requests prepared once, like wrk) or nethttp (Go's net/http client, about 40 CPU-µs per request on the shared cores)")
	fs.IntVar(&o.RunningJobs, "running-jobs", 1000, "resources: concurrently running diagnostic jobs")
	fs.Int64Var(&o.LockProbe.From, "lockprobe-from", 0, "lockprobe: schema version the database is populated at (0: the previous release's, 21; -lockprobe-historic: 13)")
	fs.Int64Var(&o.LockProbe.To, "lockprobe-to", 0, "lockprobe: last migration applied (0: the newest embedded; -lockprobe-historic: 16)")
	fs.IntVar(&o.LockProbe.Jobs, "lockprobe-jobs", 0, "lockprobe: jobs in the populated database (default 1000000, -quick 20000)")
	fs.DurationVar(&o.LockProbe.Interval, "lockprobe-interval", 50*time.Millisecond, "lockprobe: how often each probe (claim, renewal, status read) issues its statement")
	fs.DurationVar(&o.LockProbe.Settle, "lockprobe-settle", time.Second, "lockprobe: probe-only pause before the first migration and after each")
	fs.BoolVar(&o.LockProbe.Historic, "lockprobe-historic", false, "lockprobe: start at schema 13 and apply 00014..00016 (not online; they predate the rules)")
	addFleetFlags(fs, &o.Fleet)
	addLargeFlags(fs, &o.Large)
	addFairnessFlags(fs, &o.Fairness)
	addLimitFlags(fs, &o.Limit)
	fs.Func("burndown-claim-owners", "burndown: run the default burndown once per value of this list, in order, at the worker's claim owners (MIGHTYETL_CLAIM_OWNERS; 0: first-come first-served), e.g. 32,0 (default: once, at the worker's default)", func(s string) error {
		o.BurndownClaimOwners = nil
		for f := range strings.SplitSeq(s, ",") {
			n, err := strconv.Atoi(strings.TrimSpace(f))
			if err != nil || n < 0 || n > 1000 {
				return fmt.Errorf("%q: want claim owners 0..1000", f)
			}
			o.BurndownClaimOwners = append(o.BurndownClaimOwners, n)
		}
		return nil
	})
	if err := fs.Parse(args); err != nil {
		return o, err
	}
	if fs.NArg() > 0 {
		return o, fmt.Errorf("unexpected arguments %q", fs.Args())
	}
	for s := range strings.SplitSeq(*scen, ",") {
		s = strings.TrimSpace(s)
		if s == "" {
			continue
		}
		if !contains(allScenarios, s) && !contains(optInScenarios, s) {
			return o, fmt.Errorf("-scenarios: unknown scenario %q", s)
		}
		o.Scenarios = append(o.Scenarios, s)
	}
	if err := o.Feed.Validate(); err != nil {
		return o, err
	}
	if o.IntakeClient != loadClientRaw && o.IntakeClient != loadClientNetHTTP {
		return o, fmt.Errorf("-intake-client: unknown client %q (raw, nethttp)", o.IntakeClient)
	}
	for v := range strings.SplitSeq(*variants, ",") {
		v = strings.TrimSpace(v)
		if v == "" {
			continue
		}
		if !contains([]string{"default", "no-outbox", "no-outbox-no-ledger", "custom-plans"}, v) {
			return o, fmt.Errorf("-variants: unknown variant %q", v)
		}
		o.Variants = append(o.Variants, v)
	}
	for p := range strings.SplitSeq(*peers, ",") {
		p = strings.TrimSpace(p)
		if p == "" {
			continue
		}
		if p != "river" {
			return o, fmt.Errorf("-peers: unknown peer %q", p)
		}
		o.Peers = append(o.Peers, p)
	}
	o.defaults()
	return o, nil
}

// defaults fills sizes that depend on -quick.
func (o *options) defaults() {
	pick := func(full, quick int) int {
		if o.Quick {
			return quick
		}
		return full
	}
	pickD := func(full, quick time.Duration) time.Duration {
		if o.Quick {
			return quick
		}
		return full
	}
	if o.N == 0 {
		o.N = pick(1_000_000, 20_000)
	}
	if o.Duration == 0 {
		o.Duration = pickD(30*time.Second, 5*time.Second)
	}
	if o.PickupDuration == 0 {
		o.PickupDuration = pickD(20*time.Second, 2*time.Second)
	}
	if o.ScaleSmall == 0 {
		o.ScaleSmall = 10_000
	}
	if o.ScaleLarge == 0 {
		o.ScaleLarge = pick(1_000_000, 100_000)
	}
	if o.ScaleRounds == 0 {
		o.ScaleRounds = 300
	}
	if o.CrashLeases == nil {
		if o.Quick {
			o.CrashLeases = []time.Duration{5 * time.Second}
		} else {
			o.CrashLeases = []time.Duration{30 * time.Second, 5 * time.Second}
		}
	}
	if o.LockProbe.Jobs == 0 {
		o.LockProbe.Jobs = pick(1_000_000, 20_000)
	}
	if o.ResourcesWindow == 0 {
		o.ResourcesWindow = pickD(30*time.Second, 5*time.Second)
	}
	o.Fairness.defaults(o.Quick)
	o.Limit.defaults(o.Quick, o.N)
}

func contains(list []string, s string) bool {
	for _, v := range list {
		if v == s {
			return true
		}
	}
	return false
}

// Report is the whole run: the settings, the machine, every result and the
// peer comparison.
type Report struct {
	StartedAt time.Time `json:"started_at"`
	Machine   machine   `json:"machine"`
	Options   options   `json:"options"`
	Results   []Result  `json:"results"`
	Peers     []Result  `json:"peers,omitempty"`
	Ratios    []Ratio   `json:"ratios,omitempty"`
	Errors    []string  `json:"errors,omitempty"`
}

// Result is one scenario variant's figures. Metric names end in their unit.
type Result struct {
	System   string             `json:"system"`
	Scenario string             `json:"scenario"`
	Variant  string             `json:"variant,omitempty"`
	Metrics  map[string]float64 `json:"metrics"`
	Settings map[string]string  `json:"settings,omitempty"`
	Notes    []string           `json:"notes,omitempty"`
}

// Ratio compares one mightyETL figure with the peer's (or with a baseline
// of the same run).
type Ratio struct {
	Scenario  string  `json:"scenario"`
	Metric    string  `json:"metric"`
	Mighty    float64 `json:"mightyetl"`
	Peer      float64 `json:"peer"`
	PeerName  string  `json:"peer_name"`
	Ratio     float64 `json:"ratio"`
	Direction string  `json:"direction"` // "higher is better" or "lower is better"
	// Target is the ratio the product aims for; zero when there is none.
	Target float64 `json:"target,omitempty"`
}

type machine struct {
	GOOS       string  `json:"goos"`
	GOARCH     string  `json:"goarch"`
	NumCPU     int     `json:"num_cpu"`
	GoVersion  string  `json:"go_version"`
	PostgreSQL string  `json:"postgresql"`
	LoadAvg1   float64 `json:"load_avg_1m_start"`
	LoadAvgEnd float64 `json:"load_avg_1m_end"`
}

func execute(ctx context.Context, o options, log *slog.Logger) (*Report, error) {
	rep := &Report{StartedAt: time.Now().UTC(), Options: o}
	rep.Machine = machine{GOOS: runtime.GOOS, GOARCH: runtime.GOARCH, NumCPU: runtime.NumCPU(),
		GoVersion: runtime.Version(), LoadAvg1: loadAvg()}
	h, err := newHarness(ctx, o, log)
	if err != nil {
		return nil, err
	}
	defer h.close()
	rep.Machine.PostgreSQL = h.serverVersion(ctx)
	if len(o.Peers) > 0 {
		// Neither side runs beside the other's leftover tables: a table of
		// a million churned rows keeps autovacuum busy for a minute after
		// its run, on the same two cores. The peer's database of an earlier
		// invocation goes now, ours before the peer runs.
		url, err := riverDatabaseURL(o)
		if err == nil {
			err = dropDatabase(ctx, url)
		}
		if err != nil {
			return rep, fmt.Errorf("drop the peer's database: %w", err)
		}
	}
	for _, s := range o.Scenarios {
		if ctx.Err() != nil {
			break
		}
		fmt.Fprintf(os.Stderr, "bench: running %s\n", s)
		res, err := h.runScenario(ctx, s)
		rep.Results = append(rep.Results, res...)
		if err != nil {
			rep.Errors = append(rep.Errors, fmt.Sprintf("%s: %v", s, err))
			fmt.Fprintf(os.Stderr, "bench: %s failed: %v\n", s, err)
		}
	}
	if len(o.Peers) > 0 && ctx.Err() == nil {
		if err := h.drop(ctx); err != nil {
			return rep, fmt.Errorf("drop the bench database before the peer runs: %w", err)
		}
	}
	for _, p := range o.Peers {
		if ctx.Err() != nil {
			break
		}
		fmt.Fprintf(os.Stderr, "bench: running peer %s\n", p)
		res, err := runRiverPeer(ctx, o)
		rep.Peers = append(rep.Peers, res...)
		if err != nil {
			rep.Errors = append(rep.Errors, fmt.Sprintf("peer %s: %v", p, err))
			fmt.Fprintf(os.Stderr, "bench: peer %s failed: %v\n", p, err)
		}
	}
	rep.Ratios = append(append(ratios(rep.Results, rep.Peers), intakeRatios(rep.Results)...), fairnessRatios(rep.Results)...)
	rep.Ratios = append(rep.Ratios, limitRatios(rep.Results)...)
	rep.Machine.LoadAvgEnd = loadAvg()
	if len(rep.Errors) > 0 {
		return rep, fmt.Errorf("%d scenario(s) failed: %s", len(rep.Errors), strings.Join(rep.Errors, "; "))
	}
	return rep, ctx.Err()
}

func writeJSON(path string, rep *Report) error {
	b, err := json.MarshalIndent(rep, "", "  ")
	if err != nil {
		return fmt.Errorf("encode results: %w", err)
	}
	if err := os.WriteFile(path, append(b, '\n'), 0o644); err != nil {
		return fmt.Errorf("write results: %w", err)
	}
	return nil
}

// loadAvg is the one-minute load average, or 0 when unknown.
func loadAvg() float64 {
	b, err := os.ReadFile("/proc/loadavg")
	if err != nil {
		return 0
	}
	var v float64
	_, _ = fmt.Sscanf(string(b), "%f", &v)
	return v
}
