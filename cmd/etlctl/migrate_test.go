package main_test

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"testing"

	"github.com/mightyetl/mightyetl/internal/pg"
	"github.com/mightyetl/mightyetl/internal/pgtest"
)

// etlctlMigrate runs `etlctl migrate args...` against dbURL with no other
// setting from the test's environment and returns its exit code and
// standard error.
func etlctlMigrate(t *testing.T, bin, dbURL string, args ...string) (int, string) {
	t.Helper()
	cmd := exec.Command(bin, append([]string{"migrate"}, args...)...)
	cmd.Env = []string{"DATABASE_URL=" + dbURL, "PATH=" + os.Getenv("PATH")}
	var stderr strings.Builder
	cmd.Stderr = &stderr
	err := cmd.Run()
	var exit *exec.ExitError
	switch {
	case errors.As(err, &exit):
		return exit.ExitCode(), stderr.String()
	case err != nil:
		t.Fatalf("etlctl migrate %v: %v", args, err)
	}
	return 0, stderr.String()
}

// `etlctl migrate up -to N` applies migrations up to N, `down -to N` rolls
// back to N exactly, plain `down` one migration; a -to pointing the wrong
// way or past the newest migration is refused with exit 2 and changes
// nothing.
func TestMigrateUpDownTo(t *testing.T) {
	t.Parallel()
	bin := buildEtlctl(t)
	pool, url := pgtest.NewDatabase(t, pgtest.Options{Empty: true, MaxConns: 2})
	ctx := context.Background()
	applied := func() int64 {
		t.Helper()
		v, _, err := pg.SchemaVersion(ctx, pool)
		if err != nil {
			t.Fatal(err)
		}
		return v
	}
	step := func(wantCode int, wantVersion int64, args ...string) {
		t.Helper()
		code, stderr := etlctlMigrate(t, bin, url, args...)
		if code != wantCode {
			t.Fatalf("etlctl migrate %v: exit %d, want %d; stderr:\n%s", args, code, wantCode, stderr)
		}
		if got := applied(); got != wantVersion {
			t.Fatalf("after etlctl migrate %v: schema version %d, want %d", args, got, wantVersion)
		}
	}
	_, newest, err := pg.SchemaVersion(ctx, pool)
	if err != nil || newest < 12 {
		t.Fatalf("newest embedded migration %d (%v): the test steps need at least 12", newest, err)
	}
	step(0, 5, "up", "-to", "5")
	step(0, 12, "up", "-to", "12")
	step(2, 12, "up", "-to", "4")                                     // below the applied version
	step(2, 12, "down", "-to", "13")                                  // above the applied version
	step(2, 12, "up", "-to", "999999")                                // past the newest migration
	step(2, 12, "status", "-to", "3")                                 // -to is for up and down only
	step(2, 12, "down", "-to", "-1")                                  // not a version
	step(0, 12, "up", "-to", "12")                                    // already there: nothing to do
	step(0, 7, "down", "-to", "7")                                    // several at once
	step(0, 6, "down")                                                // one
	step(0, newest, "up")                                             // all
	step(0, newest-2, "down", "-to", strconv.FormatInt(newest-2, 10)) // the way back of a release
	step(0, newest, "up")                                             // and forward again
}

// A migration that keeps timing out on a lock the fleet holds makes
// `etlctl migrate up` retry it (one log line per retry: version, attempt,
// SQLSTATE class) and, once -lock-retry-for is spent, exit 1 naming the
// version and the attempts, the schema unchanged. Released, the same
// command succeeds. Every migration from 00021 on inserts its row into
// etl_schema_compatibility, which a SHARE lock blocks.
func TestMigrateUpRetriesThenGivesUp(t *testing.T) {
	t.Parallel()
	bin := buildEtlctl(t)
	pool, url := pgtest.NewDatabase(t, pgtest.Options{Empty: true, MaxConns: 2})
	ctx := context.Background()
	_, newest, err := pg.SchemaVersion(ctx, pool)
	if err != nil || newest < 22 {
		t.Fatalf("newest embedded migration %d (%v): the test needs one after 00021", newest, err)
	}
	prev := strconv.FormatInt(newest-1, 10)
	if code, stderr := etlctlMigrate(t, bin, url, "up", "-to", prev); code != 0 {
		t.Fatalf("migrate up -to %s: exit %d\n%s", prev, code, stderr)
	}
	tx, err := pool.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = tx.Rollback(ctx) }()
	if _, err := tx.Exec(ctx, "LOCK TABLE etl_schema_compatibility IN SHARE MODE"); err != nil {
		t.Fatal(err)
	}

	cmd := exec.Command(bin, "migrate", "up", "-lock-timeout", "50ms")
	cmd.Env = []string{"DATABASE_URL=" + url, "MIGHTYETL_MIGRATE_LOCK_RETRY_FOR=1s"}
	var stderr strings.Builder
	cmd.Stderr = &stderr
	err = cmd.Run()
	var exit *exec.ExitError
	if !errors.As(err, &exit) || exit.ExitCode() != 1 {
		t.Fatalf("migrate up with the lock held: %v, want exit 1\n%s", err, stderr.String())
	}
	out := stderr.String()
	want := fmt.Sprintf("migration %05d up: gave up after ", newest)
	if !strings.Contains(out, want) || !strings.Contains(out, "attempts") {
		t.Fatalf("stderr lacks %q and the attempts:\n%s", want, out)
	}
	if !strings.Contains(out, `"sqlstate_class":"55"`) || !strings.Contains(out, fmt.Sprintf(`"version":%d`, newest)) {
		t.Fatalf("stderr lacks a retry line with version and SQLSTATE class:\n%s", out)
	}
	if v, _, err := pg.SchemaVersion(ctx, pool); err != nil || v != newest-1 {
		t.Fatalf("schema version %d (%v) after giving up, want %d", v, err, newest-1)
	}

	if err := tx.Rollback(ctx); err != nil {
		t.Fatal(err)
	}
	if code, stderr := etlctlMigrate(t, bin, url, "up", "-lock-timeout", "50ms"); code != 0 {
		t.Fatalf("migrate up after the lock was released: exit %d\n%s", code, stderr)
	}
	if v, _, err := pg.SchemaVersion(ctx, pool); err != nil || v != newest {
		t.Fatalf("schema version %d (%v), want %d", v, err, newest)
	}
}
