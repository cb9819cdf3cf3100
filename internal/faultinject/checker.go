package faultinject

import (
	"context"
	"encoding/json"
	"fmt"
	"slices"
	"sort"
	"strings"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/mightyetl/mightyetl/internal/auth"
	"github.com/mightyetl/mightyetl/internal/codes"
	"github.com/mightyetl/mightyetl/internal/events"
	"github.com/mightyetl/mightyetl/internal/intake"
)

// The invariants the checker proves. Each violation is counted under one of
// these names; docs/reliability.md explains them.
const (
	InvAckedKeyOneJob       = "acknowledged key has exactly one job"
	InvAckNamesTheJob       = "every acknowledgement names that one job"
	InvNoJobWithoutAck      = "no job for a refused or unknown key"
	InvTerminal             = "every job is terminal"
	InvSucceededRows        = "SUCCEEDED job has exactly its records loaded"
	InvNoRowsUnlessSuccess  = "no target rows unless SUCCEEDED"
	InvOutcome              = "terminal outcome allowed for the request"
	InvPublished            = "terminal transition published"
	InvOneTerminalEvent     = "one terminal transition per job"
	InvOutboxDrained        = "outbox drained"
	InvClaimQueueEmpty      = "claim queue holds no terminal job"
	InvAnswers              = "no answer a correct system never gives"
	InvEveryKeyAcknowledged = "every submission acknowledged once faults stop"
	InvNoUnexpectedExit     = "no product process exits on its own"
)

// AllInvariants lists the invariants in report order.
var AllInvariants = []string{InvAckedKeyOneJob, InvAckNamesTheJob, InvNoJobWithoutAck, InvTerminal,
	InvSucceededRows, InvNoRowsUnlessSuccess, InvOutcome, InvPublished, InvOneTerminalEvent,
	InvOutboxDrained, InvClaimQueueEmpty, InvAnswers, InvEveryKeyAcknowledged, InvNoUnexpectedExit}

// Report is the checker's result: counts for the log, details for the
// run directory.
type Report struct {
	Jobs        int
	ByOutcome   map[string]int // "SUCCEEDED", "FAILED etl_...", "CANCELLED"
	ByKind      map[Kind]int   // submissions by kind
	Rejected    int            // invalid bodies refused with 422
	Events      int            // distinct lifecycle event ids read
	EventCopies int            // stream messages read (copies included)
	Violations  map[string]int
	// ViolationsAfter counts violations of jobs by the kind of the last
	// fault injected before the job's last change.
	ViolationsAfter map[string]int
	Details         []string // one line per violation, with ids: run directory only
	// AckedAbsent counts acknowledged keys with no job at all, when
	// Checker.AcceptLoss says such a loss is expected (an asynchronous
	// failover); otherwise each is a violation of InvAckedKeyOneJob.
	AckedAbsent int
	// CancelsLost counts acknowledged cancellations (200) whose job ended
	// otherwise, and StaleEvents terminal events of transitions a failover
	// undid (the job ended again, with a second terminal event), both
	// under Checker.AcceptLoss; otherwise they are violations.
	CancelsLost, StaleEvents int
}

// Total is the number of violations.
func (r *Report) Total() int {
	n := 0
	for _, v := range r.Violations {
		n += v
	}
	return n
}

type jobRow struct {
	id, kind, scope, keyHash, status, failure, cancel string
	attempts                                          int
	updated                                           time.Time
}

// Checker proves the invariants on a converged system.
type Checker struct {
	DB      *pgxpool.Pool
	NATSURL string
	Prefix  string
	HashKey []byte
	Ledger  *Ledger
	Faults  []Fault
	Procs   []*Process
	// AcceptLoss counts an acknowledged key without any job in
	// Report.AckedAbsent instead of as a violation: after a failover to an
	// asynchronous standby, what the old primary committed last is gone.
	AcceptLoss bool
	report     *Report
	jobsByID   map[string]*jobRow
	// eventSeqs are the stream sequences of each job's lifecycle
	// messages (the checker's self-test deletes some).
	eventSeqs map[string][]uint64
}

// WaitConverged polls until every job is terminal and the outbox is empty,
// or within passes (then the checker reports what is left).
func WaitConverged(ctx context.Context, db *pgxpool.Pool, within time.Duration) error {
	return waitFor(ctx, within, 250*time.Millisecond, "every job terminal and the outbox drained", func() bool {
		var active, outbox int
		err := db.QueryRow(ctx, `SELECT
			(SELECT count(*) FROM etl_job_records WHERE job_status IN ('PENDING', 'RUNNING')),
			(SELECT count(*) FROM etl_outbox_events)`).Scan(&active, &outbox)
		return err == nil && active == 0 && outbox == 0
	})
}

// Check reads the database and the lifecycle stream and evaluates every
// invariant. An error means the checker could not read its evidence.
func (c *Checker) Check(ctx context.Context) (*Report, error) {
	c.report = &Report{ByOutcome: map[string]int{}, ByKind: map[Kind]int{}, Violations: map[string]int{},
		ViolationsAfter: map[string]int{}}
	for _, inv := range AllInvariants {
		c.report.Violations[inv] = 0
	}
	if err := c.loadJobs(ctx); err != nil {
		return nil, err
	}
	rows, err := c.loadRows(ctx)
	if err != nil {
		return nil, err
	}
	evs, err := c.loadEvents(ctx)
	if err != nil {
		return nil, err
	}
	c.checkSubmissions()
	c.checkJobs(rows, evs)
	if err := c.checkTables(ctx); err != nil {
		return nil, err
	}
	c.checkAnswers()
	return c.report, nil
}

func (c *Checker) violate(inv, detail string, job *jobRow) {
	c.report.Violations[inv]++
	after := "before any fault"
	at := time.Now()
	if job != nil {
		at = job.updated
	}
	for _, f := range c.Faults {
		if !f.At.After(at) {
			after = string(f.Kind)
		}
	}
	if job != nil {
		c.report.ViolationsAfter[after]++
		detail = fmt.Sprintf("%s (job %s, status %s %s, attempts %d, last change %s; last fault before it: %s)",
			detail, job.id, job.status, job.failure, job.attempts, job.updated.Format(time.RFC3339Nano), after)
	}
	c.report.Details = append(c.report.Details, inv+": "+detail)
}

func (c *Checker) loadJobs(ctx context.Context) error {
	rs, err := c.DB.Query(ctx, `SELECT job_record_id::text, job_kind, encode(principal_scope_hash, 'hex'), encode(submission_key_hash, 'hex'),
		job_status, coalesce(failure_code::text, ''), coalesce(cancellation_code, ''), attempt_count, updated_at
		FROM etl_job_records`)
	if err != nil {
		return fmt.Errorf("read jobs: %w", err)
	}
	defer rs.Close()
	c.jobsByID = map[string]*jobRow{}
	for rs.Next() {
		j := &jobRow{}
		if err := rs.Scan(&j.id, &j.kind, &j.scope, &j.keyHash, &j.status, &j.failure, &j.cancel, &j.attempts, &j.updated); err != nil {
			return fmt.Errorf("read jobs: %w", err)
		}
		c.jobsByID[j.id] = j
	}
	if err := rs.Err(); err != nil {
		return fmt.Errorf("read jobs: %w", err)
	}
	c.report.Jobs = len(c.jobsByID)
	return nil
}

// loadRows returns processed_data.data per job, in load order; rows
// without a job are under "".
func (c *Checker) loadRows(ctx context.Context) (map[string][]string, error) {
	rs, err := c.DB.Query(ctx, `SELECT coalesce(job_record_id::text, ''), data FROM processed_data ORDER BY processed_data_id`)
	if err != nil {
		return nil, fmt.Errorf("read target rows: %w", err)
	}
	defer rs.Close()
	out := map[string][]string{}
	for rs.Next() {
		var id, data string
		if err := rs.Scan(&id, &data); err != nil {
			return nil, fmt.Errorf("read target rows: %w", err)
		}
		out[id] = append(out[id], data)
	}
	return out, rs.Err()
}

// lifecycleEvent is what the checker keeps of one CloudEvent.
type lifecycleEvent struct {
	id, jobID, status, code string
}

// loadEvents reads every message of the lifecycle stream and returns the
// events by job, deduplicated by CloudEvent id.
func (c *Checker) loadEvents(ctx context.Context) (map[string][]lifecycleEvent, error) {
	subjects, err := events.NewSubjects(c.Prefix)
	if err != nil {
		return nil, err
	}
	nc, err := nats.Connect(c.NATSURL, nats.Name("faultinject-checker"))
	if err != nil {
		return nil, fmt.Errorf("checker: connect NATS: %w", err)
	}
	defer nc.Close()
	js, err := jetstream.New(nc)
	if err != nil {
		return nil, err
	}
	ctx, cancel := context.WithTimeout(ctx, 2*time.Minute)
	defer cancel()
	st, err := js.Stream(ctx, subjects.LifecycleStream())
	if err != nil {
		return nil, fmt.Errorf("checker: lifecycle stream: %w", err)
	}
	info, err := st.Info(ctx)
	if err != nil {
		return nil, fmt.Errorf("checker: lifecycle stream info: %w", err)
	}
	byID := map[string]lifecycleEvent{}
	c.eventSeqs = map[string][]uint64{}
	if info.State.Msgs > 0 {
		cons, err := orderedConsumer(ctx, st)
		if err != nil {
			return nil, fmt.Errorf("checker: lifecycle consumer: %w", err)
		}
		var last uint64
		for last < info.State.LastSeq {
			batch, err := cons.Fetch(500, jetstream.FetchMaxWait(2*time.Second))
			if err != nil {
				return nil, fmt.Errorf("checker: fetch lifecycle events: %w", err)
			}
			n := 0
			for msg := range batch.Messages() {
				n++
				md, err := msg.Metadata()
				if err != nil {
					return nil, fmt.Errorf("checker: event metadata: %w", err)
				}
				last = md.Sequence.Stream
				c.report.EventCopies++
				var ce events.CloudEvent
				if err := json.Unmarshal(msg.Data(), &ce); err != nil || ce.ID == "" {
					c.violate(InvPublished, "a lifecycle message is not a CloudEvent", nil)
					continue
				}
				ev := lifecycleEvent{id: ce.ID, jobID: ce.Data.JobRecordID.String(), status: ce.Data.JobStatus,
					code: ce.Data.FailureCode + ce.Data.CancellationCode}
				if prev, ok := byID[ce.ID]; ok && prev != ev {
					c.violate(InvOneTerminalEvent, "one event id "+ce.ID+" carries two different events", nil)
				}
				byID[ce.ID] = ev
				c.eventSeqs[ev.jobID] = append(c.eventSeqs[ev.jobID], md.Sequence.Stream)
			}
			if err := batch.Error(); err != nil {
				return nil, fmt.Errorf("checker: fetch lifecycle events: %w", err)
			}
			if n == 0 && last < info.State.LastSeq {
				return nil, fmt.Errorf("checker: lifecycle stream ended at %d of %d", last, info.State.LastSeq)
			}
		}
	}
	c.report.Events = len(byID)
	out := map[string][]lifecycleEvent{}
	for _, ev := range byID {
		out[ev.jobID] = append(out[ev.jobID], ev)
	}
	return out, nil
}

// orderedConsumer creates an ordered consumer on st, each attempt bounded
// at 10 s and retried until ctx ends: on a cluster whose nodes were just
// killed and restarted, one creation request can go unanswered (seen once
// in the NATS-cluster scenario: the whole two minutes, with every node up
// and a metadata leader elected), and a fresh request is answered.
func orderedConsumer(ctx context.Context, st jetstream.Stream) (jetstream.Consumer, error) {
	for {
		attempt, cancel := context.WithTimeout(ctx, 10*time.Second)
		cons, err := st.OrderedConsumer(attempt, jetstream.OrderedConsumerConfig{})
		cancel()
		if err == nil || ctx.Err() != nil {
			return cons, err
		}
		select { // an error answered at once is not retried in a tight loop
		case <-ctx.Done():
			return nil, err
		case <-time.After(250 * time.Millisecond):
		}
	}
}

// checkSubmissions: every acknowledged key has exactly one job, every
// acknowledgement named it, and no refused or unacknowledged key has more
// than it may.
func (c *Checker) checkSubmissions() {
	byKey := map[string][]*jobRow{}
	for _, j := range c.jobsByID {
		k := j.scope + "/" + j.keyHash
		byKey[k] = append(byKey[k], j)
	}
	seen := map[string]bool{}
	for _, s := range c.Ledger.Submissions() {
		st := s.State()
		c.report.ByKind[s.Kind]++
		scope := auth.ScopeHash(c.HashKey, s.Principal)
		k := scope + "/" + intake.SubmissionKeyHash(scope, s.Key)
		seen[k] = true
		jobs := byKey[k]
		switch {
		case st.Rejected:
			c.report.Rejected++
			if len(jobs) != 0 {
				c.violate(InvNoJobWithoutAck, fmt.Sprintf("a body refused with 422 has %d jobs", len(jobs)), jobs[0])
			}
			continue
		case !st.Acked:
			if len(jobs) > 1 {
				c.violate(InvAckedKeyOneJob, fmt.Sprintf("an unacknowledged key has %d jobs", len(jobs)), jobs[0])
			}
			continue
		}
		if len(jobs) == 0 && c.AcceptLoss {
			c.report.AckedAbsent++
			c.report.Details = append(c.report.Details, fmt.Sprintf("acknowledged, absent after failover: a %s key acknowledged as job %v", s.Kind, st.JobIDs))
			continue
		}
		if len(jobs) != 1 {
			var j *jobRow
			if len(jobs) > 0 {
				j = jobs[0]
			}
			c.violate(InvAckedKeyOneJob, fmt.Sprintf("an acknowledged key (%s) has %d jobs", s.Kind, len(jobs)), j)
			continue
		}
		j := jobs[0]
		if len(st.JobIDs) != 1 || st.JobIDs[0] != j.id {
			c.violate(InvAckNamesTheJob, fmt.Sprintf("acknowledgements named %v", st.JobIDs), j)
		}
		c.checkOutcome(s, st, j)
	}
	for k, jobs := range byKey {
		if !seen[k] {
			for _, j := range jobs {
				c.violate(InvNoJobWithoutAck, "a job whose key the producers never used", j)
			}
		}
	}
}

// checkOutcome: the job's terminal outcome is one its request allows. A
// lease lost on every attempt (etl_worker_attempts_exhausted) is allowed for
// any request: the faults can cause it.
func (c *Checker) checkOutcome(s *Submission, st State, j *jobRow) {
	if j.status == "FAILED" && j.failure == codes.WorkerAttemptsExhausted {
		return
	}
	ok := true
	switch s.Kind {
	case KindETL, KindETLNATS, KindDiagnostic:
		ok = j.status == "SUCCEEDED"
	case KindPermanent:
		ok = j.status == "FAILED" && j.failure == codes.DiagnosticRequestedFailure
	case KindTransient:
		ok = j.status == "FAILED" && j.failure == codes.TargetUnavailable
	case KindCancel:
		switch st.CancelAns {
		case CancelDone:
			ok = j.status == "CANCELLED" && j.cancel == codes.CancelledByOwner
			if !ok && c.AcceptLoss {
				c.report.CancelsLost++
				c.report.Details = append(c.report.Details, fmt.Sprintf("acknowledged cancellation lost in the failover: job %s ended %s", j.id, j.status))
				return
			}
		case CancelSucceeded:
			ok = j.status == "SUCCEEDED"
		case CancelFailed:
			ok = j.status == "FAILED"
		case CancelNotFound:
			ok = false // the job exists
		default:
			ok = j.status == "SUCCEEDED" || j.status == "CANCELLED"
		}
	}
	if !ok {
		c.violate(InvOutcome, fmt.Sprintf("a %s request (cancel answer %q)", s.Kind, st.CancelAns), j)
	}
}

// checkJobs: terminal, target rows, lifecycle events.
func (c *Checker) checkJobs(rows map[string][]string, evs map[string][]lifecycleEvent) {
	expected := map[string][]string{}
	for _, s := range c.Ledger.Submissions() {
		if st := s.State(); st.Acked && len(st.JobIDs) == 1 {
			expected[st.JobIDs[0]] = s.Expected
		}
	}
	for _, j := range c.jobsByID {
		outcome := j.status
		if j.failure != "" {
			outcome += " " + j.failure
		}
		c.report.ByOutcome[outcome]++
		got := rows[j.id]
		switch j.status {
		case "SUCCEEDED":
			want, known := expected[j.id]
			if !known || !slices.Equal(sorted(got), sorted(want)) {
				c.violate(InvSucceededRows, fmt.Sprintf("%d target rows, %d expected", len(got), len(want)), j)
			}
		case "FAILED", "CANCELLED":
			if len(got) > 0 {
				c.violate(InvNoRowsUnlessSuccess, fmt.Sprintf("%d target rows", len(got)), j)
			}
		default:
			c.violate(InvTerminal, "not terminal", j)
			continue
		}
		var terminal []lifecycleEvent
		for _, ev := range evs[j.id] {
			if ev.status == "SUCCEEDED" || ev.status == "FAILED" || ev.status == "CANCELLED" {
				terminal = append(terminal, ev)
			}
		}
		published := false
		for _, ev := range terminal {
			if ev.status == j.status {
				published = true
			}
		}
		if !published {
			c.violate(InvPublished, fmt.Sprintf("no %s event among %d terminal events", j.status, len(terminal)), j)
		}
		if len(terminal) > 1 && published && c.AcceptLoss {
			c.report.StaleEvents += len(terminal) - 1
			c.report.Details = append(c.report.Details, fmt.Sprintf("terminal events of undone transitions: job %s has %d", j.id, len(terminal)-1))
		} else if len(terminal) > 1 {
			c.violate(InvOneTerminalEvent, fmt.Sprintf("%d distinct terminal events", len(terminal)), j)
		}
	}
	for id, got := range rows {
		if _, ok := c.jobsByID[id]; !ok {
			c.violate(InvNoRowsUnlessSuccess, fmt.Sprintf("%d target rows of no job (job id %q)", len(got), id), nil)
		}
	}
}

func sorted(s []string) []string {
	out := append([]string(nil), s...)
	sort.Strings(out)
	return out
}

// checkTables: outbox drained and no claim-queue row left.
func (c *Checker) checkTables(ctx context.Context) error {
	var outbox, queue int
	if err := c.DB.QueryRow(ctx, `SELECT (SELECT count(*) FROM etl_outbox_events), (SELECT count(*) FROM etl_job_claim_queue)`).
		Scan(&outbox, &queue); err != nil {
		return fmt.Errorf("read outbox and claim queue: %w", err)
	}
	if outbox > 0 {
		c.report.Violations[InvOutboxDrained] += outbox
		c.report.Details = append(c.report.Details, fmt.Sprintf("%s: %d outbox rows left", InvOutboxDrained, outbox))
	}
	if queue > 0 {
		c.report.Violations[InvClaimQueueEmpty] += queue
		c.report.Details = append(c.report.Details, fmt.Sprintf("%s: %d claim-queue rows left", InvClaimQueueEmpty, queue))
	}
	return nil
}

// checkAnswers: answers no correct system gives, submissions never
// acknowledged, processes that exited on their own.
func (c *Checker) checkAnswers() {
	for what, n := range c.Ledger.Unexpected() {
		c.report.Violations[InvAnswers] += n
		c.report.Details = append(c.report.Details, fmt.Sprintf("%s: %d x %s", InvAnswers, n, what))
	}
	if n := c.Ledger.GaveUp(); n > 0 {
		c.report.Violations[InvEveryKeyAcknowledged] += n
		c.report.Details = append(c.report.Details, fmt.Sprintf("%s: %d submissions never acknowledged", InvEveryKeyAcknowledged, n))
	}
	for _, p := range c.Procs {
		if n := p.Stats().UnexpectedExits; n > 0 {
			c.report.Violations[InvNoUnexpectedExit] += n
			c.report.Details = append(c.report.Details, fmt.Sprintf("%s: %s exited %d times (see %s.log)", InvNoUnexpectedExit, p.Name, n, p.Name))
		}
	}
}

// Summary is the report as count lines for the test log.
func (r *Report) Summary() string {
	var b strings.Builder
	fmt.Fprintf(&b, "jobs %d, lifecycle events %d distinct (%d stream messages), refused bodies %d\n", r.Jobs, r.Events, r.EventCopies, r.Rejected)
	b.WriteString("submissions by kind:")
	for _, k := range sortedKeys(r.ByKind) {
		fmt.Fprintf(&b, " %s=%d", k, r.ByKind[k])
	}
	b.WriteString("\njobs by outcome:")
	for _, k := range sortedKeys(r.ByOutcome) {
		fmt.Fprintf(&b, " %q=%d", k, r.ByOutcome[k])
	}
	if r.AckedAbsent > 0 {
		fmt.Fprintf(&b, "\nacknowledged, absent after failover (accepted): %d", r.AckedAbsent)
	}
	if r.CancelsLost > 0 || r.StaleEvents > 0 {
		fmt.Fprintf(&b, "\nacknowledged cancellations lost in the failover (accepted): %d; terminal events of undone transitions (accepted): %d", r.CancelsLost, r.StaleEvents)
	}
	b.WriteString("\nviolations by invariant:\n")
	for _, inv := range AllInvariants {
		fmt.Fprintf(&b, "  %-50s %d\n", inv, r.Violations[inv])
	}
	if len(r.ViolationsAfter) > 0 {
		b.WriteString("violating jobs by the last fault before them:")
		for _, k := range sortedKeys(r.ViolationsAfter) {
			fmt.Fprintf(&b, " %s=%d", k, r.ViolationsAfter[k])
		}
		b.WriteString("\n")
	}
	return b.String()
}

func sortedKeys[K ~string, V any](m map[K]V) []K {
	out := make([]K, 0, len(m))
	for k := range m {
		out = append(out, k)
	}
	slices.Sort(out)
	return out
}
