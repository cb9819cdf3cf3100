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

// runPrune serves `etlctl prune`: it deletes terminal jobs, response-ledger
// rows, unpublished outbox rows and operator audit rows older than their
// windows (database clock), and what large jobs leave behind
// (pg.ChunkedPruneKinds, no window), in bounded batches and prints how
// many it deleted. Jobs a replay references are always kept. Its windows are the
// worker's built-in maintenance settings (config.RegisterPrune, same
// variables and defaults). Safe to run from cron and concurrently with the
// service, the fleet's elected maintainer and other pruners: every batch is
// an idempotent DELETE of rows locked FOR UPDATE SKIP LOCKED, so each row
// goes exactly once and together they delete what either would alone.
func runPrune(args []string) int {
	var (
		databaseURL string
		windows     config.Prune
		timeout     time.Duration
	)
	l := config.NewLoader("etlctl prune", args, os.Getenv)
	l.String(&databaseURL, "DATABASE_URL", "database-url", config.DefaultDatabaseURL, "PostgreSQL URL", nil)
	var db config.Database
	config.RegisterDatabase(l, &db)
	config.RegisterPrune(l, &windows, "")
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
	if err := windows.Validate(); err != nil {
		fmt.Fprintf(os.Stderr, "etlctl prune: invalid configuration: %v\n", err)
		return 2
	}
	jobsOlderThan, ledgerOlderThan, outboxOlderThan, auditOlderThan, batch :=
		windows.TerminalJobsOlderThan, windows.LedgerOlderThan, windows.OutboxOlderThan, windows.AuditOlderThan, windows.Batch
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGINT, syscall.SIGTERM)
	defer stop()
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	pool, err := pg.NewPool(ctx, databaseURL, pg.PoolOptions{MaxConns: 2, ApplicationName: "mightyetl-etlctl", Pooler: db.Pooler})
	if err != nil {
		fmt.Fprintf(os.Stderr, "etlctl prune: database %s: %s\n", pg.RedactURL(databaseURL), pg.RedactError(err, databaseURL))
		return 1
	}
	defer pool.Close()
	// The schema-compatibility contract, as the worker follows it: prune
	// runs on every schema this binary may run against (a rollback to the
	// previous schema included), not only on its newest.
	if c, err := pg.CheckCompatibility(ctx, pool); err != nil {
		fmt.Fprintf(os.Stderr, "etlctl prune: read the database schema: %s\n", pg.ErrorClass(err))
		return 1
	} else if !c.Compatible {
		fmt.Fprintf(os.Stderr, "etlctl prune: %s\n", c.Reason)
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
	// What large jobs leave behind: no window, as the maintainer does.
	for _, kind := range pg.ChunkedPruneKinds {
		n, err := pg.PruneChunked(ctx, pool, kind, batch)
		if n > 0 {
			fmt.Printf("pruned %d %s\n", n, chunkedPruneWhat[kind])
		}
		if err != nil {
			fmt.Fprintf(os.Stderr, "etlctl prune: %v\n", err)
			status = 1
		}
	}
	return status
}

// chunkedPruneWhat names the rows of each chunked-job kind in prune's
// output.
var chunkedPruneWhat = map[pg.PruneKind]string{
	pg.PruneKindChunkedQueue:      "chunked-queue rows of finished jobs",
	pg.PruneKindDiscardedLoadRows: "target rows of failed, cancelled or pruned large jobs",
	pg.PruneKindBadRecords:        "bad-record rows of pruned jobs",
	pg.PruneKindChunkedLoads:      "load rows of pruned jobs",
	pg.PruneKindExpiredUploads:    "expired uploads",
	pg.PruneKindTerminalUploads:   "uploads of finished jobs",
	pg.PruneKindUploadParts:       "upload parts of pruned uploads",
	pg.PruneKindUploadChunks:      "unreferenced upload chunks",
}
