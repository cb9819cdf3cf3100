// Package console is the operator console (issue 14): server-rendered HTML
// pages under /console/ and the data behind the operator JSON endpoints
// under /api/ops/ (served by package httpapi). Operators see every owner's
// jobs but never a payload, a key or a principal: the owner is a short
// prefix of the principal scope hash.
//
// Every page is answered by bounded reads (internal/pg/ops.go): the active
// jobs through the narrow claim queue, the job list by a capped primary-key
// walk, one job by primary key. Authentication and the operator decision
// happen before the console (httpapi); the console gets the operator's
// principal scope hash in the request context.
package console

import (
	"cmp"
	"context"
	"crypto/hmac"
	"crypto/rand"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"log/slog"
	"sort"
	"sync"
	"sync/atomic"
	"time"

	"github.com/google/uuid"
	"github.com/mightyetl/mightyetl/internal/intake"
	"github.com/mightyetl/mightyetl/internal/pg"
)

// DB is what the console reads and writes through (a pgxpool.Pool).
type DB = pg.DBTX

// Defaults of Options.
const (
	// DefaultBulkCancelCap is the most jobs one bulk cancellation cancels
	// (MIGHTYETL_CONSOLE_BULK_CANCEL_CAP).
	DefaultBulkCancelCap = 100
	// DefaultSampleEvery is the spacing of the rate samples.
	DefaultSampleEvery = 30 * time.Second
	// DefaultMaxPayloadBytes bounds a replay's body
	// (MIGHTYETL_MAX_PAYLOAD_BYTES).
	DefaultMaxPayloadBytes = intake.DefaultMaxPayloadBytes
)

// Options configure a Console. Zero values take the defaults noted.
type Options struct {
	// DB runs the console's reads and cancellations. Required.
	DB DB
	// HashKey is MIGHTYETL_PRINCIPAL_HASH_KEY; it keys the CSRF tokens.
	HashKey []byte
	// BulkCancelCap bounds one bulk cancellation; zero means
	// DefaultBulkCancelCap.
	BulkCancelCap int
	// RelayState reports the outbox relay's NATS state ("connected",
	// "disconnected", "not configured"); nil means "not configured".
	RelayState func() string
	// Logger receives one line per operator action (action, outcome,
	// counts; never a payload, principal, hash or job id); nil discards.
	Logger *slog.Logger
	// SampleEvery is the spacing of the rate samples; zero means
	// DefaultSampleEvery.
	SampleEvery time.Duration
	// Replay runs an operator's replay (intake.Service.OperatorReplay);
	// nil means the console offers no replay.
	Replay func(context.Context, intake.OperatorReplayRequest) (intake.ReplayResult, error)
	// MaxPayloadBytes bounds the body of a replay (MIGHTYETL_MAX_PAYLOAD_BYTES);
	// zero means DefaultMaxPayloadBytes.
	MaxPayloadBytes int64
}

// Console serves the operator pages. Safe for concurrent use.
type Console struct {
	opts       Options
	sampler    *sampler
	relayState atomic.Pointer[func() string]
}

// SetRelayState replaces Options.RelayState (the relay starts after the
// HTTP server is built).
func (c *Console) SetRelayState(f func() string) {
	if f != nil {
		c.relayState.Store(&f)
	}
}

// WithDefaults returns o with every unset field that has a default set to
// it: DefaultBulkCancelCap, a "not configured" relay state, a discarding
// logger, DefaultSampleEvery and DefaultMaxPayloadBytes (a non-positive
// number counts as unset).
func (o Options) WithDefaults() Options {
	o.BulkCancelCap = cmp.Or(max(o.BulkCancelCap, 0), DefaultBulkCancelCap)
	if o.RelayState == nil {
		o.RelayState = func() string { return "not configured" }
	}
	if o.Logger == nil {
		o.Logger = slog.New(slog.DiscardHandler)
	}
	o.SampleEvery = cmp.Or(max(o.SampleEvery, 0), DefaultSampleEvery)
	o.MaxPayloadBytes = cmp.Or(max(o.MaxPayloadBytes, 0), DefaultMaxPayloadBytes)
	return o
}

// New returns a Console.
func New(opts Options) (*Console, error) {
	if opts.DB == nil {
		return nil, errors.New("console: no database")
	}
	opts = opts.WithDefaults()
	c := &Console{opts: opts, sampler: &sampler{every: opts.SampleEvery}}
	c.SetRelayState(opts.RelayState)
	return c, nil
}

// BulkCancelCap is the most jobs one bulk cancellation cancels.
func (c *Console) BulkCancelCap() int { return c.opts.BulkCancelCap }

// Operator is the authenticated operator of a request.
type Operator struct {
	// ScopeHash is the operator's principal scope hash (never shown whole,
	// never logged; recorded on the lifecycle event of its cancellations).
	ScopeHash string
}

type operatorKey struct{}

// WithOperator returns ctx carrying op.
func WithOperator(ctx context.Context, op Operator) context.Context {
	return context.WithValue(ctx, operatorKey{}, op)
}

func operatorFrom(ctx context.Context) (Operator, bool) {
	op, ok := ctx.Value(operatorKey{}).(Operator)
	return op, ok && op.ScopeHash != ""
}

// CSRFToken is the operator's form token: an HMAC of its scope hash under
// the server's key, domain-separated. Forms carry it; POSTs must return it.
func (c *Console) CSRFToken(op Operator) string {
	m := hmac.New(sha256.New, c.opts.HashKey)
	m.Write([]byte("mightyetl:console-csrf:v1:" + op.ScopeHash))
	return hex.EncodeToString(m.Sum(nil))
}

func (c *Console) validToken(op Operator, token string) bool {
	return hmac.Equal([]byte(c.CSRFToken(op)), []byte(token))
}

// operatorCancellationKeyHash is the cancellation_key_hash of an
// operator's cancellation, domain-separated from the owner's key hashes.
func operatorCancellationKeyHash(op Operator, id uuid.UUID) string {
	s := sha256.Sum256([]byte("mightyetl:operator-cancellation:v1:" + op.ScopeHash + ":" + id.String()))
	return hex.EncodeToString(s[:])
}

// Overview is the fleet at a glance.
type Overview struct {
	DatabaseNow        time.Time `json:"databaseNow"`
	Pending            int       `json:"pending"`
	PendingClaimable   int       `json:"pendingClaimableNow"`
	PendingScheduled   int       `json:"pendingScheduledLater"`
	Running            int       `json:"running"`
	RunningLive        int       `json:"runningLeaseLive"`
	RunningExpired     int       `json:"runningLeaseExpired"`
	ActiveCapped       bool      `json:"activeCapped"`
	OldestClaimableAge float64   `json:"oldestClaimableAgeSeconds"`
	// Outcomes are terminal outcomes in the last hour (see OutcomesCapped).
	Outcomes       []Outcome `json:"outcomesLastHour"`
	OutcomesCapped bool      `json:"outcomesCapped"`
	// Rates are claims and finishes per minute over the last 15 minutes.
	Rates            []RatePoint `json:"rates"`
	OutboxLifecycle  int64       `json:"outboxLifecycleRows"`
	OutboxAdvisory   int64       `json:"outboxAdvisoryRows"`
	OutboxOldestAge  float64     `json:"outboxOldestAgeSeconds"`
	RelayState       string      `json:"relayState"`
	SoonestExpirySec *float64    `json:"soonestLeaseExpirySeconds,omitempty"`
}

// Outcome is a count of terminal outcomes by state and code.
type Outcome struct {
	Status string `json:"status"`
	Code   string `json:"code,omitempty"`
	Count  int    `json:"count"`
}

// outboxCap bounds each outbox count.
const outboxCap = 100000

// outcomesScan bounds the jobs examined for the last hour's outcomes.
const outcomesScan = 20000

// Overview reads the overview: the active set (claim queue, capped), the
// last hour's outcomes (capped primary-key walk), the outbox (partial
// indexes, capped) and the rate samples.
func (c *Console) Overview(ctx context.Context) (Overview, error) {
	active, now, capped, err := pg.OpsActiveJobs(ctx, c.opts.DB)
	if err != nil {
		return Overview{}, err
	}
	o := Overview{DatabaseNow: now, ActiveCapped: capped, RelayState: (*c.relayState.Load())()}
	var oldest *time.Time
	for _, a := range active {
		claimable := !a.ClaimableAt.After(now)
		switch a.Status {
		case pg.StatusPending:
			o.Pending++
			if claimable {
				o.PendingClaimable++
			} else {
				o.PendingScheduled++
			}
		case pg.StatusRunning:
			o.Running++
			if claimable {
				o.RunningExpired++
			} else {
				o.RunningLive++
				s := a.ClaimableAt.Sub(now).Seconds()
				if o.SoonestExpirySec == nil || s < *o.SoonestExpirySec {
					o.SoonestExpirySec = &s
				}
			}
		}
		if claimable && (oldest == nil || a.ClaimableAt.Before(*oldest)) {
			t := a.ClaimableAt
			oldest = &t
		}
	}
	if oldest != nil {
		o.OldestClaimableAge = now.Sub(*oldest).Seconds()
	}
	outcomes, ocapped, err := pg.OpsRecentOutcomes(ctx, c.opts.DB, now.Add(-time.Hour), outcomesScan)
	if err != nil {
		return Overview{}, err
	}
	o.OutcomesCapped = ocapped
	for _, x := range outcomes {
		o.Outcomes = append(o.Outcomes, Outcome{Status: x.Status, Code: x.Code, Count: x.Count})
	}
	b, err := pg.ReadOutboxBacklog(ctx, c.opts.DB, outboxCap)
	if err != nil {
		return Overview{}, err
	}
	o.OutboxLifecycle, o.OutboxAdvisory = b.Lifecycle, b.Advisory
	if b.OldestLifecycleAt != nil {
		o.OutboxOldestAge = max(0, now.Sub(*b.OldestLifecycleAt).Seconds())
	}
	if err := c.Sample(ctx); err != nil {
		return Overview{}, err
	}
	o.Rates = c.sampler.rates(now)
	return o, nil
}

// Sample records a rate sample when the last one is older than SampleEvery
// (the overview calls it; Run calls it on a ticker).
func (c *Console) Sample(ctx context.Context) error {
	if !c.sampler.due(time.Now()) {
		return nil
	}
	cnt, err := pg.ReadOpsCounters(ctx, c.opts.DB)
	if err != nil {
		return err
	}
	c.sampler.add(time.Now(), cnt)
	return nil
}

// Run samples the rates every SampleEvery until ctx ends, so the chart has
// history before anyone opens the overview. Errors are skipped (the next
// tick retries).
func (c *Console) Run(ctx context.Context) {
	t := time.NewTicker(c.opts.SampleEvery)
	defer t.Stop()
	_ = c.Sample(ctx)
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
			_ = c.Sample(ctx)
		}
	}
}

// RatePoint is claims and finishes per minute between two samples.
type RatePoint struct {
	At              time.Time `json:"at"`
	ClaimsPerMin    float64   `json:"claimsPerMinute"`
	FinishesPerMin  float64   `json:"finishesPerMinute"`
	intervalSeconds float64
}

// sampler keeps the counters' samples of the last 15 minutes.
type sampler struct {
	every time.Duration
	mu    sync.Mutex
	s     []sample
}

type sample struct {
	at       time.Time // host clock: only differences are used
	counters pg.OpsCounters
}

const rateWindow = 15 * time.Minute

func (s *sampler) due(now time.Time) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	return len(s.s) == 0 || now.Sub(s.s[len(s.s)-1].at) >= s.every
}

func (s *sampler) add(now time.Time, c pg.OpsCounters) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.s = append(s.s, sample{at: now, counters: c})
	cut := 0
	for cut < len(s.s)-1 && now.Sub(s.s[cut].at) > rateWindow {
		cut++
	}
	s.s = s.s[cut:]
}

// rates turns consecutive samples into per-minute rates, stamped on the
// database clock (dbNow minus the sample's age on the host clock).
func (s *sampler) rates(dbNow time.Time) []RatePoint {
	s.mu.Lock()
	defer s.mu.Unlock()
	var out []RatePoint
	hostNow := time.Now()
	for i := 1; i < len(s.s); i++ {
		a, b := s.s[i-1], s.s[i]
		dt := b.at.Sub(a.at).Seconds()
		if dt <= 0 {
			continue
		}
		claims := float64(b.counters.Claims - a.counters.Claims)
		finishes := float64(b.counters.Finishes - a.counters.Finishes)
		if claims < 0 || finishes < 0 { // statistics reset
			continue
		}
		out = append(out, RatePoint{At: dbNow.Add(-hostNow.Sub(b.at)), ClaimsPerMin: claims * 60 / dt,
			FinishesPerMin: finishes * 60 / dt, intervalSeconds: dt})
	}
	return out
}

// Worker is one lease owner of the fleet, as its leases show it.
type Worker struct {
	OwnerID       string    `json:"leaseOwnerId"`
	Running       int       `json:"runningClaims"`
	Live          int       `json:"liveLeases"`
	Expired       int       `json:"expiredLeases"`
	SoonestExpiry time.Time `json:"soonestLeaseExpiry"`
	// State is "renewing" (every lease live), "lagging" (some expired) or
	// "lost" (every lease expired: a crashed or partitioned worker whose
	// jobs the next claims will take over).
	State string `json:"state"`
	// Reclaim lists the jobs with an expired lease (at most 50).
	Reclaim []uuid.UUID `json:"jobsToReclaim"`
}

// Fleet is the workers page.
type Fleet struct {
	DatabaseNow time.Time `json:"databaseNow"`
	Workers     []Worker  `json:"workers"`
	Capped      bool      `json:"activeCapped"`
}

// Fleet groups the RUNNING jobs of the active set by lease owner.
func (c *Console) Fleet(ctx context.Context) (Fleet, error) {
	active, now, capped, err := pg.OpsActiveJobs(ctx, c.opts.DB)
	if err != nil {
		return Fleet{}, err
	}
	by := map[string]*Worker{}
	for _, a := range active {
		if a.Status != pg.StatusRunning || a.LeaseOwnerID == nil || a.LeaseExpiresAt == nil {
			continue
		}
		w := by[*a.LeaseOwnerID]
		if w == nil {
			w = &Worker{OwnerID: *a.LeaseOwnerID, SoonestExpiry: *a.LeaseExpiresAt}
			by[w.OwnerID] = w
		}
		w.Running++
		if a.LeaseExpiresAt.After(now) {
			w.Live++
		} else {
			w.Expired++
			if len(w.Reclaim) < 50 {
				w.Reclaim = append(w.Reclaim, a.JobID)
			}
		}
		if a.LeaseExpiresAt.Before(w.SoonestExpiry) {
			w.SoonestExpiry = *a.LeaseExpiresAt
		}
	}
	f := Fleet{DatabaseNow: now, Capped: capped, Workers: []Worker{}}
	for _, w := range by {
		switch {
		case w.Expired == 0:
			w.State = "renewing"
		case w.Live == 0:
			w.State = "lost"
		default:
			w.State = "lagging"
		}
		f.Workers = append(f.Workers, *w)
	}
	sort.Slice(f.Workers, func(i, k int) bool { return f.Workers[i].OwnerID < f.Workers[k].OwnerID })
	return f, nil
}

// Jobs lists jobs for a filter.
func (c *Console) Jobs(ctx context.Context, f Filter) (pg.OpsPage, error) {
	return pg.OpsListJobs(ctx, c.opts.DB, f.params())
}

// Detail reads one job; pg.ErrNotFound when absent.
func (c *Console) Detail(ctx context.Context, id uuid.UUID) (pg.OpsDetail, error) {
	return pg.OpsJobDetail(ctx, c.opts.DB, id)
}

// CancelResult is the outcome of one operator cancellation.
type CancelResult struct {
	Cancelled      bool
	PreviousStatus string
	Status         string
}

// Cancel cancels one job as op (etl_operator_cancel_job) and logs the
// action without identifiers.
func (c *Console) Cancel(ctx context.Context, op Operator, id uuid.UUID) (CancelResult, error) {
	out, err := pg.OperatorCancelJob(ctx, c.opts.DB, pg.OperatorCancelParams{JobID: id,
		OperatorScopeHash: op.ScopeHash, CancellationKeyHash: operatorCancellationKeyHash(op, id)})
	if err != nil {
		if !errors.Is(err, pg.ErrNotFound) {
			c.opts.Logger.LogAttrs(ctx, slog.LevelError, "operator action", slog.String("action", "cancel"),
				slog.String("outcome", "error"), slog.String("error_class", pg.ErrorClass(err)))
		}
		return CancelResult{}, err
	}
	outcome := "not_active"
	if out.Cancelled {
		outcome = "cancelled"
	}
	c.opts.Logger.LogAttrs(ctx, slog.LevelInfo, "operator action", slog.String("action", "cancel"),
		slog.String("outcome", outcome), slog.String("previous_status", out.PreviousStatus))
	return CancelResult{Cancelled: out.Cancelled, PreviousStatus: out.PreviousStatus, Status: out.Job.Status}, nil
}

// BulkCancelPlan is the set a bulk cancellation would cancel now.
type BulkCancelPlan struct {
	Jobs []uuid.UUID
	// Capped is true when more jobs match than BulkCancelCap.
	Capped bool
}

// PlanBulkCancel returns the active jobs (PENDING or RUNNING) matching f,
// at most BulkCancelCap of them, newest first.
func (c *Console) PlanBulkCancel(ctx context.Context, f Filter) (BulkCancelPlan, error) {
	if f.Status != pg.StatusPending && f.Status != pg.StatusRunning {
		return BulkCancelPlan{}, errBulkNeedsActiveState
	}
	f.Before = nil
	p := f.params()
	p.Limit = c.opts.BulkCancelCap
	page, err := pg.OpsListJobs(ctx, c.opts.DB, p)
	if err != nil {
		return BulkCancelPlan{}, err
	}
	plan := BulkCancelPlan{Capped: page.Next != nil}
	for _, j := range page.Jobs {
		plan.Jobs = append(plan.Jobs, j.JobID)
	}
	return plan, nil
}

var errBulkNeedsActiveState = errors.New("bulk cancel needs a PENDING or RUNNING state filter")

// BulkCancel cancels at most confirmed jobs of the plan for f, each with
// the single-job statement, and returns how many it cancelled.
func (c *Console) BulkCancel(ctx context.Context, op Operator, f Filter, confirmed int) (int, error) {
	plan, err := c.PlanBulkCancel(ctx, f)
	if err != nil {
		return 0, err
	}
	n := 0
	for i, id := range plan.Jobs {
		if i >= confirmed {
			break
		}
		out, err := pg.OperatorCancelJob(ctx, c.opts.DB, pg.OperatorCancelParams{JobID: id,
			OperatorScopeHash: op.ScopeHash, CancellationKeyHash: operatorCancellationKeyHash(op, id)})
		if err != nil && !errors.Is(err, pg.ErrNotFound) {
			c.opts.Logger.LogAttrs(ctx, slog.LevelError, "operator action", slog.String("action", "bulk_cancel"),
				slog.String("outcome", "error"), slog.String("error_class", pg.ErrorClass(err)), slog.Int("cancelled", n))
			return n, fmt.Errorf("bulk cancel: %w", err)
		}
		if out.Cancelled {
			n++
		}
	}
	c.opts.Logger.LogAttrs(ctx, slog.LevelInfo, "operator action", slog.String("action", "bulk_cancel"),
		slog.String("outcome", "done"), slog.Int("confirmed", confirmed), slog.Int("cancelled", n))
	return n, nil
}

// errReplayUnavailable: the console was built without Options.Replay.
var errReplayUnavailable = errors.New("console: replay not configured")

// ReplayKey draws a fresh replay key for a replay form: the form carries it
// as a hidden field, so submitting the same rendered form twice (a double
// click, a resent POST) replays the same job, while a newly rendered form
// makes a new key. 32 hex characters of crypto/rand after "console-".
func ReplayKey() string {
	var b [16]byte
	_, _ = rand.Read(b[:])
	return "console-" + hex.EncodeToString(b[:])
}

// Replay replays the FAILED or CANCELLED job id of any owner as op with the
// resent original body and replay key (see intake.Service.OperatorReplay:
// the same errors, intake codes) and logs the action without identifiers,
// payloads or hashes.
func (c *Console) Replay(ctx context.Context, op Operator, id uuid.UUID, key string, body []byte) (intake.ReplayResult, error) {
	if c.opts.Replay == nil {
		return intake.ReplayResult{}, errReplayUnavailable
	}
	res, err := c.opts.Replay(ctx, intake.OperatorReplayRequest{OperatorScopeHash: op.ScopeHash,
		IdempotencyKey: key, JobID: id, Body: body})
	outcome := "created"
	switch {
	case err != nil:
		outcome = intake.CodeOf(err)
	case res.Replayed:
		outcome = "replayed"
	}
	level := slog.LevelInfo
	if outcome == intake.CodeTargetUnavailable || outcome == intake.CodeInternalError {
		level = slog.LevelError
	}
	c.opts.Logger.LogAttrs(ctx, level, "operator action", slog.String("action", "replay"),
		slog.String("outcome", outcome))
	return res, err
}

// ReplayEnabled reports whether the console offers replay.
func (c *Console) ReplayEnabled() bool { return c.opts.Replay != nil }

// MaxPayloadBytes is the largest replay body the console accepts.
func (c *Console) MaxPayloadBytes() int64 { return c.opts.MaxPayloadBytes }
