package main

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"io"
	"log/slog"
	"math"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/mightyetl/mightyetl/internal/natstest"
	"github.com/mightyetl/mightyetl/internal/pgtest"
)

// TestFairnessSmoke runs every part of the fairness scenario with tiny
// sizes on the test server and checks what each part is for, by the order
// of the claims rather than by their timing: beside A's backlog, the fair
// claim takes every one of B's jobs while A still has older jobs waiting and
// the first-come first-served claim none; with Zipf backlogs, the fair claim
// serves the smallest owner early in the claim order; the claim latencies
// and shares are reported. The real figures come from the documented runs
// (docs/performance.md, "Many owners").
func TestFairnessSmoke(t *testing.T) {
	server := pgtest.ServerURL(t)
	var b [6]byte
	_, _ = rand.Read(b[:])
	url, err := withDatabaseName(server, "mightyetl_bench_fair_"+hex.EncodeToString(b[:]))
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
	// A's 160 jobs run 100 ms each on 8 slots: they last at least 2 s, and
	// B submits for 0.5 s after the worker is ready, so every B job is
	// submitted and claimed while A's older jobs still wait, whatever the
	// machine's speed (it can only make A last longer).
	o := options{Scenarios: []string{"fairness"}, DatabaseURL: url, NATSURL: natstest.URL(t), Concurrency: 8, out: io.Discard,
		Fairness: fairnessOptions{Parts: fairParts, ClaimOwners: []int{0, 32},
			Backlog: 160, ADuration: 100 * time.Millisecond, BInterval: 100 * time.Millisecond, BDuration: 500 * time.Millisecond,
			ZipfOwners: 10, ZipfTotal: 1000, ZipfExponent: 1, ZipfDuration: time.Minute, ZipfWindow: 100 * time.Millisecond,
			ScaleSmall: 200, ScaleLarge: 2000, ScaleOwners: 100, ScaleLimits: []int{10}, ScaleRounds: 10,
			Timeout: time.Minute}}
	ctx, cancel := context.WithTimeout(context.Background(), 4*time.Minute)
	defer cancel()
	start := time.Now()
	rep, err := execute(ctx, o, slog.New(slog.DiscardHandler))
	if err != nil {
		t.Fatalf("bench: %v", err)
	}
	t.Logf("fairness smoke took %s", time.Since(start).Round(time.Millisecond))
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
		switch r.Variant {
		case "heavy-light/empty":
			positive("b_pickup_p50_ms", "b_pickup_p99_ms")
			if m["b_pickup_samples"] != 5 {
				t.Errorf("%s: %v samples, want 5", r.Variant, m["b_pickup_samples"])
			}
		case "heavy-light/backlog/" + claimOwnersName(0):
			positive("b_pickup_p99_ms", "b_pickup_beside_backlog_p99_ms")
			// First-come first-served: B's jobs wait behind every older one.
			if m["b_claimed_before_a_drained"] != 0 {
				t.Errorf("%s: %v of B's jobs claimed while older A jobs waited, want 0", r.Variant, m["b_claimed_before_a_drained"])
			}
		case "heavy-light/backlog/" + claimOwnersName(32):
			positive("b_pickup_p99_ms", "a_left_at_b_end")
			if m["b_claimed_before_a_drained"] != 5 || m["b_pickup_beside_backlog_samples"] != 5 {
				t.Errorf("%s: %v of B's 5 jobs claimed ahead of A's older jobs (%v beside the backlog), want all", r.Variant,
					m["b_claimed_before_a_drained"], m["b_pickup_beside_backlog_samples"])
			}
		case "heavy-light/summary":
			positive("b_p99_ratio_claim_owners_32_vs_empty", "b_p99_ratio_claim_owners_0_vs_empty")
		case "zipf/" + claimOwnersName(0), "zipf/" + claimOwnersName(32):
			positive("ratio_min", "ratio_median", "ratio_max", "jain_index", "windows")
			if m["claims"] != 1000 || m["owners"] != 10 || m["drained"] != 1 {
				t.Errorf("%s: %v claims of %v owners (drained %v), want 1000 of 10", r.Variant, m["claims"], m["owners"], m["drained"])
			}
			if m["jain_index"] > 1+1e-9 {
				t.Errorf("%s: Jain's index %v above 1", r.Variant, m["jain_index"])
			}
			// Owner 10 has 34 jobs of 1,000. Claimed at random positions
			// (first-come first-served over interleaved backlogs) their
			// mean position is about 0.5; the fair claim serves every owner
			// with work in turn, so owner 10 is done in the first half.
			if strings.Contains(r.Variant, "=32") && m["smallest_owner_mean_claim_position"] > 0.4 {
				t.Errorf("%s: the smallest owner's claims sit at %.2f of the claim order on average, want early (< 0.4)", r.Variant, m["smallest_owner_mean_claim_position"])
			}
		case "claim-latency/small-1-owner", "claim-latency/small-100-owners", "claim-latency/large-100-owners":
			positive("fair32_limit10_claim_p50_ms", "fair32_limit10_claim_p99_ms", "fifo_limit10_claim_p50_ms", "fair32_limit10_claimed_mean")
			// First-come first-served claims are never short.
			if m["fifo_limit10_claimed_mean"] != 10 || m["fifo_limit10_short_claims"] != 0 {
				t.Errorf("%s: FIFO claims of 10 took %v on average (%v short)", r.Variant, m["fifo_limit10_claimed_mean"], m["fifo_limit10_short_claims"])
			}
			want := map[bool]float64{true: 2000, false: 200}[strings.Contains(r.Variant, "large")]
			if m["claimable_rows"] != want || m["fair32_limit10_claim_samples"] != 10 {
				t.Errorf("%s: %v claimable rows, %v samples; want %v and 10", r.Variant, m["claimable_rows"], m["fair32_limit10_claim_samples"], want)
			}
		case "claim-latency/summary":
			positive("fair32_limit10_p50_ratio_large_vs_1_owner", "fair32_limit10_p99_ratio_large_vs_small_owners", "fifo_limit10_p50_ratio_large_vs_1_owner")
		default:
			t.Errorf("unexpected variant %q", r.Variant)
		}
	}
	if len(variants) != 10 {
		t.Errorf("%d results, want 10: %v", len(variants), variants)
	}
	var targets int
	for _, r := range rep.Ratios {
		if r.Target > 0 {
			targets++
		}
	}
	// B's p99 under the fair claim vs empty, and the fair claim's p50 and
	// p99 at the large table vs each small one.
	if targets != 5 {
		t.Errorf("%d ratios with a floor, want 5: %+v", targets, rep.Ratios)
	}
}

// TestFairShares: the fair share of a window is split equally among the
// owners with jobs left, none above its jobs left.
func TestFairShares(t *testing.T) {
	f := waterFill([]int{1, 10, 0, 100}, 12)
	if !slices.Equal(f, []float64{1, 5.5, 0, 5.5}) {
		t.Errorf("waterFill = %v", f)
	}
	c := zipfCounts(100, 200_000, 1)
	sum := 0
	for i, n := range c {
		sum += n
		if i > 0 && n > c[i-1] {
			t.Errorf("owner %d has %d, more than owner %d's %d", i+1, n, i, c[i-1])
		}
	}
	if sum != 200_000 || c[0] < 38_000 || c[0] > 39_000 || c[99] < 380 || c[99] > 390 {
		t.Errorf("zipf counts: sum %d, first %d, last %d", sum, c[0], c[99])
	}
	// Two owners of 2 and 6 jobs, four claims a window: the first window's
	// fair shares are 2 and 2, the second's 0 and 4 (owner 1 is done). The
	// claims took 2 and 2, then 0 and 4: ratios 1 and 1.
	t0 := time.Unix(1000, 0)
	at := func(ms int) time.Time { return t0.Add(time.Duration(ms) * time.Millisecond) }
	claims := []ownerClaim{{0, at(0)}, {0, at(1)}, {1, at(2)}, {1, at(3)}, {1, at(1000)}, {1, at(1001)}, {1, at(1002)}, {1, at(1003)}}
	m := map[string]float64{}
	addShareMetrics(m, []int{2, 6}, claims, time.Second)
	if m["windows"] != 2 || m["ratio_min"] != 1 || m["ratio_max"] != 1 || m["jain_index"] != 1 {
		t.Errorf("equal shares: %v", m)
	}
	// Owner 1 (2 jobs) served only in the second window: in the first its
	// fair share was 2 of the 4 claims and it got none.
	claims = []ownerClaim{{1, at(0)}, {1, at(1)}, {1, at(2)}, {1, at(3)}, {0, at(1000)}, {0, at(1001)}, {1, at(1002)}, {1, at(1003)}}
	m = map[string]float64{}
	addShareMetrics(m, []int{2, 6}, claims, time.Second)
	// Window 1: fair 2, 2; got 0, 4. Window 2: left 2, 2; fair 2, 2; got 2, 2.
	// Owner 1: 2/4 = 0.5; owner 2: 6/4 = 1.5.
	if m["owner_1_ratio"] != 0.5 || m["owner_2_ratio"] != 1.5 || math.Abs(m["jain_index"]-0.8) > 1e-9 {
		t.Errorf("late owner: %v", m)
	}
}

// TestFairnessFlags: the fairness list flags parse, and bad values are refused.
func TestFairnessFlags(t *testing.T) {
	o, err := parseFlags([]string{"-scenarios", "fairness", "-fairness-parts", "zipf,claim-latency", "-fairness-claim-owners", "32,0",
		"-fairness-scale-limits", "10", "-burndown-claim-owners", "32,0,0,32", "-fairness-wakeup-slots", "31,0"}, io.Discard)
	if err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(o.Fairness.Parts, []string{"zipf", "claim-latency"}) || !slices.Equal(o.Fairness.ClaimOwners, []int{32, 0}) ||
		!slices.Equal(o.Fairness.ScaleLimits, []int{10}) || !slices.Equal(o.BurndownClaimOwners, []int{32, 0, 0, 32}) ||
		!slices.Equal(o.Fairness.WakeupSlots, []int{31, 0}) {
		t.Fatalf("parsed %+v", o)
	}
	if o.Fairness.Backlog != 1_000_000 || o.Fairness.ZipfTotal != 200_000 || o.Fairness.ScaleLarge != 1_000_000 || o.Fairness.BDuration != time.Minute {
		t.Errorf("defaults %+v", o.Fairness)
	}
	for _, bad := range [][]string{{"-fairness-parts", "nope"}, {"-fairness-claim-owners", "-1"}, {"-burndown-claim-owners", "x"}, {"-fairness-scale-limits", "0"}, {"-fairness-wakeup-slots", "-1"}} {
		if _, err := parseFlags(bad, io.Discard); err == nil {
			t.Errorf("%v accepted", bad)
		}
	}
}
