package main

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"io"
	"log/slog"
	"strings"
	"testing"
	"time"

	"github.com/mightyetl/mightyetl/internal/etl"
	"github.com/mightyetl/mightyetl/internal/pgtest"
)

// TestLimitSmoke runs the limit scenario with tiny sizes (both variants,
// one batch size, two clients, one target row per job) on the test server
// in a database of its own, with the real pgbench. The scenario itself
// fails a run whose tables do not show the life cycle it claims
// (limitState.check: each finished job SUCCEEDED with its lifecycle event
// and target row and out of the queue, every other one still queued); the
// test checks the figures. The real figures come from the documented runs
// (docs/performance.md, "Distance to the limit").
func TestLimitSmoke(t *testing.T) {
	server := pgtest.ServerURL(t)
	var b [6]byte
	_, _ = rand.Read(b[:])
	url, err := withDatabaseName(server, "mightyetl_bench_limit_"+hex.EncodeToString(b[:]))
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
	const n = 500
	o := options{Scenarios: []string{"limit"}, Quick: true, N: n, DatabaseURL: url, out: io.Discard,
		Limit: limitOptions{BatchSizes: []int{40}, Clients: []int{2}, Duration: time.Second, Records: 1}}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	start := time.Now()
	rep, err := execute(ctx, o, slog.New(slog.DiscardHandler))
	if err != nil {
		t.Fatalf("bench: %v", err)
	}
	t.Logf("limit smoke took %s", time.Since(start).Round(time.Millisecond))
	got := map[string]Result{}
	for _, r := range rep.Results {
		if r.Scenario == "limit" {
			got[r.Variant] = r
		}
	}
	drain, ok1 := got["drain/batch=40/clients=2"]
	life, ok2 := got["lifecycle/batch=40/clients=2"]
	if !ok1 || !ok2 {
		t.Fatalf("limit results %v, want drain and lifecycle at batch 40, 2 clients", keys(got))
	}
	if drain.Metrics["finished"] != n || drain.Metrics["left"] != 0 {
		t.Errorf("drain finished %v and left %v of %d pre-loaded jobs", drain.Metrics["finished"], drain.Metrics["left"], n)
	}
	for _, r := range []Result{drain, life} {
		for _, k := range []string{"jobs_per_s", "finished", "claim_us_per_job", "finish_us_per_job", "wal_bytes_per_job"} {
			if !(r.Metrics[k] > 0) {
				t.Errorf("%s: %s = %v, want > 0 (%v)", r.Variant, k, r.Metrics[k], r.Metrics)
			}
		}
	}
	if !(life.Metrics["insert_us_per_job"] > 0) || drain.Metrics["insert_us_per_job"] != 0 {
		t.Errorf("insert step: lifecycle %v µs per job, drain %v (want > 0 and none)", life.Metrics["insert_us_per_job"], drain.Metrics["insert_us_per_job"])
	}
	for _, v := range []string{"drain", "lifecycle"} {
		best, ok := got["best/"+v]
		if !ok || best.Settings["of"] != v+"/batch=40/clients=2" || best.Metrics["jobs_per_s"] != got[best.Settings["of"]].Metrics["jobs_per_s"] {
			t.Errorf("best/%s = %+v", v, best)
		}
	}
}

// TestLimitRatios: each default burndown of the run over each variant's
// best; cost variants of the burndown are not compared.
func TestLimitRatios(t *testing.T) {
	rs := []Result{
		{Scenario: "burndown", Variant: "default/n=100000", Metrics: map[string]float64{"jobs_per_s": 20_000}},
		{Scenario: "burndown", Variant: "no-outbox/n=100000", Metrics: map[string]float64{"jobs_per_s": 30_000}},
		{Scenario: "limit", Variant: "drain/batch=100/clients=4", Metrics: map[string]float64{"jobs_per_s": 30_000}},
		{Scenario: "limit", Variant: "best/drain", Metrics: map[string]float64{"jobs_per_s": 40_000}, Settings: map[string]string{"of": "drain/batch=500/clients=4"}},
		{Scenario: "limit", Variant: "best/lifecycle", Metrics: map[string]float64{"jobs_per_s": 25_000}, Settings: map[string]string{"of": "lifecycle/batch=500/clients=4"}},
	}
	got := limitRatios(rs)
	if len(got) != 2 || got[0].Ratio != 0.5 || got[1].Ratio != 0.8 || got[0].Target != 0.7 ||
		!strings.Contains(got[0].Metric, "burndown default/n=100000 vs limit drain/batch=500/clients=4") {
		t.Fatalf("ratios %+v", got)
	}
	if got := limitRatios(rs[2:]); got != nil {
		t.Fatalf("ratios without a burndown: %+v", got)
	}
	rs = append(rs, Result{Scenario: "burndown", Variant: "default/n=100000/claim-owners=0", Metrics: map[string]float64{"jobs_per_s": 36_000}})
	if got := limitRatios(rs); len(got) != 4 || got[2].Ratio != 0.9 || !strings.Contains(got[3].Metric, "claim-owners=0 vs limit lifecycle") {
		t.Fatalf("ratios with two burndowns: %+v", got)
	}
}

func keys(m map[string]Result) []string {
	var out []string
	for k := range m {
		out = append(out, k)
	}
	return out
}

// TestLimitJobIsTheTransform: the target row the finish writes per record is
// what the product's transform makes of the payload's records, the payload
// is a diagnostic job the worker would accept, and every script variable
// has a value pgbench accepts.
func TestLimitJobIsTheTransform(t *testing.T) {
	for _, records := range []int{0, 1, 3} {
		job, err := newLimitJob(records)
		if err != nil {
			t.Fatal(err)
		}
		spec, err := etl.ParseDiagnostic([]byte(job.payload), 1000)
		if err != nil {
			t.Fatalf("records %d: payload %s: %v", records, job.payload, err)
		}
		rows, err := etl.Process(spec.Records, 1000)
		if err != nil || len(rows) != records {
			t.Fatalf("records %d: transform: %v (%d rows)", records, err, len(rows))
		}
		for _, r := range rows {
			if r.Data != job.data || string(r.Normalized) != job.normalized {
				t.Errorf("records %d: row (%s, %s), the script writes (%s, %s)", records, r.Data, r.Normalized, job.data, job.normalized)
			}
		}
		// pgbench refuses an empty -D value ("invalid variable definition").
		vars := limitVars(job, 10, records)
		for i := 1; i < len(vars); i += 2 {
			if name, value, _ := strings.Cut(vars[i], "="); value == "" || vars[i-1] != "-D" {
				t.Errorf("records %d: variable %s is empty or not a -D argument (%q)", records, name, vars[i-1:i+1])
			}
		}
	}
}

// TestParseLimitLatencies reads pgbench -r's per-statement lines: the
// finish's branch not taken (0) does not hide the one taken.
func TestParseLimitLatencies(t *testing.T) {
	out := []byte(`tps = 44.171 (without initial connection time)
statement latencies in milliseconds and failures:
        58.596           0  WITH ins AS (
        25.488           0  WITH candidates AS (
         0.005           0  \if :records > 0
        17.109           0  WITH won AS (
         0.000           0  \else
         0.000           0  WITH won AS (
         0.001           0  \endif
`)
	got := parseLimitLatencies(out)
	want := map[string]float64{"insert": 58.596, "claim": 25.488, "finish": 17.109}
	if len(got) != len(want) {
		t.Fatalf("got %v, want %v", got, want)
	}
	for k, v := range want {
		if got[k] != v {
			t.Errorf("%s = %v, want %v", k, got[k], v)
		}
	}
}

// TestLimitStateCheck: each way a run's tables can contradict the life
// cycle is reported.
func TestLimitStateCheck(t *testing.T) {
	ok := limitState{jobs: 10, succeeded: 6, pending: 3, running: 1, queued: 4, events: 6, targets: 12}
	if err := ok.check(2); err != nil {
		t.Fatalf("consistent state: %v", err)
	}
	for name, st := range map[string]limitState{
		"an event missing":       {jobs: 10, succeeded: 6, pending: 3, running: 1, queued: 4, events: 5, targets: 12},
		"a target row missing":   {jobs: 10, succeeded: 6, pending: 3, running: 1, queued: 4, events: 6, targets: 11},
		"a job in another state": {jobs: 11, succeeded: 6, pending: 3, running: 1, queued: 4, events: 6, targets: 12},
		"a finished job queued":  {jobs: 10, succeeded: 6, pending: 3, running: 1, queued: 5, events: 6, targets: 12},
	} {
		if err := st.check(2); err == nil {
			t.Errorf("%s: no error", name)
		}
	}
}
