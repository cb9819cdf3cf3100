package main

import (
	"context"
	"fmt"
	"log/slog"
	"os"
	"time"

	"github.com/mightyetl/mightyetl/internal/config"
	"github.com/mightyetl/mightyetl/internal/pg"
)

func runMigrate(args []string) int {
	if len(args) == 0 {
		fmt.Fprintln(os.Stderr, "usage: etlctl migrate up|down|status [-database-url URL]")
		return 2
	}
	verb := args[0]
	var databaseURL string
	l := config.NewLoader("etlctl migrate", args[1:], os.Getenv)
	l.String(&databaseURL, "DATABASE_URL", "database-url", config.DefaultDatabaseURL, "PostgreSQL URL", nil)
	if err := l.Parse(); err != nil {
		fmt.Fprintf(os.Stderr, "etlctl migrate: %v\n", err)
		return 2
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	log := slog.New(slog.NewJSONHandler(os.Stderr, nil))
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
	switch verb {
	case "up":
		err = pg.Migrate(ctx, pool)
	case "down":
		err = pg.MigrateDown(ctx, pool)
	case "status":
		err = pg.MigrationStatus(ctx, pool, os.Stdout)
	default:
		fmt.Fprintf(os.Stderr, "etlctl migrate: unknown verb %q (want up, down or status)\n", verb)
		return 2
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
