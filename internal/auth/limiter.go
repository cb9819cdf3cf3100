package auth

import (
	"sync"
	"time"
)

// Defaults of the failed-login limiter of [BasicOptions].
const (
	DefaultFailureBurst  = 10
	DefaultFailureRefill = 6 * time.Second
)

// maxTrackedAddresses bounds the failure limiter's table. When it is full,
// addresses whose buckets refilled are forgotten first, then arbitrary ones.
const maxTrackedAddresses = 1 << 16

// failureLimiter limits failed logins per client address with a token
// bucket: an address may fail burst times at once, then once per refill.
// Successful logins cost nothing. It is safe for concurrent use.
type failureLimiter struct {
	burst  float64
	refill time.Duration

	mu        sync.Mutex
	buckets   map[string]*bucket
	nextSweep time.Time
}

// bucket is one address's tokens as of at.
type bucket struct {
	tokens float64
	at     time.Time
}

func newFailureLimiter(burst int, refill time.Duration) *failureLimiter {
	return &failureLimiter{burst: float64(burst), refill: refill, buckets: make(map[string]*bucket)}
}

// level returns addr's tokens at now without changing them.
func (l *failureLimiter) level(b *bucket, now time.Time) float64 {
	if b == nil {
		return l.burst
	}
	gained := float64(now.Sub(b.at)) / float64(l.refill)
	return min(l.burst, b.tokens+max(0, gained))
}

// allow reports whether addr may attempt a login at now. When it may not,
// the error is a *ThrottleError wrapping ErrRateLimited with the time until
// the next attempt is allowed. suspect reports that addr failed recently
// (its bucket is not full); the hashing gate then lets it run only one
// verification at a time.
func (l *failureLimiter) allow(addr string, now time.Time) (suspect bool, err error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	tokens := l.level(l.buckets[addr], now)
	if tokens < 1 {
		wait := time.Duration((1 - tokens) * float64(l.refill))
		return true, &ThrottleError{Err: ErrRateLimited, RetryAfter: wait}
	}
	return tokens < l.burst, nil
}

// fail charges addr one token for a failed login at now. Tokens may go
// below zero (down to -burst): failures that were already verifying when
// the bucket emptied lengthen the wait instead of being free.
func (l *failureLimiter) fail(addr string, now time.Time) {
	l.mu.Lock()
	defer l.mu.Unlock()
	b := l.buckets[addr]
	if b == nil {
		if len(l.buckets) >= maxTrackedAddresses {
			l.makeRoom(now)
		}
		b = &bucket{}
		l.buckets[addr] = b
	}
	b.tokens = max(-l.burst, l.level(b, now)-1)
	b.at = now
}

// makeRoom forgets full buckets (an absent bucket is full), at most once a
// second; when none is full it forgets an arbitrary address.
func (l *failureLimiter) makeRoom(now time.Time) {
	if !now.Before(l.nextSweep) {
		l.nextSweep = now.Add(time.Second)
		for a, b := range l.buckets {
			if l.level(b, now) >= l.burst {
				delete(l.buckets, a)
			}
		}
	}
	for a := range l.buckets {
		if len(l.buckets) < maxTrackedAddresses {
			break
		}
		delete(l.buckets, a)
	}
}

// len returns the number of tracked addresses.
func (l *failureLimiter) len() int {
	l.mu.Lock()
	defer l.mu.Unlock()
	return len(l.buckets)
}
