package console

import (
	"context"
	"encoding/json"
	"net/http"
	"net/url"
	"strconv"
	"time"

	"github.com/google/uuid"
	"github.com/mightyetl/mightyetl/internal/pg"
)

// AuditQuery selects one page of the operator audit, newest first.
type AuditQuery struct {
	// Before continues after that record id (keyset); zero starts at the
	// newest record.
	Before int64
	// Limit is the page size: 20, 50 (the default) or 100.
	Limit int
}

// ParseAuditQuery parses before (a record id from a previous page's
// nextBefore) and limit (20, 50 or 100); anything else is an error.
func ParseAuditQuery(q url.Values) (AuditQuery, error) {
	var a AuditQuery
	if v := q.Get("before"); v != "" {
		n, err := strconv.ParseInt(v, 10, 64)
		if err != nil || n < 1 {
			return AuditQuery{}, errBadFilter
		}
		a.Before = n
	}
	limit, ok := parsePageLimit(q.Get("limit"))
	if !ok {
		return AuditQuery{}, errBadFilter
	}
	a.Limit = limit
	return a, nil
}

// Audit reads one page of the operator audit, newest first. Records show a
// short prefix of the operator's principal scope hash, never more.
func (c *Console) Audit(ctx context.Context, q AuditQuery) (pg.AuditPage, error) {
	return pg.ListOperatorAudit(ctx, c.opts.DB, pg.AuditListParams{Before: q.Before, Limit: max(q.Limit, 1)})
}

// auditFilter is the bulk cancellation's filter as its audit row records
// it: the filter's state, kind, code, from and to (the ones set) and the
// number of jobs the operator confirmed. Every value is one ParseFilter
// validated (a fixed state or kind, a code of [a-z0-9_], times); nothing
// names a payload, key or principal.
func auditFilter(f Filter, confirmed int) json.RawMessage {
	m := map[string]any{"confirmed": confirmed}
	for k, v := range map[string]string{"state": f.Status, "kind": f.Kind, "code": f.Code} {
		if v != "" {
			m[k] = v
		}
	}
	if !f.From.IsZero() {
		m["from"] = f.From.UTC().Format(time.RFC3339Nano)
	}
	if !f.To.IsZero() {
		m["to"] = f.To.UTC().Format(time.RFC3339Nano)
	}
	b, _ := json.Marshal(m) // a map of strings and an int always marshals
	return b
}

// auditRow is one audit record as the Audit page shows it.
type auditRow struct {
	pg.AuditRecord
	// Job and Replay are JobID and ReplayJobID when set (Has*).
	Job, Replay       uuid.UUID
	HasJob, HasReplay bool
	// Count is JobCount when HasCount.
	Count    int
	HasCount bool
}

// auditView is the Audit page's data.
type auditView struct {
	Rows []auditRow
	// Older is true on a page after the first.
	Older bool
	// NextURL is the next (older) page; empty at the end.
	NextURL string
}

// audit serves GET /console/audit: the operator audit, newest first, a
// keyset page at a time (?before=<record id>&limit=20|50|100).
func (h *pageHandler) audit(w http.ResponseWriter, r *http.Request) {
	q, err := ParseAuditQuery(r.URL.Query())
	if err != nil {
		h.error(w, r, http.StatusBadRequest, "Bad request", "The audit page position or size is unknown.")
		return
	}
	page, err := h.c.Audit(r.Context(), q)
	if err != nil {
		h.dbError(w, r, err)
		return
	}
	v := auditView{Older: q.Before != 0}
	for _, rec := range page.Records {
		row := auditRow{AuditRecord: rec}
		if rec.JobID != nil {
			row.Job, row.HasJob = *rec.JobID, true
		}
		if rec.ReplayJobID != nil {
			row.Replay, row.HasReplay = *rec.ReplayJobID, true
		}
		if rec.JobCount != nil {
			row.Count, row.HasCount = *rec.JobCount, true
		}
		v.Rows = append(v.Rows, row)
	}
	if page.Next != 0 {
		next := url.Values{"before": {strconv.FormatInt(page.Next, 10)}}
		if q.Limit != 50 {
			next.Set("limit", strconv.Itoa(q.Limit))
		}
		v.NextURL = "/console/audit?" + next.Encode()
	}
	h.render(w, r, http.StatusOK, "audit", "Audit", v)
}
