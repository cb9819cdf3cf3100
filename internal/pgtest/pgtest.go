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

// ServerURL returns a URL of the test server's maintenance database, or
// ends the test (skip locally, fail under CI=true) when there is no server.
func ServerURL(t testing.TB) string {
	t.Helper()
	serverOnce.Do(func() {
		if u := os.Getenv("TEST_DATABASE_URL"); u != "" {
			serverURL, serverErr = withDatabase(u, "postgres")
			return
		}
		serverURL, serverErr = startContainer()
	})
	if serverErr != nil {
		if os.Getenv("CI") == "true" {
			t.Fatalf("pgtest: no PostgreSQL for tests (set TEST_DATABASE_URL or run a Docker engine): %v", serverErr)
		}
		t.Skipf("pgtest: no PostgreSQL for tests (set TEST_DATABASE_URL or run a Docker engine): %v", serverErr)
	}
	return serverURL
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
