// Package migrations embeds the versioned SQL migrations of mightyETL.
//
// Files are named NNNNN_descriptive_name.sql and carry goose Up and Down
// sections. Every binary applies them through internal/pg.Migrate, so the
// schema a binary expects always travels with it.
package migrations

import "embed"

// FS holds every migration file; the version is the numeric file prefix.
//
//go:embed *.sql
var FS embed.FS
