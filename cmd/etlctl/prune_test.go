package main_test

import (
	"context"
	"errors"
	"os/exec"
	"strings"
	"testing"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"

	"github.com/mightyetl/mightyetl/internal/pg"
	"github.com/mightyetl/mightyetl/internal/pgtest"
)

// `etlctl prune` deletes operator audit records older than
// -audit-older-than (default 2160h) only, and refuses a window under an
// hour as it does for the other windows.
func TestPruneDeletesOperatorAuditOlderThanItsWindow(t *testing.T) {
	t.Parallel()
	pool, url := pgtest.NewDatabase(t)
	ctx := context.Background()
	op := pgtest.SHA("prune-audit-operator")
	ages := map[uuid.UUID]string{} // job id -> age of its audit row
	for _, age := range []string{"100 days", "91 days", "89 days", "1 hour"} {
		id := uuid.New()
		if _, err := pg.OperatorCancelJob(ctx, pool, pg.OperatorCancelParams{JobID: id, OperatorScopeHash: op,
			CancellationKeyHash: pgtest.SHA(id.String())}); !errors.Is(err, pg.ErrNotFound) {
			t.Fatal(err)
		}
		// Past the append-only trigger: a superuser session with triggers off.
		if err := pg.WithTx(ctx, pool, func(tx pgx.Tx) error {
			if _, err := tx.Exec(ctx, `SET LOCAL session_replication_role = replica`); err != nil {
				return err
			}
			_, err := tx.Exec(ctx, `UPDATE etl_operator_audit_records SET created_at = created_at - $2::interval
				WHERE job_record_id = $1`, id, age)
			return err
		}); err != nil {
			t.Fatal(err)
		}
		ages[id] = age
	}
	bin := buildEtlctl(t)
	prune := func(args ...string) (string, int) {
		cmd := exec.Command(bin, append([]string{"prune", "-database-url", url}, args...)...)
		out, err := cmd.CombinedOutput()
		var exit *exec.ExitError
		if err != nil && !errors.As(err, &exit) {
			t.Fatal(err)
		}
		return string(out), cmd.ProcessState.ExitCode()
	}
	if out, code := prune("-audit-older-than", "30m"); code != 2 || !strings.Contains(out, "-audit-older-than: must be 0 (skip) or at least 1h0m0s") {
		t.Fatalf("a 30m window: exit %d\n%s", code, out)
	}
	out, code := prune()
	if code != 0 || !strings.Contains(out, "pruned 2 operator audit records older than 2160h0m0s") {
		t.Fatalf("prune with the default window: exit %d\n%s", code, out)
	}
	left := map[string]bool{}
	rows, err := pool.Query(ctx, `SELECT job_record_id FROM etl_operator_audit_records`)
	if err != nil {
		t.Fatal(err)
	}
	ids, err := pgx.CollectRows(rows, pgx.RowTo[uuid.UUID])
	if err != nil {
		t.Fatal(err)
	}
	for _, id := range ids {
		left[ages[id]] = true
	}
	if len(ids) != 2 || !left["89 days"] || !left["1 hour"] {
		t.Fatalf("left after prune: %v, want the 89-day and 1-hour rows", left)
	}
	if out, code := prune("-audit-older-than", "0"); code != 0 || strings.Contains(out, "operator audit") {
		t.Fatalf("-audit-older-than 0 should skip the audit: exit %d\n%s", code, out)
	}
}
