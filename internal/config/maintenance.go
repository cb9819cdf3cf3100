package config

import (
	"fmt"
	"time"

	"github.com/mightyetl/mightyetl/internal/maintenance"
	"github.com/mightyetl/mightyetl/internal/pg"
)

// Bounds of the retention windows: zero skips that part; anything shorter
// than MinPruneWindow is refused as a likely typo that would delete live
// history.
const (
	MinPruneWindow = time.Hour
	MaxPruneWindow = 10 * 365 * 24 * time.Hour
)

// Prune holds the retention windows and batch size shared by `etlctl prune`
// and the worker's built-in maintenance (same variables, same defaults).
type Prune struct {
	TerminalJobsOlderThan time.Duration // MIGHTYETL_PRUNE_TERMINAL_JOBS_OLDER_THAN, default 720h (0 skips, else 1h..10y)
	LedgerOlderThan       time.Duration // MIGHTYETL_PRUNE_LEDGER_OLDER_THAN, default 720h
	OutboxOlderThan       time.Duration // MIGHTYETL_PRUNE_OUTBOX_OLDER_THAN, default 720h
	AuditOlderThan        time.Duration // MIGHTYETL_PRUNE_AUDIT_OLDER_THAN, default 2160h
	Batch                 int           // MIGHTYETL_PRUNE_BATCH, default 1000 (1..100000)

	flagPrefix string // the flags' prefix RegisterPrune was given, for Validate's messages
}

// RegisterPrune registers the retention settings on l into dst, each flag
// named with flagPrefix ("" for `etlctl prune`: -audit-older-than; "prune-"
// for the worker: -prune-audit-older-than).
func RegisterPrune(l *Loader, dst *Prune, flagPrefix string) {
	dst.flagPrefix = flagPrefix
	l.Duration(&dst.TerminalJobsOlderThan, "MIGHTYETL_PRUNE_TERMINAL_JOBS_OLDER_THAN", flagPrefix+"terminal-jobs-older-than",
		maintenance.DefaultWindow, 0, MaxPruneWindow, "delete SUCCEEDED/FAILED/CANCELLED jobs unchanged for this long (0 skips)")
	l.Duration(&dst.LedgerOlderThan, "MIGHTYETL_PRUNE_LEDGER_OLDER_THAN", flagPrefix+"ledger-older-than",
		maintenance.DefaultWindow, 0, MaxPruneWindow, "delete response-ledger rows older than this (0 skips)")
	l.Duration(&dst.OutboxOlderThan, "MIGHTYETL_PRUNE_OUTBOX_OLDER_THAN", flagPrefix+"outbox-older-than",
		maintenance.DefaultWindow, 0, MaxPruneWindow, "delete outbox events no relay published within this long (0 skips)")
	l.Duration(&dst.AuditOlderThan, "MIGHTYETL_PRUNE_AUDIT_OLDER_THAN", flagPrefix+"audit-older-than",
		maintenance.DefaultAuditWindow, 0, MaxPruneWindow, "delete operator audit records older than this (0 skips)")
	l.Int(&dst.Batch, "MIGHTYETL_PRUNE_BATCH", flagPrefix+"batch", pg.DefaultPruneBatch, 1, 100000, "rows per DELETE statement")
}

// Validate refuses a window that is neither 0 (skip) nor at least
// MinPruneWindow, naming the variable and the flag.
func (p Prune) Validate() error {
	for _, w := range []struct {
		env, flag string
		d         time.Duration
	}{
		{"MIGHTYETL_PRUNE_TERMINAL_JOBS_OLDER_THAN", "terminal-jobs-older-than", p.TerminalJobsOlderThan},
		{"MIGHTYETL_PRUNE_LEDGER_OLDER_THAN", "ledger-older-than", p.LedgerOlderThan},
		{"MIGHTYETL_PRUNE_OUTBOX_OLDER_THAN", "outbox-older-than", p.OutboxOlderThan},
		{"MIGHTYETL_PRUNE_AUDIT_OLDER_THAN", "audit-older-than", p.AuditOlderThan},
	} {
		if w.d != 0 && w.d < MinPruneWindow {
			return fmt.Errorf("%s / -%s%s: must be 0 (skip) or at least %s", w.env, p.flagPrefix, w.flag, MinPruneWindow)
		}
	}
	return nil
}

// Windows are the windows as internal/maintenance takes them.
func (p Prune) Windows() maintenance.Windows {
	return maintenance.Windows{TerminalJobs: p.TerminalJobsOlderThan, Ledger: p.LedgerOlderThan,
		Outbox: p.OutboxOlderThan, Audit: p.AuditOlderThan}
}

// Maintenance is the worker's built-in retention (internal/maintenance,
// docs/operations/maintenance.md).
type Maintenance struct {
	Enabled  bool          // MIGHTYETL_MAINTENANCE_ENABLED, default true
	Interval time.Duration // MIGHTYETL_MAINTENANCE_INTERVAL, default 10m (4s..24h)
	Prune    Prune         // MIGHTYETL_PRUNE_*, as `etlctl prune`
}

// RegisterMaintenance registers the maintenance settings on l into dst.
func RegisterMaintenance(l *Loader, dst *Maintenance) {
	l.Bool(&dst.Enabled, "MIGHTYETL_MAINTENANCE_ENABLED", "maintenance-enabled", true,
		"run retention in this worker when elected maintainer (one worker of the fleet at a time)")
	l.Duration(&dst.Interval, "MIGHTYETL_MAINTENANCE_INTERVAL", "maintenance-interval", maintenance.DefaultInterval,
		4*time.Second, 24*time.Hour, "how often the elected maintainer prunes; a dead maintainer is replaced within one interval")
	RegisterPrune(l, &dst.Prune, "prune-")
}
