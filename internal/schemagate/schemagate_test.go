package schemagate_test

import (
	"context"
	"testing"
	"time"

	"go.uber.org/goleak"

	"github.com/mightyetl/mightyetl/internal/pg"
	"github.com/mightyetl/mightyetl/internal/pgtest"
	"github.com/mightyetl/mightyetl/internal/schemagate"
)

func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m)
}

// The gate's verdict follows the database: compatible after Start at the
// binary's schema, incompatible once the schema needs a newer binary level,
// compatible again once it admits this level; Watch's channel closes at
// each change and only then. Stop is safe twice and keeps the verdict.
func TestGateFollowsTheSchema(t *testing.T) {
	pool, _ := pgtest.NewDatabase(t)
	ctx := context.Background()
	g := schemagate.New(schemagate.Options{DB: pool, Interval: time.Hour}) // RunOnce drives it
	if g.Compatible() {
		t.Fatal("compatible before any check")
	}
	if err := g.Start(ctx); err != nil {
		t.Fatal(err)
	}
	ok, changed := g.Watch()
	if !ok || !g.Compatible() {
		t.Fatal("not compatible after Start at the binary's own schema")
	}
	g.RunOnce(ctx)
	select {
	case <-changed:
		t.Fatal("Watch's channel closed without a change")
	default:
	}

	next := pg.MaxSchemaVersion + 1
	pgtest.SetFutureSchema(t, pool, next, pg.BinaryCompatLevel+1)
	g.RunOnce(ctx)
	select {
	case <-changed:
	default:
		t.Fatal("Watch's channel still open after the verdict changed")
	}
	if ok, changed = g.Watch(); ok || g.Compatible() {
		t.Fatal("compatible at a schema that needs a newer binary")
	}

	pgtest.SetFutureSchema(t, pool, next, pg.BinaryCompatLevel)
	g.RunOnce(ctx)
	select {
	case <-changed:
	default:
		t.Fatal("Watch's channel still open after the verdict changed back")
	}
	if !g.Compatible() {
		t.Fatal("not compatible at a newer schema that admits this level")
	}
	for range 2 {
		if err := g.Stop(ctx); err != nil {
			t.Fatal(err)
		}
	}
	if !g.Compatible() {
		t.Fatal("Stop changed the verdict")
	}
}
