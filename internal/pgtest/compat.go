package pgtest

import (
	"context"
	"testing"

	"github.com/mightyetl/mightyetl/internal/pg"
)

// SetFutureSchema makes db look migrated to schema version with an
// etl_schema_compatibility row requiring binary level: a synthetic goose
// version row (inserted once) and an upserted compatibility row, not a
// migration. For tests of the schema-compatibility contract
// (pg.CheckCompatibility); the database is not usable by goose afterwards.
func SetFutureSchema(t testing.TB, db pg.DBTX, version, level int64) {
	t.Helper()
	ctx := context.Background()
	_, err := db.Exec(ctx, `INSERT INTO mightyetl_schema_migrations (version_id, is_applied)
		SELECT $1::bigint, true WHERE NOT EXISTS (SELECT 1 FROM mightyetl_schema_migrations WHERE version_id = $1::bigint)`, version)
	if err != nil {
		t.Fatalf("pgtest: insert schema version %d: %v", version, err)
	}
	_, err = db.Exec(ctx, `INSERT INTO etl_schema_compatibility (schema_version, oldest_compatible_binary) VALUES ($1, $2)
		ON CONFLICT (schema_version) DO UPDATE SET oldest_compatible_binary = excluded.oldest_compatible_binary`, version, level)
	if err != nil {
		t.Fatalf("pgtest: set schema %d compatibility: %v", version, err)
	}
}
