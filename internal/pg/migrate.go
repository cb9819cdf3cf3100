package pg

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"log/slog"
	"strings"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/jackc/pgx/v5/stdlib"
	"github.com/mightyetl/mightyetl/migrations"
	"github.com/pressly/goose/v3"
	"github.com/pressly/goose/v3/lock"
)

// migrationTable is goose's version table; named for the product.
const migrationTable = "mightyetl_schema_migrations"

func provider(pool *pgxpool.Pool) (*goose.Provider, *sql.DB, error) {
	return newProvider(pool, migrations.FS)
}

// newProvider opens goose on pool over the migration files in fsys.
func newProvider(pool *pgxpool.Pool, fsys fs.FS) (*goose.Provider, *sql.DB, error) {
	db := stdlib.OpenDBFromPool(pool)
	locker, err := lock.NewPostgresSessionLocker()
	if err != nil {
		_ = db.Close()
		return nil, nil, fmt.Errorf("migration locker: %w", err)
	}
	p, err := goose.NewProvider(goose.DialectPostgres, db, fsys,
		goose.WithTableName(migrationTable),
		goose.WithLogger(goose.NopLogger()),
		// Serialise concurrent migrators (several binaries starting at once)
		// with a session advisory lock.
		goose.WithSessionLocker(locker),
	)
	if err != nil {
		_ = db.Close()
		return nil, nil, fmt.Errorf("open migrations: %w", err)
	}
	return p, db, nil
}

// Migrate applies every pending migration with the default Migrator: one at
// a time, each statement under a short lock_timeout, a migration that times
// out on a lock retried (see Migrator). It is safe to run from several
// processes at once: goose serialises them with a session advisory lock.
func Migrate(ctx context.Context, pool *pgxpool.Pool) error {
	return Migrator{}.Up(ctx, pool)
}

// MigrateDown rolls back the newest applied migration (default Migrator).
func MigrateDown(ctx context.Context, pool *pgxpool.Pool) error {
	return Migrator{}.Down(ctx, pool)
}

// MigrateTo migrates up or down to version exactly (default Migrator).
func MigrateTo(ctx context.Context, pool *pgxpool.Pool, version int64) error {
	return Migrator{}.To(ctx, pool, version)
}

// SchemaVersion returns the applied schema version and the version this
// binary expects (its newest embedded migration).
func SchemaVersion(ctx context.Context, pool *pgxpool.Pool) (applied, expected int64, err error) {
	p, db, err := provider(pool)
	if err != nil {
		return 0, 0, err
	}
	defer db.Close()
	applied, err = p.GetDBVersion(ctx)
	if err != nil {
		return 0, 0, fmt.Errorf("read schema version: %w", err)
	}
	srcs := p.ListSources()
	if len(srcs) > 0 {
		expected = srcs[len(srcs)-1].Version
	}
	return applied, expected, nil
}

// MigrationStatus writes one line per migration (version, applied or pending) to w.
func MigrationStatus(ctx context.Context, pool *pgxpool.Pool, w io.Writer) error {
	p, db, err := provider(pool)
	if err != nil {
		return err
	}
	defer db.Close()
	st, err := p.Status(ctx)
	if err != nil {
		return fmt.Errorf("migration status: %w", err)
	}
	for _, s := range st {
		state := "pending"
		if s.State == goose.StateApplied {
			state = "applied " + s.AppliedAt.UTC().Format("2006-01-02T15:04:05Z")
		}
		fmt.Fprintf(w, "%05d %-45s %s\n", s.Source.Version, baseName(s.Source.Path), state)
	}
	return nil
}

func baseName(p string) string {
	if i := strings.LastIndex(p, "/"); i >= 0 {
		return p[i+1:]
	}
	return p
}

// EnsureDatabase creates the database named in databaseURL when it does not
// exist, connecting to the server's "postgres" maintenance database to do so.
func EnsureDatabase(ctx context.Context, databaseURL string, log *slog.Logger) error {
	cfg, err := pgx.ParseConfig(databaseURL)
	if err != nil {
		return fmt.Errorf("parse database url: %w", err)
	}
	name := cfg.Database
	if name == "" || name == "postgres" {
		return nil
	}
	// Probe first: most starts find the database in place.
	if conn, err := pgx.ConnectConfig(ctx, cfg); err == nil {
		_ = conn.Close(ctx)
		return nil
	}
	admin := cfg.Copy()
	admin.Database = "postgres"
	conn, err := pgx.ConnectConfig(ctx, admin)
	if err != nil {
		return fmt.Errorf("connect to maintenance database: %w", err)
	}
	defer conn.Close(context.WithoutCancel(ctx))
	_, err = conn.Exec(ctx, "CREATE DATABASE "+pgx.Identifier{name}.Sanitize())
	if err != nil && !isDuplicateDatabase(err) {
		return fmt.Errorf("create database: %w", err)
	}
	if err == nil && log != nil {
		log.Info("created database")
	}
	return nil
}

func isDuplicateDatabase(err error) bool {
	var pgErr interface{ SQLState() string }
	return errors.As(err, &pgErr) && pgErr.SQLState() == "42P04"
}
