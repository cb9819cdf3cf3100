package pg

import (
	"context"
	"errors"
	"fmt"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
)

// The schema-compatibility contract (migration 00021,
// docs/operations/upgrades.md). A binary declares the range of schema
// versions it works with and its compatibility level; each schema version
// records, in etl_schema_compatibility, the oldest binary level that may run
// against it.
const (
	// BinaryCompatLevel is this binary's compatibility level. A release
	// raises it when its code changes what it needs from the schema in a way
	// a later schema may declare incompatible.
	BinaryCompatLevel int64 = 3
	// MinSchemaVersion is the oldest schema this binary's code runs against:
	// it uses the objects of every migration up to this one.
	MinSchemaVersion int64 = 25
	// MaxSchemaVersion is the newest schema this binary knows (its newest
	// embedded migration). A newer schema is accepted only when its newest
	// etl_schema_compatibility row admits BinaryCompatLevel.
	MaxSchemaVersion int64 = 25
)

// Compatibility is the outcome of CheckCompatibility. The zero value is
// not compatible.
type Compatibility struct {
	// Applied is the database's applied schema version.
	Applied int64
	// RequiredBinary is the oldest binary level of the newest
	// etl_schema_compatibility row at or below Applied; 0 when there is none
	// (a schema older than 00021).
	RequiredBinary int64
	// Compatible reports whether this binary may run against the schema.
	Compatible bool
	// Reason is "" when Compatible, else a fixed sentence naming both
	// versions and what the operator does about it.
	Reason string
}

// Compatible applies the rule to an applied schema version and the oldest
// binary level that schema records (0: none recorded):
//   - applied < MinSchemaVersion: incompatible, the schema is too old (run
//     `etlctl migrate up`);
//   - MinSchemaVersion <= applied <= MaxSchemaVersion: compatible;
//   - applied > MaxSchemaVersion: compatible only when requiredBinary is
//     recorded and at most BinaryCompatLevel.
func Compatible(applied, requiredBinary int64) Compatibility {
	c := Compatibility{Applied: applied, RequiredBinary: requiredBinary}
	switch {
	case applied < MinSchemaVersion:
		c.Reason = fmt.Sprintf("database schema %d is older than this binary's minimum %d (binary level %d): run `etlctl migrate up`",
			applied, MinSchemaVersion, BinaryCompatLevel)
	case applied <= MaxSchemaVersion:
		c.Compatible = true
	case requiredBinary == 0:
		c.Reason = fmt.Sprintf("database schema %d is newer than this binary's maximum %d and records no oldest binary level: deploy a newer binary",
			applied, MaxSchemaVersion)
	case requiredBinary > BinaryCompatLevel:
		c.Reason = fmt.Sprintf("database schema %d needs binary level >= %d, this binary is level %d (schemas %d..%d): deploy a newer binary",
			applied, requiredBinary, BinaryCompatLevel, MinSchemaVersion, MaxSchemaVersion)
	default:
		c.Compatible = true
	}
	return c
}

// compatTableVersion is the migration that created etl_schema_compatibility.
const compatTableVersion = 21

// CheckCompatibility reads the applied schema version and the newest
// etl_schema_compatibility row at or below it, and applies Compatible. It
// costs two indexed reads. An error means the check could not be made (the
// caller treats the binary as not ready); an incompatible schema is not an
// error.
func CheckCompatibility(ctx context.Context, pool *pgxpool.Pool) (Compatibility, error) {
	var applied int64
	// goose's version table, read as goose reads it (GetDBVersion): the
	// largest version_id is the applied version.
	err := pool.QueryRow(ctx, `SELECT coalesce(max(version_id), 0) FROM `+migrationTable).Scan(&applied)
	if err != nil {
		return Compatibility{}, fmt.Errorf("read schema version: %w", err)
	}
	var required int64
	if applied >= compatTableVersion {
		err = pool.QueryRow(ctx, `SELECT oldest_compatible_binary FROM etl_schema_compatibility
			WHERE schema_version <= $1 ORDER BY schema_version DESC LIMIT 1`, applied).Scan(&required)
		if err != nil && !errors.Is(err, pgx.ErrNoRows) {
			return Compatibility{}, fmt.Errorf("read schema compatibility: %w", err)
		}
	}
	return Compatible(applied, required), nil
}
