package intake

import (
	"context"
	"errors"
	"fmt"
	"math"
	"sync"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"golang.org/x/time/rate"

	"github.com/mightyetl/mightyetl/internal/codes"
	"github.com/mightyetl/mightyetl/internal/metrics"
	"github.com/mightyetl/mightyetl/internal/pg"
)

// Per-owner quotas at intake (issue 33): a token bucket of submissions per
// owner, kept in this process, and a cap on the owner's pending (PENDING or
// RUNNING) jobs, counted in the database. Every use case that creates a job
// for its caller goes through Service.admitOwner: Submit (HTTP submit and
// diagnostic jobs, NATS requests), SubmitUpload (large jobs over HTTP and
// from the NATS Object Store) and Replay. The operator's replay is not an
// owner's submission and is not limited.

// DefaultPendingWindow is QuotaOptions.PendingWindow's default: how long
// one count of an owner's pending jobs is used.
const DefaultPendingWindow = time.Second

// Limits named by QuotaExceeded.Limit.
const (
	QuotaLimitRate    = "rate"    // the owner's submission rate
	QuotaLimitPending = "pending" // the owner's pending jobs
)

// OwnerLimits are one owner's quotas. The zero value is unlimited.
type OwnerLimits struct {
	// MaxPendingJobs bounds the owner's PENDING and RUNNING jobs
	// (MIGHTYETL_OWNER_MAX_PENDING_JOBS); 0 means unlimited.
	MaxPendingJobs int64
	// SubmitRate is the owner's sustained submissions per second, a token
	// bucket (MIGHTYETL_OWNER_SUBMIT_RATE); 0 means unlimited.
	SubmitRate float64
	// SubmitBurst is the bucket's size, the submissions an idle owner may
	// make at once (MIGHTYETL_OWNER_SUBMIT_BURST); 0 means
	// max(1, ceil(SubmitRate)).
	SubmitBurst int
}

// Limited reports whether l limits anything.
func (l OwnerLimits) Limited() bool { return l.MaxPendingJobs > 0 || l.SubmitRate > 0 }

// burst is the bucket size SubmitBurst stands for.
func (l OwnerLimits) burst() int {
	if l.SubmitBurst > 0 {
		return l.SubmitBurst
	}
	return max(1, int(math.Ceil(l.SubmitRate)))
}

func (l OwnerLimits) validate() error {
	switch {
	case l.MaxPendingJobs < 0:
		return fmt.Errorf("max pending jobs %d below 0", l.MaxPendingJobs)
	case l.SubmitRate < 0 || math.IsNaN(l.SubmitRate) || math.IsInf(l.SubmitRate, 0):
		return fmt.Errorf("submit rate %v is not a finite number ≥ 0", l.SubmitRate)
	case l.SubmitBurst < 0:
		return fmt.Errorf("submit burst %d below 0", l.SubmitBurst)
	}
	return nil
}

// QuotaOptions configure the per-owner quotas of a Service. The zero value
// limits nothing and costs nothing per request.
type QuotaOptions struct {
	// Default are the limits of every owner without an override.
	Default OwnerLimits
	// Overrides are the limits of the principals they name (as the
	// credentials name them: a Basic user name, a JWT sub), in place of
	// Default (MIGHTYETL_OWNER_OVERRIDES_FILE).
	Overrides map[string]OwnerLimits
	// PendingWindow is how long one count of an owner's pending jobs is
	// used, with the jobs this process admitted since added to it; zero
	// means DefaultPendingWindow.
	PendingWindow time.Duration
	// Now is the clock of the buckets and of PendingWindow; nil means
	// time.Now (a test hook).
	Now func() time.Time
}

// Enabled reports whether o limits any owner.
func (o QuotaOptions) Enabled() bool {
	if o.Default.Limited() {
		return true
	}
	for _, l := range o.Overrides {
		if l.Limited() {
			return true
		}
	}
	return false
}

func (o QuotaOptions) validate() error {
	if err := o.Default.validate(); err != nil {
		return fmt.Errorf("owner quotas: %w", err)
	}
	for _, l := range o.Overrides {
		if err := l.validate(); err != nil {
			return fmt.Errorf("owner quotas: an override's %w", err) // never the principal
		}
	}
	if o.PendingWindow < 0 {
		return fmt.Errorf("owner quotas: pending window %v below 0", o.PendingWindow)
	}
	return nil
}

// QuotaExceeded is the cause of an etl_owner_quota_exceeded rejection
// (errors.As on the *Error): which limit refused the submission, and when
// the same request may be admitted.
type QuotaExceeded struct {
	// Limit is QuotaLimitRate or QuotaLimitPending.
	Limit string
	// RetryAfter is at least a second: for the rate, the bucket's delay
	// until it holds a token again; for pending jobs, two count windows
	// (at least two seconds), after which a finished job is seen.
	RetryAfter time.Duration
}

// Error returns "owner quota exceeded: <limit>".
func (q *QuotaExceeded) Error() string { return "owner quota exceeded: " + q.Limit }

// RetryAfterSeconds is RetryAfter in whole seconds, rounded up, at least 1.
func (q *QuotaExceeded) RetryAfterSeconds() int64 {
	return max(1, int64(math.Ceil(q.RetryAfter.Seconds())))
}

// ErrOwnerQuotaExceeded matches (errors.Is) every etl_owner_quota_exceeded
// rejection.
var ErrOwnerQuotaExceeded = codeError(codes.OwnerQuotaExceeded)

func quotaError(limit string, retryAfter time.Duration) error {
	return &Error{Code: codes.OwnerQuotaExceeded, Index: -1,
		cause: &QuotaExceeded{Limit: limit, RetryAfter: max(retryAfter, time.Second)}}
}

// SetQuotas replaces the per-owner quotas (a configuration reload). Owners'
// buckets are kept and take the new rate and size at their next
// submission; every owner's pending jobs are counted again at its next
// submission. Options that limit nothing switch the quotas off. Safe for
// concurrent use with submissions.
func (s *Service) SetQuotas(o QuotaOptions) error {
	if err := o.validate(); err != nil {
		return err
	}
	s.quotaMu.Lock()
	defer s.quotaMu.Unlock()
	if !o.Enabled() {
		s.quotas.Store(nil)
		return nil
	}
	q := s.quotas.Load()
	if q == nil {
		q = &ownerQuotas{db: s.db, owners: map[string]*ownerState{}}
		if s.metrics != nil {
			q.decisions = make(map[string]prometheus.Counter, len(metrics.OwnerQuotaOutcomes))
			for _, o := range metrics.OwnerQuotaOutcomes {
				q.decisions[o] = s.metrics.OwnerQuotaDecisions.WithLabelValues(o)
			}
		}
	}
	q.configure(o)
	s.quotas.Store(q)
	return nil
}

// admitOwner applies the caller's quotas to one job about to be created
// under keyHash (its submission key's hash as stored). It returns the
// admission, which the caller must settle once with whether the job was
// created (nil, when there is nothing to settle, is fine to settle), or an
// etl_owner_quota_exceeded error (or etl_target_unavailable when the
// pending count could not be read). A request whose key already has a job
// (a client's retry, a NATS redelivery) is never refused by a quota: it
// goes on and converges on that job (or is refused for another body).
// Without quotas it costs one atomic load.
func (s *Service) admitOwner(ctx context.Context, principal, scope, keyHash string) (*admission, error) {
	q := s.quotas.Load()
	if q == nil {
		return nil, nil
	}
	adm, err := q.admit(ctx, principal, scope)
	var quota *QuotaExceeded
	if !errors.As(err, &quota) {
		return adm, err
	}
	if _, ferr := pg.FindSubmittedJob(ctx, s.db, scope, keyHash); ferr == nil {
		q.count(metrics.OwnerQuotaResubmitted)
		return nil, nil
	}
	if quota.Limit == QuotaLimitRate {
		q.count(metrics.OwnerQuotaRateLimited)
	} else {
		q.count(metrics.OwnerQuotaPendingLimited)
	}
	return nil, err
}

// admission is one submission's reservation of its owner's pending jobs.
type admission struct{ st *ownerState }

// settle ends the reservation: created says whether the job was created.
// A nil admission has nothing to settle.
func (a *admission) settle(created bool) {
	if a != nil {
		a.st.settle(created)
	}
}

// ownerQuotas are the per-owner states of one Service's quotas.
type ownerQuotas struct {
	db        DB
	decisions map[string]prometheus.Counter // by outcome; nil counts nothing
	cfg       atomic.Pointer[quotaConfig]

	mu     sync.Mutex
	owners map[string]*ownerState // by principal scope hash
	swept  time.Time
}

// quotaConfig is one configuration of the quotas; replaced, never changed.
type quotaConfig struct {
	def       OwnerLimits
	overrides map[string]OwnerLimits
	window    time.Duration
	now       func() time.Time
	// gen changes with every configuration: an owner's pending count
	// taken under another is taken again.
	gen uint64
}

func (q *ownerQuotas) configure(o QuotaOptions) {
	c := &quotaConfig{def: o.Default, overrides: make(map[string]OwnerLimits, len(o.Overrides)),
		window: o.PendingWindow, now: o.Now}
	for p, l := range o.Overrides {
		c.overrides[p] = l
	}
	if c.window == 0 {
		c.window = DefaultPendingWindow
	}
	if c.now == nil {
		c.now = time.Now
	}
	if old := q.cfg.Load(); old != nil {
		c.gen = old.gen + 1
	}
	q.cfg.Store(c)
}

func (c *quotaConfig) limitsOf(principal string) OwnerLimits {
	if l, ok := c.overrides[principal]; ok {
		return l
	}
	return c.def
}

// pendingRetryAfter is the Retry-After of a pending-jobs refusal.
func (c *quotaConfig) pendingRetryAfter() time.Duration { return max(2*time.Second, 2*c.window) }

func (q *ownerQuotas) count(outcome string) {
	if c := q.decisions[outcome]; c != nil {
		c.Inc()
	}
}

// admit decides one submission of principal (scope): the pending cap
// first (a reservation in this process), then the bucket (a token); a
// refusal by the bucket gives the reservation back. It counts admissions;
// admitOwner counts refusals (after the resubmission check).
func (q *ownerQuotas) admit(ctx context.Context, principal, scope string) (*admission, error) {
	cfg := q.cfg.Load()
	lim := cfg.limitsOf(principal)
	if !lim.Limited() {
		return nil, nil
	}
	now := cfg.now()
	st := q.state(scope, now, cfg)
	var adm *admission
	if lim.MaxPendingJobs > 0 {
		var err error
		if adm, err = st.reservePending(ctx, q.db, cfg, scope, lim.MaxPendingJobs); err != nil {
			return nil, err
		}
	}
	if lim.SubmitRate > 0 {
		if delay, ok := st.take(lim, now); !ok {
			adm.settle(false)
			return nil, quotaError(QuotaLimitRate, delay)
		}
	}
	q.count(metrics.OwnerQuotaAdmitted)
	return adm, nil
}

// Owner states are swept when there are more than sweepAbove of them, at
// most once per sweepEvery count windows; a state unused for idleWindows
// count windows, with no reservation out and a full bucket (so forgetting
// it changes no decision but a recount), is removed.
const (
	sweepAbove  = 1024
	sweepEvery  = 10
	idleWindows = 60
)

// state returns scope's state, created on first use.
func (q *ownerQuotas) state(scope string, now time.Time, cfg *quotaConfig) *ownerState {
	q.mu.Lock()
	defer q.mu.Unlock()
	st := q.owners[scope]
	if st == nil {
		st = &ownerState{}
		q.owners[scope] = st
	}
	st.used = now
	if len(q.owners) > sweepAbove && now.Sub(q.swept) >= sweepEvery*cfg.window {
		q.swept = now
		for k, o := range q.owners {
			if now.Sub(o.used) >= idleWindows*cfg.window && o.idle(now) {
				delete(q.owners, k)
			}
		}
	}
	return st
}

// ownerState is one owner's bucket and pending count in this process.
type ownerState struct {
	used time.Time // under ownerQuotas.mu

	mu      sync.Mutex
	limiter *rate.Limiter // nil until the owner has a rate
	// The pending count: counted is the database's count (bounded by the
	// cap + 1) taken at countedAt under configuration gen; completed are
	// the jobs this process created for the owner since that count began
	// (some may be in it too: counted twice, never missed); inflight are
	// admitted submissions without their outcome yet.
	loaded             bool
	counted, completed int64
	inflight           int64
	countedAt          time.Time
	gen                uint64
	refreshing         chan struct{} // closed when the count in flight ends; nil when none
}

// idle reports whether forgetting st changes nothing but a recount.
func (st *ownerState) idle(now time.Time) bool {
	st.mu.Lock()
	defer st.mu.Unlock()
	return st.inflight == 0 && st.refreshing == nil &&
		(st.limiter == nil || st.limiter.TokensAt(now) >= float64(st.limiter.Burst()))
}

// reservePending reserves one of the owner's maxPending pending jobs, or
// refuses: the count in hand (the database's, plus the jobs created and in
// flight here since) is at the cap. The count is taken again once it is
// older than the window (or from another configuration) by one submission
// while the others go on with the count in hand; the owner's first
// submissions wait for the first count. Jobs that finished since the count
// are seen at the next one, so within a window the cap is conservative.
func (st *ownerState) reservePending(ctx context.Context, db DB, cfg *quotaConfig, scope string, maxPending int64) (*admission, error) {
	for {
		st.mu.Lock()
		current := st.loaded && st.gen == cfg.gen && cfg.now().Sub(st.countedAt) < cfg.window
		if current || (st.loaded && st.refreshing != nil) {
			if st.counted+st.completed+st.inflight >= maxPending {
				st.mu.Unlock()
				return nil, quotaError(QuotaLimitPending, cfg.pendingRetryAfter())
			}
			st.inflight++
			st.mu.Unlock()
			return &admission{st: st}, nil
		}
		if wait := st.refreshing; wait != nil {
			st.mu.Unlock()
			select {
			case <-wait:
				continue
			case <-ctx.Done():
				return nil, storeError(ctx.Err())
			}
		}
		wait := make(chan struct{})
		st.refreshing = wait
		mark := st.completed
		st.mu.Unlock()
		n, err := pg.CountOwnerPendingJobs(ctx, db, scope, maxPending+1)
		st.mu.Lock()
		st.refreshing = nil
		close(wait)
		if err == nil {
			// The jobs created here before the count began are in it.
			st.loaded, st.counted, st.completed, st.countedAt, st.gen = true, n, st.completed-mark, cfg.now(), cfg.gen
		}
		st.mu.Unlock()
		if err != nil {
			return nil, storeError(err)
		}
	}
}

// settle ends one reservation of reservePending.
func (st *ownerState) settle(created bool) {
	st.mu.Lock()
	defer st.mu.Unlock()
	st.inflight--
	if created {
		st.completed++
	}
}

// take takes one token from the owner's bucket at now, or returns how long
// until it holds one (the limiter's reservation delay; the reservation is
// cancelled).
func (st *ownerState) take(lim OwnerLimits, now time.Time) (time.Duration, bool) {
	r, b := rate.Limit(lim.SubmitRate), lim.burst()
	st.mu.Lock()
	if st.limiter == nil {
		st.limiter = rate.NewLimiter(r, b) // full
	} else if st.limiter.Limit() != r || st.limiter.Burst() != b {
		st.limiter.SetLimitAt(now, r)
		st.limiter.SetBurstAt(now, b)
	}
	l := st.limiter
	st.mu.Unlock()
	res := l.ReserveN(now, 1)
	if !res.OK() { // one token never exceeds a burst of at least one
		return time.Second, false
	}
	if d := res.DelayFrom(now); d > 0 {
		res.CancelAt(now)
		return d, false
	}
	return 0, true
}

// settleSubmission settles adm (admitOwner's) with whether sub created
// its job, once that is known: at once, or, for a caller whose ctx ended
// while its group commit was still being written, when that round ends
// (bounded by the flush timeout; past it, as not created).
func (s *Service) settleSubmission(ctx context.Context, adm *admission, sub *submission) {
	switch {
	case adm == nil:
	case sub.settled():
		adm.settle(sub.err == nil && sub.res.Created)
	case ctx.Err() == nil: // refused before it was queued
		adm.settle(false)
	default:
		go func() {
			t := time.NewTimer(s.batcher.flushTimeout + time.Second)
			defer t.Stop()
			select {
			case <-sub.done:
				adm.settle(sub.err == nil && sub.res.Created)
			case <-t.C:
				adm.settle(false)
			}
		}()
	}
}

// precheckOwner refuses, without taking a token or a place, a request that
// the caller's quotas would refuse now, from what this process already
// knows (no database read): for work that is expensive to do before
// admitOwner decides (an Object Store ingest streams the whole object
// before its job is submitted). It lets a request through when it does not
// know (an owner not seen yet, a count older than its window); admitOwner
// still decides. The caller has checked that the key has no job yet.
func (s *Service) precheckOwner(principal, scope string) error {
	q := s.quotas.Load()
	if q == nil {
		return nil
	}
	err := q.precheck(principal, scope)
	var quota *QuotaExceeded
	if errors.As(err, &quota) {
		if quota.Limit == QuotaLimitRate {
			q.count(metrics.OwnerQuotaRateLimited)
		} else {
			q.count(metrics.OwnerQuotaPendingLimited)
		}
	}
	return err
}

func (q *ownerQuotas) precheck(principal, scope string) error {
	cfg := q.cfg.Load()
	lim := cfg.limitsOf(principal)
	if !lim.Limited() {
		return nil
	}
	q.mu.Lock()
	st := q.owners[scope]
	q.mu.Unlock()
	if st == nil {
		return nil
	}
	now := cfg.now()
	st.mu.Lock()
	defer st.mu.Unlock()
	if lim.MaxPendingJobs > 0 && st.loaded && st.gen == cfg.gen && now.Sub(st.countedAt) < cfg.window &&
		st.counted+st.completed+st.inflight >= lim.MaxPendingJobs {
		return quotaError(QuotaLimitPending, cfg.pendingRetryAfter())
	}
	if lim.SubmitRate > 0 && st.limiter != nil && st.limiter.Limit() == rate.Limit(lim.SubmitRate) {
		if tokens := st.limiter.TokensAt(now); tokens < 1 {
			return quotaError(QuotaLimitRate, time.Duration((1-tokens)/lim.SubmitRate*float64(time.Second)))
		}
	}
	return nil
}
