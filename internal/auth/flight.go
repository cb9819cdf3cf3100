package auth

import "sync"

// flightKey names one credential's verification: the cache key (HMAC of
// the principal and the password bytes its hash checks, under the
// per-process key; never the password itself) and the credential set
// generation it is verified against.
type flightKey struct {
	cred [32]byte
	gen  uint64
}

// verifyFlight is one verification in progress that requests presenting
// the same credential wait on instead of hashing it again. Its result
// fields are written before done is closed and read only after.
type verifyFlight struct {
	done    chan struct{}
	decided bool // a verdict was reached; false: the leader was refused or gave up before one
	ok      bool // the verdict: known principal, matching password
}

// verifyFlights is the set of verifications in progress, one per
// flightKey: concurrent requests with the same credential share one hash
// computation (a singleflight). Safe for concurrent use.
type verifyFlights struct {
	mu      sync.Mutex
	m       map[flightKey]*verifyFlight
	waiting int // requests waiting on a flight of another (tests)
}

func newVerifyFlights() *verifyFlights {
	return &verifyFlights{m: make(map[flightKey]*verifyFlight)}
}

// join returns the flight of k in progress and false (the caller waits on
// it with wait), or starts one with the caller as its leader and returns it
// and true. With share false the caller never waits on another: it leads a
// flight of its own, registered only when none is in progress. A leader
// must call finish exactly once.
func (f *verifyFlights) join(k flightKey, share bool) (*verifyFlight, bool) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if fl, ok := f.m[k]; ok {
		if share {
			f.waiting++
			return fl, false
		}
		return &verifyFlight{done: make(chan struct{})}, true
	}
	fl := &verifyFlight{done: make(chan struct{})}
	f.m[k] = fl
	return fl, true
}

// wait blocks until fl finishes or done is closed (the waiting request
// ended), and reports whether fl finished.
func (f *verifyFlights) wait(fl *verifyFlight, done <-chan struct{}) bool {
	defer func() {
		f.mu.Lock()
		f.waiting--
		f.mu.Unlock()
	}()
	select {
	case <-fl.done:
		return true
	case <-done:
		return false
	}
}

// finish records the leader's outcome of fl, removes it when it is k's
// registered flight and wakes its waiters. decided false means no verdict
// (the waiters try again on their own).
func (f *verifyFlights) finish(k flightKey, fl *verifyFlight, decided, ok bool) {
	f.mu.Lock()
	defer f.mu.Unlock()
	fl.decided, fl.ok = decided, ok
	if f.m[k] == fl {
		delete(f.m, k)
	}
	close(fl.done)
}

// stats returns the flights in progress and the requests waiting on them
// (tests).
func (f *verifyFlights) stats() (flights, waiting int) {
	f.mu.Lock()
	defer f.mu.Unlock()
	return len(f.m), f.waiting
}
