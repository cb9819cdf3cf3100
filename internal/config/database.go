package config

import (
	"errors"

	"github.com/mightyetl/mightyetl/internal/pg"
)

// Database holds the database connection settings the intake, the worker and
// etlctl share besides DATABASE_URL: what sits between them and PostgreSQL
// (docs/operations/pgbouncer.md).
type Database struct {
	// Pooler is MIGHTYETL_DATABASE_POOLER: none (default) when DATABASE_URL
	// reaches PostgreSQL itself (or a pooler in session mode), transaction
	// when it reaches a pooler in transaction mode (PgBouncer pool_mode =
	// transaction): see pg.PoolerTransaction.
	Pooler pg.Pooler
	// DirectURL is MIGHTYETL_DATABASE_DIRECT_URL: a URL that reaches
	// PostgreSQL without a transaction pooler, for what needs a session of
	// its own: the outbox relay's LISTEN and `etlctl migrate` (goose's
	// session advisory lock). Empty means DATABASE_URL; with
	// Pooler=transaction and no DirectURL the relay polls and migrate
	// refuses to run.
	DirectURL string
}

// RegisterDatabase registers the database connection settings on l into dst.
func RegisterDatabase(l *Loader, dst *Database) {
	l.String(new(string), "MIGHTYETL_DATABASE_POOLER", "database-pooler", string(pg.PoolerNone),
		"connection pooler in front of PostgreSQL: none or transaction (PgBouncer pool_mode=transaction)", func(s string) error {
			p, err := pg.ParsePooler(s)
			if err != nil {
				return errors.New("must be none or transaction")
			}
			dst.Pooler = p
			return nil
		})
	l.String(&dst.DirectURL, "MIGHTYETL_DATABASE_DIRECT_URL", "database-direct-url", "",
		"PostgreSQL URL without a transaction pooler, for LISTEN and migrations (default: DATABASE_URL)", nil)
}

// ListenURL is the URL the outbox relay opens its LISTEN connection on, given
// the pooled databaseURL: DirectURL when set; databaseURL without a
// transaction pooler; "" (poll only) with Pooler=transaction and no DirectURL.
func (d Database) ListenURL(databaseURL string) string {
	switch {
	case d.DirectURL != "":
		return d.DirectURL
	case d.Pooler.Transaction():
		return ""
	}
	return databaseURL
}

// MigrationURL is the URL migrations run on, given databaseURL: DirectURL
// when set, else databaseURL, or an error with Pooler=transaction (goose
// holds a session advisory lock, which a transaction pooler cannot keep).
func (d Database) MigrationURL(databaseURL string) (string, error) {
	switch {
	case d.DirectURL != "":
		return d.DirectURL, nil
	case d.Pooler.Transaction():
		return "", errors.New("MIGHTYETL_DATABASE_POOLER=transaction: migrations need a direct connection; set MIGHTYETL_DATABASE_DIRECT_URL to a URL that bypasses the pooler")
	}
	return databaseURL, nil
}
