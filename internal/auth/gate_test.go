package auth

import (
	"errors"
	"fmt"
	"net/http"
	"sync"
	"testing"
	"time"

	"github.com/mightyetl/mightyetl/internal/testwait"
)

// hangGuard bounds waits for things that must happen at once, so a broken
// build fails instead of hanging. It is never a speed assertion.
const hangGuard = 10 * time.Second

// receive returns the next value of ch, or fails the test when none comes
// within hangGuard.
func receive[T any](t *testing.T, ch <-chan T, what string) (T, bool) {
	t.Helper()
	select {
	case v := <-ch:
		return v, true
	case <-time.After(hangGuard):
		t.Errorf("%s: nothing within %v", what, hangGuard)
		var zero T
		return zero, false
	}
}

// checkThrottled fails unless err is a *ThrottleError wrapping want with a
// Retry-After of at least one second.
func checkThrottled(t *testing.T, err, want error) {
	t.Helper()
	var te *ThrottleError
	if !errors.As(err, &te) || !errors.Is(err, want) || te.RetryAfterSeconds() < 1 {
		t.Errorf("error %v, want a ThrottleError wrapping %v with Retry-After", err, want)
		return
	}
	if errors.Is(err, ErrUnauthenticated) {
		t.Errorf("throttle error %v matches ErrUnauthenticated", err)
	}
}

func requestFrom(addr, user, pass string) *http.Request {
	r := basicRequest(user, pass)
	r.RemoteAddr = addr
	return r
}

// A flood of unknown principals from one address, its verifications held
// on a barrier, cannot take the slot of a real user from another address:
// the flood holds at most all slots but one, queues at most
// DefaultHashWaitersPerAddress more, and every further flood request is refused at
// once with ErrRateLimited and a Retry-After; the real user is verified
// while the flood is still held.
func TestBasicFloodCannotTakeRealUsersSlot(t *testing.T) {
	b, _, _ := newTestBasic(t, BasicOptions{FailureBurst: -1, MaxHashWait: time.Hour}, credLine(t, "alice", "wonderland"))
	const floodAddr, realAddr = "198.51.100.7:40000", "192.0.2.10:50000"
	hold := make(chan struct{})
	entered := make(chan struct{}, 1000)
	b.beforeVerify = func(r *http.Request) {
		if r.RemoteAddr == floodAddr {
			entered <- struct{}{}
			<-hold
		}
	}
	slots := b.gate.slots
	held, queued, refused := slots-1, b.gate.perAddr, 3*slots
	n := held + queued + refused
	results := make(chan error, n)
	var flood sync.WaitGroup
	for i := range n {
		flood.Go(func() {
			_, err := b.Authenticate(requestFrom(floodAddr, fmt.Sprintf("mallory-%d", i), "guess"))
			results <- err
		})
	}
	released := false
	release := func() {
		if !released {
			released = true
			close(hold)
		}
	}
	defer flood.Wait()
	defer release()

	for range held {
		receive(t, entered, "flood verification entered")
	}
	for range refused {
		err, ok := receive(t, results, "flood request beyond the bound refused while the flood is held")
		if !ok {
			break
		}
		checkThrottled(t, err, ErrRateLimited)
	}
	testwait.For(t, hangGuard, "flood holding its slots and queue", func() bool {
		running, waiting := b.gate.stats()
		return running == held && waiting == queued
	})

	before := b.verifications.Load()
	type outcome struct {
		p   string
		err error
	}
	realUser := make(chan outcome, 1)
	go func() {
		p, err := b.Authenticate(requestFrom(realAddr, "alice", "wonderland"))
		realUser <- outcome{p, err}
	}()
	got, ok := receive(t, realUser, "real user's request while the flood is held")
	if ok && (got.err != nil || got.p != "alice") {
		t.Errorf("real user: %q, %v; want alice", got.p, got.err)
	}
	if ok && b.verifications.Load()-before != 1 {
		t.Errorf("real user took %d verifications, want 1", b.verifications.Load()-before)
	}
	if len(entered) != 0 {
		t.Errorf("%d more flood verifications entered while the flood was held", len(entered))
	}

	release()
	flood.Wait()
	close(results)
	for err := range results {
		if !errors.Is(err, ErrUnauthenticated) {
			t.Errorf("held or queued flood request: %v, want ErrUnauthenticated", err)
		}
	}
	if !ok {
		<-realUser
	}
}

// holdSlots starts one request per address whose verification blocks until
// the returned release is called, and waits until all of them hold a slot.
func holdSlots(t *testing.T, b *Basic, addrs []string) (release func(), wait func()) {
	t.Helper()
	hold := make(chan struct{})
	entered := make(chan struct{}, len(addrs))
	holding := map[string]bool{}
	for _, a := range addrs {
		holding[a] = true
	}
	b.beforeVerify = func(r *http.Request) {
		if holding[r.RemoteAddr] {
			entered <- struct{}{}
			<-hold
		}
	}
	var wg sync.WaitGroup
	for _, a := range addrs {
		// A principal per holder: requests with one credential would share
		// one verification.
		wg.Go(func() { _, _ = b.Authenticate(requestFrom(a, "mallory@"+a, "guess")) })
	}
	for range addrs {
		receive(t, entered, "holding request entered")
	}
	var once sync.Once
	return func() { once.Do(func() { close(hold) }) }, wg.Wait
}

// holdAllSlots holds every hash slot of b, each from its own address (see
// holdSlots).
func holdAllSlots(t *testing.T, b *Basic) (release func(), wait func()) {
	t.Helper()
	var holders []string
	for i := range b.gate.slots {
		holders = append(holders, fmt.Sprintf("203.0.113.%d:1000", i))
	}
	return holdSlots(t, b, holders)
}

// authenticateAlice sends alice's correct password from addr in a goroutine
// and sends the error Authenticate returns to errs.
func authenticateAlice(b *Basic, addr string, errs chan<- error) {
	go func() {
		_, err := b.Authenticate(requestFrom(addr, "alice", "wonderland"))
		errs <- err
	}()
}

// The wait for a slot is bounded: past MaxHashWaiters a request is refused
// at once with ErrOverloaded and a Retry-After, and a request that waited
// MaxHashWait gets the same.
func TestBasicHashWaitIsBounded(t *testing.T) {
	t.Run("waiters", func(t *testing.T) {
		// A principal per waiter: requests with one credential would share
		// one place in the queue.
		b, _, _ := newTestBasic(t, BasicOptions{FailureBurst: -1, MaxHashWait: time.Hour, MaxHashWaiters: 3},
			credLine(t, "alice", "wonderland"), credLine(t, "u0", "p0"), credLine(t, "u1", "p1"), credLine(t, "u2", "p2"))
		release, wait := holdAllSlots(t, b)
		defer wait()
		defer release()

		waiters := make(chan error, 3)
		for i := range 3 {
			go func() {
				_, err := b.Authenticate(requestFrom(fmt.Sprintf("192.0.2.%d:2000", i), fmt.Sprint("u", i), fmt.Sprint("p", i)))
				waiters <- err
			}()
		}
		testwait.For(t, hangGuard, "three requests waiting", func() bool { _, w := b.gate.stats(); return w == 3 })
		over := make(chan error, 1)
		authenticateAlice(b, "192.0.2.99:2000", over)
		if err, ok := receive(t, over, "request beyond MaxHashWaiters refused while the slots are held"); ok {
			checkThrottled(t, err, ErrOverloaded)
		}
		release()
		for range 3 {
			if err, ok := receive(t, waiters, "waiter served"); ok && err != nil {
				t.Errorf("waiter: %v", err)
			}
		}
	})
	t.Run("time", func(t *testing.T) {
		b, _, _ := newTestBasic(t, BasicOptions{FailureBurst: -1, MaxHashWait: time.Millisecond}, credLine(t, "alice", "wonderland"))
		release, wait := holdAllSlots(t, b)
		defer wait()
		defer release()
		timedOut := make(chan error, 1)
		authenticateAlice(b, "192.0.2.1:2000", timedOut)
		if err, ok := receive(t, timedOut, "request that waited MaxHashWait refused"); ok {
			checkThrottled(t, err, ErrOverloaded)
		}
		if running, waiting := b.gate.stats(); running != b.gate.slots || waiting != 0 {
			t.Errorf("gate running %d waiting %d after a timed-out wait", running, waiting)
		}
	})
}

// Waiters are admitted one address at a time, round-robin: a real user's
// request that arrives behind three flood requests is admitted after at
// most one of them.
func TestHashGateRoundRobin(t *testing.T) {
	g := newHashGate(2, 100, DefaultHashWaitersPerAddress, time.Hour)
	ctx := t.Context()
	relF, err := g.acquire(ctx, "flood", true)
	if err != nil {
		t.Fatal(err)
	}
	relG, err := g.acquire(ctx, "other", false)
	if err != nil {
		t.Fatal(err)
	}
	type grant struct {
		addr    string
		release func()
	}
	admitted := make(chan grant, 8)
	enqueue := func(addr string, suspect bool, waiting int) {
		go func() {
			rel, err := g.acquire(ctx, addr, suspect)
			if err != nil {
				t.Error(err)
				rel = func() {}
			}
			admitted <- grant{addr, rel}
		}()
		testwait.For(t, hangGuard, "request queued", func() bool { _, w := g.stats(); return w == waiting })
	}
	for i := range 3 {
		enqueue("flood", true, i+1)
	}
	enqueue("real", false, 4)

	// Free a slot at a time, always the flood's when it has one, and record
	// who gets it.
	var order []string
	floodSlot := relF
	free := []func(){relG}
	for len(order) < 4 {
		var rel func()
		if floodSlot != nil {
			rel, floodSlot = floodSlot, nil
		} else {
			rel, free = free[len(free)-1], free[:len(free)-1]
		}
		rel()
		got, ok := receive(t, admitted, "admission after a release")
		if !ok {
			break
		}
		order = append(order, got.addr)
		if got.addr == "flood" {
			floodSlot = got.release
		} else {
			free = append(free, got.release)
		}
	}
	want := []string{"flood", "real", "flood", "flood"}
	if fmt.Sprint(order) != fmt.Sprint(want) {
		t.Errorf("admission order %v, want %v", order, want)
	}
	if floodSlot != nil {
		floodSlot()
	}
	for _, rel := range free {
		rel()
	}
	if r, w := g.stats(); r != 0 || w != 0 || len(g.addrs) != 0 || len(g.ring) != 0 {
		t.Errorf("gate not empty after all releases: running %d waiting %d addrs %d ring %d", r, w, len(g.addrs), len(g.ring))
	}
}

// An address runs at most all slots but one at once; an address with
// recent failures runs one.
func TestHashGatePerAddressLimit(t *testing.T) {
	g := newHashGate(4, 100, DefaultHashWaitersPerAddress, time.Hour)
	ctx := t.Context()
	var rels []func()
	for range 3 {
		rel, err := g.acquire(ctx, "a", false)
		if err != nil {
			t.Fatal(err)
		}
		rels = append(rels, rel)
	}
	rel, err := g.acquire(ctx, "b", true)
	if err != nil {
		t.Fatal(err)
	}
	rels = append(rels, rel)
	if r, _ := g.stats(); r != 4 {
		t.Fatalf("running %d, want 4", r)
	}
	for _, rel := range rels {
		rel()
		rel() // a second release is a no-op
	}
	// A suspect address gets one slot; its next request waits even though
	// slots are free.
	first, err := g.acquire(ctx, "s", true)
	if err != nil {
		t.Fatal(err)
	}
	got := make(chan func(), 1)
	go func() {
		rel, err := g.acquire(ctx, "s", true)
		if err != nil {
			t.Error(err)
		}
		got <- rel
	}()
	testwait.For(t, hangGuard, "second suspect request waiting", func() bool { r, w := g.stats(); return r == 1 && w == 1 })
	first()
	if rel, ok := receive(t, got, "second suspect request admitted"); ok && rel != nil {
		rel()
	}
}
