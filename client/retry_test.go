package client

import (
	"fmt"
	"testing"
	"time"
)

// TestRetryPause: the pause before retry n is a full-jitter draw below
// min(MaxDelay, BaseDelay·2^(n-1)), or the server's Retry-After when that is
// longer, never above MaxDelay; zero fields take the documented defaults.
func TestRetryPause(t *testing.T) {
	def := RetryPolicy{}.withDefaults()
	if def.MaxAttempts != 5 || def.BaseDelay != 200*time.Millisecond || def.MaxDelay != 10*time.Second {
		t.Fatalf("defaults %+v", def)
	}
	p := RetryPolicy{MaxAttempts: 3, BaseDelay: 100 * time.Millisecond, MaxDelay: 2 * time.Second}
	tests := []struct {
		n          int
		retryAfter time.Duration
		lo, hi     time.Duration // the pause lies in [lo, hi]
	}{
		{1, 0, 0, 100 * time.Millisecond},
		{2, 0, 0, 200 * time.Millisecond},
		{5, 0, 0, 1600 * time.Millisecond},
		{6, 0, 0, 2 * time.Second},
		{40, 0, 0, 2 * time.Second},
		{1, time.Second, time.Second, time.Second},         // Retry-After above the bound wins
		{3, time.Minute, 2 * time.Second, 2 * time.Second}, // and is capped at MaxDelay
	}
	for _, tt := range tests {
		t.Run(fmt.Sprintf("%d-%v", tt.n, tt.retryAfter), func(t *testing.T) {
			for range 200 {
				if d := p.pause(tt.n, tt.retryAfter); d < tt.lo || d > tt.hi {
					t.Fatalf("pause %v, want in [%v, %v]", d, tt.lo, tt.hi)
				}
			}
		})
	}
}
