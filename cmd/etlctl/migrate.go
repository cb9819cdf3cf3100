package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"log/slog"
	"os"
	"os/signal"
	"strconv"
	"syscall"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/mightyetl/mightyetl/internal/config"
	"github.com/mightyetl/mightyetl/internal/pg"
)

const migrateUsage = "usage: etlctl migrate up|down|status [-to VERSION] [-lock-timeout 1s] [-lock-retry-for 10m] [-database-url URL]"

func runMigrate(args []string) int {
	if len(args) == 0 {
		fmt.Fprintln(os.Stderr, migrateUsage)
		return 2
	}
	verb := args[0]
	var databaseURL, toRaw string
	l := config.NewLoader("etlctl migrate", args[1:], os.Getenv)
	l.String(&databaseURL, "DATABASE_URL", "database-url", config.DefaultDatabaseURL, "PostgreSQL URL", nil)
	// Migrations hold goose's session advisory lock: behind a transaction
	// pooler they run on MIGHTYETL_DATABASE_DIRECT_URL, or not at all.
	var db config.Database
	config.RegisterDatabase(l, &db)
	l.String(&toRaw, "MIGHTYETL_MIGRATE_TO", "to", "",
		"target schema version: up applies migrations up to it, down rolls back to it exactly (default: up applies all, down rolls back one)",
		func(s string) error {
			if s == "" {
				return nil
			}
			if n, err := strconv.ParseInt(s, 10, 64); err != nil || n < 0 {
				return fmt.Errorf("must be a schema version (an integer of 0 or more)")
			}
			return nil
		})
	var mig pg.Migrator
	l.Duration(&mig.LockTimeout, "MIGHTYETL_MIGRATE_LOCK_TIMEOUT", "lock-timeout", pg.DefaultMigrateLockTimeout,
		10*time.Millisecond, time.Minute,
		"lock_timeout of every migration statement whose file sets none: the longest the fleet's statements queue behind a migration waiting for a lock")
	l.Duration(&mig.LockRetryFor, "MIGHTYETL_MIGRATE_LOCK_RETRY_FOR", "lock-retry-for", pg.DefaultMigrateLockRetryFor,
		time.Second, 24*time.Hour,
		"how long one migration is retried after lock timeouts (SQLSTATE 55P03) before the run fails")
	if err := l.Parse(); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			fmt.Println(migrateUsage)
			l.Usage(os.Stdout)
			return 0
		}
		fmt.Fprintf(os.Stderr, "etlctl migrate: %v\n%s\n", err, migrateUsage)
		return 2
	}
	databaseURL, err := db.MigrationURL(databaseURL)
	if err != nil {
		fmt.Fprintf(os.Stderr, "etlctl migrate: %v\n", err)
		return 2
	}
	switch verb {
	case "up", "down", "status":
	default:
		fmt.Fprintf(os.Stderr, "etlctl migrate: unknown verb %q (want up, down or status)\n", verb)
		return 2
	}
	to := int64(-1)
	if toRaw != "" {
		if verb == "status" {
			fmt.Fprintln(os.Stderr, "etlctl migrate: -to applies to up and down, not status")
			return 2
		}
		to, _ = strconv.ParseInt(toRaw, 10, 64)
	}
	// No overall deadline: a migration that waits for locks is bounded by
	// -lock-retry-for, its statements by their files' statement_timeout;
	// SIGINT or SIGTERM stops the run (the running migration rolls back).
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	log := slog.New(slog.NewJSONHandler(os.Stderr, nil))
	mig.Log = log
	if verb == "up" {
		if err := pg.EnsureDatabase(ctx, databaseURL, log); err != nil {
			fmt.Fprintf(os.Stderr, "etlctl migrate: database %s: %s\n", pg.RedactURL(databaseURL), pg.RedactError(err, databaseURL))
			return 1
		}
	}
	pool, err := pg.NewPool(ctx, databaseURL, pg.PoolOptions{MaxConns: 2, ApplicationName: "mightyetl-etlctl"})
	if err != nil {
		fmt.Fprintf(os.Stderr, "etlctl migrate: database %s: %s\n", pg.RedactURL(databaseURL), pg.RedactError(err, databaseURL))
		return 1
	}
	defer pool.Close()
	if to >= 0 {
		if code := checkTarget(ctx, pool, verb, to); code != 0 {
			return code
		}
	}
	switch {
	case verb == "status":
		err = pg.MigrationStatus(ctx, pool, os.Stdout)
	case to >= 0:
		err = mig.To(ctx, pool, to)
	case verb == "up":
		err = mig.Up(ctx, pool)
	default:
		err = mig.Down(ctx, pool)
	}
	if err != nil {
		fmt.Fprintf(os.Stderr, "etlctl migrate %s: %v\n", verb, err)
		return 1
	}
	if verb != "status" {
		applied, expected, err := pg.SchemaVersion(ctx, pool)
		if err == nil {
			fmt.Printf("schema version %d (binary expects %d)\n", applied, expected)
		}
	}
	return 0
}

// checkTarget refuses a -to that points the wrong way (up to an older
// version, down to a newer one) or past the newest migration this binary
// carries, so `-to` never silently does nothing or the opposite of the verb.
func checkTarget(ctx context.Context, pool *pgxpool.Pool, verb string, to int64) int {
	applied, newest, err := pg.SchemaVersion(ctx, pool)
	if err != nil {
		fmt.Fprintf(os.Stderr, "etlctl migrate %s: %v\n", verb, err)
		return 1
	}
	switch {
	case verb == "up" && to > newest:
		fmt.Fprintf(os.Stderr, "etlctl migrate up: -to %d is past this binary's newest migration %d\n", to, newest)
		return 2
	case verb == "up" && to < applied:
		fmt.Fprintf(os.Stderr, "etlctl migrate up: -to %d is below the applied schema version %d (use migrate down -to %d)\n", to, applied, to)
		return 2
	case verb == "down" && to > applied:
		fmt.Fprintf(os.Stderr, "etlctl migrate down: -to %d is above the applied schema version %d (use migrate up -to %d)\n", to, applied, to)
		return 2
	}
	return 0
}
