package worker

import (
	"context"
	"sync"
	"time"

	"github.com/google/uuid"
	"github.com/mightyetl/mightyetl/internal/lease"
	"github.com/mightyetl/mightyetl/internal/metrics"
)

// running is one held claim.
type running struct {
	claim lease.Claim
	// localDeadline is the worker's conservative view of the lease expiry
	// on its monotonic clock: the moment the claim or renewal statement was
	// sent plus the lease duration. The database expiry is never earlier.
	// Guarded by claimSet.mu.
	localDeadline time.Time
	// ctx is the handler's context, cancelled with a cause when the lease is
	// lost, revoked or the worker shuts down; cancel cancels it.
	ctx    context.Context
	cancel context.CancelCauseFunc
	lost   bool // renewal stopped for this claim
	// finishing is true while a completer holds the claim's success (in a
	// group or its transaction, which locks the job row). Renewal goes on
	// for it: a finish that fails or times out again and again keeps its
	// lease, and renewal never waits on the transaction (the renewal
	// statement skips the locked row and answers busy). But a renewal that
	// matched zero rows is not a loss while it is set: the finish may have
	// committed and ended the lease, and the finish's fenced write decides
	// (lease.ErrLost when it matched nothing). Cleared when the finish
	// failed; a committed finish keeps it until the claim settles.
	finishing bool
	// timedOut is true once the attempt passed MaxJobDuration: renewal
	// stops, and the job is failed with etl_job_timeout.
	timedOut bool
	// timer fires at MaxJobDuration.
	timer *time.Timer
	// slotHeld is true while the handler runs: the claim holds one of the
	// Concurrency execution slots, or one of the wake-up slots when wakeup
	// is set. The slot is freed as soon as the handler returns; the claim
	// stays live (and renewed) until its outcome commits.
	slotHeld bool
	// wakeup is true for a claim of the wake-up slots (Config.WakeupSlots,
	// the producer's arrivals claim). Set before the claim is added.
	wakeup      bool
	started     time.Time
	sinceCancel time.Duration
}

// claimSet is the one record of the claims a worker holds, shared by its
// roles: the executor pool adds and settles claims, the producer reads how
// many slots are free, the renewer reads and updates deadlines and marks
// claims lost, the completer marks claims finishing. Every field and every
// running field noted so is guarded by mu.
type claimSet struct {
	cfg *Config
	m   *metrics.Worker
	sig *testSignals

	// slotFree wakes the producer when a slot or a live-claim place frees:
	// written (never blocking, coalesced) by freeSlot and settle on the
	// executor goroutines, read by the producer loop.
	slotFree chan struct{}

	mu      sync.Mutex
	live    map[uuid.UUID]*running // claims held now, by claim id
	byJob   map[uuid.UUID]*running // the newest held claim of each job
	running int                    // claims holding an execution slot, wake-up slots included
	wakeups int                    // claims holding a wake-up slot
	// reserved holds the places under maxLive given to the claim statement
	// in flight of each kind (reserve; index 1: the arrivals claim) until
	// its claims are added, so the regular and the arrivals claim, which
	// run at once, never take the same place.
	reserved [2]int
	// recheck holds the claims a revocation asked the renewer to confirm
	// with the database.
	recheck map[*running]struct{}
}

func newClaimSet(cfg *Config, m *metrics.Worker, sig *testSignals) *claimSet {
	return &claimSet{
		cfg: cfg, m: m, sig: sig,
		slotFree: make(chan struct{}, 1),
		live:     make(map[uuid.UUID]*running),
		byJob:    make(map[uuid.UUID]*running),
		recheck:  make(map[*running]struct{}),
	}
}

// free is how many claims the producer's regular claim may take now:
// Concurrency bounds the running handlers outside the wake-up slots; claims
// whose handler returned and whose outcome is settling hold no slot, within
// maxLive (less what an arrivals claim in flight reserved).
func (s *claimSet) free() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.freeLocked(false)
}

// freeLocked is free (wakeup false) or, for the arrivals claim, the wake-up
// slots no handler holds within maxLive (less what the regular claim in
// flight reserved); s.mu held.
func (s *claimSet) freeLocked(wakeup bool) int {
	room := s.cfg.maxLive() - len(s.live) - s.reserved[0] - s.reserved[1]
	if wakeup {
		return min(max(s.cfg.WakeupSlots, 0)-s.wakeups, room+s.reserved[1])
	}
	return min(s.cfg.Concurrency-(s.running-s.wakeups), room+s.reserved[0])
}

// reserve returns how many claims the regular claim (wakeup false) or the
// arrivals claim may take now, as free, and holds those places until
// release. Each kind runs one claim statement at a time.
func (s *claimSet) reserve(wakeup bool) int {
	s.mu.Lock()
	defer s.mu.Unlock()
	n := s.freeLocked(wakeup)
	s.reserved[b2i(wakeup)] = max(n, 0)
	return n
}

// release gives back the places reserve held for its kind, once the claims
// taken with them are added (or none were taken).
func (s *claimSet) release(wakeup bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.reserved[b2i(wakeup)] = 0
}

func b2i(b bool) int {
	if b {
		return 1
	}
	return 0
}

// runningCount returns how many claims hold an execution slot.
func (s *claimSet) runningCount() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.running
}

// add records r as held and running, and returns the claim of the same job
// it supersedes (nil if none).
func (s *claimSet) add(r *running) (old *running) {
	s.mu.Lock()
	defer s.mu.Unlock()
	// The database let this worker claim a job it still runs under an
	// older claim: that claim's lease expired, so its handler is stale.
	old = s.byJob[r.claim.JobID]
	s.live[r.claim.ClaimID] = r
	s.byJob[r.claim.JobID] = r
	r.slotHeld = true
	s.running++
	if r.wakeup {
		s.wakeups++
	}
	s.m.RunningJobs.Set(float64(s.running))
	return old
}

// kickProducer wakes the producer without blocking.
func (s *claimSet) kickProducer() {
	select {
	case s.slotFree <- struct{}{}:
	default:
	}
}

// freeSlot gives r's execution slot back (once) and wakes the producer: the
// handler returned, so another job may start while r's outcome commits. A
// wake-up slot waits for the next wake-up instead.
func (s *claimSet) freeSlot(r *running) {
	s.mu.Lock()
	held := r.slotHeld
	if held {
		r.slotHeld = false
		s.running--
		if r.wakeup {
			s.wakeups--
		}
		s.m.RunningJobs.Set(float64(s.running))
	}
	s.mu.Unlock()
	if held && !r.wakeup {
		s.kickProducer()
	}
}

// settle forgets a claim whose outcome is settled (and frees its slot if the
// handler's return did not already).
func (s *claimSet) settle(r *running) {
	r.timer.Stop()
	r.cancel(context.Canceled)
	s.freeSlot(r)
	s.mu.Lock()
	delete(s.recheck, r)
	removed := false
	if s.live[r.claim.ClaimID] == r {
		delete(s.live, r.claim.ClaimID)
		removed = true
	}
	if s.byJob[r.claim.JobID] == r {
		delete(s.byJob, r.claim.JobID)
	}
	s.mu.Unlock()
	if removed {
		// A settled claim may make room under the maxLive bound.
		s.kickProducer()
	}
}

// markLost stops renewal for r, counts the loss once under reason and
// cancels its handler with cause (ErrLeaseLost, or ErrRevoked for a
// revocation).
func (s *claimSet) markLost(r *running, reason string, cause error) {
	s.mu.Lock()
	first := !r.lost
	r.lost = true
	s.mu.Unlock()
	if first {
		s.m.ClaimsLost.WithLabelValues(reason).Inc()
		s.sig.lost.signal(reason)
	}
	r.cancel(cause)
}

// timeOut ends an attempt that ran past MaxJobDuration: renewal of its claim
// stops, and a handler still running is cancelled with ErrJobTimeout (the
// executor then fails the job with etl_job_timeout while the lease holds).
func (s *claimSet) timeOut(r *running) {
	s.mu.Lock()
	running := r.slotHeld && s.live[r.claim.ClaimID] == r
	if running {
		r.timedOut = true
	}
	s.mu.Unlock()
	if running {
		s.m.JobTimeouts.Inc()
		r.cancel(ErrJobTimeout)
	}
}

// cancelAll cancels every held claim's handler with cause.
func (s *claimSet) cancelAll(cause error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	for _, r := range s.live {
		r.cancel(cause)
	}
}

// askRecheck queues jobID's claim, if held, for the renewer to confirm, and
// reports whether there was one.
func (s *claimSet) askRecheck(jobID uuid.UUID) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	r, ok := s.byJob[jobID]
	if ok {
		s.recheck[r] = struct{}{}
	}
	return ok
}

// takeRechecks empties the recheck queue and returns the claims in it that
// renewal still covers.
func (s *claimSet) takeRechecks() []*running {
	s.mu.Lock()
	defer s.mu.Unlock()
	pending := make([]*running, 0, len(s.recheck))
	for r := range s.recheck {
		delete(s.recheck, r)
		if s.renewsLocked(r) {
			pending = append(pending, r)
		}
	}
	return pending
}

// renewsLocked reports whether renewal covers r (s.mu held): it is live,
// not lost and not timed out. A finishing claim is renewed too (see
// running.finishing for how its results count).
func (s *claimSet) renewsLocked(r *running) bool {
	return s.live[r.claim.ClaimID] == r && !r.lost && !r.timedOut
}

// renewable snapshots the claims renewal still covers.
func (s *claimSet) renewable() []*running {
	s.mu.Lock()
	defer s.mu.Unlock()
	out := make([]*running, 0, len(s.live))
	for _, r := range s.live {
		if s.renewsLocked(r) {
			out = append(out, r)
		}
	}
	return out
}

// setFinishing marks the claims of rs as held by a completer, or no longer
// (their finish failed and will be tried again): while marked, renewal
// still extends them but never counts them stale, revoked or out of time.
func (s *claimSet) setFinishing(rs []*running, on bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	for _, r := range rs {
		r.finishing = on
	}
}

// deadline returns r's conservative deadline and whether it is lost.
func (s *claimSet) deadline(r *running) (time.Time, bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return r.localDeadline, r.lost
}
