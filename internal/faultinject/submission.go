package faultinject

import (
	"encoding/json"
	"fmt"
	"math/rand/v2"
	"sort"
	"strconv"
	"sync"
	"time"

	"github.com/mightyetl/mightyetl/internal/etl"
)

// Kind is what a submission asks for, and so which terminal outcomes its
// job may have.
type Kind string

// Submission kinds.
const (
	// KindETL is a valid etl_records job over HTTP: it must succeed.
	KindETL Kind = "etl_http"
	// KindETLNATS is a valid etl_records job over a NATS request.
	KindETLNATS Kind = "etl_nats"
	// KindInvalid is a body the transform rejects: 422 etl_invalid_record,
	// never a job.
	KindInvalid Kind = "invalid_http"
	// KindDiagnostic is a diagnostic job that runs a while, then loads its
	// records: it must succeed.
	KindDiagnostic Kind = "diagnostic_ok"
	// KindPermanent is a diagnostic job that fails permanently:
	// FAILED etl_diagnostic_requested_failure.
	KindPermanent Kind = "diagnostic_permanent"
	// KindTransient is a diagnostic job that fails transiently on every
	// attempt: FAILED etl_target_unavailable after its last attempt.
	KindTransient Kind = "diagnostic_transient"
	// KindCancel is a long diagnostic job its owner cancels while it is
	// pending or running.
	KindCancel Kind = "cancelled_by_owner"
)

// Cancellation answers the checker relies on.
const (
	CancelNone      = ""          // not asked, or no definitive answer
	CancelDone      = "cancelled" // 200: the job must be CANCELLED
	CancelSucceeded = "succeeded" // 409 etl_job_already_succeeded
	CancelFailed    = "failed"    // 409 etl_job_already_failed
	// CancelNotFound is 404 etl_job_not_found: right only for a job an
	// asynchronous failover lost (Checker.AcceptLoss), a violation otherwise.
	CancelNotFound = "not_found"
)

// Submission is one idempotency key and its exact body, and what the
// system answered. The key, body and ids never leave the process except
// into the run directory's violation file.
type Submission struct {
	Kind      Kind
	Principal string
	Key       string
	Body      []byte
	Path      string   // request path for HTTP; "" for NATS
	Expected  []string // processed_data.data rows a SUCCEEDED job must have, in order

	mu        sync.Mutex
	attempts  int
	acked     bool
	ackedAt   time.Time
	jobIDs    map[string]int // every job id an acknowledgement named
	rejected  bool           // the expected 422 of KindInvalid
	cancelAns string
	// firstRefused is when the intake first refused the submission (a
	// 5xx or a transport error), zero when it never did.
	firstRefused time.Time
}

// ack records an acknowledgement naming jobID. On the first one it
// returns how long after the first refusal it came (0 when never refused)
// and true.
func (s *Submission) ack(jobID string) (sinceRefused time.Duration, first bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if !s.acked {
		s.acked, s.ackedAt, first = true, time.Now(), true
		if !s.firstRefused.IsZero() {
			sinceRefused = s.ackedAt.Sub(s.firstRefused)
		}
	}
	if s.jobIDs == nil {
		s.jobIDs = map[string]int{}
	}
	s.jobIDs[jobID]++
	return sinceRefused, first
}

// State is a snapshot of a submission's answers.
type State struct {
	Attempts  int
	Acked     bool
	AckedAt   time.Time
	JobIDs    []string // distinct ids the acknowledgements named (must be one)
	Rejected  bool
	CancelAns string
}

// State returns a snapshot.
func (s *Submission) State() State {
	s.mu.Lock()
	defer s.mu.Unlock()
	st := State{Attempts: s.attempts, Acked: s.acked, AckedAt: s.ackedAt, Rejected: s.rejected, CancelAns: s.cancelAns}
	for id := range s.jobIDs {
		st.JobIDs = append(st.JobIDs, id)
	}
	sort.Strings(st.JobIDs)
	return st
}

// Ledger records every submission and every answer, for the checker and the
// recovery times. Safe for concurrent use.
type Ledger struct {
	mu          sync.Mutex
	subs        []*Submission
	ackTimes    []time.Time
	responses   map[string]int // "http 202", "http 503 etl_target_unavailable", "nats reply", ...
	unexpected  map[string]int // answers no correct system gives (a violation each)
	unackedLeft int            // submissions still unacknowledged when producers gave up
	// refusals counts the intake's refusals of a submission by class
	// ("http 503 <code> with Retry-After", "http transport error", ...);
	// acceptWaits are, per refused submission that was then acknowledged,
	// the time from its first refusal to its acknowledgement.
	refusals    map[string]int
	acceptWaits []time.Duration
}

// NewLedger returns an empty ledger.
func NewLedger() *Ledger {
	return &Ledger{responses: map[string]int{}, unexpected: map[string]int{}, refusals: map[string]int{}}
}

// refused records a refusal of s (class as in Refusals).
func (l *Ledger) refused(s *Submission, class string) {
	s.mu.Lock()
	if s.firstRefused.IsZero() && !s.acked {
		s.firstRefused = time.Now()
	}
	s.mu.Unlock()
	l.mu.Lock()
	l.refusals[class]++
	l.mu.Unlock()
}

// Refusals returns the count of each class of refusal of a submission:
// "http 503 <errorCode> with Retry-After", "http 503 <errorCode> without
// Retry-After", "http <status> <errorCode>" for other 5xx, and "http
// transport error".
func (l *Ledger) Refusals() map[string]int {
	l.mu.Lock()
	defer l.mu.Unlock()
	return copyCounts(l.refusals)
}

// AcceptWaits returns, for every refused submission later acknowledged,
// the time from its first refusal to its acknowledgement, sorted.
func (l *Ledger) AcceptWaits() []time.Duration {
	l.mu.Lock()
	out := append([]time.Duration(nil), l.acceptWaits...)
	l.mu.Unlock()
	sort.Slice(out, func(i, j int) bool { return out[i] < out[j] })
	return out
}

func (l *Ledger) add(s *Submission) {
	l.mu.Lock()
	l.subs = append(l.subs, s)
	l.mu.Unlock()
}

func (l *Ledger) response(what string) {
	l.mu.Lock()
	l.responses[what]++
	l.mu.Unlock()
}

func (l *Ledger) unexpectedAnswer(what string) {
	l.mu.Lock()
	l.unexpected[what]++
	l.mu.Unlock()
}

func (l *Ledger) acked(s *Submission, jobID string) {
	wait, first := s.ack(jobID)
	l.mu.Lock()
	l.ackTimes = append(l.ackTimes, time.Now())
	if first && wait > 0 {
		l.acceptWaits = append(l.acceptWaits, wait)
	}
	l.mu.Unlock()
}

func (l *Ledger) gaveUp() {
	l.mu.Lock()
	l.unackedLeft++
	l.mu.Unlock()
}

// Submissions returns every submission so far.
func (l *Ledger) Submissions() []*Submission {
	l.mu.Lock()
	defer l.mu.Unlock()
	return append([]*Submission(nil), l.subs...)
}

// AckTimes returns the times of every acknowledgement, sorted.
func (l *Ledger) AckTimes() []time.Time {
	l.mu.Lock()
	out := append([]time.Time(nil), l.ackTimes...)
	l.mu.Unlock()
	sort.Slice(out, func(i, j int) bool { return out[i].Before(out[j]) })
	return out
}

// Responses returns the count of each answer class.
func (l *Ledger) Responses() map[string]int {
	l.mu.Lock()
	defer l.mu.Unlock()
	return copyCounts(l.responses)
}

// Unexpected returns the count of each unexpected answer.
func (l *Ledger) Unexpected() map[string]int {
	l.mu.Lock()
	defer l.mu.Unlock()
	return copyCounts(l.unexpected)
}

// GaveUp is how many submissions were never acknowledged.
func (l *Ledger) GaveUp() int {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.unackedLeft
}

func copyCounts(m map[string]int) map[string]int {
	out := make(map[string]int, len(m))
	for k, v := range m {
		out[k] = v
	}
	return out
}

// newKey is a fresh idempotency key ([A-Za-z0-9._:-]{16,128}).
func newKey(prefix string) string { return prefix + "-" + randomHex(12) }

var firstNames = []string{"jane", "ada", "grace", "linus", "ken", "barbara", "edsger", "margaret"}

// etlRecords is a JSON array of n valid records and the rows the
// transform makes of them.
func etlRecords(rng *rand.Rand, n int) (json.RawMessage, []string, error) {
	recs := make([]map[string]any, n)
	for i := range recs {
		name := firstNames[rng.IntN(len(firstNames))]
		recs[i] = map[string]any{
			"id":     "r" + strconv.Itoa(i) + "-" + randomHex(3),
			"name":   name,
			"email":  name + "@EXAMPLE.org",
			"amount": strconv.Itoa(rng.IntN(100000)) + "." + strconv.Itoa(rng.IntN(10)),
			"qty":    rng.IntN(50),
		}
	}
	body, err := json.Marshal(recs)
	if err != nil {
		return nil, nil, err
	}
	rows, err := etl.Process(body, 1000)
	if err != nil {
		return nil, nil, fmt.Errorf("the harness made an invalid record: %w", err)
	}
	data := make([]string, len(rows))
	for i, r := range rows {
		data[i] = r.Data
	}
	return body, data, nil
}

// diagnosticBody is a diagnostic job body: wait d, then fail as asked or
// load records.
func diagnosticBody(d time.Duration, records json.RawMessage, failWith string) ([]byte, error) {
	m := map[string]any{"durationMillis": d.Milliseconds(), "records": records}
	if failWith != "" {
		m["failWith"] = failWith
	}
	return json.Marshal(m)
}
