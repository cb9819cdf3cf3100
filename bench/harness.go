package main

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"log/slog"
	"runtime"
	"sort"
	"strconv"
	"strings"
	"sync/atomic"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/mightyetl/mightyetl/internal/binarytest"
	"github.com/mightyetl/mightyetl/internal/metrics"
	"github.com/mightyetl/mightyetl/internal/pg"
	"github.com/mightyetl/mightyetl/internal/worker"
)

// zeroPayload is the burndown job: a diagnostic job that does nothing.
const zeroPayload = `{"durationMillis":0,"records":[],"failWith":null}`

// benchPrincipal is the principal scope hash of every bench job.
var benchPrincipal = sha("mightyetl-bench-principal")

func sha(s string) string {
	h := sha256.Sum256([]byte(s))
	return hex.EncodeToString(h[:])
}

// harness owns the bench database and a pool on it.
type harness struct {
	o    options
	log  *slog.Logger
	url  string
	pool *pgxpool.Pool
	// notify wakes the outbox relays after inserts, as the intake does.
	notify *pg.OutboxNotifier
	// workerURLParams are extra connection settings (URL query) of the
	// in-process worker's pools; empty for the product defaults.
	workerURLParams string
	// keySeq makes submission keys unique within the run.
	keySeq atomic.Int64
	// bins builds the product binaries (cmd/<name>), each once, into a
	// temporary directory close removes.
	bins binarytest.Builder
	// pristine is set by fresh and cleared when a scenario returns or a
	// limit run used the database: a scenario that needs an empty database
	// may take it as it is instead of re-creating it (takeFresh).
	pristine bool
	// fairFresh is set once the fairness scenario re-created the database
	// (fairReset).
	fairFresh bool
}

func newHarness(ctx context.Context, o options, log *slog.Logger) (*harness, error) {
	h := &harness{o: o, log: log, url: o.DatabaseURL}
	if err := h.fresh(ctx); err != nil {
		return nil, err
	}
	return h, nil
}

func (h *harness) close() {
	if h.pool != nil {
		h.pool.Close()
	}
	_ = h.bins.Close()
}

// drop closes the harness's pool and drops the bench database (fresh
// re-creates it).
func (h *harness) drop(ctx context.Context) error {
	if h.pool != nil {
		h.pool.Close()
		h.pool = nil
	}
	return dropDatabase(ctx, h.url)
}

// fresh drops and re-creates the bench database and migrates it, so every
// scenario starts from an empty schema.
func (h *harness) fresh(ctx context.Context) error {
	if err := h.drop(ctx); err != nil {
		return err
	}
	if err := pg.EnsureDatabase(ctx, h.url, nil); err != nil {
		return fmt.Errorf("ensure database: %w", err)
	}
	if h.o.ExplainSlower > 0 {
		// Profiling aid: the server logs the plan of every statement slower
		// than this (auto_explain), for this database only.
		if err := alterDatabase(ctx, h.url, fmt.Sprintf(
			"SET session_preload_libraries = 'auto_explain'; ALTER DATABASE %%s SET auto_explain.log_min_duration = %d; ALTER DATABASE %%s SET auto_explain.log_analyze = on; ALTER DATABASE %%s SET auto_explain.log_buffers = on",
			h.o.ExplainSlower.Milliseconds())); err != nil {
			return err
		}
	}
	pool, err := pg.NewPool(ctx, h.url, pg.PoolOptions{MaxConns: 8, ApplicationName: "mightyetl-bench"})
	if err != nil {
		return err
	}
	if err := pg.Migrate(ctx, pool); err != nil {
		pool.Close()
		return err
	}
	h.pool = pool
	h.notify = pg.NewOutboxNotifier(pool)
	h.pristine = true
	return nil
}

// takeFresh is fresh unless the database was re-created and nothing has
// used it since (the first scenario of an invocation, or the first run of
// one); either way the caller gets it empty and leaves it not pristine.
func (h *harness) takeFresh(ctx context.Context) error {
	if !h.pristine {
		if err := h.fresh(ctx); err != nil {
			return err
		}
	}
	h.pristine = false
	return nil
}

// dropDatabase drops the database named in url (disconnecting its
// sessions) so that pg.EnsureDatabase creates it empty.
func dropDatabase(ctx context.Context, url string) error {
	cfg, err := pgx.ParseConfig(url)
	if err != nil {
		return fmt.Errorf("parse database url: %w", err)
	}
	name := cfg.Database
	if name == "" || name == "postgres" || name == "template0" || name == "template1" {
		return fmt.Errorf("refusing to drop database %q: give the bench its own database", name)
	}
	admin := cfg.Copy()
	admin.Database = "postgres"
	conn, err := pgx.ConnectConfig(ctx, admin)
	if err != nil {
		return fmt.Errorf("connect to maintenance database: %w", err)
	}
	defer conn.Close(context.WithoutCancel(ctx))
	if _, err := conn.Exec(ctx, "DROP DATABASE IF EXISTS "+pgx.Identifier{name}.Sanitize()+" WITH (FORCE)"); err != nil {
		return fmt.Errorf("drop database: %w", err)
	}
	return nil
}

// alterDatabase runs "ALTER DATABASE <db> " + each ;-separated clause of
// settings (with %s standing for the quoted name) from the maintenance database.
func alterDatabase(ctx context.Context, url, settings string) error {
	cfg, err := pgx.ParseConfig(url)
	if err != nil {
		return err
	}
	admin := cfg.Copy()
	admin.Database = "postgres"
	conn, err := pgx.ConnectConfig(ctx, admin)
	if err != nil {
		return err
	}
	defer conn.Close(context.WithoutCancel(ctx))
	q := pgx.Identifier{cfg.Database}.Sanitize()
	for i, clause := range strings.Split(settings, ";") {
		clause = strings.TrimSpace(clause)
		var stmt string
		if i == 0 {
			stmt = "ALTER DATABASE " + q + " " + clause
		} else {
			stmt = strings.ReplaceAll(clause, "%s", q)
		}
		if _, err := conn.Exec(ctx, stmt); err != nil {
			return fmt.Errorf("configure bench database: %w", err)
		}
	}
	return nil
}

func (h *harness) serverVersion(ctx context.Context) string {
	var v string
	if err := h.pool.QueryRow(ctx, "SHOW server_version").Scan(&v); err != nil {
		return "unknown"
	}
	return v
}

func (h *harness) runScenario(ctx context.Context, name string) ([]Result, error) {
	defer func() { h.pristine = false }()
	switch name {
	case "burndown":
		return h.burndownAll(ctx)
	case "continuous":
		r, err := h.continuous(ctx)
		return []Result{r}, err
	case "pickup":
		return h.pickup(ctx)
	case "crash":
		return h.crash(ctx)
	case "scale":
		r, err := h.scale(ctx)
		return []Result{r}, err
	case "resources":
		return h.resources(ctx)
	case "intake":
		return h.intake(ctx)
	case "intake-binary":
		return h.intakeBinary(ctx)
	case "lockprobe":
		return h.lockProbe(ctx)
	case "fleet":
		return h.fleet(ctx)
	case "large":
		return h.large(ctx)
	case "fairness":
		return h.fairness(ctx)
	case "limit":
		return h.limit(ctx)
	}
	return nil, fmt.Errorf("unknown scenario %q", name)
}

// bulkInsertSQL inserts PENDING diagnostic jobs $4..$5 in one statement,
// straight into the table (bypassing the per-job API and its job_available
// outbox rows, which a pre-loaded backlog would not have). Each row gets a
// unique submission key hash and the true SHA-256 digest of its payload, so
// the worker's integrity check passes.
//
// Job ids are UUIDv7 (48-bit millisecond time, then random bits), as the
// product's InsertJobs draws them, and every job gets its claim-queue row
// with its owner slot and priority, and the owner its etl_claim_owners row
// due by its first job (migration 00025), as pg.InsertJobs writes them: the
// fair claim serves the backlog through the owner's index, not only through
// the oldest share that takes rows without an owner slot.
var bulkInsertSQL = `
WITH ins AS (
    INSERT INTO etl_job_records (job_record_id, job_kind, principal_scope_hash, submission_key_hash,
                                 request_digest, request_payload, max_attempts)
    SELECT ` + uuidV7SQL + `,
           'diagnostic', decode($1, 'hex'),
           sha256(convert_to($2 || ':' || g, 'UTF8')),
           sha256(convert_to($3, 'UTF8')), $3, 3
    FROM generate_series($4::bigint, $5::bigint) AS g
    RETURNING job_record_id, available_at, job_priority, principal_scope_hash
), queued AS (
    INSERT INTO etl_job_claim_queue (job_record_id, claimable_at, owner_slot, priority)
    SELECT job_record_id, available_at, ` + pg.OwnerSlotOf("principal_scope_hash") + `, job_priority FROM ins
)
` + ownersDueSQL

// uuidV7SQL draws a UUIDv7 in SQL (the database clock's milliseconds, then
// random bits), as the product's InsertJobs draws job ids in Go.
const uuidV7SQL = `encode(set_bit(set_bit(overlay(uuid_send(gen_random_uuid())
                    PLACING substring(int8send((extract(epoch FROM clock_timestamp()) * 1000)::bigint) FROM 3)
                    FROM 1 FOR 6), 52, 1), 53, 1), 'hex')::uuid`

// ownersDueSQL ends a bulk insert whose CTE ins returned the new jobs'
// available_at and principal_scope_hash: each owner is due by its earliest
// new job, as pg.InsertJobs makes it (migration 00025).
var ownersDueSQL = `INSERT INTO etl_claim_owners AS o (owner_slot, due_at)
SELECT ` + pg.OwnerSlotOf("principal_scope_hash") + `, min(available_at) FROM ins GROUP BY 1
ON CONFLICT (owner_slot) DO UPDATE
SET due_at = least(o.due_at, excluded.due_at), idle_visits = 0, updated_at = clock_timestamp()`

// bulkInsert inserts n PENDING diagnostic jobs with payload, in statements
// of at most 250,000 rows, then VACUUM ANALYZEs the table so the measured
// run starts from settled statistics and visibility.
func (h *harness) bulkInsert(ctx context.Context, n int, payload string) (time.Duration, error) {
	start := time.Now()
	tag := "bench-" + uuid.NewString()
	const chunk = 250_000
	for lo := 1; lo <= n; lo += chunk {
		hi := min(lo+chunk-1, n)
		if _, err := h.pool.Exec(ctx, bulkInsertSQL, benchPrincipal, tag, payload, lo, hi); err != nil {
			return 0, fmt.Errorf("bulk insert jobs: %w", err)
		}
	}
	if _, err := h.pool.Exec(ctx, "VACUUM ANALYZE etl_job_records, etl_job_claim_queue"); err != nil {
		return 0, fmt.Errorf("vacuum analyze: %w", err)
	}
	return time.Since(start), nil
}

// insertJobs stores jobs as the intake's group commit does: pg.InsertJobs,
// then the relays' wake-up (migration 00013).
func (h *harness) insertJobs(ctx context.Context, jobs []pg.NewJob) error {
	_, err := pg.InsertJobs(ctx, h.pool, jobs)
	h.notify.Kick()
	return err
}

// newJobs builds n jobs for pg.InsertJobs with unique keys.
func (h *harness) newJobs(n int, payload string) []pg.NewJob {
	jobs := make([]pg.NewJob, n)
	digest := sha(payload)
	for i := range jobs {
		// A time-ordered UUIDv7, as the intake draws them (a random v4 id
		// scatters the primary-key inserts).
		seq := h.keySeq.Add(1)
		jobs[i] = pg.NewJob{JobID: uuid.Must(uuid.NewV7()), Kind: pg.KindDiagnostic, PrincipalScopeHash: benchPrincipal,
			SubmissionKeyHash: sha("bench-key-" + strconv.FormatInt(seq, 10) + "-" + uuid.NewString()),
			RequestDigest:     digest, Payload: payload, MaxAttempts: 3}
	}
	return jobs
}

// statusCounts returns the number of jobs per status.
func (h *harness) statusCounts(ctx context.Context) (map[string]int, error) {
	rows, err := h.pool.Query(ctx, `SELECT job_status, count(*) FROM etl_job_records GROUP BY 1`)
	if err != nil {
		return nil, fmt.Errorf("count jobs: %w", err)
	}
	out, err := pgx.CollectRows(rows, func(r pgx.CollectableRow) (struct {
		s string
		n int
	}, error) {
		var v struct {
			s string
			n int
		}
		err := r.Scan(&v.s, &v.n)
		return v, err
	})
	if err != nil {
		return nil, fmt.Errorf("count jobs: %w", err)
	}
	m := map[string]int{}
	for _, v := range out {
		m[v.s] = v.n
	}
	return m, nil
}

func (h *harness) count(ctx context.Context, sql string, args ...any) (int64, error) {
	var n int64
	if err := h.pool.QueryRow(ctx, sql, args...).Scan(&n); err != nil {
		return 0, fmt.Errorf("count: %w", err)
	}
	return n, nil
}

// rig is one in-process worker with its own pools and registry.
type rig struct {
	w           *worker.Worker
	exec, renew *pgxpool.Pool
	reg         *prometheus.Registry
	m           *metrics.Worker
	execConns   int32
}

// defaultExecConns sizes the execution pool exactly as cmd/worker does.
func defaultExecConns(concurrency int) int32 {
	return int32(max(4, min(concurrency+2, 4*runtime.GOMAXPROCS(0)+4)))
}

// startWorker builds and starts the real worker. execConns 0 sizes the pool
// like cmd/worker; handlers nil means worker.DefaultHandlers.
func (h *harness) startWorker(ctx context.Context, cfg worker.Config, handlers map[string]worker.Handler, execConns int32) (*rig, error) {
	if cfg.Concurrency == 0 {
		cfg.Concurrency = 8
	}
	if execConns == 0 {
		execConns = defaultExecConns(cfg.Concurrency)
	}
	if handlers == nil {
		handlers = worker.DefaultHandlers(1000)
	}
	url := h.url
	if h.workerURLParams != "" {
		sep := "?"
		if strings.Contains(url, "?") {
			sep = "&"
		}
		url += sep + h.workerURLParams
	}
	exec, err := pg.NewPool(ctx, url, pg.PoolOptions{MaxConns: execConns, ApplicationName: "mightyetl-worker", PinnedPlans: true})
	if err != nil {
		return nil, err
	}
	renew, err := pg.NewPool(ctx, url, pg.PoolOptions{MaxConns: 2, MinConns: 1, ApplicationName: "mightyetl-renewer", PinnedPlans: true})
	if err != nil {
		exec.Close()
		return nil, err
	}
	reg := prometheus.NewRegistry()
	m := metrics.NewWorker(reg)
	w := worker.New(cfg, exec, renew, handlers, m, nil)
	if err := w.Start(ctx); err != nil {
		exec.Close()
		renew.Close()
		return nil, err
	}
	return &rig{w: w, exec: exec, renew: renew, reg: reg, m: m, execConns: execConns}, nil
}

func (r *rig) stop(ctx context.Context) error {
	err := r.w.Stop(ctx)
	r.exec.Close()
	r.renew.Close()
	return err
}

func (r *rig) outcomes(label string) float64 {
	return testutil.ToFloat64(r.m.Outcomes.WithLabelValues(label))
}

// waitUntil polls cond every interval until it holds, ctx ends or timeout.
func waitUntil(ctx context.Context, timeout, interval time.Duration, what string, cond func() (bool, error)) error {
	deadline := time.Now().Add(timeout)
	for {
		ok, err := cond()
		if err != nil {
			return err
		}
		if ok {
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("timed out after %s waiting for %s", timeout, what)
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(interval):
		}
	}
}

// percentiles returns p50/p90/p99/max (and mean) of ds in milliseconds.
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

func itoa(n int) string { return strconv.Itoa(n) }
