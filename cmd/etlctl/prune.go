package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"os"
	"os/signal"
	"syscall"
	"time"

	"github.com/mightyetl/mightyetl/internal/config"
	"github.com/mightyetl/mightyetl/internal/pg"
)

// Bounds of the prune windows: zero skips that part; anything shorter than
// minPruneWindow is refused as a likely typo that would delete live history.
const (
	defaultPruneWindow = 720 * time.Hour
	// defaultAuditPruneWindow keeps the operator audit three times longer
	// than the jobs it names: who acted stays answerable after the job is gone.
	defaultAuditPruneWindow = 2160 * time.Hour
	minPruneWindow          = time.Hour
	maxPruneWindow          = 10 * 365 * 24 * time.Hour
)

// runPrune serves `etlctl prune`: it deletes terminal jobs, response-ledger
// rows, unpublished outbox rows and operator audit rows older than their
// windows (database clock) in bounded batches and prints how many it
// deleted. Jobs a replay references are always kept. Safe to run from cron and concurrently with the service and other pruners.
func runPrune(args []string) int {
	var (
		databaseURL     string
		jobsOlderThan   time.Duration
		ledgerOlderThan time.Duration
		outboxOlderThan time.Duration
		auditOlderThan  time.Duration
		batch           int
		timeout         time.Duration
	)
	l := config.NewLoader("etlctl prune", args, os.Getenv)
	l.String(&databaseURL, "DATABASE_URL", "database-url", config.DefaultDatabaseURL, "PostgreSQL URL", nil)
	l.Duration(&jobsOlderThan, "MIGHTYETL_PRUNE_TERMINAL_JOBS_OLDER_THAN", "terminal-jobs-older-than",
		defaultPruneWindow, 0, maxPruneWindow, "delete SUCCEEDED/FAILED/CANCELLED jobs unchanged for this long (0 skips)")
	l.Duration(&ledgerOlderThan, "MIGHTYETL_PRUNE_LEDGER_OLDER_THAN", "ledger-older-than",
		defaultPruneWindow, 0, maxPruneWindow, "delete response-ledger rows older than this (0 skips)")
	l.Duration(&outboxOlderThan, "MIGHTYETL_PRUNE_OUTBOX_OLDER_THAN", "outbox-older-than",
		defaultPruneWindow, 0, maxPruneWindow, "delete outbox events no relay published within this long (0 skips)")
	l.Duration(&auditOlderThan, "MIGHTYETL_PRUNE_AUDIT_OLDER_THAN", "audit-older-than",
		defaultAuditPruneWindow, 0, maxPruneWindow, "delete operator audit records older than this (0 skips)")
	l.Int(&batch, "MIGHTYETL_PRUNE_BATCH", "batch", pg.DefaultPruneBatch, 1, 100000, "rows per DELETE statement")
	l.Duration(&timeout, "MIGHTYETL_PRUNE_TIMEOUT", "timeout", time.Hour, time.Second, 24*time.Hour,
		"give up after this long (rows already deleted stay deleted)")
	if err := l.Parse(); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			fmt.Println("usage: etlctl prune [flags]")
			l.Usage(os.Stdout)
			return 0
		}
		fmt.Fprintf(os.Stderr, "etlctl prune: invalid configuration: %v\n", err)
		return 2
	}
	for _, w := range []struct {
		name string
		d    time.Duration
	}{{"-terminal-jobs-older-than", jobsOlderThan}, {"-ledger-older-than", ledgerOlderThan}, {"-outbox-older-than", outboxOlderThan},
		{"-audit-older-than", auditOlderThan}} {
		if w.d != 0 && w.d < minPruneWindow {
			fmt.Fprintf(os.Stderr, "etlctl prune: invalid configuration: %s: must be 0 (skip) or at least %s\n", w.name, minPruneWindow)
			return 2
		}
	}
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGINT, syscall.SIGTERM)
	defer stop()
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	pool, err := pg.NewPool(ctx, databaseURL, pg.PoolOptions{MaxConns: 2, ApplicationName: "mightyetl-etlctl"})
	if err != nil {
		fmt.Fprintf(os.Stderr, "etlctl prune: database %s: %s\n", pg.RedactURL(databaseURL), pg.RedactError(err, databaseURL))
		return 1
	}
	defer pool.Close()
	if applied, expected, err := pg.SchemaVersion(ctx, pool); err != nil || applied != expected {
		fmt.Fprintf(os.Stderr, "etlctl prune: database schema is not at the expected version (%d, binary expects %d); run `etlctl migrate up` (%v)\n", applied, expected, err)
		return 1
	}
	status := 0
	if jobsOlderThan > 0 {
		n, err := pg.PruneTerminalJobs(ctx, pool, jobsOlderThan, batch)
		fmt.Printf("pruned %d terminal jobs older than %s\n", n, jobsOlderThan)
		if err != nil {
			fmt.Fprintf(os.Stderr, "etlctl prune: %v\n", err)
			status = 1
		}
	}
	if ledgerOlderThan > 0 {
		n, err := pg.PruneLedger(ctx, pool, ledgerOlderThan, batch)
		fmt.Printf("pruned %d ledger rows older than %s\n", n, ledgerOlderThan)
		if err != nil {
			fmt.Fprintf(os.Stderr, "etlctl prune: %v\n", err)
			status = 1
		}
	}
	if n, err := pg.PruneOrphanQueueRows(ctx, pool); err != nil {
		fmt.Fprintf(os.Stderr, "etlctl prune: %v\n", err)
		status = 1
	} else if n > 0 {
		fmt.Printf("pruned %d claim-queue rows without a job\n", n)
	}
	if outboxOlderThan > 0 {
		n, err := pg.PruneOutbox(ctx, pool, outboxOlderThan, batch)
		fmt.Printf("pruned %d unpublished outbox events older than %s\n", n, outboxOlderThan)
		if err != nil {
			fmt.Fprintf(os.Stderr, "etlctl prune: %v\n", err)
			status = 1
		}
	}
	if auditOlderThan > 0 {
		n, err := pg.PruneOperatorAudit(ctx, pool, auditOlderThan, batch)
		fmt.Printf("pruned %d operator audit records older than %s\n", n, auditOlderThan)
		if err != nil {
			fmt.Fprintf(os.Stderr, "etlctl prune: %v\n", err)
			status = 1
		}
	}
	return status
}
