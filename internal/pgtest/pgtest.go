// Package pgtest gives tests an isolated, migrated PostgreSQL database of
// their own on a real server.
//
// The server comes from TEST_DATABASE_URL when set (a URL to any database of
// the server; the maintenance database "postgres" is used to create others),
// otherwise from a testcontainers-go PostgreSQL container when a Docker engine
// answers. With neither, tests skip locally and FAIL when CI=true, so a CI run
// can never pass by skipping its database tests.
//
// Each call of NewDatabase clones a template database that holds the current
// migrations (built once per migration set and server), so a test costs one
// CREATE DATABASE and packages can run in parallel.
package pgtest

import (
	"context"
	"crypto/rand"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"io/fs"
	"net/url"
	"os"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/mightyetl/mightyetl/internal/pg"
	"github.com/mightyetl/mightyetl/migrations"
	"github.com/testcontainers/testcontainers-go"
	tcpostgres "github.com/testcontainers/testcontainers-go/modules/postgres"
	"github.com/testcontainers/testcontainers-go/wait"
)

var (
	serverOnce sync.Once
	serverURL  string
	serverErr  error
)

// LocalURL is where a developer machine and CI run PostgreSQL by default.
const LocalURL = "postgres://postgres@127.0.0.1:5432/postgres?sslmode=disable"

// ServerURL returns a URL of the test server's maintenance database:
// TEST_DATABASE_URL when set, else the local server on its default port
// (LocalURL) when it answers, else a testcontainers-go PostgreSQL when a
// Docker engine answers. With none of them the test FAILS with one line: a
// database test never passes by skipping.
func ServerURL(t testing.TB) string {
	t.Helper()
	serverOnce.Do(func() {
		serverURL, serverErr = resolveServer(os.Getenv("TEST_DATABASE_URL"), probeLocal, startContainer)
	})
	if serverErr != nil {
		t.Fatalf("pgtest: no PostgreSQL for tests (set TEST_DATABASE_URL, start one on 127.0.0.1:5432 or a Docker engine): %v", serverErr)
	}
	return serverURL
}

// resolveServer is ServerURL's choice: env (TEST_DATABASE_URL) when set,
// else LocalURL when probe answers, else container(); an error names every
// source that was tried.
func resolveServer(env string, probe func() error, container func() (string, error)) (string, error) {
	if env != "" {
		return withDatabase(env, "postgres")
	}
	localErr := probe()
	if localErr == nil {
		return LocalURL, nil
	}
	u, err := container()
	if err != nil {
		return "", fmt.Errorf("TEST_DATABASE_URL unset; local server: %v; %w", localErr, err)
	}
	return u, nil
}

// probeLocal connects to LocalURL once, briefly.
func probeLocal() error {
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Second)
	defer cancel()
	conn, err := pgx.Connect(ctx, LocalURL)
	if err != nil {
		return err
	}
	return conn.Close(ctx)
}

func startContainer() (string, error) {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	if _, err := testcontainers.NewDockerProvider(); err != nil {
		return "", fmt.Errorf("no docker engine: %w", err)
	}
	c, err := tcpostgres.Run(ctx, "postgres:15-alpine",
		tcpostgres.WithDatabase("postgres"),
		tcpostgres.WithUsername("postgres"),
		tcpostgres.WithPassword("postgres"),
		testcontainers.WithWaitStrategy(wait.ForLog("database system is ready to accept connections").WithOccurrence(2).WithStartupTimeout(time.Minute)),
	)
	if err != nil {
		return "", fmt.Errorf("start postgres container: %w", err)
	}
	return c.ConnectionString(ctx, "sslmode=disable")
}

func withDatabase(raw, name string) (string, error) {
	u, err := url.Parse(raw)
	if err != nil {
		return "", fmt.Errorf("parse TEST_DATABASE_URL: %w", err)
	}
	u.Path = "/" + name
	return u.String(), nil
}

// migrationsHash names the template after the exact migration set.
func migrationsHash() string {
	h := sha256.New()
	_ = fs.WalkDir(migrations.FS, ".", func(p string, d fs.DirEntry, err error) error {
		if err != nil || d.IsDir() {
			return err
		}
		b, err := fs.ReadFile(migrations.FS, p)
		if err != nil {
			return err
		}
		fmt.Fprintf(h, "%s\x00%d\x00", p, len(b))
		h.Write(b)
		return nil
	})
	return hex.EncodeToString(h.Sum(nil))[:16]
}

var templateMu sync.Mutex

// ensureTemplate builds the migrated template database once per server and
// migration set, serialised across test processes by an advisory lock. It is
// built under a temporary name and renamed, so a half-built template is never
// cloned.
func ensureTemplate(ctx context.Context, admin *pgx.Conn) (string, error) {
	templateMu.Lock()
	defer templateMu.Unlock()
	name := "mightyetl_template_" + migrationsHash()
	if _, err := admin.Exec(ctx, "SELECT pg_advisory_lock(hashtext('mightyetl_pgtest_template'))"); err != nil {
		return "", fmt.Errorf("lock template: %w", err)
	}
	defer func() {
		_, _ = admin.Exec(context.WithoutCancel(ctx), "SELECT pg_advisory_unlock(hashtext('mightyetl_pgtest_template'))")
	}()
	var exists bool
	if err := admin.QueryRow(ctx, "SELECT EXISTS (SELECT 1 FROM pg_database WHERE datname = $1)", name).Scan(&exists); err != nil {
		return "", fmt.Errorf("look up template: %w", err)
	}
	if exists {
		return name, nil
	}
	building := name + "_building"
	_, _ = admin.Exec(ctx, "DROP DATABASE IF EXISTS "+pgx.Identifier{building}.Sanitize()+" WITH (FORCE)")
	if _, err := admin.Exec(ctx, "CREATE DATABASE "+pgx.Identifier{building}.Sanitize()); err != nil {
		return "", fmt.Errorf("create template: %w", err)
	}
	u, err := withDatabase(admin.Config().ConnString(), building)
	if err != nil {
		return "", err
	}
	pool, err := pg.NewPool(ctx, u, pg.PoolOptions{MaxConns: 2})
	if err != nil {
		return "", err
	}
	err = pg.Migrate(ctx, pool)
	pool.Close()
	if err != nil {
		return "", err
	}
	if _, err := admin.Exec(ctx, "ALTER DATABASE "+pgx.Identifier{building}.Sanitize()+" RENAME TO "+pgx.Identifier{name}.Sanitize()); err != nil {
		return "", fmt.Errorf("publish template: %w", err)
	}
	return name, nil
}

// Options adjusts NewDatabase.
type Options struct {
	// Empty skips migrations: the database starts empty (for migration tests).
	Empty bool
	// MaxConns sizes the returned pool; zero means 8.
	MaxConns int32
}

// NewDatabase creates a fresh database for this test and returns a pool on it
// and its URL. The database is migrated to the newest version unless
// opts.Empty. It is dropped when the test ends.
func NewDatabase(t testing.TB, opts ...Options) (*pgxpool.Pool, string) {
	t.Helper()
	var o Options
	if len(opts) > 0 {
		o = opts[0]
	}
	if o.MaxConns == 0 {
		o.MaxConns = 8
	}
	base := ServerURL(t)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	admin, err := pgx.Connect(ctx, base)
	if err != nil {
		t.Fatalf("pgtest: connect to server: %v", err)
	}
	defer admin.Close(context.Background())

	name := "mightyetl_test_" + randomHex(8)
	stmt := "CREATE DATABASE " + pgx.Identifier{name}.Sanitize()
	if !o.Empty {
		tpl, err := ensureTemplate(ctx, admin)
		if err != nil {
			t.Fatalf("pgtest: template: %v", err)
		}
		stmt += " TEMPLATE " + pgx.Identifier{tpl}.Sanitize()
	}
	if _, err := admin.Exec(ctx, stmt); err != nil {
		t.Fatalf("pgtest: create database: %v", err)
	}
	u, err := withDatabase(base, name)
	if err != nil {
		t.Fatal(err)
	}
	pool, err := pg.NewPool(ctx, u, pg.PoolOptions{MaxConns: o.MaxConns, ApplicationName: "mightyetl-test"})
	if err != nil {
		t.Fatalf("pgtest: pool: %v", err)
	}
	t.Cleanup(func() {
		pool.Close()
		DropDatabase(t, name)
	})
	return pool, u
}

// DropDatabase drops the named database, disconnecting any session on it.
func DropDatabase(t testing.TB, name string) {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	admin, err := pgx.Connect(ctx, ServerURL(t))
	if err != nil {
		t.Logf("pgtest: drop %s: connect: %v", name, err)
		return
	}
	defer admin.Close(ctx)
	if _, err := admin.Exec(ctx, "DROP DATABASE IF EXISTS "+pgx.Identifier{name}.Sanitize()+" WITH (FORCE)"); err != nil {
		t.Logf("pgtest: drop %s: %v", name, err)
	}
}

// NewPool opens an additional pool on the same database (for example one per
// simulated worker process). It is closed when the test ends.
func NewPool(t testing.TB, databaseURL string, maxConns int32) *pgxpool.Pool {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	pool, err := pg.NewPool(ctx, databaseURL, pg.PoolOptions{MaxConns: maxConns, ApplicationName: "mightyetl-test"})
	if err != nil {
		t.Fatalf("pgtest: pool: %v", err)
	}
	t.Cleanup(pool.Close)
	return pool
}

func randomHex(n int) string {
	b := make([]byte, n)
	_, _ = rand.Read(b)
	return hex.EncodeToString(b)
}

// ExpireLeaseSQL moves the lease of job $1 (and its claim-queue row, which
// follows the lease) $2 microseconds into the past by the database clock, as
// if the lease had run out: the next claim may take it. $2 must be positive.
var ExpireLeaseSQL = pastEligibilitySQL("lease_expires_at", "RUNNING",
	"job_record_id = $1", "$2::bigint * interval '1 microsecond'")

// ExpireAllLeasesSQL is ExpireLeaseSQL for every RUNNING job, 1 ms ago.
var ExpireAllLeasesSQL = pastEligibilitySQL("lease_expires_at", "RUNNING", "true", "interval '1 millisecond'")

// MakeAvailableSQL moves the available_at of PENDING job $1 (and its
// claim-queue row) $2 microseconds into the past by the database clock.
var MakeAvailableSQL = pastEligibilitySQL("available_at", "PENDING",
	"job_record_id = $1", "$2::bigint * interval '1 microsecond'")

// pastEligibilitySQL is one statement that sets column (the time a job in
// status becomes claimable) of the jobs matching filter to ago before the
// database clock, and moves their claim-queue rows with it, as every product
// statement does (migration 00005), and makes their owners due by then
// (migration 00025), as a requeue does: time passing would have brought
// both. Its rows affected are the queue rows moved.
func pastEligibilitySQL(column, status, filter, ago string) string {
	return `
WITH moved AS (
    UPDATE etl_job_records
    SET ` + column + ` = clock_timestamp() - ` + ago + `
    WHERE ` + filter + ` AND job_status = '` + status + `'
    RETURNING job_record_id, ` + column + ` AS eligible_at
), queued AS (
    UPDATE etl_job_claim_queue q SET claimable_at = m.eligible_at
    FROM moved m WHERE q.job_record_id = m.job_record_id
    RETURNING q.owner_slot, q.claimable_at
), owners AS (
    UPDATE etl_claim_owners o SET due_at = least(o.due_at, x.due_at), idle_visits = 0
    FROM (SELECT owner_slot, min(claimable_at) AS due_at FROM queued GROUP BY owner_slot) x
    WHERE o.owner_slot = x.owner_slot
)
SELECT 1 FROM queued`
}

// claimQueueViolationsSQL lists every way the claim queue disagrees with the
// job rows: a PENDING or RUNNING job without a queue row, a queue row of a
// terminal job, or a claimable_at earlier than the job's real eligibility
// (available_at while PENDING, lease_expires_at while RUNNING). A later
// claimable_at only delays a claim (the queue row is a hint); an earlier one
// would make the claim scan a job it must skip. Large (chunked) jobs are
// never in this queue (migration 00023: etl_chunked_job_queue), and any
// chunked job found in it is a violation.
const claimQueueViolationsSQL = `
SELECT 'active job without queue row' FROM etl_job_records j
WHERE j.job_status IN ('PENDING', 'RUNNING') AND j.job_kind <> 'etl_chunked'
  AND NOT EXISTS (SELECT 1 FROM etl_job_claim_queue q WHERE q.job_record_id = j.job_record_id)
UNION ALL
SELECT 'queue row of a chunked job' FROM etl_job_claim_queue q
JOIN etl_job_records j USING (job_record_id)
WHERE j.job_kind = 'etl_chunked'
UNION ALL
SELECT 'queue row of a ' || j.job_status || ' job' FROM etl_job_claim_queue q
JOIN etl_job_records j USING (job_record_id)
WHERE j.job_status NOT IN ('PENDING', 'RUNNING')
UNION ALL
SELECT 'claimable_at before eligibility' FROM etl_job_claim_queue q
JOIN etl_job_records j USING (job_record_id)
WHERE (j.job_status = 'PENDING' AND q.claimable_at < j.available_at)
   OR (j.job_status = 'RUNNING' AND q.claimable_at < j.lease_expires_at)
LIMIT 10`

// AssertClaimQueueConsistent fails t when the claim queue (migration 00005)
// disagrees with the job rows (see claimQueueViolationsSQL).
func AssertClaimQueueConsistent(t testing.TB, db interface {
	Query(context.Context, string, ...any) (pgx.Rows, error)
}) {
	t.Helper()
	rows, err := db.Query(context.Background(), claimQueueViolationsSQL)
	if err != nil {
		t.Fatalf("check claim queue: %v", err)
	}
	violations, err := pgx.CollectRows(rows, pgx.RowTo[string])
	if err != nil {
		t.Fatalf("check claim queue: %v", err)
	}
	for _, v := range violations {
		t.Errorf("claim queue inconsistent: %s", v)
	}
}
