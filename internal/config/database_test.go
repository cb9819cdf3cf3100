package config

import (
	"errors"
	"strings"
	"testing"

	"github.com/mightyetl/mightyetl/internal/pg"
)

// TestDatabasePoolerSettings: MIGHTYETL_DATABASE_POOLER defaults to none,
// takes transaction, refuses anything else naming the setting; the direct
// URL's password never reaches provenance or a start-up error; the relay's
// LISTEN URL and the migration URL follow the pooler.
func TestDatabasePoolerSettings(t *testing.T) {
	w, _, err := LoadWorker(nil, env(map[string]string{"MIGHTYETL_WORKER_ID": "worker-pooler-1"}))
	if err != nil {
		t.Fatal(err)
	}
	if w.Database.Pooler != pg.PoolerNone || w.Database.DirectURL != "" {
		t.Fatalf("defaults: %+v", w.Database)
	}
	if _, _, err := LoadIntake(nil, env(map[string]string{"MIGHTYETL_DATABASE_POOLER": "session"})); err == nil || !strings.HasPrefix(err.Error(), "MIGHTYETL_DATABASE_POOLER") {
		t.Fatalf("pooler=session: %v, want a line naming MIGHTYETL_DATABASE_POOLER", err)
	}
	const pooled, direct = "postgres://app:pooledpw@pgbouncer:6432/mightyetl", "postgres://app:directpw@db:5432/mightyetl"
	w, l, err := LoadWorker(nil, env(map[string]string{"MIGHTYETL_WORKER_ID": "worker-pooler-1",
		"DATABASE_URL": pooled, "MIGHTYETL_DATABASE_POOLER": "transaction", "MIGHTYETL_DATABASE_DIRECT_URL": direct}))
	if err != nil {
		t.Fatal(err)
	}
	if w.Database.Pooler != pg.PoolerTransaction || w.Database.DirectURL != direct {
		t.Fatalf("loaded %+v", w.Database)
	}
	for _, s := range l.Provenance() {
		if strings.Contains(s.Value, "directpw") || strings.Contains(s.Value, "pooledpw") {
			t.Fatalf("provenance leaks a password: %+v", s)
		}
	}
	if msg := w.RedactError(errors.New("dial " + direct + " and " + pooled)); strings.Contains(msg, "directpw") || strings.Contains(msg, "pooledpw") {
		t.Fatalf("RedactError leaks a password: %s", msg)
	}

	for _, tc := range []struct {
		d               Database
		listen, migrate string
		migrateErr      bool
	}{
		{Database{}, pooled, pooled, false},
		{Database{DirectURL: direct}, direct, direct, false},
		{Database{Pooler: pg.PoolerTransaction, DirectURL: direct}, direct, direct, false},
		{Database{Pooler: pg.PoolerTransaction}, "", "", true},
	} {
		if got := tc.d.ListenURL(pooled); got != tc.listen {
			t.Errorf("%+v ListenURL = %q, want %q", tc.d, got, tc.listen)
		}
		got, err := tc.d.MigrationURL(pooled)
		if got != tc.migrate || (err != nil) != tc.migrateErr {
			t.Errorf("%+v MigrationURL = %q, %v; want %q, error %v", tc.d, got, err, tc.migrate, tc.migrateErr)
		}
		if err != nil && !strings.Contains(err.Error(), "MIGHTYETL_DATABASE_DIRECT_URL") {
			t.Errorf("MigrationURL error does not name the fix: %v", err)
		}
	}
}
