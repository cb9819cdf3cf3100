package deploy_test

import (
	"bytes"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
)

// migrationLint runs tools/migration-lint/lint.sh over dir (and, when
// baseline is not empty, that baseline instead of the shipped one) from the
// repository root, as `make migration-lint` does. It fails the test, never
// skips it, when the pinned squawk is not installed.
func migrationLint(t *testing.T, dir, baseline string) (string, error) {
	t.Helper()
	if _, err := os.Stat("../tools/migration-lint/node_modules/.bin/squawk"); err != nil {
		t.Fatal("the pinned migration linter is not installed: npm ci --prefix tools/migration-lint")
	}
	args := []string{dir}
	if baseline != "" {
		args = append(args, baseline)
	}
	cmd := exec.Command("tools/migration-lint/lint.sh", args...)
	cmd.Dir = ".."
	var out bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &out
	err := cmd.Run()
	return out.String(), err
}

// copyMigrations copies migrations/*.sql into a new temporary directory and
// adds extra (file name -> contents) to it.
func copyMigrations(t *testing.T, extra map[string]string) string {
	t.Helper()
	dir := t.TempDir()
	files, err := filepath.Glob("../migrations/*.sql")
	if err != nil || len(files) == 0 {
		t.Fatalf("no migrations found: %v", err)
	}
	for _, f := range files {
		b, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(dir, filepath.Base(f)), b, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	for name, body := range extra {
		if err := os.WriteFile(filepath.Join(dir, name), []byte(body), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	return dir
}

// TestMigrationLintPassesOnMigrations: the shipped migrations are clean
// under squawk's rules with the baseline of past findings, so `make
// migration-lint` in `make test` passes on the tree.
func TestMigrationLintPassesOnMigrations(t *testing.T) {
	out, err := migrationLint(t, "migrations", "")
	if err != nil {
		t.Fatalf("migration-lint on migrations/: %v; output:\n%s", err, out)
	}
	if !strings.Contains(out, "are clean (squawk ") {
		t.Fatalf("migration-lint on migrations/ printed:\n%s\nwant the clean summary", out)
	}
}

// TestMigrationLintJudgesNewMigrations: a new migration gets no baseline:
// a blocking statement fails the run naming the file, the line and the
// rule; its online form passes, so the rules can be met.
func TestMigrationLintJudgesNewMigrations(t *testing.T) {
	const timeouts = "SET lock_timeout = '1s';\nSET statement_timeout = '30min';\n"
	for _, tc := range []struct {
		name, body string
		wantLine   int    // 1-based line of the finding; 0: the run passes
		wantRule   string // the squawk rule named on that line
	}{
		{
			name:     "plain index",
			body:     "-- +goose Up\n" + timeouts + "CREATE INDEX foo ON etl_job_records (created_at);\n\n-- +goose Down\n" + timeouts + "DROP INDEX CONCURRENTLY IF EXISTS foo;\n",
			wantLine: 4, wantRule: "require-concurrent-index-creation",
		},
		{
			name:     "no lock_timeout",
			body:     "-- +goose NO TRANSACTION\n-- +goose Up\nCREATE INDEX CONCURRENTLY IF NOT EXISTS foo ON etl_job_records (created_at);\n",
			wantLine: 3, wantRule: "require-lock-timeout",
		},
		{
			name:     "concurrent index inside the goose transaction",
			body:     "-- +goose Up\n" + timeouts + "CREATE INDEX CONCURRENTLY IF NOT EXISTS foo ON etl_job_records (created_at);\n",
			wantLine: 4, wantRule: "ban-concurrent-index-creation-in-transaction",
		},
		{
			name:     "validated constraint",
			body:     "-- +goose Up\n" + timeouts + "ALTER TABLE etl_job_records ADD CONSTRAINT foo_check CHECK (attempt_count >= 0);\n",
			wantLine: 4, wantRule: "constraint-missing-not-valid",
		},
		{
			name: "online index",
			body: "-- +goose NO TRANSACTION\n-- +goose Up\n" + timeouts + "CREATE INDEX CONCURRENTLY IF NOT EXISTS foo ON etl_job_records (created_at);\n\n" +
				"-- +goose Down\n" + timeouts + "DROP INDEX CONCURRENTLY IF EXISTS foo;\n",
		},
		{
			name: "new table whose down drops it",
			body: "-- +goose Up\n" + timeouts + "CREATE TABLE IF NOT EXISTS foo (id bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY);\n\n" +
				"-- +goose Down\n" + timeouts + "DROP TABLE IF EXISTS foo;\n",
		},
	} {
		t.Run(tc.name, func(t *testing.T) {
			const file = "00099_lint_probe.sql"
			out, err := migrationLint(t, copyMigrations(t, map[string]string{file: tc.body}), "")
			if tc.wantLine == 0 {
				if err != nil {
					t.Fatalf("migration-lint refused an online migration: %v; output:\n%s", err, out)
				}
				return
			}
			var exit *exec.ExitError
			if !errors.As(err, &exit) {
				t.Fatalf("migration-lint with %s: %v, want a non-zero exit; output:\n%s", tc.name, err, out)
			}
			prefix := fmt.Sprintf("/%s:%d:", file, tc.wantLine)
			for _, line := range strings.Split(out, "\n") {
				if strings.Contains(line, prefix) && strings.Contains(line, "warning: "+tc.wantRule+" ") {
					return
				}
			}
			t.Fatalf("migration-lint output has no line with %q and rule %s:\n%s", prefix, tc.wantRule, out)
		})
	}
}

// TestMigrationLintBaselineIsClosed: the baseline may list only past
// migrations (up to 00020), and only rules that still fire.
func TestMigrationLintBaselineIsClosed(t *testing.T) {
	shipped, err := os.ReadFile("../tools/migration-lint/baseline.txt")
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct{ name, line, want string }{
		{"new migration", "00099_lint_probe.sql require-concurrent-index-creation it is urgent", "new migrations may not be baselined"},
		{"stale rule", "00018_job_rows_fillfactor_30.sql require-concurrent-index-creation never fired", "lists require-concurrent-index-creation, which no longer fires"},
		{"no reason", "00099_lint_probe.sql require-concurrent-index-creation", "lists no reason"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			baseline := filepath.Join(t.TempDir(), "baseline.txt")
			body := strings.Replace(string(shipped), "00018_job_rows_fillfactor_30.sql require-lock-timeout,", "00018_job_rows_fillfactor_30.sql require-concurrent-index-creation,require-lock-timeout,", 1)
			if tc.name != "stale rule" {
				body = string(shipped) + tc.line + "\n"
			}
			if err := os.WriteFile(baseline, []byte(body), 0o644); err != nil {
				t.Fatal(err)
			}
			dir := copyMigrations(t, map[string]string{
				"00099_lint_probe.sql": "-- +goose Up\nCREATE INDEX foo ON etl_job_records (created_at);\n",
			})
			out, err := migrationLint(t, dir, baseline)
			var exit *exec.ExitError
			if !errors.As(err, &exit) {
				t.Fatalf("migration-lint with a baseline entry (%s): %v, want a non-zero exit; output:\n%s", tc.name, err, out)
			}
			if !strings.Contains(out, tc.want) {
				t.Fatalf("migration-lint with a baseline entry (%s) printed:\n%s\nwant %q", tc.name, out, tc.want)
			}
		})
	}
}
