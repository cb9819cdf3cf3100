package main

import (
	"context"
	"fmt"
	"io"
	"os"
	"time"

	"github.com/mightyetl/mightyetl/internal/buildinfo"
	"github.com/mightyetl/mightyetl/internal/config"
	"github.com/mightyetl/mightyetl/internal/pg"
)

// runVersion prints the build of this binary (internal/buildinfo), one
// "key: value" line each: version, commit, modified, commit_time (when
// known) and go, then its schema-compatibility contract (pg.BinaryCompatLevel
// and the schema range pg.MinSchemaVersion..pg.MaxSchemaVersion). The
// intake and the worker export the build values as mightyetl_build_info.
//
// With DATABASE_URL or -database-url set it also reads the database
// (pg.CheckCompatibility) and prints schema_applied, schema_required_binary
// and schema_compatible, plus schema_reason when not compatible; it exits 1
// when the database cannot be read or the schema is not compatible, so a
// deploy script can gate on it. Without a URL it never connects.
func runVersion(args []string) int {
	var databaseURL string
	l := config.NewLoader("etlctl version", args, os.Getenv)
	l.String(&databaseURL, "DATABASE_URL", "database-url", "",
		"PostgreSQL URL; when set, also print the database's schema version and whether this binary may run against it", nil)
	var db config.Database
	config.RegisterDatabase(l, &db)
	if err := l.Parse(); err != nil {
		fmt.Fprintf(os.Stderr, "etlctl version: %v\nusage: etlctl version [-database-url URL]\n", err)
		return 2
	}
	printVersion(os.Stdout, buildinfo.Read())
	if databaseURL == "" {
		return 0
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	pool, err := pg.NewPool(ctx, databaseURL, pg.PoolOptions{MaxConns: 1, ApplicationName: "mightyetl-etlctl", Pooler: db.Pooler})
	if err != nil {
		fmt.Fprintf(os.Stderr, "etlctl version: database %s: %s\n", pg.RedactURL(databaseURL), pg.RedactError(err, databaseURL))
		return 1
	}
	defer pool.Close()
	c, err := pg.CheckCompatibility(ctx, pool)
	if err != nil {
		fmt.Fprintf(os.Stderr, "etlctl version: database %s: %s\n", pg.RedactURL(databaseURL), pg.RedactError(err, databaseURL))
		return 1
	}
	printSchema(os.Stdout, c)
	if !c.Compatible {
		return 1
	}
	return 0
}

func printVersion(w io.Writer, b buildinfo.Info) {
	fmt.Fprintf(w, "version: %s\ncommit: %s\nmodified: %t\n", b.Version, b.Commit, b.Modified)
	if b.Time != "" {
		fmt.Fprintf(w, "commit_time: %s\n", b.Time)
	}
	fmt.Fprintf(w, "go: %s\n", b.GoVersion)
	fmt.Fprintf(w, "binary_compat_level: %d\nschema_range: %d..%d\n", pg.BinaryCompatLevel, pg.MinSchemaVersion, pg.MaxSchemaVersion)
}

func printSchema(w io.Writer, c pg.Compatibility) {
	fmt.Fprintf(w, "schema_applied: %d\nschema_required_binary: %d\nschema_compatible: %t\n", c.Applied, c.RequiredBinary, c.Compatible)
	if c.Reason != "" {
		fmt.Fprintf(w, "schema_reason: %s\n", c.Reason)
	}
}
