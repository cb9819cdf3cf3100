package outbox

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"sync/atomic"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/jackc/pgxlisten"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/mightyetl/mightyetl/internal/events"
	"github.com/mightyetl/mightyetl/internal/metrics"
	"github.com/mightyetl/mightyetl/internal/pg"
	"github.com/mightyetl/mightyetl/internal/startstop"
	"github.com/mightyetl/mightyetl/internal/tracing"
)

// NotifyChannel is the channel outbox writers notify: single-job rows by
// their trigger at commit, group rows by pg.OutboxNotifier after commit
// (migration 00013).
const NotifyChannel = pg.OutboxNotifyChannel

// Defaults of Options.
const (
	DefaultPollInterval         = time.Second
	DefaultBatchSize            = 500
	DefaultPublishTimeout       = 5 * time.Second
	DefaultListenReconnectDelay = time.Second
)

// MaxGroupEvents is the most events one group row holds: migration 00006's
// etl_outbox_group_shape_check allows 1..10,000 members (a finish group has
// at most the worker's FinishBatch, 1,024 by default).
const MaxGroupEvents = 10000

// publishWindow is how many lifecycle publishes may await their JetStream
// acknowledgement at once: twice batchSize, and never fewer than
// MaxGroupEvents, because a group row is published whole even when it holds
// more events than batchSize. A batch therefore never waits for a free slot
// unless RunOnce runs concurrently with itself.
func publishWindow(batchSize int) int { return max(2*batchSize, MaxGroupEvents) }

// Options tunes a Relay. Zero values take the defaults noted.
type Options struct {
	// PollInterval is the fallback poll when no notification arrives
	// (MIGHTYETL_OUTBOX_POLL_INTERVAL); zero means DefaultPollInterval.
	PollInterval time.Duration
	// BatchSize bounds the rows of each class (advisory, lifecycle) one batch
	// takes; zero means DefaultBatchSize.
	BatchSize int
	// PublishTimeout bounds the wait for JetStream acknowledgements (and the
	// stream set-up) in one batch; zero means DefaultPublishTimeout.
	PublishTimeout time.Duration
	// ListenReconnectDelay is the pause before the LISTEN connection is
	// re-established after it broke; zero means DefaultListenReconnectDelay.
	ListenReconnectDelay time.Duration
	// Source is the CloudEvents source of lifecycle events; empty means
	// events.DefaultSource.
	Source string
	// ListenConnConfig configures the LISTEN connection; nil means a copy
	// of the pool's connection configuration. A pool that goes through a
	// transaction pooler (PgBouncer pool_mode = transaction) cannot LISTEN:
	// give a configuration that reaches PostgreSQL directly, or PollOnly.
	ListenConnConfig *pgx.ConnConfig
	// PollOnly runs no LISTEN connection: the relay takes batches on its
	// poll interval and on Wake only.
	PollOnly bool
	// StreamReplicas is the lifecycle stream's replica count
	// (MIGHTYETL_NATS_STREAM_REPLICAS); zero means 1. More than 1 needs a
	// JetStream cluster; an existing stream is updated to it.
	StreamReplicas int
}

// WithDefaults returns o with every non-positive duration or size set to
// its Default* constant.
func (o Options) WithDefaults() Options {
	o.PollInterval = cmp.Or(max(o.PollInterval, 0), DefaultPollInterval)
	o.BatchSize = cmp.Or(max(o.BatchSize, 0), DefaultBatchSize)
	o.PublishTimeout = cmp.Or(max(o.PublishTimeout, 0), DefaultPublishTimeout)
	o.ListenReconnectDelay = cmp.Or(max(o.ListenReconnectDelay, 0), DefaultListenReconnectDelay)
	return o
}

// Relay publishes the transactional outbox to NATS; see the package
// documentation for the batch protocol and the outage rules. Create it with
// New; run it with Start and Stop, or drive it with RunOnce. A Relay runs
// once (internal/startstop): a second Start returns
// startstop.ErrAlreadyStarted, a Start after Stop startstop.ErrStopped. Any
// number of relays may run on one database.
type Relay struct {
	pool     *pgxpool.Pool
	nc       *nats.Conn
	js       jetstream.JetStream
	subjects events.Subjects
	log      *slog.Logger
	m        *metrics.Outbox
	opts     Options

	wake        chan struct{}
	streamReady atomic.Bool
	listenDown  atomic.Bool

	ss startstop.Base

	// beforeCommit, when set (tests only), runs after a batch published and
	// deleted its rows and before it commits; an error rolls the batch back,
	// as if the relay died between publish and delete.
	beforeCommit func() error
}

// New returns a relay that reads the outbox through pool, opens its own
// LISTEN connection from pool's configuration, and publishes on nc under
// prefix. log and m may be nil. It fails when pool or nc is nil or the prefix
// is invalid (events.ErrInvalidPrefix).
func New(pool *pgxpool.Pool, nc *nats.Conn, prefix string, log *slog.Logger, m *metrics.Outbox, opts Options) (*Relay, error) {
	if pool == nil || nc == nil {
		return nil, errors.New("new outbox relay: pool and nats connection are required")
	}
	subjects, err := events.NewSubjects(prefix)
	if err != nil {
		return nil, fmt.Errorf("new outbox relay: %w", err)
	}
	opts = opts.WithDefaults()
	js, err := jetstream.New(nc,
		jetstream.WithPublishAsyncMaxPending(publishWindow(opts.BatchSize)),
		jetstream.WithPublishAsyncTimeout(opts.PublishTimeout))
	if err != nil {
		return nil, fmt.Errorf("new outbox relay: %w", err)
	}
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	if m == nil {
		m = metrics.NewOutbox(nil)
	}
	return &Relay{
		pool: pool, nc: nc, js: js, subjects: subjects,
		log: log.With("component", "outbox_relay"), m: m, opts: opts,
		wake: make(chan struct{}, 1),
	}, nil
}

// Start checks that the outbox table is reachable, then runs the relay in
// the background until Stop or until ctx is cancelled. NATS need not be up:
// the relay drops advisory rows and keeps lifecycle rows until it is.
// Returns the start-up check's error (the relay is then stopped: it runs
// once), startstop.ErrAlreadyStarted on a second call and
// startstop.ErrStopped after Stop.
func (r *Relay) Start(ctx context.Context) error {
	return r.ss.Start(ctx, r.start)
}

func (r *Relay) start(ctx context.Context) (startstop.StopFunc, error) {
	if _, err := r.pool.Exec(ctx, "SELECT 1 FROM etl_outbox_events LIMIT 0"); err != nil {
		return nil, fmt.Errorf("start outbox relay: check outbox table: %w", err)
	}
	runCtx, cancel := context.WithCancel(context.WithoutCancel(ctx))
	stopOnParent := context.AfterFunc(ctx, cancel)

	var wg sync.WaitGroup
	if !r.opts.PollOnly {
		listenConfig := r.opts.ListenConnConfig
		if listenConfig == nil {
			listenConfig = r.pool.Config().ConnConfig
		}
		listener := &pgxlisten.Listener{
			Connect: func(ctx context.Context) (*pgx.Conn, error) {
				return pgx.ConnectConfig(ctx, listenConfig.Copy())
			},
			LogError:       r.listenError,
			ReconnectDelay: r.opts.ListenReconnectDelay,
		}
		listener.Handle(NotifyChannel, listenHandler{r})
		wg.Go(func() {
			_ = listener.Listen(runCtx) // returns only when runCtx ends
		})
	}
	wg.Go(func() { r.loop(runCtx) })
	r.log.Info("outbox relay started", "poll_interval", r.opts.PollInterval.String(), "batch_size", r.opts.BatchSize, "listen", !r.opts.PollOnly)
	return func(context.Context) error {
		stopOnParent()
		cancel()
		wg.Wait() // a batch in flight finishes or rolls back on runCtx
		return nil
	}, nil
}

// Stop stops the relay and waits until its goroutines have returned, or
// until ctx ends (then it returns ctx.Err() and the relay still stops in the
// background; a later Stop waits for it). A batch in flight finishes or
// rolls back. Safe to call twice, concurrently, and on a relay never
// started (a later Start then returns startstop.ErrStopped).
func (r *Relay) Stop(ctx context.Context) error {
	return r.ss.Stop(ctx)
}

// Wake asks the relay for a batch, as a notification on NotifyChannel does
// (and is counted like one, source "notify"): a process that runs a relay
// and commits outbox rows itself can wake it without a NOTIFY round trip
// through PostgreSQL. It never blocks, and wake-ups that arrive while one
// is pending become one. Safe for concurrent use and at any time; before
// Start and after Stop it has no effect.
func (r *Relay) Wake() { r.signal(metrics.WakeNotify) }

// signal wakes the loop; never blocks (one pending wake-up is enough).
func (r *Relay) signal(source string) {
	r.m.Wakeups.WithLabelValues(source).Inc()
	select {
	case r.wake <- struct{}{}:
	default:
	}
}

type listenHandler struct{ r *Relay }

func (h listenHandler) HandleNotification(context.Context, *pgconn.Notification, *pgx.Conn) error {
	h.r.signal(metrics.WakeNotify)
	return nil
}

// HandleBacklog runs each time LISTEN is (re)established: notifications
// sent while it was down were missed, so look at the table now.
func (h listenHandler) HandleBacklog(context.Context, string, *pgx.Conn) error {
	if h.r.listenDown.Swap(false) {
		h.r.log.Info("outbox listener reconnected")
	}
	h.r.signal(metrics.WakeNotify)
	return nil
}

// listenError logs the first error of a LISTEN outage; the listener keeps
// reconnecting and the poll covers the gap.
func (r *Relay) listenError(ctx context.Context, err error) {
	if ctx.Err() != nil {
		return
	}
	if !r.listenDown.Swap(true) {
		r.log.Warn("outbox listener lost its connection; polling until it is back", "error_class", pg.ErrorClass(err))
	}
}

// loop drains the outbox whenever woken, logging once per failure streak.
func (r *Relay) loop(ctx context.Context) {
	status := r.nc.StatusChanged(nats.CONNECTED)
	defer r.nc.RemoveStatusListener(status)
	poll := time.NewTicker(r.opts.PollInterval)
	defer poll.Stop()
	failing := false
	var measured time.Time // when the backlog gauges were last refreshed
	for {
		for ctx.Err() == nil {
			_, more, err := r.runOnce(ctx)
			if err != nil {
				if ctx.Err() != nil {
					return
				}
				r.m.BatchErrors.Inc()
				if !failing {
					r.log.Warn("outbox batch failed; retrying on the next wake-up or poll", "error_class", pg.ErrorClass(err))
				}
				failing = true
				break
			}
			if failing {
				r.log.Info("outbox batches succeed again")
				failing = false
			}
			if !more {
				break
			}
		}
		// The gauges follow the poll interval, not every wake-up: under load
		// the relay wakes on every commit that wrote an outbox row.
		if measured.IsZero() || time.Since(measured) >= r.opts.PollInterval {
			r.refreshBacklog(ctx)
			measured = time.Now()
		}
		select {
		case <-ctx.Done():
			return
		case <-r.wake:
		case <-poll.C:
			r.m.Wakeups.WithLabelValues(metrics.WakePoll).Inc()
		case <-status:
			r.m.Wakeups.WithLabelValues(metrics.WakeReconnect).Inc()
		}
	}
}

// refreshBacklog sets the backlog gauges; see backlogSQL for what they
// measure and at what cost.
func (r *Relay) refreshBacklog(ctx context.Context) {
	n, age, err := measureBacklog(ctx, r.pool)
	if err != nil {
		return // the batch error already reports an unreachable database
	}
	r.m.Backlog.Set(float64(n))
	r.m.OldestAge.Set(age)
}

// RunOnce handles one batch (see the package documentation) and returns the
// number published: advisory rows whose message was sent and lifecycle
// events JetStream acknowledged (a group row counts once per member). An error means the batch, or some
// of its lifecycle rows, will be retried; rows published before the error
// may be published again. Safe to call concurrently with a running relay and
// with other relays.
func (r *Relay) RunOnce(ctx context.Context) (published int, err error) {
	published, _, err = r.runOnce(ctx)
	return published, err
}

// runOnce is RunOnce that also reports whether a class filled its batch, so
// the loop continues without waiting.
func (r *Relay) runOnce(ctx context.Context) (published int, more bool, err error) {
	ctx, span := tracing.Start(ctx, "outbox.publish")
	defer func() { tracing.EndBatch(span, published, err) }()
	connected := r.nc.Status() == nats.CONNECTED
	var lifecycleErr error
	err = pg.WithTx(ctx, r.pool, func(tx pgx.Tx) error {
		published, more, lifecycleErr = 0, false, nil
		if err := useGenericPlans(ctx, tx); err != nil {
			return err
		}
		advisory, err := selectBatch(ctx, tx, advisoryBatch(r.opts.BatchSize))
		if err != nil {
			return err
		}
		var lifecycle []row
		if connected {
			// Lifecycle rows are not even locked while NATS is down.
			if lifecycle, err = selectBatch(ctx, tx, lifecycleBatch(r.opts.BatchSize)); err != nil {
				return err
			}
		}
		more = len(advisory) == r.opts.BatchSize || len(lifecycle) == r.opts.BatchSize

		done := make([]int64, 0, len(advisory)+len(lifecycle))
		published += r.publishAdvisory(advisory, connected)
		for _, a := range advisory {
			done = append(done, a.id)
		}
		tps, err := lifecycleTraceparents(ctx, tx, lifecycle)
		if err != nil {
			return err
		}
		acked, discarded, ackedEvents, leftover, err := r.publishLifecycle(ctx, lifecycle, tps, r.opts.BatchSize)
		lifecycleErr = err
		published += ackedEvents
		more = more || leftover
		done = append(append(done, acked...), discarded...)
		if lifecycleErr != nil {
			more = false // back off until the next wake-up or poll
		}
		if err := deleteRows(ctx, tx, done); err != nil {
			return err
		}
		if r.beforeCommit != nil {
			if err := r.beforeCommit(); err != nil {
				return err
			}
		}
		return nil
	})
	if err != nil {
		return published, false, fmt.Errorf("relay outbox batch: %w", err)
	}
	if lifecycleErr != nil {
		return published, false, fmt.Errorf("relay outbox batch: %w", lifecycleErr)
	}
	return published, more, nil
}

// AnnounceAvailable publishes one "<prefix>.jobs.available" wake-up now,
// for jobs a caller of this process committed without a job_available
// outbox row (intake.Service.SetAnnouncer): the same advisory message the
// relay sends for such rows, counted the same way (kind job_available,
// published or dropped), without the outbox row, its index entries, and
// the relay transaction that would select and delete it. It is sent after
// the commit, so it never announces a job that does not exist; like every
// wake-up it may be lost (NATS down: dropped, as the relay drops advisory
// rows), and workers then find the jobs by their poll. Never blocks on
// the network. Safe for concurrent use.
func (r *Relay) AnnounceAvailable() {
	r.publishAvailable(r.nc.Status() == nats.CONNECTED, 1)
}

// publishAvailable sends one coalesced wake-up for n job_available rows (or
// announcements) when connected, counts them published or dropped, and
// reports whether it went out.
func (r *Relay) publishAvailable(connected bool, n int) bool {
	sent := connected && r.nc.Publish(r.subjects.JobsAvailable(), nil) == nil
	outcome := metrics.OutboxDropped
	if sent {
		outcome = metrics.OutboxPublished
	}
	r.m.Published.WithLabelValues(metrics.OutboxKindAvailable, outcome).Add(float64(n))
	return sent
}

// publishAdvisory sends one coalesced wake-up for all job_available rows and
// one revocation per lease_revoked row, and returns how many rows went out.
// Every advisory row is done afterwards, sent or not: while NATS is down they
// are dropped by design (see the package documentation).
func (r *Relay) publishAdvisory(rows []row, connected bool) int {
	available := 0
	var revoked []row
	for _, a := range rows {
		if a.kind == metrics.OutboxKindAvailable {
			available++
		} else {
			revoked = append(revoked, a)
		}
	}
	sent := 0
	if available > 0 && r.publishAvailable(connected, available) {
		sent += available
	}
	for _, v := range revoked {
		outcome := metrics.OutboxDropped
		if connected && v.jobID.Valid &&
			r.nc.Publish(r.subjects.JobsRevoked(), []byte(v.jobID.UUID.String())) == nil {
			outcome = metrics.OutboxPublished
			sent++
		}
		r.m.Published.WithLabelValues(metrics.OutboxKindRevoked, outcome).Inc()
	}
	return sent
}

// publishLifecycle publishes rows to JetStream asynchronously, waits for the
// acknowledgements (bounded by PublishTimeout), and returns the ids of the
// rows whose every event was acknowledged, the ids of malformed rows to
// discard, how many events were acknowledged, and an error when any event
// was not acknowledged. A group row (migration 00006) becomes one event per
// member, each with its stable id "<row id>-<member>"; it is done only when
// all of them are acknowledged, and otherwise republished whole later (the
// stable ids let JetStream drop the copies). At most maxEvents events go out
// per call (always at least one row); the rows left over stay for the next
// batch and leftover is true. A malformed row (which no mightyETL statement
// writes) is discarded and counted as dropped, so it cannot block the outbox
// forever.
func (r *Relay) publishLifecycle(ctx context.Context, rows []row, tps map[uuid.UUID]string, maxEvents int) (acked, discarded []int64, ackedEvents int, leftover bool, err error) {
	if len(rows) == 0 {
		return nil, nil, 0, false, nil
	}
	parent := ctx
	ctx, cancel := context.WithTimeout(ctx, r.opts.PublishTimeout)
	defer cancel()
	if !r.streamReady.Load() {
		if _, err := events.EnsureLifecycleStreamReplicas(ctx, r.js, r.subjects.Prefix(), r.opts.StreamReplicas); err != nil {
			r.m.Published.WithLabelValues(metrics.OutboxKindLifecycle, metrics.OutboxFailed).Add(float64(len(rows)))
			return nil, nil, 0, false, fmt.Errorf("ensure lifecycle stream: %w", err)
		}
		r.streamReady.Store(true)
	}
	type pending struct {
		row int // index into rows
		e   events.Lifecycle
		fut jetstream.PubAckFuture
	}
	var (
		inflight []pending
		dups     []duplicate // acknowledged as duplicates: a copy, or a reused outbox id
		firstErr error
		failed   int
		sent     int
	)
	fail := func(err error) {
		failed++
		if firstErr == nil {
			firstErr = err
		}
	}
	missing := make([]int, len(rows)) // events of each row not (yet) acknowledged
	drop := func(i int) {
		r.m.Published.WithLabelValues(metrics.OutboxKindLifecycle, metrics.OutboxDropped).Inc()
		r.log.Error("dropping a malformed lifecycle outbox row")
		discarded = append(discarded, rows[i].id)
		missing[i] = -1
	}
	for i, lr := range rows {
		if sent > 0 && sent+lr.events() > maxEvents {
			leftover = true
			missing[i] = -1
			for j := i + 1; j < len(rows); j++ {
				missing[j] = -1
			}
			break
		}
		evs, msgs, ok := r.lifecycleMsgs(lr, tps)
		if !ok {
			drop(i)
			continue
		}
		missing[i] = len(msgs)
		sent += len(msgs)
		for k, msg := range msgs {
			// A publish that finds the window full waits for a free slot
			// as long as the batch may wait for acknowledgements, not
			// nats.go's default 200 ms: slow acks must delay a batch, not
			// fail it over and over.
			fut, err := r.js.PublishMsgAsync(msg, jetstream.WithStallWait(stallWait(ctx)))
			if err != nil {
				fail(err)
				continue
			}
			inflight = append(inflight, pending{i, evs[k], fut})
		}
	}
	for _, p := range inflight {
		select {
		case ack := <-p.fut.Ok():
			if ack.Duplicate {
				dups = append(dups, duplicate{p.row, p.e, ack.Sequence})
				continue
			}
			missing[p.row]--
			ackedEvents++
		case err := <-p.fut.Err():
			fail(err)
		case <-ctx.Done():
			fail(fmt.Errorf("wait for jetstream acknowledgement: %w", ctx.Err()))
		}
	}
	if len(dups) > 0 {
		done, err := r.resolveDuplicates(parent, dups)
		for k, p := range dups {
			if done[k] {
				missing[p.row]--
				ackedEvents++
			}
		}
		if err != nil {
			for k := range dups {
				if !done[k] {
					fail(err)
				}
			}
		}
	}
	for i, n := range missing {
		if n == 0 {
			acked = append(acked, rows[i].id)
		}
	}
	if ackedEvents > 0 {
		r.m.Published.WithLabelValues(metrics.OutboxKindLifecycle, metrics.OutboxPublished).Add(float64(ackedEvents))
	}
	if failed > 0 {
		r.m.Published.WithLabelValues(metrics.OutboxKindLifecycle, metrics.OutboxFailed).Add(float64(failed))
		if errors.Is(firstErr, jetstream.ErrNoStreamResponse) || errors.Is(firstErr, nats.ErrNoResponders) {
			r.streamReady.Store(false) // the stream vanished: set it up again next time
		}
		return acked, discarded, ackedEvents, leftover, fmt.Errorf("publish lifecycle events: %d of %d not acknowledged: %w", failed, sent, firstErr)
	}
	return acked, discarded, ackedEvents, leftover, nil
}

// stallWait is what is left of ctx's deadline (set from PublishTimeout), at
// least a millisecond.
func stallWait(ctx context.Context) time.Duration {
	d := time.Millisecond
	if deadline, ok := ctx.Deadline(); ok {
		d = max(time.Until(deadline), d)
	}
	return d
}

// resolveDuplicates handles lifecycle events JetStream acknowledged as
// duplicates of a stored message (Nats-Msg-Id already in the stream's
// duplicate window; the acknowledgement carries the sequence of the
// ORIGINAL stored message, nats-server stream.go). It reads each original
// and compares its transition with the event's (events.SameTransition):
//
//   - the same transition: a true copy (a row republished after a relay
//     died between publish and delete, by this release or v0.1.0, which
//     used the same ids); the event is done.
//   - another transition: the outbox id was handed out again after a
//     failover to an asynchronous standby; the event is published again
//     under the suffixed id (events.Lifecycle.ReusedEventID).
//   - the original is no longer in the stream (stream limits, deleted): its
//     transition cannot be compared, so the event is published again under
//     the suffixed id too. At least once beats loss: for a true copy a
//     consumer then sees one transition twice, under two ids.
//
// done[k] reports whether dups[k] is acknowledged (as a copy or
// republished); err is the first failure, and those not done are retried
// with their row.
func (r *Relay) resolveDuplicates(ctx context.Context, dups []duplicate) (done []bool, err error) {
	// Its own time budget: the batch's may be used up by the acknowledgements.
	ctx, cancel := context.WithTimeout(ctx, r.opts.PublishTimeout)
	defer cancel()
	done = make([]bool, len(dups))
	stream, err := r.js.Stream(ctx, r.subjects.LifecycleStream())
	if err != nil {
		return done, fmt.Errorf("look up lifecycle stream for a duplicate acknowledgement: %w", err)
	}
	type outcome struct {
		reused, gone bool
		err          error
	}
	out := make([]outcome, len(dups))
	// The stored originals are read in parallel: a group row's copies come
	// in hundreds.
	sem := make(chan struct{}, resolveParallel)
	var wg sync.WaitGroup
	for k, d := range dups {
		sem <- struct{}{}
		wg.Go(func() {
			defer func() { <-sem }()
			o := &out[k]
			if d.seq == 0 {
				// No stored original to compare with (a clustered stream
				// still proposing it): retry the row later, not guess.
				o.err = errors.New("duplicate acknowledgement without a stream sequence")
				return
			}
			stored, err := stream.GetMsg(ctx, d.seq)
			switch {
			case err == nil:
				o.reused = !events.SameTransition(stored.Data, d.e)
			case errors.Is(err, jetstream.ErrMsgNotFound):
				o.gone = true
			default:
				o.err = fmt.Errorf("read the stored original of a duplicate: %w", err)
			}
		})
	}
	wg.Wait()
	// The republishes go out in the batch's order (a group row's members
	// stay in array order) and are awaited together.
	futs := make([]jetstream.PubAckFuture, len(dups))
	for k, d := range dups {
		if o := &out[k]; o.err == nil && (o.reused || o.gone) {
			e := d.e
			e.Reused = true
			msg, err := events.LifecycleMsg(r.subjects, r.opts.Source, e)
			if err == nil {
				futs[k], err = r.js.PublishMsgAsync(msg, jetstream.WithStallWait(stallWait(ctx)))
			}
			if err != nil {
				o.err = fmt.Errorf("republish under a suffixed id: %w", err)
			}
		}
	}
	for k, fut := range futs {
		if fut == nil || out[k].err != nil {
			continue
		}
		select {
		case <-fut.Ok():
		case err := <-fut.Err():
			out[k].err = fmt.Errorf("republish under a suffixed id: %w", err)
		case <-ctx.Done():
			out[k].err = fmt.Errorf("republish under a suffixed id: %w", ctx.Err())
		}
	}
	reused, gone := 0, 0
	for k, o := range out {
		if o.err != nil {
			err = cmp.Or(err, o.err)
			continue
		}
		done[k] = true
		if o.reused || o.gone {
			r.m.ReusedIDs.Inc()
		}
		if o.reused {
			reused++
		}
		if o.gone {
			gone++
		}
	}
	if reused+gone > 0 {
		r.log.Warn("lifecycle events republished under suffixed ids: their outbox ids were already used in the stream (failover to an asynchronous standby?)",
			"other_transition", reused, "original_gone", gone)
	}
	return done, err
}

// resolveParallel is how many stored originals resolveDuplicates reads at
// once.
const resolveParallel = 16

// duplicate is a lifecycle event JetStream acknowledged as a duplicate;
// seq is the stream sequence of the stored original.
type duplicate struct {
	row int // index into the batch's rows
	e   events.Lifecycle
	seq uint64
}

// lifecycleMsgs builds the events and JetStream messages of one lifecycle
// row: one for a plain row, one per member for a group row. ok is false for
// a malformed row.
func (r *Relay) lifecycleMsgs(lr row, tps map[uuid.UUID]string) (evs []events.Lifecycle, msgs []*nats.Msg, ok bool) {
	if lr.status == nil {
		return nil, nil, false
	}
	base := events.Lifecycle{OutboxID: lr.id, Status: *lr.status, OccurredAt: lr.occurredAt}
	if lr.code != nil {
		base.Code = *lr.code
	}
	if lr.jobIDs == nil {
		if !lr.jobID.Valid {
			return nil, nil, false
		}
		e := base
		e.JobID = lr.jobID.UUID
		e.Traceparent = tps[e.JobID]
		if lr.attemptCount != nil {
			e.AttemptCount = int(*lr.attemptCount)
		}
		msg, err := events.LifecycleMsg(r.subjects, r.opts.Source, e)
		if err != nil {
			return nil, nil, false
		}
		return []events.Lifecycle{e}, []*nats.Msg{msg}, true
	}
	if len(lr.jobIDs) == 0 || len(lr.attempts) != len(lr.jobIDs) {
		return nil, nil, false
	}
	evs = make([]events.Lifecycle, len(lr.jobIDs))
	msgs = make([]*nats.Msg, len(lr.jobIDs))
	for i, id := range lr.jobIDs {
		e := base
		e.Grouped, e.Member, e.JobID, e.AttemptCount = true, i, id, int(lr.attempts[i])
		e.Traceparent = tps[id]
		msg, err := events.LifecycleMsg(r.subjects, r.opts.Source, e)
		if err != nil {
			return nil, nil, false
		}
		evs[i], msgs[i] = e, msg
	}
	return evs, msgs, true
}
