package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"os"
	"os/signal"
	"syscall"
	"time"

	"github.com/mightyetl/mightyetl/internal/config"
	"github.com/mightyetl/mightyetl/internal/pg"
)

const backfillUsage = `usage:
  etlctl backfill list                 name and description of every backfill this binary carries
  etlctl backfill status [NAME]        rows each backfill (or NAME) still has to do
  etlctl backfill run NAME [-batch-size 1000] [-pause 0s] [-lock-timeout 1s] [-statement-timeout 30s] [-retry-for 10m]
exit status of run: 0 nothing remains, 3 stopped by SIGINT/SIGTERM after the batch in flight (run it again to continue),
1 failed (rows done stay done), 2 bad usage`

// exitBackfillStopped is `backfill run`'s exit status when a signal stopped
// it before every row was done.
const exitBackfillStopped = 3

// runBackfill serves `etlctl backfill`: the product's registry, stopped by
// SIGINT or SIGTERM after the batch in flight (a second signal ends the
// process at once).
func runBackfill(args []string) int {
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGINT, syscall.SIGTERM)
	defer stop()
	go func() {
		<-ctx.Done()
		stop() // the next signal has its default effect
	}()
	return runBackfillWith(ctx, args, pg.Backfills, os.Getenv, os.Stdout, os.Stderr)
}

// runBackfillWith is runBackfill on registry reg; ctx ending stops a run
// after its batch in flight.
func runBackfillWith(ctx context.Context, args []string, reg *pg.BackfillRegistry, getenv func(string) string, stdout, stderr io.Writer) int {
	if len(args) == 0 {
		fmt.Fprintln(stderr, backfillUsage)
		return 2
	}
	verb, rest := args[0], args[1:]
	var name string
	switch verb {
	case "-h", "--help", "help":
		fmt.Fprintln(stdout, backfillUsage)
		return 0
	case "list":
	case "status":
		if len(rest) > 0 && rest[0] != "" && rest[0][0] != '-' {
			name, rest = rest[0], rest[1:]
		}
	case "run":
		if len(rest) == 0 || rest[0] == "" || rest[0][0] == '-' {
			fmt.Fprintf(stderr, "etlctl backfill run: name the backfill (etlctl backfill list)\n%s\n", backfillUsage)
			return 2
		}
		name, rest = rest[0], rest[1:]
	default:
		fmt.Fprintf(stderr, "etlctl backfill: unknown verb %q (want list, status or run)\n%s\n", verb, backfillUsage)
		return 2
	}
	if name != "" {
		if _, ok := reg.Get(name); !ok {
			fmt.Fprintf(stderr, "etlctl backfill %s: no backfill named %q in this binary (etlctl backfill list)\n", verb, name)
			return 2
		}
	}

	var databaseURL string
	var db config.Database
	var o pg.BackfillOptions
	l := config.NewLoader("etlctl backfill "+verb, rest, getenv)
	if verb != "list" {
		l.String(&databaseURL, "DATABASE_URL", "database-url", config.DefaultDatabaseURL, "PostgreSQL URL", nil)
		// A backfill needs no session of its own: behind a transaction
		// pooler it runs on DATABASE_URL (each batch is one transaction).
		config.RegisterDatabase(l, &db)
	}
	if verb == "run" {
		l.Int(&o.BatchSize, "MIGHTYETL_BACKFILL_BATCH_SIZE", "batch-size", pg.DefaultBackfillBatchSize, 1, 100000,
			"most rows one batch (one transaction) does")
		l.Duration(&o.Pause, "MIGHTYETL_BACKFILL_PAUSE", "pause", 0, 0, time.Hour,
			"wait between two batches, to leave the database to the fleet")
		l.Duration(&o.LockTimeout, "MIGHTYETL_BACKFILL_LOCK_TIMEOUT", "lock-timeout", pg.DefaultBackfillLockTimeout,
			10*time.Millisecond, time.Minute, "lock_timeout of each batch")
		l.Duration(&o.StatementTimeout, "MIGHTYETL_BACKFILL_STATEMENT_TIMEOUT", "statement-timeout", pg.DefaultBackfillStatementTimeout,
			100*time.Millisecond, time.Hour, "statement_timeout of each batch")
		l.Duration(&o.RetryFor, "MIGHTYETL_BACKFILL_RETRY_FOR", "retry-for", pg.DefaultBackfillRetryFor,
			time.Second, 24*time.Hour, "how long a batch is retried after lock timeouts (SQLSTATE 55P03), or rows all locked by others are waited for")
	}
	if err := l.Parse(); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			fmt.Fprintln(stdout, backfillUsage)
			l.Usage(stdout)
			return 0
		}
		fmt.Fprintf(stderr, "etlctl backfill %s: invalid configuration: %v\n", verb, err)
		return 2
	}

	if verb == "list" {
		list := reg.List()
		for _, b := range list {
			fmt.Fprintf(stdout, "%s\t%s\n", b.Name, b.Description)
		}
		if len(list) == 0 {
			fmt.Fprintln(stderr, "etlctl backfill list: this binary carries no backfill")
		}
		return 0
	}

	connectCtx, cancel := context.WithTimeout(context.WithoutCancel(ctx), time.Minute)
	defer cancel()
	pool, err := pg.NewPool(connectCtx, databaseURL, pg.PoolOptions{MaxConns: 2, ApplicationName: "mightyetl-etlctl-backfill", Pooler: db.Pooler})
	if err != nil {
		fmt.Fprintf(stderr, "etlctl backfill %s: database %s: %s\n", verb, pg.RedactURL(databaseURL), pg.RedactError(err, databaseURL))
		return 1
	}
	defer pool.Close()

	if verb == "status" {
		todo := reg.List()
		if name != "" {
			b, _ := reg.Get(name)
			todo = []pg.Backfill{b}
		}
		for _, b := range todo {
			n, err := pg.BackfillRemaining(ctx, pool, b)
			if err != nil {
				fmt.Fprintf(stderr, "etlctl backfill status %s: %s\n", b.Name, pg.ErrorClass(err))
				return 1
			}
			fmt.Fprintf(stdout, "%s\tremaining %d\n", b.Name, n)
		}
		return 0
	}

	b, _ := reg.Get(name)
	log := slog.New(slog.NewJSONHandler(stderr, nil))
	o.OnBatch = func(p pg.BackfillProgress) {
		fmt.Fprintf(stdout, "batch %d: %d rows (%d this run)\n", p.Batch, p.Rows, p.Done)
	}
	o.OnRetry = func(batch int, state string) {
		log.Warn("backfill batch waits for a lock; retrying", "backfill", b.Name, "batch", batch, "sqlstate_class", state[:2])
	}
	// The first count runs even when a signal came meanwhile (a second one
	// ends the process); the run then stops before its first batch.
	start, err := pg.BackfillRemaining(context.WithoutCancel(ctx), pool, b)
	if err != nil {
		fmt.Fprintf(stderr, "etlctl backfill run %s: %s\n", b.Name, pg.ErrorClass(err))
		return 1
	}
	fmt.Fprintf(stdout, "backfill %s: %d rows to do, batches of %d\n", b.Name, start, o.BatchSize)
	res, err := pg.RunBackfill(ctx, pool, b, o)
	switch {
	case err != nil:
		fmt.Fprintf(stderr, "etlctl backfill run %s: %v (%d rows done this run stay done; run it again)\n", b.Name, err, res.Done)
		return 1
	case res.Stopped && res.Remaining > 0:
		fmt.Fprintf(stdout, "stopped: %d rows this run; %d remain: run it again to continue\n", res.Done, res.Remaining)
		return exitBackfillStopped
	}
	fmt.Fprintf(stdout, "done: %d rows this run; 0 remain\n", res.Done)
	return 0
}
