package main

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"io"
	"log/slog"
	"os/exec"
	"testing"
	"time"

	"go.uber.org/goleak"

	"github.com/mightyetl/mightyetl/bench/feed"
	"github.com/mightyetl/mightyetl/internal/natstest"
	"github.com/mightyetl/mightyetl/internal/pgtest"
)

func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m,
		goleak.IgnoreTopFunction("github.com/jackc/pgx/v5/pgxpool.(*Pool).backgroundHealthCheck"),
		goleak.IgnoreTopFunction("database/sql.(*DB).connectionOpener"),
		goleak.IgnoreTopFunction("internal/poll.runtime_pollWait"),
	)
}

// TestSmokeEveryScenario runs every scenario with tiny sizes against the
// test server (pgtest.ServerURL: TEST_DATABASE_URL, else the local server),
// in a database of its own that it drops at the end, and checks that each
// produced sane figures. It keeps the harness from rotting; the real figures
// come from the documented full runs.
func TestSmokeEveryScenario(t *testing.T) {
	server := pgtest.ServerURL(t)
	var b [6]byte
	_, _ = rand.Read(b[:])
	url, err := withDatabaseName(server, "mightyetl_bench_smoke_"+hex.EncodeToString(b[:]))
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
	o := options{
		Scenarios: allScenarios, Quick: true,
		N: 500, Duration: 2 * time.Second, PickupDuration: 400 * time.Millisecond, Rate: 50,
		DatabaseURL: url, NATSURL: natstest.URL(t),
		Concurrency: 128, FinishBatch: 128, Completers: 2,
		ScaleSmall: 1000, ScaleLarge: 5000, ScaleRounds: 30,
		CrashLeases:     []time.Duration{3 * time.Second},
		ResourcesWindow: time.Second, RunningJobs: 50,
		Feed: feed.Config{Mode: feed.Riverbench, Interval: 10 * time.Millisecond, Batch: 200, Backlog: 1000, Inserters: 1},
		out:  io.Discard,
	}
	// A bound on a hung scenario, not a speed check: quiet, the run takes
	// about 1.5 minutes; on a machine loaded to 10 it took over 3 (a
	// migration inside the intake-binary scenario ran out of the old 3-minute
	// bound in CI).
	ctx, cancel := context.WithTimeout(context.Background(), 8*time.Minute)
	defer cancel()
	start := time.Now()
	rep, err := execute(ctx, o, slog.New(slog.DiscardHandler))
	if err != nil {
		t.Fatalf("bench: %v", err)
	}
	t.Logf("smoke run took %s", time.Since(start).Round(time.Millisecond))

	seen := map[string]bool{}
	for _, r := range rep.Results {
		seen[r.Scenario] = true
		m := r.Metrics
		positive := func(keys ...string) {
			t.Helper()
			for _, k := range keys {
				if v, ok := m[k]; !ok || !(v > 0) {
					t.Errorf("%s %s: %s = %v, want > 0 (%v)", r.Scenario, r.Variant, k, v, m)
				}
			}
		}
		switch r.Scenario {
		case "burndown":
			positive("jobs_per_s", "succeeded")
			if m["succeeded"] != m["jobs"] {
				t.Errorf("burndown: %v of %v SUCCEEDED", m["succeeded"], m["jobs"])
			}
		case "continuous":
			positive("jobs_per_s", "worked", "inserted_per_s")
			if r.Variant != "feed="+feed.Riverbench {
				t.Errorf("continuous ran feed %q, want the riverbench feed", r.Variant)
			}
		case "pickup":
			positive("submit_to_start_p50_ms", "submit_to_start_p99_ms", "available_to_claimed_p99_ms")
			if m["submit_to_start_samples"] != m["jobs"] {
				t.Errorf("pickup %s: %v latencies for %v jobs", r.Variant, m["submit_to_start_samples"], m["jobs"])
			}
		case "crash":
			positive("reclaim_all_s", "target_s")
			if m["min_attempt_after"] != 2 {
				t.Errorf("crash: every job should be on its second attempt, min is %v", m["min_attempt_after"])
			}
		case "scale":
			positive("small_claim_p50_ms", "large_claim_p50_ms", "p50_ratio_large_vs_small")
			if m["large_pending_rows"] != 5000 {
				t.Errorf("scale: %v pending rows, want 5000", m["large_pending_rows"])
			}
		case "resources":
			positive("rss_mib", "renew_statement_p50_ms")
		case "intake-binary":
			seen["intake-binary/"+r.Variant] = true
			if r.Settings["database_tls"] == "" || r.Settings["synchronous_commit"] == "" {
				t.Errorf("intake-binary %s: no database connection settings in %v", r.Variant, r.Settings)
			}
			switch r.Variant {
			case "http":
				positive("accepted", "accepted_per_s", "request_p50_ms")
				if m["stored_pending"] < m["accepted"] {
					t.Errorf("intake-binary http: %v accepted, %v stored", m["accepted"], m["stored_pending"])
				}
			case "jetstream":
				positive("requests", "jobs_per_s")
				if m["stored"] != m["requests"] {
					t.Errorf("intake-binary jetstream: %v of %v requests stored", m["stored"], m["requests"])
				}
			case "insert-autocommit":
				if _, err := exec.LookPath("pgbench"); err == nil {
					positive("tps", "rows")
				}
			}
		}
	}
	for _, v := range []string{"http", "jetstream", "insert-autocommit"} {
		if !seen["intake-binary/"+v] && (v != "jetstream" || o.NATSURL != "") {
			t.Errorf("intake-binary produced no %s result", v)
		}
	}
	for _, s := range allScenarios {
		if !seen[s] {
			t.Errorf("scenario %s produced no result", s)
		}
	}
}
