package auth

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"sync"
	"testing"
	"time"

	"github.com/mightyetl/mightyetl/internal/testwait"
)

// holdLeader makes the first verification of b block until the returned
// release is called; entered receives once it holds its slot.
func holdLeader(b *Basic) (entered <-chan struct{}, release func()) {
	in := make(chan struct{}, 1)
	hold := make(chan struct{})
	var first sync.Once
	b.beforeVerify = func(*http.Request) {
		first.Do(func() {
			in <- struct{}{}
			<-hold
		})
	}
	var once sync.Once
	return in, func() { once.Do(func() { close(hold) }) }
}

// Issue 29 item 1: on a cold cache, N concurrent requests from one address
// with the same correct credential cost one verification and all succeed:
// while the first verifies, the others wait for its verdict outside the
// hash gate (no slot, no place in the address's queue of 8), so none is
// refused with ErrRateLimited. Before the fix each verified on its own and
// all but slots-1+8 of them got ErrRateLimited.
func TestBasicConcurrentSameCredentialShareOneVerification(t *testing.T) {
	b, _, _ := newTestBasic(t, BasicOptions{MaxHashWait: time.Hour}, credLine(t, "alice", "wonderland"))
	entered, release := holdLeader(b)
	defer release()
	const n = 32
	type outcome struct {
		p   string
		err error
	}
	results := make(chan outcome, n)
	var wg sync.WaitGroup
	defer wg.Wait()
	for range n {
		wg.Go(func() {
			p, err := b.Authenticate(requestFrom("192.0.2.10:5000", "alice", "wonderland"))
			results <- outcome{p, err}
		})
	}
	receive(t, entered, "first verification entered")
	testwait.For(t, hangGuard, "the other requests waiting on the first one's verification", func() bool {
		_, waiting := b.flights.stats()
		return waiting == n-1
	})
	if running, waiting := b.gate.stats(); running != 1 || waiting != 0 {
		t.Errorf("hash gate running %d waiting %d while one verification is shared, want 1 and 0", running, waiting)
	}
	release()
	for range n {
		got, ok := receive(t, results, "result")
		if ok && (got.err != nil || got.p != "alice") {
			t.Errorf("Authenticate = %q, %v; want alice", got.p, got.err)
		}
	}
	if v := b.verifications.Load(); v != 1 {
		t.Errorf("%d verifications for %d concurrent requests with one credential, want 1", v, n)
	}
	if flights, waiting := b.flights.stats(); flights != 0 || waiting != 0 {
		t.Errorf("flights %d waiting %d after all returned", flights, waiting)
	}
}

// A flood of one wrong password shares one verification too: every request
// fails with ErrUnauthenticated, and the address is charged one failed
// login (the one verification), not one per request. The flood stays
// bounded: the next verification of that address is its own, through the
// failure limit and the gate.
func TestBasicSameWrongPasswordSharesOneVerificationAndOneCharge(t *testing.T) {
	b, _, _ := newTestBasic(t, BasicOptions{MaxHashWait: time.Hour, FailureBurst: 10}, credLine(t, "alice", "wonderland"))
	const addr = "198.51.100.7"
	entered, release := holdLeader(b)
	defer release()
	const n = 20
	errs := make(chan error, n)
	var wg sync.WaitGroup
	defer wg.Wait()
	for range n {
		wg.Go(func() {
			_, err := b.Authenticate(requestFrom(addr+":4000", "alice", "guess"))
			errs <- err
		})
	}
	receive(t, entered, "first verification entered")
	testwait.For(t, hangGuard, "the other requests waiting", func() bool { _, w := b.flights.stats(); return w == n-1 })
	release()
	for range n {
		if err, ok := receive(t, errs, "result"); ok && !errors.Is(err, ErrUnauthenticated) {
			t.Errorf("wrong password: %v, want ErrUnauthenticated", err)
		}
	}
	if v := b.verifications.Load(); v != 1 {
		t.Errorf("%d verifications, want 1", v)
	}
	b.limiter.mu.Lock()
	tokens := b.limiter.buckets[addr].tokens
	b.limiter.mu.Unlock()
	if tokens != 9 {
		t.Errorf("address has %v failure tokens left, want 9 (one charge)", tokens)
	}
	// Sequential wrong passwords are each verified and charged: the burst
	// of 10 still bounds the address.
	for i := range 9 {
		if _, err := b.Authenticate(requestFrom(addr+":4000", "alice", fmt.Sprint("guess-", i))); !errors.Is(err, ErrUnauthenticated) {
			t.Fatalf("wrong password %d: %v, want ErrUnauthenticated", i, err)
		}
	}
	_, err := b.Authenticate(requestFrom(addr+":4000", "alice", "another"))
	checkThrottled(t, err, ErrRateLimited)
}

// A request waiting on another's verification that ends (client gone)
// returns ErrUnauthenticated at once; the verification and its other
// waiters are unaffected.
func TestBasicWaiterContextEnds(t *testing.T) {
	b, _, _ := newTestBasic(t, BasicOptions{MaxHashWait: time.Hour}, credLine(t, "alice", "wonderland"))
	entered, release := holdLeader(b)
	defer release()
	leader := make(chan error, 1)
	authenticateAlice(b, "192.0.2.1:1000", leader)
	receive(t, entered, "leader verifying")

	ctx, cancel := context.WithCancel(t.Context())
	waiter := make(chan error, 1)
	go func() {
		_, err := b.Authenticate(requestFrom("192.0.2.2:1000", "alice", "wonderland").WithContext(ctx))
		waiter <- err
	}()
	testwait.For(t, hangGuard, "waiter joined", func() bool { _, w := b.flights.stats(); return w == 1 })
	cancel()
	if err, ok := receive(t, waiter, "cancelled waiter"); ok && !errors.Is(err, ErrUnauthenticated) {
		t.Errorf("cancelled waiter: %v, want ErrUnauthenticated", err)
	}
	if _, w := b.flights.stats(); w != 0 {
		t.Errorf("%d still waiting after the waiter left", w)
	}
	release()
	if err, ok := receive(t, leader, "leader"); ok && err != nil {
		t.Errorf("leader: %v", err)
	}
}

// When the request leading a verification gives up before a verdict (its
// client left while it waited for a slot), a request waiting on it is not
// failed with it: it leads a verification of its own and gets the verdict.
func TestBasicWaiterTakesOverWhenLeaderGivesUp(t *testing.T) {
	b, _, _ := newTestBasic(t, BasicOptions{FailureBurst: -1, MaxHashWait: time.Hour}, credLine(t, "alice", "wonderland"))
	releaseSlots, waitSlots := holdAllSlots(t, b)
	defer waitSlots()
	defer releaseSlots()

	ctx, cancel := context.WithCancel(t.Context())
	defer cancel()
	leader := make(chan error, 1)
	go func() {
		_, err := b.Authenticate(requestFrom("192.0.2.1:1000", "alice", "wonderland").WithContext(ctx))
		leader <- err
	}()
	testwait.For(t, hangGuard, "leader waiting for a slot", func() bool { _, w := b.gate.stats(); return w == 1 })
	waiter := make(chan error, 1)
	authenticateAlice(b, "192.0.2.2:1000", waiter)
	testwait.For(t, hangGuard, "second request waiting on the leader", func() bool { _, w := b.flights.stats(); return w == 1 })

	cancel()
	if err, ok := receive(t, leader, "leader gave up"); ok && !errors.Is(err, ErrUnauthenticated) {
		t.Errorf("leader: %v, want ErrUnauthenticated", err)
	}
	testwait.For(t, hangGuard, "second request waiting for a slot itself", func() bool { _, w := b.gate.stats(); return w == 1 })
	releaseSlots()
	if err, ok := receive(t, waiter, "second request's verdict"); ok && err != nil {
		t.Errorf("second request: %v, want alice", err)
	}
	waitSlots()
	if v := b.verifications.Load() - int64(b.gate.slots); v != 1 {
		t.Errorf("%d verifications besides the %d held ones, want 1", v, b.gate.slots)
	}
}

// Different credentials never share: each wrong password of a flood is
// verified on its own (TestBasicFloodCannotTakeRealUsersSlot bounds them).
func TestBasicDifferentCredentialsDoNotShare(t *testing.T) {
	b, _, _ := newTestBasic(t, BasicOptions{FailureBurst: -1, CacheTTL: -1}, credLine(t, "alice", "wonderland"))
	mustAuth(t, b, "alice", "wonderland", "alice", nil)
	mustAuth(t, b, "alice", "wonder", "", ErrUnauthenticated)
	mustAuth(t, b, "bob", "wonderland", "", ErrUnauthenticated)
	if v := b.verifications.Load(); v != 3 {
		t.Errorf("%d verifications, want 3", v)
	}
}
