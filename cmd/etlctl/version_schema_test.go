package main_test

import (
	"errors"
	"fmt"
	"os/exec"
	"strings"
	"testing"

	"github.com/mightyetl/mightyetl/internal/pg"
	"github.com/mightyetl/mightyetl/internal/pgtest"
)

// versionFields runs `etlctl version args...` and returns its "key: value"
// lines and exit code.
func versionFields(t *testing.T, bin string, args ...string) (map[string]string, int) {
	t.Helper()
	cmd := exec.Command(bin, append([]string{"version"}, args...)...)
	cmd.Env = []string{} // no DATABASE_URL from the test's environment
	out, err := cmd.Output()
	code := 0
	var exit *exec.ExitError
	if errors.As(err, &exit) {
		code = exit.ExitCode()
	} else if err != nil {
		t.Fatalf("etlctl version: %v", err)
	}
	fields := map[string]string{}
	for _, line := range strings.Split(strings.TrimSuffix(string(out), "\n"), "\n") {
		k, v, ok := strings.Cut(line, ": ")
		if !ok {
			t.Fatalf("line %q is not \"key: value\" in\n%s", line, out)
		}
		fields[k] = v
	}
	return fields, code
}

// `etlctl version` prints the binary's compatibility level and schema range
// and, with a database URL, the database's schema version and whether this
// binary may run against it (exit 1 when not).
func TestVersionPrintsTheSchemaContract(t *testing.T) {
	t.Parallel()
	bin := buildEtlctl(t)
	rng := fmt.Sprintf("%d..%d", pg.MinSchemaVersion, pg.MaxSchemaVersion)
	lvl := fmt.Sprint(pg.BinaryCompatLevel)

	got, code := versionFields(t, bin)
	if code != 0 || got["binary_compat_level"] != lvl || got["schema_range"] != rng || got["schema_applied"] != "" {
		t.Fatalf("without a database: exit %d, %v", code, got)
	}

	pool, url := pgtest.NewDatabase(t)
	got, code = versionFields(t, bin, "-database-url", url)
	if code != 0 || got["schema_applied"] != fmt.Sprint(pg.MaxSchemaVersion) || got["schema_compatible"] != "true" || got["schema_range"] != rng {
		t.Fatalf("at the newest schema: exit %d, %v", code, got)
	}

	pgtest.SetFutureSchema(t, pool, pg.MaxSchemaVersion+1, pg.BinaryCompatLevel+1)
	got, code = versionFields(t, bin, "-database-url", url)
	if code != 1 || got["schema_applied"] != fmt.Sprint(pg.MaxSchemaVersion+1) || got["schema_compatible"] != "false" ||
		got["schema_required_binary"] != fmt.Sprint(pg.BinaryCompatLevel+1) || !strings.Contains(got["schema_reason"], "needs binary level") {
		t.Fatalf("at a schema needing a newer binary: exit %d, %v", code, got)
	}
}
