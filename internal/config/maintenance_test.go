package config_test

import (
	"strings"
	"testing"
	"time"

	"github.com/mightyetl/mightyetl/internal/config"
	"github.com/mightyetl/mightyetl/internal/maintenance"
	"github.com/mightyetl/mightyetl/internal/pg"
)

// A worker configured by nothing runs maintenance with the library's
// defaults, which are `etlctl prune`'s windows.
func TestWorkerMaintenanceDefaults(t *testing.T) {
	c, _, err := config.LoadWorker(nil, func(string) string { return "" })
	if err != nil {
		t.Fatal(err)
	}
	m := c.Maintenance
	if !m.Enabled || m.Interval != maintenance.DefaultInterval || m.Prune.Windows() != maintenance.DefaultWindows() ||
		m.Prune.Batch != pg.DefaultPruneBatch {
		t.Fatalf("defaults: %+v", m)
	}
}

// The worker reads the same MIGHTYETL_PRUNE_* variables as `etlctl prune`,
// its flags carry the prune- prefix, and a window under an hour is refused
// naming both.
func TestWorkerMaintenanceSettings(t *testing.T) {
	env := map[string]string{
		"MIGHTYETL_MAINTENANCE_ENABLED":     "false",
		"MIGHTYETL_MAINTENANCE_INTERVAL":    "30s",
		"MIGHTYETL_PRUNE_OUTBOX_OLDER_THAN": "168h",
		"MIGHTYETL_PRUNE_LEDGER_OLDER_THAN": "0",
	}
	c, _, err := config.LoadWorker([]string{"-prune-batch", "50"}, func(k string) string { return env[k] })
	if err != nil {
		t.Fatal(err)
	}
	m := c.Maintenance
	if m.Enabled || m.Interval != 30*time.Second || m.Prune.OutboxOlderThan != 168*time.Hour || m.Prune.LedgerOlderThan != 0 ||
		m.Prune.Batch != 50 {
		t.Fatalf("settings: %+v", m)
	}
	for name, e := range map[string]map[string]string{
		"MIGHTYETL_PRUNE_AUDIT_OLDER_THAN / -prune-audit-older-than: must be 0 (skip) or at least 1h0m0s": {"MIGHTYETL_PRUNE_AUDIT_OLDER_THAN": "30m"},
		"MIGHTYETL_MAINTENANCE_INTERVAL": {"MIGHTYETL_MAINTENANCE_INTERVAL": "1s"},
		"MIGHTYETL_MAINTENANCE_ENABLED":  {"MIGHTYETL_MAINTENANCE_ENABLED": "sometimes"},
	} {
		if _, _, err := config.LoadWorker(nil, func(k string) string { return e[k] }); err == nil || !strings.Contains(err.Error(), name) {
			t.Errorf("%v: %v, want an error naming %q", e, err, name)
		}
	}
}
