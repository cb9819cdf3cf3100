package httpapi

import (
	"encoding/json"
	"net/http"
	"strconv"
	"time"

	"github.com/mightyetl/mightyetl/internal/codes"
	"github.com/mightyetl/mightyetl/internal/console"
)

// opsAuditRecord is one operator audit record in the operator JSON: the
// operator as a short prefix of its principal scope hash, never more.
type opsAuditRecord struct {
	AuditRecordID     string          `json:"auditRecordId"`
	Operator          string          `json:"operator"`
	Action            string          `json:"action"`
	JobRecordID       string          `json:"jobRecordId,omitempty"`
	ReplayJobRecordID string          `json:"replayJobRecordId,omitempty"`
	Filter            json.RawMessage `json:"filter,omitempty"`
	JobCount          *int            `json:"jobCount,omitempty"`
	Outcome           string          `json:"outcome"`
	CreatedAt         time.Time       `json:"createdAt"`
}

// opsAudit serves GET /api/ops/audit: the operator audit, newest first, a
// page at a time (before: the previous page's nextBefore; limit 20, 50 or
// 100); an unknown value is 400 etl_ops_invalid_filter.
func (a *api) opsAudit(w http.ResponseWriter, r *http.Request, _ console.Operator) {
	q, err := console.ParseAuditQuery(r.URL.Query())
	if err != nil {
		writeProblem(w, r, codes.OpsInvalidFilter)
		return
	}
	page, err := a.opts.Console.Audit(r.Context(), q)
	if err != nil {
		writeProblem(w, r, codes.TargetUnavailable)
		return
	}
	out := struct {
		Records    []opsAuditRecord `json:"records"`
		NextBefore string           `json:"nextBefore,omitempty"`
	}{Records: []opsAuditRecord{}}
	for _, rec := range page.Records {
		o := opsAuditRecord{AuditRecordID: strconv.FormatInt(rec.ID, 10), Operator: rec.Operator, Action: rec.Action,
			Filter: rec.Filter, JobCount: rec.JobCount, Outcome: rec.Outcome, CreatedAt: rec.CreatedAt.UTC()}
		if rec.JobID != nil {
			o.JobRecordID = rec.JobID.String()
		}
		if rec.ReplayJobID != nil {
			o.ReplayJobRecordID = rec.ReplayJobID.String()
		}
		out.Records = append(out.Records, o)
	}
	if page.Next != 0 {
		out.NextBefore = strconv.FormatInt(page.Next, 10)
	}
	writeOpsJSON(w, out)
}
