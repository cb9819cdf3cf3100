package intake

import (
	"cmp"
	"context"
	"fmt"
	"slices"
	"sync"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"github.com/mightyetl/mightyetl/internal/pg"
	"github.com/mightyetl/mightyetl/internal/startstop"
)

// submission is one waiting Submit call inside the group-commit batcher.
type submission struct {
	job  pg.NewJob
	size int64         // payload bytes: what the submission adds to its INSERT
	done chan struct{} // closed when res/err are set
	res  pg.Inserted
	err  error
	// groupSize is how many submissions shared the insert (set with res).
	groupSize int
}

// settled reports whether s's outcome is set (done is closed); only then may
// res, err and groupSize be read.
func (s *submission) settled() bool {
	select {
	case <-s.done:
		return true
	default:
		return false
	}
}

// batcher is the group commit of submissions. Each round's statement has a
// fixed cost (about 0.3 ms: the statement, its commit, the round trip)
// besides its per-job cost, so throughput is commits/s × rows per commit:
// the batcher maximises rows per commit. At most maxInFlight transactions run at
// once; submissions arriving meanwhile queue and leave together in the next
// transaction, up to maxBatch rows and maxBytes payload bytes (every
// payload of a batch travels in one text[] parameter, and PostgreSQL caps a
// value at 1 GB; a single submission larger than maxBytes goes alone). When
// nothing is in flight, the first arrival waits up to window (by default
// none) for company (a full batch, by count or by bytes, ends the wait).
//
// No goroutine runs while idle: the first caller of a round flushes in its
// own goroutine, and a flush that finds more submissions queued when it
// ends hands them to a new short-lived goroutine. A flush runs on a context
// detached from any caller's cancellation, bounded by flushTimeout, so one
// client going away never fails the others' submissions.
type batcher struct {
	db           pg.TxBeginner
	window       time.Duration
	maxBatch     int
	maxBytes     int64
	maxInFlight  int
	flushTimeout time.Duration
	observe      func(n int) // batch size, may be nil
	// wakeOutbox wakes the outbox relays after each flush
	// (Service.wakeOutbox): the job_available group row does not NOTIFY in
	// its transaction (migration 00013). nil in tests that build a batcher
	// alone.
	wakeOutbox func()
	// announcer returns the function that announces a flush's jobs itself
	// (Service.SetAnnouncer), or nil: then the flush writes the
	// job_available outbox row and wakes the relays. nil in tests that build
	// a batcher alone.
	announcer func() func()

	mu           sync.Mutex
	pending      []*submission
	pendingBytes int64 // sum of pending sizes
	inFlight     int   // transactions running
	// wake is the waiting leader's channel, nil when no leader waits; a full
	// batch closes it so the leader stops waiting.
	wake chan struct{}
	// open is true between Start and Stop: only then are submissions taken.
	open bool
	// drained is closed once a stopping batcher has nothing queued or in
	// flight; nil until Stop finds work still settling.
	drained chan struct{}

	base startstop.Base
}

// Start opens the batcher for submissions (startstop: once; a Start after
// Stop returns startstop.ErrStopped). It starts no goroutine: the first
// caller of a round flushes it.
func (b *batcher) Start(ctx context.Context) error {
	return b.base.Start(ctx, func(context.Context) (startstop.StopFunc, error) {
		b.mu.Lock()
		b.open = true
		b.mu.Unlock()
		return b.stop, nil
	})
}

// Stop refuses further submissions (ErrTargetUnavailable, a retryable 503
// or a NATS redelivery), flushes a round still waiting for company at once,
// and waits until every queued and in-flight submission has its outcome, or
// until ctx ends (then it returns ctx.Err() and the flushes finish in the
// background, each bounded by its flush timeout).
func (b *batcher) Stop(ctx context.Context) error { return b.base.Stop(ctx) }

func (b *batcher) stop(ctx context.Context) error {
	b.mu.Lock()
	b.open = false
	if b.wake != nil {
		close(b.wake) // the waiting leader flushes now
		b.wake = nil
	}
	if b.settledLocked() {
		b.mu.Unlock()
		return nil
	}
	b.drained = make(chan struct{})
	drained := b.drained
	b.mu.Unlock()
	select {
	case <-drained:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

// settledLocked reports whether nothing is queued or in flight; b.mu held.
func (b *batcher) settledLocked() bool { return len(b.pending) == 0 && b.inFlight == 0 }

// submit queues s, takes part in flushing, and waits for s's outcome or ctx.
// When ctx ends before the outcome is known the submission may still
// commit; the caller's retry with the same key and body then replays it. An
// outcome already known wins over an ended ctx.
func (b *batcher) submit(ctx context.Context, s *submission) error {
	var wake chan struct{} // non-nil: this caller leads the round
	s.size = int64(len(s.job.Payload))
	b.mu.Lock()
	if !b.open {
		b.mu.Unlock()
		return ErrTargetUnavailable
	}
	b.pending = append(b.pending, s)
	b.pendingBytes += s.size
	switch {
	case b.wake != nil && (len(b.pending) >= b.maxBatch || b.pendingBytes >= b.maxBytes):
		close(b.wake) // the leader has nothing left to wait for
		b.wake = nil
	case b.wake == nil && b.inFlight < b.maxInFlight:
		wake = make(chan struct{})
		b.wake = wake
	}
	b.mu.Unlock()

	if wake != nil {
		if b.window > 0 {
			t := time.NewTimer(b.window)
			select { // not abandoned on ctx: the round's other callers rely on this flush
			case <-t.C:
			case <-wake:
				t.Stop()
			}
		}
		b.mu.Lock()
		if b.wake == wake {
			b.wake = nil
		}
		batch := b.take()
		b.mu.Unlock()
		if batch != nil {
			b.run(ctx, batch)
		}
	}
	select {
	case <-s.done:
		return s.err
	case <-ctx.Done():
		select {
		case <-s.done: // settled as well (a leader flushes whatever its ctx): report it
			return s.err
		default:
			return ctx.Err()
		}
	}
}

// take removes the oldest queued submissions, up to maxBatch of them and
// maxBytes of payload (always at least one), and counts a transaction in
// flight for them; nil when none are queued. b.mu must be held.
func (b *batcher) take() []*submission {
	if len(b.pending) == 0 {
		return nil
	}
	n, bytes := 0, int64(0)
	for n < len(b.pending) && n < b.maxBatch {
		size := b.pending[n].size
		if n > 0 && bytes+size > b.maxBytes {
			break
		}
		n, bytes = n+1, bytes+size
	}
	b.pendingBytes -= bytes
	batch := b.pending[:n:n]
	b.pending = append([]*submission(nil), b.pending[n:]...)
	b.inFlight++
	return batch
}

// run flushes batch, then hands whatever queued meanwhile to a new
// goroutine (unless a waiting leader will take it).
func (b *batcher) run(ctx context.Context, batch []*submission) {
	b.flush(ctx, batch)
	b.mu.Lock()
	b.inFlight--
	var next []*submission
	if b.wake == nil {
		next = b.take()
	}
	if b.drained != nil && b.settledLocked() {
		close(b.drained)
		b.drained = nil
	}
	b.mu.Unlock()
	if next != nil {
		go b.run(context.WithoutCancel(ctx), next)
	}
}

// flush inserts batch in one transaction and hands every caller its result,
// retrying a lost deadlock or serialization race and a conflicting row that
// vanished before it was read (each job keeps its id across attempts).
// Identical (principal, key) pairs are sent once; the first caller of a pair
// gets Created true if the row is new, the others see the same job with
// Created false. Jobs are sorted by (scope, key) so concurrent flushes that
// share keys wait on each other's unique-index entries in one order and
// cannot deadlock.
func (b *batcher) flush(ctx context.Context, batch []*submission) {
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), b.flushTimeout)
	defer cancel()

	type pairKey struct{ scope, key string }
	index := make(map[pairKey]int, len(batch))
	jobs := make([]pg.NewJob, 0, len(batch))
	slot := make([]int, len(batch))
	for i, s := range batch {
		k := pairKey{s.job.PrincipalScopeHash, s.job.SubmissionKeyHash}
		j, ok := index[k]
		if !ok {
			j = len(jobs)
			index[k] = j
			jobs = append(jobs, s.job)
		}
		slot[i] = j
	}
	// Every job gets its id now, once for all attempts: an attempt that
	// fails after its insert committed (a conflicting row vanished before
	// the lookup) leaves its jobs behind, and the retry recognises them by
	// id as created by this flush, not as somebody else's (a replay).
	for j := range jobs {
		if jobs[j].JobID != uuid.Nil {
			continue
		}
		id, err := uuid.NewV7()
		if err != nil {
			failBatch(batch, fmt.Errorf("flush: job id: %w", err))
			return
		}
		jobs[j].JobID = id
	}
	order := make([]int, len(jobs))
	for i := range order {
		order[i] = i
	}
	slices.SortFunc(order, func(x, y int) int {
		return cmp.Or(cmp.Compare(jobs[x].PrincipalScopeHash, jobs[y].PrincipalScopeHash),
			cmp.Compare(jobs[x].SubmissionKeyHash, jobs[y].SubmissionKeyHash))
	})
	sorted := make([]pg.NewJob, len(jobs))
	for to, from := range order {
		sorted[to] = jobs[from]
	}

	var inserted []pg.Inserted
	var err error
	// One choice for every attempt of this flush: with an announcer the
	// jobs get no job_available outbox row and the announcer wakes the
	// workers after the commit instead.
	var announce func()
	if b.announcer != nil {
		announce = b.announcer()
	}
	insert := pg.InsertJobs
	if announce != nil {
		insert = pg.InsertJobsUnannounced
	}
	for attempt := 0; ; attempt++ {
		if db, ok := b.db.(pg.DBTX); ok {
			// One autocommitted statement inserts every job with its outbox
			// row (atomic on its own), saving BEGIN and COMMIT round trips;
			// reading already-existing rows afterwards needs no transaction.
			inserted, err = insert(ctx, db, sorted)
		} else {
			err = pg.WithTx(ctx, b.db, func(tx pgx.Tx) error {
				var ierr error
				inserted, ierr = insert(ctx, tx, sorted)
				return ierr
			})
		}
		if err == nil || attempt == 2 || !retryableFlush(err) {
			break
		}
	}
	// After every flush, even a failed one: an autocommitted insert may have
	// committed before a later step failed. A wake-up finding nothing costs
	// the relay one empty batch, or a worker one empty claim.
	switch {
	case announce != nil:
		announce()
	case b.wakeOutbox != nil:
		b.wakeOutbox()
	}
	if err != nil {
		failBatch(batch, err)
		return
	}
	if b.observe != nil {
		b.observe(len(batch))
	}
	results := make([]pg.Inserted, len(jobs))
	for to, from := range order {
		results[from] = inserted[to]
	}
	handed := make([]bool, len(jobs))
	for i, s := range batch {
		s.res = results[slot[i]]
		if handed[slot[i]] {
			s.res.Created = false
		}
		handed[slot[i]] = true
		s.groupSize = len(batch)
		close(s.done)
	}
}

// failBatch hands every submission of batch the classified err.
func failBatch(batch []*submission, err error) {
	for _, s := range batch {
		s.err = storeError(err)
		close(s.done)
	}
}

// retryableFlush is true for losing a deadlock or serialization race, and
// for an existing row that vanished between InsertJobs' two statements
// (pg.ClassConflict). Other transient failures are not retried here: the
// caller answers them as etl_target_unavailable.
func retryableFlush(err error) bool {
	return pg.ErrorClass(err) == pg.ClassConflict
}
