package intake

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/google/uuid"
	"github.com/mightyetl/mightyetl/internal/auth"
	"github.com/mightyetl/mightyetl/internal/metrics"
	"github.com/mightyetl/mightyetl/internal/pg"
)

// DB is what the Service needs from PostgreSQL; *pgxpool.Pool satisfies it.
type DB interface {
	pg.DBTX
	pg.TxBeginner
}

// Defaults of Options.
const (
	DefaultMaxBatchRecords        = 1000
	DefaultMaxAttempts            = 3
	DefaultGroupCommitWindow      = 0
	DefaultGroupCommitMaxBatch    = 256
	DefaultGroupCommitMaxBytes    = 16 << 20
	DefaultGroupCommitMaxInFlight = 1
	DefaultFlushTimeout           = 15 * time.Second
	DefaultListLimit              = 50
	MaxListLimit                  = 100
)

// Options configure a Service. Zero values take the defaults noted.
type Options struct {
	// DB is the pool every use case runs on. Required.
	DB DB
	// PrincipalHashKey keys principal_scope_hash and cursor bindings
	// (MIGHTYETL_PRINCIPAL_HASH_KEY). Empty is accepted only for deny mode,
	// where no request reaches the Service; with an empty key every use case
	// that needs a principal's scope fails with ErrInternal instead of
	// hashing under an empty key.
	PrincipalHashKey []byte
	// MaxBatchRecords bounds records per request
	// (MIGHTYETL_MAX_BATCH_RECORDS); zero means DefaultMaxBatchRecords.
	MaxBatchRecords int
	// MaxAttempts is stored on each new job (1..100, MIGHTYETL_MAX_ATTEMPTS);
	// zero means DefaultMaxAttempts.
	MaxAttempts int
	// GroupCommitWindow is how long the first submission of a round waits for
	// others to share its transaction when nothing is in flight; zero means
	// DefaultGroupCommitWindow (no wait: see GroupCommitMaxInFlight),
	// negative means no wait.
	GroupCommitWindow time.Duration
	// GroupCommitMaxBatch flushes a round early once this many submissions
	// wait; zero means DefaultGroupCommitMaxBatch.
	GroupCommitMaxBatch int
	// GroupCommitMaxBytes flushes a round early once its payloads add up to
	// this many bytes, and no round carries more (a larger submission goes
	// alone): all payloads of a round travel in one text[] parameter, which
	// PostgreSQL caps at 1 GB. Zero means DefaultGroupCommitMaxBytes.
	GroupCommitMaxBytes int64
	// GroupCommitMaxInFlight bounds concurrent group-commit transactions;
	// zero means DefaultGroupCommitMaxInFlight. The default, 1, with no
	// window is classic group commit: a submission arriving while nothing is
	// in flight goes at once, alone if need be; those arriving meanwhile
	// leave together the moment it commits, so rows per commit grow with the
	// load by themselves. A group commit costs about 0.3 ms of fixed work
	// whatever its size, so more, smaller rounds in flight lose
	// (docs/performance.md, "Why these constants", has the measurements).
	GroupCommitMaxInFlight int
	// FlushTimeout bounds one group-commit transaction; zero means
	// DefaultFlushTimeout.
	FlushTimeout time.Duration
	// Metrics, when not nil, counts submissions, cancellations and batch sizes.
	Metrics *metrics.Intake
	// Quotas are the per-owner quotas (MIGHTYETL_OWNER_*); the zero value
	// limits nothing. See SetQuotas.
	Quotas QuotaOptions
	// Uploads bound large-job uploads (MIGHTYETL_UPLOAD_*); zero fields
	// take their defaults.
	Uploads UploadOptions
	// MaxScheduleHorizon is how far ahead of the intake's clock a
	// submission's or replay's notBefore may lie
	// (MIGHTYETL_MAX_SCHEDULE_HORIZON); zero or negative means
	// DefaultMaxScheduleHorizon.
	MaxScheduleHorizon time.Duration
}

// WithDefaults returns o with every zero field that has a default set to
// it (the Default* constants; a non-positive group-commit size, in-flight
// bound or flush timeout counts as zero). A negative GroupCommitWindow is
// kept: it means no wait.
func (o Options) WithDefaults() Options {
	o.MaxBatchRecords = cmp.Or(o.MaxBatchRecords, DefaultMaxBatchRecords)
	o.MaxAttempts = cmp.Or(o.MaxAttempts, DefaultMaxAttempts)
	o.GroupCommitWindow = cmp.Or(o.GroupCommitWindow, DefaultGroupCommitWindow)
	o.GroupCommitMaxBatch = cmp.Or(max(o.GroupCommitMaxBatch, 0), DefaultGroupCommitMaxBatch)
	o.GroupCommitMaxBytes = cmp.Or(max(o.GroupCommitMaxBytes, 0), DefaultGroupCommitMaxBytes)
	o.GroupCommitMaxInFlight = cmp.Or(max(o.GroupCommitMaxInFlight, 0), DefaultGroupCommitMaxInFlight)
	o.FlushTimeout = cmp.Or(max(o.FlushTimeout, 0), DefaultFlushTimeout)
	o.Uploads = o.Uploads.WithDefaults()
	o.MaxScheduleHorizon = cmp.Or(max(o.MaxScheduleHorizon, 0), DefaultMaxScheduleHorizon)
	return o
}

// Service runs the intake use cases. It holds no goroutines and no cache
// but the per-owner quotas' state (quota.go); it is safe for concurrent use
// and needs no shutdown.
type Service struct {
	db          DB
	hashKey     []byte
	scopes      *auth.ScopeHasher // under hashKey
	maxRecords  int
	maxAttempts int
	metrics     *metrics.Intake
	uploads     UploadOptions
	// maxScheduleHorizon bounds a notBefore (Options.MaxScheduleHorizon).
	maxScheduleHorizon time.Duration
	batcher            *batcher
	// notify wakes the outbox relays after a commit that wrote an outbox
	// group row (submit, replay), unless outboxWake is set.
	notify *pg.OutboxNotifier
	// outboxWake, when set, wakes the relay of this process instead (see
	// SetOutboxWake).
	outboxWake atomic.Pointer[func()]
	// announce, when set, publishes the wake-up for submitted jobs itself
	// (see SetAnnouncer).
	announce atomic.Pointer[func()]
	// quotas are the per-owner quotas, nil when none (quota.go); quotaMu
	// serialises SetQuotas.
	quotas  atomic.Pointer[ownerQuotas]
	quotaMu sync.Mutex
}

// SetAnnouncer makes announce the wake-up for jobs submitted from now on:
// their group commit writes no job_available outbox row
// (pg.InsertJobsUnannounced) and calls announce once it has committed, for
// a process with its own NATS connection (outbox.Relay.AnnounceAvailable).
// That saves the row, its index entries and the relay transaction that
// would select and delete it, for every group commit. nil restores the
// outbox row, which any relay of the fleet announces (set it before the
// connection closes). The wake-up is advisory either way: one lost between
// the commit and the publish delays the pickup to the workers' poll.
// announce must not block. Replays keep their outbox row. Safe for
// concurrent use.
func (s *Service) SetAnnouncer(announce func()) {
	if announce == nil {
		s.announce.Store(nil)
		return
	}
	s.announce.Store(&announce)
}

// announcer returns the current announce function, nil when none is set.
func (s *Service) announcer() func() {
	if a := s.announce.Load(); a != nil {
		return *a
	}
	return nil
}

// SetOutboxWake makes wake the wake-up the service sends after a commit
// that wrote outbox rows, instead of a NOTIFY on the outbox channel: for a
// process that runs an outbox relay itself (outbox.Relay.Wake), which then
// takes those rows without a PostgreSQL round trip per commit, and without
// waking the relays of other processes for rows it takes anyway. nil
// restores the NOTIFY (set it before that relay stops, so later commits
// wake the others). wake must not block. Safe for concurrent use.
func (s *Service) SetOutboxWake(wake func()) {
	if wake == nil {
		s.outboxWake.Store(nil)
		return
	}
	s.outboxWake.Store(&wake)
}

// wakeOutbox wakes the outbox relay(s) after a commit that wrote outbox rows.
func (s *Service) wakeOutbox() {
	if wake := s.outboxWake.Load(); wake != nil {
		(*wake)()
		return
	}
	s.notify.Kick()
}

// Start opens the service's group commit for submissions: until Start, and
// after Stop, Submit (and everything that submits: the NATS consumer)
// refuses with ErrTargetUnavailable, which callers retry. It follows
// internal/startstop: once, and never after Stop.
func (s *Service) Start(ctx context.Context) error { return s.batcher.Start(ctx) }

// Stop refuses new submissions, flushes a group-commit round still waiting
// for company at once, and waits until every submission handed to the
// service has its outcome, or until ctx ends (it returns ctx.Err(); the
// flushes finish in the background, each bounded by FlushTimeout). Reads,
// cancellations and replays do not go through the group commit and are not
// affected. Safe to call twice, concurrently, and before Start.
func (s *Service) Stop(ctx context.Context) error { return s.batcher.Stop(ctx) }

// New returns a Service, or an error when opts are out of range.
func New(opts Options) (*Service, error) {
	if opts.DB == nil {
		return nil, errors.New("new intake service: no database")
	}
	opts = opts.WithDefaults()
	if opts.MaxAttempts < 1 || opts.MaxAttempts > 100 {
		return nil, fmt.Errorf("new intake service: max attempts %d outside 1..100", opts.MaxAttempts)
	}
	if opts.MaxBatchRecords < 1 {
		return nil, fmt.Errorf("new intake service: max batch records %d below 1", opts.MaxBatchRecords)
	}
	if err := opts.Uploads.validate(); err != nil {
		return nil, fmt.Errorf("new intake service: %w", err)
	}
	s := &Service{
		db:          opts.DB,
		hashKey:     append([]byte(nil), opts.PrincipalHashKey...),
		scopes:      auth.NewScopeHasher(opts.PrincipalHashKey),
		maxRecords:  opts.MaxBatchRecords,
		maxAttempts: opts.MaxAttempts,
		metrics:     opts.Metrics,
		uploads:     opts.Uploads,
		notify:      pg.NewOutboxNotifier(opts.DB),

		maxScheduleHorizon: opts.MaxScheduleHorizon,
	}
	s.batcher = &batcher{
		wakeOutbox:   s.wakeOutbox,
		announcer:    s.announcer,
		db:           opts.DB,
		window:       max(opts.GroupCommitWindow, 0), // negative: no wait
		maxBatch:     opts.GroupCommitMaxBatch,
		maxBytes:     opts.GroupCommitMaxBytes,
		maxInFlight:  opts.GroupCommitMaxInFlight,
		flushTimeout: opts.FlushTimeout,
	}
	if opts.Metrics != nil {
		s.batcher.observe = func(n int) { opts.Metrics.SubmitBatchSize.Observe(float64(n)) }
	}
	if err := s.SetQuotas(opts.Quotas); err != nil {
		return nil, fmt.Errorf("new intake service: %w", err)
	}
	return s, nil
}

// scope returns principal_scope_hash of principal, or ErrPrincipalRequired
// when the principal is blank.
func (s *Service) scope(principal string) (string, error) {
	if strings.TrimSpace(principal) == "" {
		return "", ErrPrincipalRequired
	}
	if len(s.hashKey) == 0 {
		return "", ErrInternal // misconfigured: never hash under an empty key
	}
	return s.scopes.Hash(principal), nil
}

// Status returns the caller's job jobID. Absent and foreign jobs are both
// ErrJobNotFound; an unreachable database is etl_target_unavailable.
func (s *Service) Status(ctx context.Context, principal string, jobID uuid.UUID) (pg.Job, error) {
	scope, err := s.scope(principal)
	if err != nil {
		return pg.Job{}, err
	}
	j, err := pg.GetJob(ctx, s.db, scope, jobID)
	if errors.Is(err, pg.ErrNotFound) {
		return pg.Job{}, ErrJobNotFound
	}
	if err != nil {
		return pg.Job{}, storeError(err)
	}
	return j, nil
}

// ListRequest asks for one page of the caller's jobs.
type ListRequest struct {
	Principal string
	// Limit is 1..100; zero means 50. Anything else is ErrInvalidPageLimit.
	Limit int
	// Cursor is a NextCursor from an earlier page of the same principal, or
	// empty for the first page. Anything else is ErrInvalidPageCursor.
	Cursor string
	// Status, when not empty, keeps jobs in that state (one of the five);
	// anything else is ErrInvalidStatusFilter.
	Status string
	// Priority, when not 0, keeps jobs of that priority (1..4); anything
	// else is ErrInvalidPriorityFilter.
	Priority int
}

// ListResult is one page.
type ListResult struct {
	// Jobs are newest first (created_at DESC, job_record_id DESC).
	Jobs []pg.Job
	// NextCursor continues the list; empty on the last page. It is bound to
	// the principal: no other principal can use it.
	NextCursor string
	// Limit is the effective page size.
	Limit int
}

// ValidStatus reports whether s is one of the five job states.
func ValidStatus(s string) bool {
	switch s {
	case pg.StatusPending, pg.StatusRunning, pg.StatusSucceeded, pg.StatusFailed, pg.StatusCancelled:
		return true
	}
	return false
}

// List returns one keyset page of the caller's jobs. Validation order:
// limit, status, priority, cursor.
func (s *Service) List(ctx context.Context, req ListRequest) (ListResult, error) {
	scope, err := s.scope(req.Principal)
	if err != nil {
		return ListResult{}, err
	}
	if req.Limit == 0 {
		req.Limit = DefaultListLimit
	}
	if req.Limit < 1 || req.Limit > MaxListLimit {
		return ListResult{}, ErrInvalidPageLimit
	}
	if req.Status != "" && !ValidStatus(req.Status) {
		return ListResult{}, ErrInvalidStatusFilter
	}
	if req.Priority != 0 && (req.Priority < pg.HighestPriority || req.Priority > pg.LowestPriority) {
		return ListResult{}, ErrInvalidPriorityFilter
	}
	p := pg.ListParams{PrincipalScopeHash: scope, Status: req.Status, Priority: req.Priority, Limit: req.Limit + 1}
	if req.Cursor != "" {
		k, err := decodeCursor(s.hashKey, scope, req.Cursor)
		if err != nil {
			return ListResult{}, err
		}
		p.After = &k
	}
	jobs, err := pg.ListJobs(ctx, s.db, p)
	if err != nil {
		return ListResult{}, storeError(err)
	}
	res := ListResult{Jobs: jobs, Limit: req.Limit}
	if len(jobs) > req.Limit {
		res.Jobs = jobs[:req.Limit]
		last := res.Jobs[req.Limit-1]
		res.NextCursor = encodeCursor(s.hashKey, scope, pg.PageKey{CreatedAt: last.CreatedAt, JobID: last.JobID})
	}
	return res, nil
}

func (s *Service) count(outcome string) {
	if s.metrics != nil {
		s.metrics.Submissions.WithLabelValues(outcome).Inc()
	}
}

func (s *Service) countRejection(code string) {
	if s.metrics != nil {
		s.metrics.Rejections.WithLabelValues(code).Inc()
	}
}

func (s *Service) countCancel(outcome string) {
	if s.metrics != nil {
		s.metrics.Cancellations.WithLabelValues(outcome).Inc()
	}
}
