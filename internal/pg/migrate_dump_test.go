package pg_test

import (
	"bytes"
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"sort"
	"strconv"
	"strings"
	"testing"

	"github.com/mightyetl/mightyetl/internal/pg"
	"github.com/mightyetl/mightyetl/internal/pgtest"
)

// pgDumpDirGlob is where Debian and Ubuntu install the client binaries of
// each PostgreSQL major version; they are not always on PATH.
const pgDumpDirGlob = "/usr/lib/postgresql/*/bin/pg_dump"

// findPGDump returns a pg_dump that can dump a server of major version
// serverMajor: the oldest /usr/lib/postgresql/<major>/bin/pg_dump with
// major >= serverMajor (pg_dump refuses newer servers), else pg_dump on
// PATH. With none, the test fails with one line naming the fix.
func findPGDump(t *testing.T, serverMajor int) string {
	t.Helper()
	paths, _ := filepath.Glob(pgDumpDirGlob)
	major := func(p string) int {
		n, _ := strconv.Atoi(filepath.Base(filepath.Dir(filepath.Dir(p))))
		return n
	}
	sort.Slice(paths, func(i, j int) bool { return major(paths[i]) < major(paths[j]) })
	for _, p := range paths {
		if st, err := os.Stat(p); err == nil && st.Mode()&0o111 != 0 && major(p) >= serverMajor {
			return p
		}
	}
	if p, err := exec.LookPath("pg_dump"); err == nil {
		return p
	}
	t.Fatalf("pg_dump not found in %s or on PATH: install the PostgreSQL client (apt-get install postgresql-client; .ci/run installs the server, which brings it)", pgDumpDirGlob)
	return ""
}

// schemaDump is `pg_dump --schema-only` of the database at url without
// what differs between two dumps of one schema: comment lines (the header
// names the server and pg_dump versions), the random-keyed \restrict and
// \unrestrict lines of newer pg_dump releases, and blank lines. goose's
// version table is left out: it exists from the first migration on, and its
// rows are data.
func schemaDump(t *testing.T, pgDump, url string) []string {
	t.Helper()
	var stdout, stderr bytes.Buffer
	cmd := exec.Command(pgDump, "--schema-only", "--no-password",
		"--exclude-table=mightyetl_schema_migrations*", "--dbname="+url)
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	if err := cmd.Run(); err != nil {
		t.Fatalf("pg_dump: %v: %s", err, strings.TrimSpace(stderr.String()))
	}
	var lines []string
	for _, line := range strings.Split(stdout.String(), "\n") {
		trimmed := strings.TrimSpace(line)
		if trimmed == "" || strings.HasPrefix(trimmed, "--") ||
			strings.HasPrefix(trimmed, `\restrict`) || strings.HasPrefix(trimmed, `\unrestrict`) {
			continue
		}
		lines = append(lines, line)
	}
	return lines
}

// dumpDifference lists the lines only one of two dumps has, each counted as
// often as it occurs, prefixed "-" (only in want) or "+" (only in got), at
// most limit of them.
func dumpDifference(want, got []string, limit int) []string {
	counts := map[string]int{}
	for _, l := range want {
		counts[l]++
	}
	for _, l := range got {
		counts[l]--
	}
	var out []string
	for _, l := range want {
		if counts[l] > 0 && len(out) < limit {
			out = append(out, "-"+l)
			counts[l]--
		}
	}
	for _, l := range got {
		if counts[l] < 0 && len(out) < limit {
			out = append(out, "+"+l)
			counts[l]++
		}
	}
	return out
}

// TestEveryMigrationDownRestoresTheSchemaBeforeIt steps one database
// through every migration: at each version v it takes the schema dump at
// v-1, applies v, rolls it back and dumps again. The two dumps must be equal,
// so a down section restores exactly what its up section changed (00013's
// down once put back the statement trigger of 00001 instead of 00004's).
func TestEveryMigrationDownRestoresTheSchemaBeforeIt(t *testing.T) {
	t.Parallel()
	pool, url := pgtest.NewDatabase(t, pgtest.Options{Empty: true, MaxConns: 2})
	ctx := context.Background()
	var serverVersion int
	if err := pool.QueryRow(ctx, `SELECT current_setting('server_version_num')::int`).Scan(&serverVersion); err != nil {
		t.Fatal(err)
	}
	pgDump := findPGDump(t, serverVersion/10000)
	newest := newestMigration(t)
	before := schemaDump(t, pgDump, url)
	for v := int64(1); v <= newest; v++ {
		if err := pg.MigrateTo(ctx, pool, v); err != nil {
			t.Fatalf("up to %d: %v", v, err)
		}
		if err := pg.MigrateTo(ctx, pool, v-1); err != nil {
			t.Fatalf("down from %d: %v", v, err)
		}
		after := schemaDump(t, pgDump, url)
		if diff := dumpDifference(before, after, 40); len(diff) > 0 {
			t.Errorf("migration %05d: the schema after its up and down differs from the schema before it (- before, + after):\n%s",
				v, strings.Join(diff, "\n"))
		}
		if err := pg.MigrateTo(ctx, pool, v); err != nil {
			t.Fatalf("up to %d again: %v", v, err)
		}
		before = schemaDump(t, pgDump, url)
	}
	// A dump that lost its objects would make every comparison pass.
	if !slices.ContainsFunc(before, func(l string) bool { return strings.HasPrefix(l, "CREATE TABLE public.etl_job_records ") }) {
		t.Fatalf("the schema dump at version %d has no etl_job_records table", newest)
	}
}
