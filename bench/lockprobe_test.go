package main

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/hex"
	"io"
	"log/slog"
	"strings"
	"testing"
	"time"

	"github.com/mightyetl/mightyetl/internal/pgtest"
)

// TestLockProbeSmoke runs the lockprobe scenario at a tiny size, once on
// the upgrade path from schema 20 (so at least 00021 is applied) and once
// in the historic mode (00014..00016), and checks that every migration got
// a row, the data set has its shape and no probe statement failed. Figures
// come from the documented full runs (docs/operations/upgrades.md).
func TestLockProbeSmoke(t *testing.T) {
	server := pgtest.ServerURL(t)
	names, newest, err := migrationNames()
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name     string
		lp       lockProbeOptions
		from, to int64
	}{
		{"upgrade path", lockProbeOptions{From: 20}, 20, newest},
		{"historic", lockProbeOptions{Historic: true}, historicFrom, historicTo},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var b [6]byte
			_, _ = rand.Read(b[:])
			url, err := withDatabaseName(server, "mightyetl_bench_lockprobe_"+hex.EncodeToString(b[:]))
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() {
				ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
				defer cancel()
				if err := dropDatabase(ctx, url); err != nil {
					t.Logf("drop lockprobe database: %v", err)
				}
			})
			lp := tc.lp
			lp.Jobs, lp.Interval, lp.Settle = 2000, 20*time.Millisecond, 100*time.Millisecond
			o := options{Scenarios: []string{"lockprobe"}, DatabaseURL: url, LockProbe: lp, out: io.Discard}
			ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
			defer cancel()
			rep, err := execute(ctx, o, slog.New(slog.DiscardHandler))
			if err != nil {
				t.Fatalf("bench: %v", err)
			}
			got := map[string]Result{}
			for _, r := range rep.Results {
				got[r.Variant] = r
			}
			// tolerated is how many of kind's failures are what the
			// historic migrations themselves cause: they ran in one
			// transaction each and retyped columns, so a probe may be the
			// deadlock victim (40P01) or find its prepared plan's result
			// type changed (0A000). None is tolerated on the upgrade path.
			tolerated := func(kind string) float64 {
				if !tc.lp.Historic {
					return 0
				}
				m := got["summary"].Metrics
				return m[kind+"_failed_sqlstate_40p01"] + m[kind+"_failed_sqlstate_0a000"]
			}
			for v := tc.from + 1; v <= tc.to; v++ {
				r, ok := got[names[v]]
				if !ok {
					t.Errorf("no result for migration %s", names[v])
					continue
				}
				if !(r.Metrics["migration_s"] > 0) {
					t.Errorf("%s: migration_s = %v", r.Variant, r.Metrics["migration_s"])
				}
				for _, k := range lockProbeKinds {
					if r.Metrics[k+"_failed"] > tolerated(k) {
						t.Errorf("%s: %v %s probes failed", r.Variant, r.Metrics[k+"_failed"], k)
					}
				}
			}
			s, ok := got["summary"]
			if !ok {
				t.Fatal("no summary result")
			}
			m := s.Metrics
			if m["jobs"] != 2000 || m["pending_jobs"] != 20 || m["running_jobs"] != 5 {
				t.Errorf("data set: %v jobs, %v pending, %v running; want 2000, 20, 5", m["jobs"], m["pending_jobs"], m["running_jobs"])
			}
			if !(m["processed_rows"] > 0) || m["ledger_rows"] != 100 || m["outbox_rows"] != 10 {
				t.Errorf("data set: %v processed rows, %v ledger rows (want 100), %v outbox rows (want 10)",
					m["processed_rows"], m["ledger_rows"], m["outbox_rows"])
			}
			if m["from_version"] != float64(tc.from) || m["to_version"] != float64(tc.to) {
				t.Errorf("versions %v..%v, want %d..%d", m["from_version"], m["to_version"], tc.from, tc.to)
			}
			for _, k := range lockProbeKinds {
				if m[k+"_statements_total"] < 1 || m[k+"_failed_total"] > tolerated(k) {
					t.Errorf("%s probe: %v statements, %v failed (%v)", k, m[k+"_statements_total"], m[k+"_failed_total"], s.Notes)
				}
			}
			var out bytes.Buffer
			printLockProbeTable(&out, rep.Results)
			if !strings.Contains(out.String(), names[tc.to]) || !strings.Contains(out.String(), "MAX RENEW WAIT ms") {
				t.Errorf("table lacks the last migration or the header:\n%s", out.String())
			}
		})
	}
}

// TestLockProbeOptions: lockprobe runs only when named, and its versions
// resolve to the previous release's schema (or 13..16 historic) and the
// newest migration unless given.
func TestLockProbeOptions(t *testing.T) {
	o, err := parseFlags(nil, io.Discard)
	if err != nil {
		t.Fatal(err)
	}
	if contains(o.Scenarios, "lockprobe") {
		t.Errorf("lockprobe runs by default: %v", o.Scenarios)
	}
	o, err = parseFlags([]string{"-scenarios", "lockprobe", "-quick"}, io.Discard)
	if err != nil || len(o.Scenarios) != 1 || o.LockProbe.Jobs != 20_000 || o.LockProbe.Interval != 50*time.Millisecond {
		t.Fatalf("-scenarios lockprobe -quick: %+v, %v", o.LockProbe, err)
	}
	if o, _ := parseFlags([]string{"-scenarios", "lockprobe"}, io.Discard); o.LockProbe.Jobs != 1_000_000 {
		t.Errorf("default jobs %d, want 1000000", o.LockProbe.Jobs)
	}
	for _, tc := range []struct {
		o        lockProbeOptions
		from, to int64
		bad      bool
	}{
		{o: lockProbeOptions{}, from: previousReleaseSchema, to: 30},
		{o: lockProbeOptions{Historic: true}, from: 13, to: 16},
		{o: lockProbeOptions{From: 20, To: 21}, from: 20, to: 21},
		{o: lockProbeOptions{From: 12}, bad: true},
		{o: lockProbeOptions{To: 31}, bad: true},
		{o: lockProbeOptions{From: 25, To: 22}, bad: true},
	} {
		from, to, err := tc.o.resolve(30)
		if tc.bad != (err != nil) || (!tc.bad && (from != tc.from || to != tc.to)) {
			t.Errorf("%+v: %d..%d, %v; want %d..%d, error %v", tc.o, from, to, err, tc.from, tc.to, tc.bad)
		}
	}
}
