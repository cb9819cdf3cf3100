package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"math/rand/v2"
	"os"
	"sort"
	"strconv"
	"strings"
	"sync"
	"text/tabwriter"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/mightyetl/mightyetl/internal/lease"
	"github.com/mightyetl/mightyetl/internal/pg"
	"github.com/mightyetl/mightyetl/migrations"
)

// The lockprobe scenario measures how long each migration of an upgrade
// blocks the fleet (issue 30, docs/operations/upgrades.md): on a fresh
// database migrated to a start version and populated with n jobs
// (lockprobe_populate.go), it applies each later migration one at a time
// while three probes, each on a connection of its own, issue every
// interval the product's own statements:
//
//   - claim: lease.ClaimJobs of one job, on a pool set up as the worker's
//     execution pool (pinned plans);
//   - renew: lease.Renew of the probe's 8 leases, on a pool set up as the
//     worker's renewal pool (pinned plans) but without its lock_timeout, so
//     a block shows as its whole length instead of a 55P03;
//   - status: pg.GetJob of a random job with its owner, as the intake's
//     GET /api/etl/jobs/{id} (from a schema older than this binary's
//     minimum, the same read projected to job_status: GetJob reads newer
//     columns).
//
// A probe statement's wait is its start-to-finish latency; a statement
// blocked longer than the interval delays the probe's next one, so each
// block is measured once, whole. Per migration the result is the
// migration's own duration and, per kind, the longest statement whose run
// overlapped it. The floor (issue 30): no migration in the upgrade path
// blocks a probe statement for more than lockProbeFloor.
//
// The historic mode starts at schema 13 and applies 00014..00016, the
// migrations that are not online (they predate the rules), to show what
// they do at the same size. 00014 refuses to run while any job holds a live
// lease, so there the data set's RUNNING jobs hold expired leases, the claim
// probe takes leases of 1 µs and the renewal probe presents those (it
// extends nothing, but takes the same locks); the status probe is a
// primary-key read of job_status (GetJob's owner predicate is bytea from
// 00014 on), and the probes use the extended protocol without cached
// statements, as the column types change under them.

// previousReleaseSchema is the schema version of the previous release
// (v0.1.0, compat/previous-release): where an upgrade starts. Each release
// sets it to its own schema.
const previousReleaseSchema = 21

// lockProbeFloor is the longest a migration of the upgrade path may block
// a claim, a renewal or a status read.
const lockProbeFloor = time.Second

// historicFrom and historicTo bound the historic mode's migrations.
const historicFrom, historicTo = 13, 16

// lockProbeKinds are the probe statements, in table order.
var lockProbeKinds = []string{"claim", "renew", "status"}

// lockProbeOptions are the scenario's settings.
type lockProbeOptions struct {
	// From is the schema the database is populated at (0: 21, or 13 in the
	// historic mode); To the last migration applied (0: the newest embedded,
	// or 16 in the historic mode).
	From int64 `json:"from"`
	To   int64 `json:"to"`
	// Jobs is the data set's size (default 1,000,000, -quick 20,000).
	Jobs int `json:"jobs"`
	// Interval is how often each probe issues its statement (default 50ms).
	Interval time.Duration `json:"interval_ns"`
	// Historic starts at schema 13 and applies 00014..00016.
	Historic bool `json:"historic"`
	// Settle is the pause before the first migration (the probes' baseline
	// window) and between two migrations (default 1s).
	Settle time.Duration `json:"settle_ns"`
}

// probeSample is one probe statement's run.
type probeSample struct {
	start, end time.Time
	failed     bool
}

// probeLog collects the probes' samples.
type probeLog struct {
	mu      sync.Mutex
	samples map[string][]probeSample
	errs    map[string]error // the first error of each kind
	// classes counts each kind's failures by errorClass.
	classes map[string]map[string]int
}

func (l *probeLog) add(kind string, s probeSample, err error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.samples[kind] = append(l.samples[kind], s)
	if err != nil && l.errs[kind] == nil {
		l.errs[kind] = err
	}
	if err != nil {
		if l.classes == nil {
			l.classes = map[string]map[string]int{}
		}
		if l.classes[kind] == nil {
			l.classes[kind] = map[string]int{}
		}
		l.classes[kind][errorClass(err)]++
	}
}

// window returns, for kind, the longest run of a statement that overlapped
// [from, to], how many statements overlapped it and how many failed.
func (l *probeLog) window(kind string, from, to time.Time) (longest time.Duration, n, failed int) {
	l.mu.Lock()
	defer l.mu.Unlock()
	for _, s := range l.samples[kind] {
		if s.end.Before(from) || s.start.After(to) {
			continue
		}
		n++
		if s.failed {
			failed++
		}
		longest = max(longest, s.end.Sub(s.start))
	}
	return longest, n, failed
}

// migrationNames maps each embedded migration's version to its file name
// without .sql.
func migrationNames() (map[int64]string, int64, error) {
	files, err := fs.Glob(migrations.FS, "*.sql")
	if err != nil {
		return nil, 0, err
	}
	names := map[int64]string{}
	var newest int64
	for _, f := range files {
		num, _, ok := strings.Cut(f, "_")
		v, err := strconv.ParseInt(num, 10, 64)
		if !ok || err != nil {
			continue
		}
		names[v] = strings.TrimSuffix(f, ".sql")
		newest = max(newest, v)
	}
	return names, newest, nil
}

// resolve returns the scenario's start and end versions: the options'
// own, else the defaults of the mode, checked against the newest migration.
func (o lockProbeOptions) resolve(newest int64) (from, to int64, err error) {
	from, to = o.From, o.To
	if from == 0 {
		from = previousReleaseSchema
		if o.Historic {
			from = historicFrom
		}
	}
	if to == 0 {
		to = newest
		if o.Historic {
			to = historicTo
		}
	}
	switch {
	case from < historicFrom:
		return 0, 0, fmt.Errorf("lockprobe: start version %d: the populate SQL needs schema %d or later", from, historicFrom)
	case to > newest:
		return 0, 0, fmt.Errorf("lockprobe: end version %d: the newest migration is %d", to, newest)
	case from > to:
		return 0, 0, fmt.Errorf("lockprobe: start version %d is after end version %d", from, to)
	}
	return from, to, nil
}

// lockProbe runs the scenario and drops its populated database at the end
// (the harness gets a fresh, fully migrated empty one back).
func (h *harness) lockProbe(ctx context.Context) (res []Result, err error) {
	o := h.o.LockProbe
	names, newest, err := migrationNames()
	if err != nil {
		return nil, err
	}
	from, to, err := o.resolve(newest)
	if err != nil {
		return nil, err
	}
	defer func() {
		if ferr := h.fresh(context.WithoutCancel(ctx)); ferr != nil && err == nil {
			err = fmt.Errorf("lockprobe: drop the populated database: %w", ferr)
		}
	}()
	if err := h.drop(ctx); err != nil {
		return nil, err
	}
	if err := pg.EnsureDatabase(ctx, h.url, nil); err != nil {
		return nil, fmt.Errorf("ensure database: %w", err)
	}
	pool, err := pg.NewPool(ctx, h.url, pg.PoolOptions{MaxConns: 4, ApplicationName: "mightyetl-bench-lockprobe"})
	if err != nil {
		return nil, err
	}
	h.pool = pool
	if err := pg.MigrateTo(ctx, pool, from); err != nil {
		return nil, fmt.Errorf("lockprobe: migrate to %d: %w", from, err)
	}
	fmt.Fprintf(os.Stderr, "bench: lockprobe: populating %d jobs at schema %d\n", o.Jobs, from)
	st, err := h.populate(ctx, o.Jobs, from, !o.Historic)
	if err != nil {
		return nil, err
	}
	summary := Result{System: "mightyetl", Scenario: "lockprobe", Variant: "summary", Metrics: map[string]float64{
		"jobs": float64(o.Jobs), "pending_jobs": float64(st.pending), "running_jobs": float64(st.running),
		"populate_s": st.took.Seconds(), "job_table_mib": st.jobTableMiB, "database_mib": st.dbMiB,
		"processed_rows": float64(st.processedRows), "ledger_rows": float64(st.ledgerRows),
		"outbox_rows": float64(st.outboxes), "from_version": float64(from), "to_version": float64(to),
		"interval_ms": ms(o.Interval), "floor_ms": ms(lockProbeFloor),
	}, Settings: map[string]string{"mode": map[bool]string{false: "upgrade path", true: "historic"}[o.Historic]}}

	p, err := h.startProbes(ctx, o, from)
	if err != nil {
		return []Result{summary}, err
	}
	defer p.stop()
	wait := func(d time.Duration) error {
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(d):
			return nil
		}
	}
	baseStart := time.Now()
	if err := wait(o.Settle); err != nil {
		return []Result{summary}, err
	}
	for _, k := range lockProbeKinds {
		longest, _, _ := p.log.window(k, baseStart, time.Now())
		summary.Metrics["baseline_"+k+"_max_ms"] = ms(longest)
	}
	migrate, err := pg.NewPool(ctx, h.url, pg.PoolOptions{MaxConns: 2, ApplicationName: "mightyetl-bench-lockprobe-migrate"})
	if err != nil {
		return []Result{summary}, err
	}
	defer migrate.Close()
	var worst time.Duration
	var worstName string
	for v := from + 1; v <= to; v++ {
		name, ok := names[v]
		if !ok {
			continue
		}
		fmt.Fprintf(os.Stderr, "bench: lockprobe: applying %s\n", name)
		t0 := time.Now()
		merr := pg.MigrateTo(ctx, migrate, v)
		t1 := time.Now()
		// The probes' statements that were blocked end after the commit.
		if err := wait(o.Settle); err != nil {
			return append(res, summary), err
		}
		r := Result{System: "mightyetl", Scenario: "lockprobe", Variant: name,
			Metrics: map[string]float64{"migration_s": t1.Sub(t0).Seconds()}}
		var most time.Duration
		for _, k := range lockProbeKinds {
			longest, n, failed := p.log.window(k, t0, t1)
			r.Metrics[k+"_wait_max_ms"] = ms(longest)
			r.Metrics[k+"_statements"] = float64(n)
			r.Metrics[k+"_failed"] = float64(failed)
			most = max(most, longest)
		}
		r.Metrics["max_wait_ms"] = ms(most)
		if most > lockProbeFloor {
			r.Notes = append(r.Notes, fmt.Sprintf("blocks the fleet for %s, over the %s floor", most.Round(time.Millisecond), lockProbeFloor))
		}
		if most > worst {
			worst, worstName = most, name
		}
		res = append(res, r)
		if merr != nil {
			summary.Metrics["max_wait_ms"] = ms(worst)
			return append(res, summary), fmt.Errorf("lockprobe: %s: %w", name, merr)
		}
	}
	p.stop()
	summary.Metrics["max_wait_ms"] = ms(worst)
	switch {
	case worstName == "":
		summary.Notes = append(summary.Notes, "no migration applied")
	case worst > lockProbeFloor:
		summary.Notes = append(summary.Notes, fmt.Sprintf("FLOOR EXCEEDED: %s blocks a probe statement for %s (floor %s)",
			worstName, worst.Round(time.Millisecond), lockProbeFloor))
	default:
		summary.Notes = append(summary.Notes, fmt.Sprintf("floor met: the longest wait, %s during %s, is under %s",
			worst.Round(time.Millisecond), worstName, lockProbeFloor))
	}
	for _, k := range lockProbeKinds {
		longest, n, failed := p.log.window(k, time.Time{}, time.Now())
		summary.Metrics[k+"_statements_total"] = float64(n)
		summary.Metrics[k+"_failed_total"] = float64(failed)
		summary.Metrics[k+"_wait_max_total_ms"] = ms(longest)
		for class, n := range p.log.classes[k] {
			summary.Metrics[k+"_failed_"+strings.ReplaceAll(strings.ToLower(class), " ", "_")] = float64(n)
		}
		if e := p.log.errs[k]; e != nil {
			// Error classes only, never the text (it may carry SQL).
			summary.Notes = append(summary.Notes, fmt.Sprintf("%s probe failed at least once (%s)", k, errorClass(e)))
		}
	}
	return append(res, summary), nil
}

// errorClass is err's SQLSTATE, or "client" for an error of no statement.
func errorClass(err error) string {
	var pgErr interface{ SQLState() string }
	if errors.As(err, &pgErr) {
		return "SQLSTATE " + pgErr.SQLState()
	}
	return "client"
}

// probes are the running probe goroutines and their pools.
type probes struct {
	log    *probeLog
	cancel context.CancelFunc
	wg     sync.WaitGroup
	pools  []*pgxpool.Pool
	once   sync.Once
}

// stop ends the probes and closes their pools; safe to call twice.
func (p *probes) stop() {
	p.once.Do(func() {
		p.cancel()
		p.wg.Wait()
		for _, pl := range p.pools {
			pl.Close()
		}
	})
}

// startProbes opens the probes' pools, takes the renewal probe's leases,
// reads the status probe's sample of jobs and starts the three loops.
func (h *harness) startProbes(ctx context.Context, o lockProbeOptions, schema int64) (*probes, error) {
	url := h.url
	if o.Historic {
		// Column types change under the statements (00014): no statement
		// is kept prepared across them.
		sep := "?"
		if strings.Contains(url, "?") {
			sep = "&"
		}
		url += sep + "default_query_exec_mode=describe_exec"
	}
	pctx, cancel := context.WithCancel(context.WithoutCancel(ctx))
	p := &probes{log: &probeLog{samples: map[string][]probeSample{}, errs: map[string]error{}}, cancel: cancel}
	open := func(name string, pinned bool) (*pgxpool.Pool, error) {
		pl, err := pg.NewPool(ctx, url, pg.PoolOptions{MaxConns: 1, MinConns: 1,
			ApplicationName: "mightyetl-bench-lockprobe-" + name, PinnedPlans: pinned, StatementTimeout: 5 * time.Minute})
		if err == nil {
			p.pools = append(p.pools, pl)
		}
		return pl, err
	}
	claimPool, err := open("claim", true)
	if err != nil {
		p.stop()
		return nil, err
	}
	renewPool, err := open("renew", true)
	if err != nil {
		p.stop()
		return nil, err
	}
	statusPool, err := open("status", false)
	if err != nil {
		p.stop()
		return nil, err
	}
	leaseFor := 10 * time.Minute
	if o.Historic {
		leaseFor = time.Microsecond // 00014 refuses live leases
	}
	const renewOwner, claimOwner = "lockprobe-renewer-1", "lockprobe-claimer-1"
	held, err := lease.ClaimJobs(ctx, renewPool, lease.ClaimParams{OwnerID: renewOwner, Limit: 8, LeaseDuration: leaseFor})
	if err != nil {
		p.stop()
		return nil, fmt.Errorf("lockprobe: take the renewal probe's leases: %w", err)
	}
	if len(held.Claimed) == 0 {
		p.stop()
		return nil, errors.New("lockprobe: take the renewal probe's leases: no job to claim")
	}
	refs := make([]lease.Ref, len(held.Claimed))
	for i, c := range held.Claimed {
		refs[i] = c.Ref
	}
	owner := "encode(principal_scope_hash, 'hex')"
	if schema < 14 {
		owner = "principal_scope_hash::text"
	}
	// About 1,000 jobs evenly spread over the id range (and so over time
	// and states), the same ones on every run of a size.
	rows, err := statusPool.Query(ctx, `SELECT job_record_id, `+owner+` FROM (
		SELECT job_record_id, principal_scope_hash, row_number() OVER (ORDER BY job_record_id) AS rn
		FROM etl_job_records) s
		WHERE rn % greatest((SELECT count(*) FROM etl_job_records) / 1000, 1) = 0`)
	if err != nil {
		p.stop()
		return nil, fmt.Errorf("lockprobe: sample jobs: %w", err)
	}
	type job struct {
		id    uuid.UUID
		owner string
	}
	var sample []job
	for rows.Next() {
		var j job
		if err := rows.Scan(&j.id, &j.owner); err != nil {
			rows.Close()
			p.stop()
			return nil, fmt.Errorf("lockprobe: sample jobs: %w", err)
		}
		sample = append(sample, j)
	}
	rows.Close()
	if err := rows.Err(); err != nil {
		p.stop()
		return nil, fmt.Errorf("lockprobe: sample jobs: %w", err)
	}
	if len(sample) == 0 {
		p.stop()
		return nil, errors.New("lockprobe: sample jobs: the table is empty")
	}
	status := func(ctx context.Context) error {
		j := sample[rand.IntN(len(sample))]
		_, err := pg.GetJob(ctx, statusPool, j.owner, j.id)
		return err
	}
	if o.From < pg.MinSchemaVersion && !o.Historic {
		// This binary's GetJob reads columns the starting schema lacks
		// (from 00025 on, job_priority): the same owner-scoped primary-key
		// read, projected to a column every schema has.
		status = func(ctx context.Context) error {
			var s string
			j := sample[rand.IntN(len(sample))]
			return statusPool.QueryRow(ctx, `SELECT j.job_status FROM etl_job_records j
				WHERE j.job_record_id = $1 AND j.principal_scope_hash = decode($2, 'hex')`, j.id, j.owner).Scan(&s)
		}
	}
	if o.Historic {
		status = func(ctx context.Context) error {
			var s string
			return statusPool.QueryRow(ctx, `SELECT job_status FROM etl_job_records WHERE job_record_id = $1`,
				sample[rand.IntN(len(sample))].id).Scan(&s)
		}
	}
	loops := map[string]func(context.Context) error{
		"claim": func(ctx context.Context) error {
			_, err := lease.ClaimJobs(ctx, claimPool, lease.ClaimParams{OwnerID: claimOwner, Limit: 1, LeaseDuration: leaseFor})
			return err
		},
		"renew": func(ctx context.Context) error {
			_, err := lease.Renew(ctx, renewPool, renewOwner, refs, leaseFor)
			return err
		},
		"status": status,
	}
	for _, kind := range lockProbeKinds {
		// One run of each before the loops start: a statement that does not
		// work at this schema fails the scenario here, and every probe has
		// a measurement.
		start := time.Now()
		err := loops[kind](ctx)
		p.log.add(kind, probeSample{start: start, end: time.Now(), failed: err != nil}, err)
		if err != nil {
			p.stop()
			return nil, fmt.Errorf("lockprobe: first %s probe: %w", kind, err)
		}
	}
	for kind, fn := range loops {
		p.wg.Add(1)
		go func() {
			defer p.wg.Done()
			runProbe(pctx, o.Interval, kind, fn, p.log)
		}()
	}
	return p, nil
}

// runProbe issues fn every interval until ctx ends, recording each run. A
// run longer than the interval is followed at once by the next.
func runProbe(ctx context.Context, interval time.Duration, kind string, fn func(context.Context) error, log *probeLog) {
	t := time.NewTicker(interval)
	defer t.Stop()
	for {
		start := time.Now()
		err := fn(ctx)
		if ctx.Err() != nil {
			return // the run the stop interrupted is not a measurement
		}
		log.add(kind, probeSample{start: start, end: time.Now(), failed: err != nil}, err)
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
	}
}

// printLockProbeTable writes the lockprobe results as one row per
// migration: its duration and the longest wait of each probe.
func printLockProbeTable(w io.Writer, rs []Result) {
	var rows []Result
	var summary *Result
	for i, r := range rs {
		if r.Scenario != "lockprobe" {
			continue
		}
		if r.Variant == "summary" {
			summary = &rs[i]
			continue
		}
		rows = append(rows, r)
	}
	if len(rows) == 0 {
		return
	}
	sort.SliceStable(rows, func(i, j int) bool { return rows[i].Variant < rows[j].Variant })
	fmt.Fprintln(w)
	if summary != nil {
		m := summary.Metrics
		fmt.Fprintf(w, "lockprobe (%s): %d jobs (job table %.0f MiB, database %.0f MiB), schema %d -> %d, probes every %s\n",
			summary.Settings["mode"], int64(m["jobs"]), m["job_table_mib"], m["database_mib"], int64(m["from_version"]),
			int64(m["to_version"]), time.Duration(m["interval_ms"]*float64(time.Millisecond)))
	}
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "MIGRATION\tDURATION s\tMAX CLAIM WAIT ms\tMAX RENEW WAIT ms\tMAX STATUS WAIT ms")
	if summary != nil {
		m := summary.Metrics
		fmt.Fprintf(tw, "(baseline, no migration)\t\t%.1f\t%.1f\t%.1f\n", m["baseline_claim_max_ms"], m["baseline_renew_max_ms"], m["baseline_status_max_ms"])
	}
	for _, r := range rows {
		m := r.Metrics
		fmt.Fprintf(tw, "%s\t%.3f\t%.1f\t%.1f\t%.1f\n", r.Variant, m["migration_s"], m["claim_wait_max_ms"], m["renew_wait_max_ms"], m["status_wait_max_ms"])
	}
	_ = tw.Flush()
	if summary != nil {
		for _, n := range summary.Notes {
			fmt.Fprintf(w, "lockprobe: %s\n", n)
		}
	}
}
