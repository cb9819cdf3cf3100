package auth

import (
	"errors"
	"fmt"
	"net/http/httptest"
	"testing"
	"time"
)

// Failed logins are limited per client address (RemoteAddr's host, IPv6 by
// /64), with a token bucket on the test clock; X-Forwarded-For is ignored;
// successes cost nothing; an address over its budget gets no verification.
func TestBasicFailedLoginsLimitedPerAddress(t *testing.T) {
	b, clock, _ := newTestBasic(t, BasicOptions{CacheTTL: -1, FailureBurst: 3, FailureRefill: 10 * time.Second},
		credLine(t, "alice", "wonderland"))
	const attacker, other = "198.51.100.7:40000", "192.0.2.10:50000"
	auth := func(addr, user, pass string) (string, error) {
		return b.Authenticate(requestFrom(addr, user, pass))
	}
	for range 3 {
		if _, err := auth(attacker, "mallory", "guess"); !errors.Is(err, ErrUnauthenticated) {
			t.Fatalf("failure within the burst: %v", err)
		}
	}
	n := b.verifications.Load()
	_, err := auth(attacker, "mallory", "guess")
	checkThrottled(t, err, ErrRateLimited)
	var te *ThrottleError
	if errors.As(err, &te) && te.RetryAfter != 10*time.Second {
		t.Errorf("Retry-After %v, want 10s (one refill)", te.RetryAfter)
	}
	_, err = auth("198.51.100.7:40001", "alice", "wonderland") // same host, other port
	checkThrottled(t, err, ErrRateLimited)
	r := requestFrom(attacker, "alice", "wonderland")
	r.Header.Set("X-Forwarded-For", "192.0.2.10")
	_, err = b.Authenticate(r)
	checkThrottled(t, err, ErrRateLimited)
	if got := b.verifications.Load() - n; got != 0 {
		t.Errorf("%d verifications for a limited address, want 0", got)
	}

	// Another address is not affected, and successes never use up tokens.
	for range 10 {
		if p, err := auth(other, "alice", "wonderland"); err != nil || p != "alice" {
			t.Fatalf("other address: %q, %v", p, err)
		}
	}

	clock.Advance(10 * time.Second) // one token back
	if p, err := auth(attacker, "alice", "wonderland"); err != nil || p != "alice" {
		t.Fatalf("after a refill: %q, %v", p, err)
	}
	if _, err := auth(attacker, "mallory", "guess"); !errors.Is(err, ErrUnauthenticated) {
		t.Fatalf("refilled failure: %v", err)
	}
	_, err = auth(attacker, "mallory", "guess")
	checkThrottled(t, err, ErrRateLimited)

	// Two addresses of one IPv6 /64 share a budget.
	for range 3 {
		_, _ = auth("[2001:db8:1:2::1]:1", "mallory", "guess")
	}
	_, err = auth("[2001:db8:1:2::ffff]:1", "mallory", "guess")
	checkThrottled(t, err, ErrRateLimited)
}

// A cached success needs no verification and is served even to an address
// over its failure budget.
func TestBasicCacheHitIgnoresFailureLimit(t *testing.T) {
	b, _, _ := newTestBasic(t, BasicOptions{FailureBurst: 1}, credLine(t, "alice", "wonderland"))
	const addr = "198.51.100.7:40000"
	if _, err := b.Authenticate(requestFrom(addr, "alice", "wonderland")); err != nil {
		t.Fatal(err)
	}
	_, _ = b.Authenticate(requestFrom(addr, "alice", "wrong"))
	_, err := b.Authenticate(requestFrom(addr, "alice", "wrong"))
	checkThrottled(t, err, ErrRateLimited)
	if p, err := b.Authenticate(requestFrom(addr, "alice", "wonderland")); err != nil || p != "alice" {
		t.Fatalf("cached success from a limited address: %q, %v", p, err)
	}
}

func TestClientAddr(t *testing.T) {
	for _, tc := range []struct{ remote, want string }{
		{"192.0.2.1:1234", "192.0.2.1"},
		{"[::ffff:192.0.2.1]:1234", "192.0.2.1"},
		{"[2001:db8:1:2:3:4:5:6]:443", "2001:db8:1:2::/64"},
		{"[fe80::1%eth0]:443", "fe80::/64"},
		{"192.0.2.1", "192.0.2.1"},
		{"@", "@"},
		{"", ""},
	} {
		r := httptest.NewRequest("GET", "/", nil)
		r.RemoteAddr = tc.remote
		r.Header.Set("X-Forwarded-For", "203.0.113.9")
		if got := clientAddr(r, nil); got != tc.want {
			t.Errorf("clientAddr(%q) = %q, want %q", tc.remote, got, tc.want)
		}
	}
}

// The limiter's table stays bounded: refilled buckets are forgotten first.
func TestFailureLimiterBounded(t *testing.T) {
	l := newFailureLimiter(2, time.Second)
	now := time.Unix(0, 0)
	for i := range maxTrackedAddresses {
		l.fail(fmt.Sprint(i), now)
	}
	if l.len() != maxTrackedAddresses {
		t.Fatalf("tracked %d", l.len())
	}
	now = now.Add(time.Minute) // every bucket refilled
	l.fail("new", now)
	if l.len() != 1 {
		t.Fatalf("tracked %d after a sweep, want 1", l.len())
	}
	for i := range maxTrackedAddresses + 10 {
		l.fail(fmt.Sprint(i), now)
	}
	if l.len() > maxTrackedAddresses {
		t.Fatalf("tracked %d, bound %d", l.len(), maxTrackedAddresses)
	}
}
