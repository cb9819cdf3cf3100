// Package backoff computes the pauses of exponential backoff: the bound of
// an attempt (Capped) and a full-jitter draw below it (Full).
//
// Attempts are numbered from 1: the pause after the first failure is at most
// base, and the bound doubles with every later attempt until it reaches the
// maximum.
// Full draws uniformly in [0, bound] ("full jitter", as in AWS's
// "Exponential Backoff And Jitter"), which spreads the retries of many
// callers that failed together; Capped is the bound itself, for callers
// whose pause is not drawn (a redelivery delay, a retry loop owned by one
// goroutine). The functions are pure apart from the random source and safe
// for concurrent use.
package backoff

import (
	"math"
	"math/rand/v2"
	"time"
)

// Capped returns min(maxDelay, base·2^(attempt-1)): base for attempt 1 and
// for any attempt below 1, doubled for every later attempt, never above
// maxDelay. A base or maxDelay of zero or less gives 0; a maxDelay below base
// gives maxDelay. The doubling stops at maxDelay, so no attempt number
// overflows.
func Capped(base, maxDelay time.Duration, attempt int) time.Duration {
	if base <= 0 || maxDelay <= 0 {
		return 0
	}
	d := base
	for i := 1; i < attempt && d < maxDelay; i++ {
		if d > maxDelay/2 {
			return maxDelay
		}
		d *= 2
	}
	return min(d, maxDelay)
}

// Full returns a full-jitter pause for attempt: uniform in
// [0, Capped(base, maxDelay, attempt)], from math/rand/v2's global source
// (safe for concurrent use). It is 0 when the bound is.
func Full(base, maxDelay time.Duration, attempt int) time.Duration {
	return FullFrom(nil, base, maxDelay, attempt)
}

// FullFrom is Full drawing from r, so a test can fix the draws; a nil r
// means the global source. A *rand.Rand is not safe for concurrent use: the
// caller that shares one guards it.
func FullFrom(r *rand.Rand, base, maxDelay time.Duration, attempt int) time.Duration {
	d := Capped(base, maxDelay, attempt)
	if d <= 0 {
		return 0
	}
	if d == math.MaxInt64 {
		d-- // the draw is below d+1, which must not overflow
	}
	if r == nil {
		return time.Duration(rand.Int64N(int64(d) + 1))
	}
	return time.Duration(r.Int64N(int64(d) + 1))
}
