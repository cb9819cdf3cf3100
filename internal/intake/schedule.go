package intake

import (
	"strings"
	"time"

	"github.com/mightyetl/mightyetl/internal/metrics"
	"github.com/mightyetl/mightyetl/internal/pg"
)

// Schedule header names: the same on an HTTP request and on a NATS request
// message (events.PriorityHeader and events.NotBeforeHeader name them too).
const (
	// PriorityHeader carries a submission's priority: one digit, 1
	// (highest) to 4 (lowest).
	PriorityHeader = "Mightyetl-Priority"
	// NotBeforeHeader carries the earliest time a submitted job may run:
	// RFC 3339 with a "Z" or numeric offset.
	NotBeforeHeader = "Mightyetl-Not-Before"
)

// DefaultMaxScheduleHorizon is Options.MaxScheduleHorizon's default
// (MIGHTYETL_MAX_SCHEDULE_HORIZON): a job may be scheduled up to 30 days
// ahead.
const DefaultMaxScheduleHorizon = 30 * 24 * time.Hour

// maxNotBeforeLength bounds a NotBeforeHeader value: RFC 3339 with nine
// fractional digits and an offset is 35 characters.
const maxNotBeforeLength = 40

// Schedule is when and how urgently a new job runs. The zero value is the
// default: priority pg.DefaultPriority (a replay: its source's), at once.
// Neither field is part of a request's identity: a resubmission with the
// same key and body is the first job, with the first submission's
// schedule, whatever schedule it carries.
type Schedule struct {
	// Priority is 1 (highest) .. 4 (lowest); 0 means the default. Other
	// values are ErrInvalidPriority.
	Priority int
	// NotBefore, when not zero, is the earliest time the job may be claimed;
	// the database clock decides when it has passed. A time already past
	// means at once. One later than the intake's own clock plus
	// Options.MaxScheduleHorizon is ErrInvalidNotBefore. Stored with
	// microsecond precision (truncated).
	NotBefore time.Time
}

// ParseSchedule parses the values of PriorityHeader and NotBeforeHeader
// (each nil or empty when the header is absent), with the same rules for
// HTTP and NATS requests: at most one value each; a priority is exactly one
// digit 1..4 (ErrInvalidPriority otherwise); a notBefore is RFC 3339 with
// "T", a "Z" or numeric offset and an optional fraction after a "."
// (ErrInvalidNotBefore otherwise). The horizon is the Service's to check.
func ParseSchedule(priority, notBefore []string) (Schedule, error) {
	var s Schedule
	switch len(priority) {
	case 0:
	case 1:
		p := priority[0]
		if len(p) != 1 || p[0] < '0'+pg.HighestPriority || p[0] > '0'+pg.LowestPriority {
			return Schedule{}, ErrInvalidPriority
		}
		s.Priority = int(p[0] - '0')
	default:
		return Schedule{}, ErrInvalidPriority
	}
	switch len(notBefore) {
	case 0:
	case 1:
		t, ok := parseNotBefore(notBefore[0])
		if !ok {
			return Schedule{}, ErrInvalidNotBefore
		}
		s.NotBefore = t
	default:
		return Schedule{}, ErrInvalidNotBefore
	}
	return s, nil
}

// parseNotBefore parses an RFC 3339 date-time. time.RFC3339Nano alone
// would also take a "," before the fraction and an offset of 24 hours or
// more; RFC 3339 has only "." and offsets up to 23:59.
func parseNotBefore(v string) (time.Time, bool) {
	if len(v) < len("2006-01-02T15:04:05Z") || len(v) > maxNotBeforeLength || v[10] != 'T' || strings.ContainsRune(v, ',') {
		return time.Time{}, false
	}
	if v[len(v)-1] != 'Z' {
		off := v[len(v)-6:] // "+hh:mm"
		if off[1] > '2' || off[1] == '2' && off[2] > '3' || off[4] > '5' {
			return time.Time{}, false
		}
	}
	t, err := time.Parse(time.RFC3339Nano, v)
	if err != nil {
		return time.Time{}, false
	}
	return t, true
}

// checkSchedule validates a schedule against the priority range and the
// horizon from now (the intake's clock; claimability is the database's to
// decide). It returns the schedule as stored: NotBefore truncated to
// microseconds.
func (s *Service) checkSchedule(sc Schedule) (Schedule, error) {
	if sc.Priority != 0 && (sc.Priority < pg.HighestPriority || sc.Priority > pg.LowestPriority) {
		return Schedule{}, ErrInvalidPriority
	}
	if !sc.NotBefore.IsZero() {
		if sc.NotBefore.After(time.Now().Add(s.maxScheduleHorizon)) {
			return Schedule{}, ErrInvalidNotBefore
		}
		sc.NotBefore = sc.NotBefore.Truncate(time.Microsecond)
	}
	return sc, nil
}

// RejectSubmission counts a submission a transport refused before it
// reached Submit (a malformed PriorityHeader or NotBeforeHeader, say) as
// Submit counts its own rejections: outcome rejected, by err's code.
func (s *Service) RejectSubmission(err error) {
	s.countRejection(CodeOf(err))
	s.count(metrics.SubmissionRejected)
}
