package client

import (
	"fmt"
	"net/http"
	"time"
)

// Headers of a submission's schedule, the same on an HTTP request and on a
// NATS request (docs/api.md).
const (
	// PriorityHeader carries a job's priority: one digit, 1 (highest) to 4
	// (lowest).
	PriorityHeader = "Mightyetl-Priority"
	// NotBeforeHeader carries the earliest time a job may run: RFC 3339
	// with an offset.
	NotBeforeHeader = "Mightyetl-Not-Before"
)

// The priorities a job may have: 1 is the highest, 4 the lowest; a job
// submitted without WithPriority has DefaultPriority.
const (
	HighestPriority = 1
	DefaultPriority = 2
	LowestPriority  = 4
)

// SubmitOption sets a field of a submission: of Submit, SubmitDiagnostic
// and Replay, and of a Producer's Publish and PublishAndWait. Neither field
// is part of the request's identity: the service answers a repeated request
// (same key and body) with the first one's job as it is.
type SubmitOption func(*schedule)

// WithPriority sets the job's priority, 1 (highest) to 4 (lowest)
// (PriorityHeader); zero sends none (DefaultPriority; a replay: its
// source's). Any other value fails the call with CodeInvalidPriority before
// anything is sent.
func WithPriority(p int) SubmitOption { return func(s *schedule) { s.priority = p } }

// WithNotBefore sets the earliest time the job may run (NotBeforeHeader,
// sent in UTC with nanoseconds; the service keeps microseconds). The
// service's database clock decides when it has passed; a time already past
// runs the job at once; one beyond the service's horizon
// (MIGHTYETL_MAX_SCHEDULE_HORIZON, 30 days by default) is answered
// CodeInvalidNotBefore. The zero time sends none (at once).
func WithNotBefore(t time.Time) SubmitOption { return func(s *schedule) { s.notBefore = t } }

// schedule is what SubmitOptions set.
type schedule struct {
	priority  int
	notBefore time.Time
}

// scheduleOf applies opts; an *Error for a priority the service would
// refuse.
func scheduleOf(opts []SubmitOption) (schedule, *Error) {
	var s schedule
	for _, o := range opts {
		if o != nil {
			o(&s)
		}
	}
	if s.priority != 0 && (s.priority < HighestPriority || s.priority > LowestPriority) {
		return schedule{}, &Error{Code: CodeInvalidPriority,
			Detail: fmt.Sprintf("priority %d; a priority is %d (highest) to %d (lowest)", s.priority, HighestPriority, LowestPriority)}
	}
	return s, nil
}

// values is the headers' values, each empty when not sent.
func (s schedule) values() (priority, notBefore string) {
	if s.priority != 0 {
		priority = fmt.Sprint(s.priority)
	}
	if !s.notBefore.IsZero() {
		notBefore = s.notBefore.UTC().Format(time.RFC3339Nano)
	}
	return priority, notBefore
}

// httpHeader is the schedule's request headers, nil when none.
func (s schedule) httpHeader() http.Header {
	p, nb := s.values()
	if p == "" && nb == "" {
		return nil
	}
	h := http.Header{}
	if p != "" {
		h.Set(PriorityHeader, p)
	}
	if nb != "" {
		h.Set(NotBeforeHeader, nb)
	}
	return h
}
