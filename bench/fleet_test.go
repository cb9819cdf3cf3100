package main

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"flag"
	"io"
	"log/slog"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/mightyetl/mightyetl/internal/natstest"
	"github.com/mightyetl/mightyetl/internal/pgtest"
)

// TestFleetSmoke runs the fleet scenario with tiny sizes (1 and 2 worker
// binaries, 1 and 2 intakes, 2 workers + 2 intakes together) on the test
// server and checks that each part produced its figures; the real figures
// come from the documented runs (docs/performance.md, "Many processes").
func TestFleetSmoke(t *testing.T) {
	server := pgtest.ServerURL(t)
	var b [6]byte
	_, _ = rand.Read(b[:])
	url, err := withDatabaseName(server, "mightyetl_bench_fleet_"+hex.EncodeToString(b[:]))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		if err := dropDatabase(ctx, url); err != nil {
			t.Logf("drop smoke database: %v", err)
		}
	})
	o := options{Scenarios: []string{"fleet"}, Rate: 50, DatabaseURL: url, NATSURL: natstest.URL(t), Concurrency: 64, out: io.Discard,
		Fleet: fleetOptions{Parts: []string{fleetPartWorkers, fleetPartIntakes, fleetPartMixed}, Procs: []int{1, 2}, Intakes: []int{1, 2},
			Rounds: 1, Warmup: 300 * time.Millisecond, Window: time.Second, PickupDuration: 200 * time.Millisecond, Backlog: 30_000,
			MixedWorkers: 2, MixedIntakes: 2}}
	ctx, cancel := context.WithTimeout(context.Background(), 4*time.Minute)
	defer cancel()
	rep, err := execute(ctx, o, slog.New(slog.DiscardHandler))
	if err != nil {
		t.Fatalf("bench: %v", err)
	}
	var variants []string
	for _, r := range rep.Results {
		variants = append(variants, r.Variant)
		m := r.Metrics
		positive := func(keys ...string) {
			t.Helper()
			for _, k := range keys {
				if v, ok := m[k]; !ok || !(v > 0) {
					t.Errorf("%s: %s = %v, want > 0 (%v)", r.Variant, k, v, m)
				}
			}
		}
		switch v, _, _ := strings.Cut(r.Variant, "/"); v {
		case "workers=1", "workers=2":
			positive("jobs_per_s", "pickup_p50_ms", "pickup_p99_ms", "backlog_left_at_window_end", "worker_rss_mib_max", "server_connections_max")
			if m["pickup_samples"] != 10 {
				t.Errorf("%s: %v pickup samples, want 10", r.Variant, m["pickup_samples"])
			}
			// At most the stated budget: MIGHTYETL_WORKER_POOL_SIZE (6) + 2 per worker.
			procs := map[string]float64{"1": 1, "2": 2}[r.Settings["worker_processes"]]
			if n := m["server_connections_max"]; n > 8*procs {
				t.Errorf("%s: %v server connections, over 8 per worker", r.Variant, n)
			}
		case "intakes=1", "intakes=2":
			positive("accepted_per_s", "request_p99_ms", "intake_rss_mib_max")
		case "mixed-direct":
			positive("accepted_per_s", "jobs_per_s", "worker_rss_mib_max", "intake_rss_mib_max")
		case "summary":
			positive("jobs_per_s_ratio_2_vs_1", "accepted_per_s_ratio_2_vs_1_intakes")
		default:
			t.Errorf("unexpected variant %q", r.Variant)
		}
	}
	for _, want := range []string{"workers=1/round=1", "workers=2/round=1", "intakes=1/round=1", "intakes=2/round=1", "mixed-direct/round=1", "summary"} {
		if !slices.Contains(variants, want) {
			t.Errorf("no %s result (have %v)", want, variants)
		}
	}
}

// TestFleetFlags: the fleet's list flags parse, and bad values are refused.
func TestFleetFlags(t *testing.T) {
	var o fleetOptions
	fs := flag.NewFlagSet("bench", flag.ContinueOnError)
	fs.SetOutput(io.Discard)
	addFleetFlags(fs, &o)
	if err := fs.Parse([]string{"-fleet-procs", "1,8", "-fleet-parts", "mixed", "-binary-env", "A=1, B=2", "-fleet-pooler-env", "MIGHTYETL_DATABASE_POOLER=transaction,X=y"}); err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(o.Procs, []int{1, 8}) || !slices.Equal(o.Parts, []string{"mixed"}) || !slices.Equal(o.BinaryEnv, []string{"A=1", "B=2"}) ||
		!slices.Equal(o.PoolerEnv, []string{"MIGHTYETL_DATABASE_POOLER=transaction", "X=y"}) || !slices.Equal(o.Intakes, []int{1, 2}) {
		t.Fatalf("parsed %+v", o)
	}
	for _, bad := range [][]string{{"-fleet-procs", "0"}, {"-fleet-procs", "x"}, {"-fleet-parts", "nope"}} {
		fs := flag.NewFlagSet("bench", flag.ContinueOnError)
		fs.SetOutput(io.Discard)
		addFleetFlags(fs, &fleetOptions{})
		if err := fs.Parse(bad); err == nil {
			t.Errorf("%v accepted", bad)
		}
	}
}
