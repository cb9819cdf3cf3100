package auth

import (
	"context"
	"runtime"
	"sync"
	"time"
)

// Defaults of the hashing gate of [BasicOptions].
const (
	DefaultMaxHashWait = 2 * time.Second
	// DefaultHashWaitersPerSlot times the number of hashing slots is the
	// default bound on requests waiting for a slot.
	DefaultHashWaitersPerSlot = 8
	// DefaultHashWaitersPerAddress is the default bound on the requests of
	// one client address waiting for a hashing slot; more from the same
	// address get ErrRateLimited.
	DefaultHashWaitersPerAddress = 8
)

// defaultHashSlots is the number of hashing slots when
// BasicOptions.HashSlots is zero: max(2, GOMAXPROCS).
func defaultHashSlots() int { return max(2, runtime.GOMAXPROCS(0)) }

// overloadRetryAfter is the Retry-After of a request the gate sheds: a
// verification takes tens of milliseconds, so a second is plenty.
const overloadRetryAfter = time.Second

// hashGate admits password verifications: at most slots run at once, and
// the requests that wait are queued per client address and admitted
// round-robin across addresses, so one address's flood cannot hold every
// slot or make another address wait behind it.
//
//   - An address runs at most slots-1 verifications at once (at least 1), so
//     a slot is always left for other addresses; an address that failed a
//     login recently (suspect) runs at most one.
//   - At most maxWaiters requests wait in all, and at most perAddr per
//     address; a request beyond either bound is
//     refused at once (ErrOverloaded, ErrRateLimited), never queued.
//   - A request waits at most maxWait, then gets ErrOverloaded.
//
// It is safe for concurrent use.
type hashGate struct {
	slots      int
	maxWaiters int
	perAddr    int
	maxWait    time.Duration

	mu      sync.Mutex
	running int
	waiting int
	addrs   map[string]*gateAddr // addresses with verifications running or waiting
	ring    []*gateAddr          // addresses with waiters, in round-robin order
	next    int                  // index in ring of the next address to serve
}

// gateAddr is one client address's share of the gate.
type gateAddr struct {
	key     string
	limit   int // concurrent verifications allowed, as of its latest request
	running int
	queue   []*gateWaiter // FIFO
	inRing  bool
}

// gateWaiter is one waiting request; ready is closed when it is admitted.
type gateWaiter struct {
	ready    chan struct{}
	admitted bool // guarded by hashGate.mu
}

// newHashGate returns a gate of slots verification slots, at most
// maxWaiters waiting requests in all and perAddr per address, and waits of
// at most maxWait.
func newHashGate(slots, maxWaiters, perAddr int, maxWait time.Duration) *hashGate {
	return &hashGate{slots: slots, maxWaiters: maxWaiters, perAddr: perAddr, maxWait: maxWait, addrs: make(map[string]*gateAddr)}
}

// acquire waits for a verification slot for a request of addr and returns
// the function that gives it back. It fails at once with a *ThrottleError
// when the wait bounds are reached, with one wrapping ErrOverloaded when
// the slot does not come within maxWait, and with ErrUnauthenticated when
// ctx ends first.
func (g *hashGate) acquire(ctx context.Context, addr string, suspect bool) (release func(), err error) {
	g.mu.Lock()
	a := g.addrs[addr]
	if a == nil {
		a = &gateAddr{key: addr}
		g.addrs[addr] = a
	}
	a.limit = max(1, g.slots-1)
	if suspect {
		a.limit = 1
	}
	if len(a.queue) == 0 && g.running < g.slots && a.running < a.limit {
		g.admit(a)
		g.mu.Unlock()
		return g.releaser(a), nil
	}
	switch {
	case len(a.queue) >= g.perAddr:
		g.forget(a)
		g.mu.Unlock()
		return nil, &ThrottleError{Err: ErrRateLimited, RetryAfter: overloadRetryAfter}
	case g.waiting >= g.maxWaiters:
		g.forget(a)
		g.mu.Unlock()
		return nil, &ThrottleError{Err: ErrOverloaded, RetryAfter: overloadRetryAfter}
	}
	w := &gateWaiter{ready: make(chan struct{})}
	a.queue = append(a.queue, w)
	g.waiting++
	if !a.inRing {
		a.inRing = true
		g.ring = append(g.ring, a)
	}
	g.dispatch() // a may be servable now (a slot freed by a capped address)
	g.mu.Unlock()

	timer := time.NewTimer(g.maxWait)
	defer timer.Stop()
	var fail error
	select {
	case <-w.ready:
		return g.releaser(a), nil
	case <-timer.C:
		fail = &ThrottleError{Err: ErrOverloaded, RetryAfter: overloadRetryAfter}
	case <-ctx.Done():
		fail = errRequestEnded
	}
	g.mu.Lock()
	defer g.mu.Unlock()
	if w.admitted {
		// Admitted while giving up: hand the slot on.
		g.done(a)
		return nil, fail
	}
	for i, q := range a.queue {
		if q == w {
			a.queue = append(a.queue[:i], a.queue[i+1:]...)
			break
		}
	}
	g.waiting--
	if len(a.queue) == 0 {
		g.unring(a)
	}
	g.forget(a)
	return nil, fail
}

// releaser returns the once-only release of a slot held for a.
func (g *hashGate) releaser(a *gateAddr) func() {
	var once sync.Once
	return func() {
		once.Do(func() {
			g.mu.Lock()
			defer g.mu.Unlock()
			g.done(a)
		})
	}
}

// admit gives a a slot. Callers hold mu.
func (g *hashGate) admit(a *gateAddr) {
	g.running++
	a.running++
}

// done takes back a slot of a and serves waiters. Callers hold mu.
func (g *hashGate) done(a *gateAddr) {
	g.running--
	a.running--
	g.dispatch()
	g.forget(a)
}

// dispatch admits waiters while slots are free, one per address in turn,
// skipping addresses at their limit. Callers hold mu.
func (g *hashGate) dispatch() {
	for g.running < g.slots && len(g.ring) > 0 {
		served := false
		for range len(g.ring) {
			if g.next >= len(g.ring) {
				g.next = 0
			}
			a := g.ring[g.next]
			if a.running >= a.limit {
				g.next++
				continue
			}
			w := a.queue[0]
			a.queue = a.queue[1:]
			g.waiting--
			g.admit(a)
			w.admitted = true
			close(w.ready)
			if len(a.queue) == 0 {
				g.unring(a) // the next address moves to index next
			} else {
				g.next++
			}
			served = true
			break
		}
		if !served {
			return // every waiting address is at its limit
		}
	}
}

// unring removes a from the ring, keeping the turn of the address after
// it. Callers hold mu.
func (g *hashGate) unring(a *gateAddr) {
	for i, r := range g.ring {
		if r == a {
			g.ring = append(g.ring[:i], g.ring[i+1:]...)
			if i < g.next {
				g.next--
			}
			break
		}
	}
	a.inRing = false
}

// forget drops a's entry when it has nothing running or waiting. Callers
// hold mu.
func (g *hashGate) forget(a *gateAddr) {
	if a.running == 0 && len(a.queue) == 0 && !a.inRing && g.addrs[a.key] == a {
		delete(g.addrs, a.key)
	}
}

// stats returns the verifications running and waiting (tests).
func (g *hashGate) stats() (running, waiting int) {
	g.mu.Lock()
	defer g.mu.Unlock()
	return g.running, g.waiting
}
