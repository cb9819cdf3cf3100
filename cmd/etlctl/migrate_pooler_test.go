package main_test

import (
	"context"
	"errors"
	"os"
	"os/exec"
	"strings"
	"testing"

	"github.com/mightyetl/mightyetl/internal/pg"
	"github.com/mightyetl/mightyetl/internal/pgbouncertest"
	"github.com/mightyetl/mightyetl/internal/pgtest"
)

// Behind a transaction pooler (MIGHTYETL_DATABASE_POOLER=transaction)
// `etlctl migrate` refuses to run without MIGHTYETL_DATABASE_DIRECT_URL
// (goose's session advisory lock cannot live there), exit 2 naming the
// setting and the schema untouched; with it, the migrations run on the
// direct URL while DATABASE_URL points at the PgBouncer.
func TestMigrateRunsOnTheDirectURLBehindAPooler(t *testing.T) {
	t.Parallel()
	bin := buildEtlctl(t)
	pool, direct := pgtest.NewDatabase(t, pgtest.Options{Empty: true, MaxConns: 1})
	b := pgbouncertest.Start(t, pgbouncertest.Options{PoolSize: 2})
	run := func(env ...string) (int, string) {
		t.Helper()
		cmd := exec.Command(bin, "migrate", "up")
		cmd.Env = append([]string{"DATABASE_URL=" + b.URL(direct), "MIGHTYETL_DATABASE_POOLER=transaction", "PATH=" + os.Getenv("PATH")}, env...)
		var stderr strings.Builder
		cmd.Stderr = &stderr
		err := cmd.Run()
		var exit *exec.ExitError
		switch {
		case errors.As(err, &exit):
			return exit.ExitCode(), stderr.String()
		case err != nil:
			t.Fatal(err)
		}
		return 0, stderr.String()
	}
	applied := func() int64 {
		t.Helper()
		v, _, err := pg.SchemaVersion(context.Background(), pool)
		if err != nil {
			t.Fatal(err)
		}
		return v
	}
	code, stderr := run()
	if code != 2 || !strings.Contains(stderr, "MIGHTYETL_DATABASE_DIRECT_URL") || applied() != 0 {
		t.Fatalf("migrate behind a pooler without a direct URL: exit %d, schema %d, stderr:\n%s\nwant exit 2 naming MIGHTYETL_DATABASE_DIRECT_URL, schema 0", code, applied(), stderr)
	}
	code, stderr = run("MIGHTYETL_DATABASE_DIRECT_URL=" + direct)
	_, newest, err := pg.SchemaVersion(context.Background(), pool)
	if err != nil {
		t.Fatal(err)
	}
	if code != 0 || applied() != newest {
		t.Fatalf("migrate with a direct URL: exit %d, schema %d (want 0, %d); stderr:\n%s", code, applied(), newest, stderr)
	}
}
