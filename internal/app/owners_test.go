package app

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"testing"

	"github.com/mightyetl/mightyetl/internal/auth"
	"github.com/mightyetl/mightyetl/internal/intake"
	"github.com/mightyetl/mightyetl/internal/pg"
	"github.com/mightyetl/mightyetl/internal/pgtest"
)

// An intake with MIGHTYETL_OWNER_OVERRIDES_FILE writes each named owner's
// claim weight at start and takes the file's quotas; a reload (SIGHUP)
// applies an edited file (a removed owner's weight back to 1, a new quota
// at once), and a broken file keeps the last good configuration.
func TestIntakeOwnerOverrides(t *testing.T) {
	t.Parallel()
	pool, url := pgtest.NewDatabase(t)
	const key = "0123456789abcdef0123456789abcdef-test"
	file := filepath.Join(t.TempDir(), "owners.json")
	write := func(body string) {
		t.Helper()
		if err := os.WriteFile(file, []byte(body), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	write(`{"owners":[{"principal":"tenant-a","weight":7,"maxPendingJobs":1},{"principal":"tenant-b","weight":3}]}`)
	cfg := testIntakeConfig(url)
	cfg.PrincipalHashKey = key
	cfg.Owners.OverridesFile = file
	in, err := NewIntake(cfg, openTestPools(t, cfg), IntakeOptions{})
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	if err := in.Start(ctx); err != nil {
		t.Fatal(err)
	}
	defer in.Stop(ctx)
	weight := func(principal string) int {
		t.Helper()
		slot, _ := pg.OwnerSlot(auth.ScopeHash([]byte(key), principal))
		w := 0
		if err := pool.QueryRow(ctx, `SELECT weight FROM etl_claim_owners WHERE owner_slot = $1`, slot).Scan(&w); err != nil && !pg.IsNoRows(err) {
			t.Fatal(err)
		}
		return w
	}
	if a, b := weight("tenant-a"), weight("tenant-b"); a != 7 || b != 3 {
		t.Fatalf("weights at start: tenant-a %d tenant-b %d, want 7 and 3", a, b)
	}
	submit := func(principal, k string) error {
		_, err := in.Service.Submit(ctx, intake.SubmitRequest{Principal: principal, IdempotencyKey: k, Body: []byte(`[{"id":"a"}]`)})
		return err
	}
	if err := submit("tenant-a", "owners-key-00000001"); err != nil {
		t.Fatal(err)
	}
	if err := submit("tenant-a", "owners-key-00000002"); !errors.Is(err, intake.ErrOwnerQuotaExceeded) {
		t.Fatalf("tenant-a over its override: %v", err)
	}

	write(`{"owners":[{"principal":"tenant-a","weight":2,"maxPendingJobs":2}]}`)
	if err := in.ReloadOwners(ctx); err != nil {
		t.Fatal(err)
	}
	if a, b := weight("tenant-a"), weight("tenant-b"); a != 2 || b != 1 {
		t.Fatalf("weights after reload: tenant-a %d tenant-b %d, want 2 and 1", a, b)
	}
	if err := submit("tenant-a", "owners-key-00000002"); err != nil {
		t.Fatalf("after raising tenant-a's cap: %v", err)
	}

	write(`{"owners":[{"principal":"tenant-a","weight":0}]}`)
	if err := in.ReloadOwners(ctx); err == nil {
		t.Fatal("a broken file was reloaded")
	}
	if a := weight("tenant-a"); a != 2 {
		t.Fatalf("a broken file changed tenant-a's weight to %d", a)
	}
	if err := submit("tenant-a", "owners-key-00000003"); !errors.Is(err, intake.ErrOwnerQuotaExceeded) {
		t.Fatalf("a broken file changed tenant-a's quota: %v", err)
	}
}
