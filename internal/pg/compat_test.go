package pg_test

import (
	"context"
	"strings"
	"testing"

	"github.com/mightyetl/mightyetl/internal/pg"
	"github.com/mightyetl/mightyetl/internal/pgtest"
)

func TestCompatibleRule(t *testing.T) {
	t.Parallel()
	lvl := pg.BinaryCompatLevel
	cases := []struct {
		name             string
		applied, require int64
		want             bool
		reason           string
	}{
		{"empty database", 0, 0, false, "migrate up"},
		{"one below the minimum", pg.MinSchemaVersion - 1, 0, false, "migrate up"},
		{"the minimum", pg.MinSchemaVersion, 1, true, ""},
		{"the maximum", pg.MaxSchemaVersion, lvl, true, ""},
		{"newer, admits this level", pg.MaxSchemaVersion + 1, lvl, true, ""},
		{"newer, admits older levels", pg.MaxSchemaVersion + 3, 1, true, ""},
		{"newer, needs a higher level", pg.MaxSchemaVersion + 1, lvl + 1, false, "needs binary level"},
		{"newer, records nothing", pg.MaxSchemaVersion + 1, 0, false, "records no oldest binary level"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			got := pg.Compatible(c.applied, c.require)
			if got.Compatible != c.want || got.Applied != c.applied || got.RequiredBinary != c.require {
				t.Fatalf("Compatible(%d, %d) = %+v, want compatible %t", c.applied, c.require, got, c.want)
			}
			if c.want != (got.Reason == "") {
				t.Fatalf("reason %q for compatible %t", got.Reason, c.want)
			}
			if !c.want && !strings.Contains(got.Reason, c.reason) {
				t.Fatalf("reason %q does not say %q", got.Reason, c.reason)
			}
		})
	}
}

// The binary's declared range covers its own newest migration: a binary is
// always compatible with the schema it migrates to.
func TestSchemaRangeCoversTheNewestMigration(t *testing.T) {
	t.Parallel()
	pool, _ := pgtest.NewDatabase(t)
	applied, expected, err := pg.SchemaVersion(context.Background(), pool)
	if err != nil {
		t.Fatal(err)
	}
	if expected != pg.MaxSchemaVersion || applied != expected || pg.MinSchemaVersion > pg.MaxSchemaVersion {
		t.Fatalf("newest migration %d (applied %d), binary range %d..%d", expected, applied, pg.MinSchemaVersion, pg.MaxSchemaVersion)
	}
	c, err := pg.CheckCompatibility(context.Background(), pool)
	if err != nil || !c.Compatible || c.Applied != expected || c.RequiredBinary > pg.BinaryCompatLevel {
		t.Fatalf("at the newest schema: %+v, %v", c, err)
	}
}

// CheckCompatibility reads the schema version and the compatibility rows
// from the database: an older schema, a newer one that admits this binary
// and one that does not (synthetic rows of a future migration).
func TestCheckCompatibilityReadsTheDatabase(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	pool, _ := pgtest.NewDatabase(t, pgtest.Options{Empty: true})

	if err := pg.MigrateTo(ctx, pool, pg.MinSchemaVersion-1); err != nil {
		t.Fatal(err)
	}
	if c, err := pg.CheckCompatibility(ctx, pool); err != nil || c.Compatible || c.Applied != pg.MinSchemaVersion-1 {
		t.Fatalf("below the minimum: %+v, %v", c, err)
	}
	migUp(t, pool)
	if c, err := pg.CheckCompatibility(ctx, pool); err != nil || !c.Compatible {
		t.Fatalf("at the newest: %+v, %v", c, err)
	}

	next := pg.MaxSchemaVersion + 1
	pgtest.SetFutureSchema(t, pool, next, pg.BinaryCompatLevel)
	if c, err := pg.CheckCompatibility(ctx, pool); err != nil || !c.Compatible || c.Applied != next {
		t.Fatalf("newer schema admitting this level: %+v, %v", c, err)
	}
	pgtest.SetFutureSchema(t, pool, next, pg.BinaryCompatLevel+1)
	c, err := pg.CheckCompatibility(ctx, pool)
	if err != nil || c.Compatible || c.RequiredBinary != pg.BinaryCompatLevel+1 {
		t.Fatalf("newer schema needing a higher level: %+v, %v", c, err)
	}
	if !strings.Contains(c.Reason, "needs binary level") {
		t.Fatalf("reason %q", c.Reason)
	}
}
