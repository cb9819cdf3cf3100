package console

import (
	"errors"
	"net/url"
	"strconv"
	"strings"
	"time"

	"github.com/google/uuid"
	"github.com/mightyetl/mightyetl/internal/pg"
)

// Filter is the job list's filter, parsed from a query string.
type Filter struct {
	Status string
	Kind   string
	Code   string
	// Priority is 1..4, or 0 for any.
	Priority int
	From     time.Time
	To       time.Time
	Before   *uuid.UUID
	Limit    int
}

// timeLayouts are the accepted from/to forms: RFC 3339, and the value of
// an HTML datetime-local input (read as UTC).
var timeLayouts = []string{time.RFC3339Nano, "2006-01-02T15:04:05", "2006-01-02T15:04"}

var errBadFilter = errors.New("invalid filter")

// ParseFilter parses state, kind, code, priority, from, to, before and
// limit; unknown values are errors (never a silent widening of the filter).
// A priority is one of the digits 1..4 (empty: any).
func ParseFilter(q url.Values) (Filter, error) {
	f := Filter{Limit: defaultPageLimit}
	f.Status = strings.TrimSpace(q.Get("state"))
	switch f.Status {
	case "", pg.StatusPending, pg.StatusRunning, pg.StatusSucceeded, pg.StatusFailed, pg.StatusCancelled:
	default:
		return Filter{}, errBadFilter
	}
	f.Kind = strings.TrimSpace(q.Get("kind"))
	switch f.Kind {
	case "", pg.KindETLRecords, pg.KindDiagnostic:
	default:
		return Filter{}, errBadFilter
	}
	f.Code = strings.TrimSpace(q.Get("code"))
	if len(f.Code) > 128 || strings.Trim(f.Code, "abcdefghijklmnopqrstuvwxyz0123456789_") != "" {
		return Filter{}, errBadFilter
	}
	switch p := strings.TrimSpace(q.Get("priority")); p {
	case "":
	case "1", "2", "3", "4":
		f.Priority = int(p[0] - '0')
	default:
		return Filter{}, errBadFilter
	}
	for _, tf := range []struct {
		name string
		dst  *time.Time
	}{{"from", &f.From}, {"to", &f.To}} {
		v := strings.TrimSpace(q.Get(tf.name))
		if v == "" {
			continue
		}
		var err error
		for _, layout := range timeLayouts {
			var t time.Time
			if t, err = time.ParseInLocation(layout, v, time.UTC); err == nil {
				*tf.dst = t.UTC()
				break
			}
		}
		if err != nil {
			return Filter{}, errBadFilter
		}
	}
	if v := q.Get("before"); v != "" {
		id, err := uuid.Parse(v)
		if err != nil {
			return Filter{}, errBadFilter
		}
		f.Before = &id
	}
	limit, ok := parsePageLimit(q.Get("limit"))
	if !ok {
		return Filter{}, errBadFilter
	}
	f.Limit = limit
	return f, nil
}

// defaultPageLimit is the rows of a console list page without ?limit=.
const defaultPageLimit = 50

// parsePageLimit reads a list page's ?limit=: empty means defaultPageLimit,
// and only 20, 50 and 100 are accepted (ok false otherwise).
func parsePageLimit(v string) (limit int, ok bool) {
	switch v {
	case "":
		return defaultPageLimit, true
	case "20", "50", "100":
		n, _ := strconv.Atoi(v)
		return n, true
	}
	return 0, false
}

// Query renders f as a query string (without before unless keep).
func (f Filter) Query(keepBefore bool) url.Values {
	q := url.Values{}
	set := func(k, v string) {
		if v != "" {
			q.Set(k, v)
		}
	}
	set("state", f.Status)
	set("kind", f.Kind)
	set("code", f.Code)
	if f.Priority != 0 {
		q.Set("priority", itoa(f.Priority))
	}
	if !f.From.IsZero() {
		q.Set("from", f.From.Format(time.RFC3339))
	}
	if !f.To.IsZero() {
		q.Set("to", f.To.Format(time.RFC3339))
	}
	if keepBefore && f.Before != nil {
		q.Set("before", f.Before.String())
	}
	if f.Limit != defaultPageLimit && f.Limit != 0 {
		q.Set("limit", itoa(f.Limit))
	}
	return q
}

func (f Filter) params() pg.OpsListParams {
	limit := f.Limit
	if limit == 0 {
		limit = 50
	}
	return pg.OpsListParams{Status: f.Status, Kind: f.Kind, FailureCode: f.Code, Priority: f.Priority,
		From: f.From, To: f.To, Before: f.Before, Limit: limit}
}
