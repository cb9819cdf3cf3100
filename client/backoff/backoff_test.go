package backoff_test

import (
	"fmt"
	"math"
	"math/rand/v2"
	"testing"
	"time"

	"github.com/mightyetl/mightyetl/client/backoff"
)

func TestCapped(t *testing.T) {
	const maxDuration = time.Duration(math.MaxInt64)
	tests := []struct {
		base, max time.Duration
		attempt   int
		want      time.Duration
	}{
		{time.Second, 5 * time.Minute, -3, time.Second}, // below 1 counts as 1
		{time.Second, 5 * time.Minute, 0, time.Second},
		{time.Second, 5 * time.Minute, 1, time.Second},
		{time.Second, 5 * time.Minute, 2, 2 * time.Second},
		{time.Second, 5 * time.Minute, 3, 4 * time.Second},
		{time.Second, 5 * time.Minute, 9, 256 * time.Second},
		{time.Second, 5 * time.Minute, 10, 5 * time.Minute},
		{time.Second, 5 * time.Minute, 1000, 5 * time.Minute},
		{time.Second, 5 * time.Minute, math.MaxInt, 5 * time.Minute},
		{time.Millisecond, time.Millisecond, 5, time.Millisecond},
		{time.Second, 500 * time.Millisecond, 1, 500 * time.Millisecond}, // the cap wins over the base
		{50 * time.Millisecond, time.Second, 5, 800 * time.Millisecond},
		{50 * time.Millisecond, time.Second, 6, time.Second},
		{0, time.Minute, 7, 0},
		{-time.Second, time.Minute, 1, 0},
		{time.Second, 0, 3, 0},
		{time.Second, -time.Second, 3, 0},
		{1, maxDuration, 62, 1 << 61},
		{1, maxDuration, 63, 1 << 62},
		{1, maxDuration, 64, maxDuration}, // 2^63 would overflow
		{3 * time.Nanosecond, maxDuration, 1000, maxDuration},
	}
	for _, tt := range tests {
		t.Run(fmt.Sprintf("%v-%v-%d", tt.base, tt.max, tt.attempt), func(t *testing.T) {
			if got := backoff.Capped(tt.base, tt.max, tt.attempt); got != tt.want {
				t.Fatalf("Capped = %v, want %v", got, tt.want)
			}
			// Full jitter: every draw lies in [0, Capped].
			for range 200 {
				if d := backoff.Full(tt.base, tt.max, tt.attempt); d < 0 || d > tt.want {
					t.Fatalf("Full = %v, outside [0, %v]", d, tt.want)
				}
			}
		})
	}
}

// TestFullFromIsTheSeededDrawAndReachesBothEnds: a seeded source gives the
// same pauses twice, and a bound of a few nanoseconds is met at 0 and at the
// bound itself (the interval is closed).
func TestFullFromIsTheSeededDrawAndReachesBothEnds(t *testing.T) {
	draws := func() []time.Duration {
		r := rand.New(rand.NewPCG(1, 2))
		var out []time.Duration
		for attempt := 1; attempt <= 12; attempt++ {
			out = append(out, backoff.FullFrom(r, 100*time.Millisecond, 10*time.Second, attempt))
		}
		return out
	}
	a, b := draws(), draws()
	distinct := map[time.Duration]bool{}
	for i := range a {
		if a[i] != b[i] {
			t.Fatalf("draw %d: %v then %v from the same seed", i, a[i], b[i])
		}
		if bound := backoff.Capped(100*time.Millisecond, 10*time.Second, i+1); a[i] < 0 || a[i] > bound {
			t.Fatalf("draw %d: %v outside [0, %v]", i, a[i], bound)
		}
		distinct[a[i]] = true
	}
	if len(distinct) < 10 {
		t.Fatalf("12 draws, %d distinct: %v", len(distinct), a)
	}
	r := rand.New(rand.NewPCG(3, 4))
	seen := map[time.Duration]int{}
	for range 2000 {
		seen[backoff.FullFrom(r, 3, 3, 1)]++
	}
	for d := time.Duration(0); d <= 3; d++ {
		if seen[d] < 300 {
			t.Fatalf("pause %v drawn %d times in 2000 (all: %v), want about 500", d, seen[d], seen)
		}
	}
	if len(seen) != 4 {
		t.Fatalf("draws %v, want only 0..3", seen)
	}
	if d := backoff.FullFrom(r, time.Duration(math.MaxInt64), time.Duration(math.MaxInt64), 1); d < 0 {
		t.Fatalf("draw below the largest bound: %v", d)
	}
	if d := backoff.FullFrom(r, 0, time.Second, 3); d != 0 {
		t.Fatalf("zero base: %v", d)
	}
}
