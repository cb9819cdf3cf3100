package httpapi

import (
	"encoding/hex"
	"strings"
	"testing"

	"github.com/mightyetl/mightyetl/internal/auth"
	"github.com/mightyetl/mightyetl/internal/codes"
	"github.com/mightyetl/mightyetl/internal/pg"
)

// GET /api/ops/audit lists the operator audit newest first with a working
// keyset cursor: the operator's replays through the API appear on the
// first page (newest first, with the source, the job made and the outcome,
// the operator as an 8-character hash prefix, never the whole hash), and
// following nextBefore reaches every older row exactly once. Bad cursors
// are 400, a non-operator 403 and no credentials 401, as on every
// /api/ops route; other methods 405.
func TestOpsAuditListsNewestFirstWithCursor(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	failed := finishJob(t, e, "alice", "key-opsaudit-00000001", pg.StatusFailed)
	// 22 older rows, written as the cancellation statement writes them.
	older := e.count(`WITH ins AS (
		INSERT INTO etl_operator_audit_records (operator_principal_scope_hash, operator_action, job_record_id, outcome_code)
		SELECT decode(repeat('ab', 32), 'hex'), 'cancel', gen_random_uuid(), 'ok' FROM generate_series(1, 22)
		RETURNING 1) SELECT count(*) FROM ins`)
	if older != 22 {
		t.Fatalf("inserted %d older rows", older)
	}
	path := "/api/ops/jobs/" + failed + "/replays"
	var created submitted
	first := e.do(req{Method: "POST", Path: path, Principal: "operator", Key: "ops-audit-test-0001", Body: sampleBody})
	if first.Status != 202 {
		t.Fatalf("replay: %d %s", first.Status, first.Body)
	}
	first.json(t, &created)
	if res := e.do(req{Method: "POST", Path: path, Principal: "operator", Key: "ops-audit-test-0002", Body: "[]"}); res.Status != 422 {
		t.Fatalf("mismatched replay: %d %s", res.Status, res.Body)
	}

	type record struct {
		AuditRecordID     string         `json:"auditRecordId"`
		Operator          string         `json:"operator"`
		Action            string         `json:"action"`
		JobRecordID       string         `json:"jobRecordId"`
		ReplayJobRecordID string         `json:"replayJobRecordId"`
		Filter            map[string]any `json:"filter"`
		JobCount          *int           `json:"jobCount"`
		Outcome           string         `json:"outcome"`
	}
	type page struct {
		Records    []record `json:"records"`
		NextBefore string   `json:"nextBefore"`
	}
	opHash := auth.ScopeHash(testHashKey, "operator")
	res := e.do(req{Method: "GET", Path: "/api/ops/audit?limit=20", Principal: "operator"})
	if res.Status != 200 || !strings.HasPrefix(res.Header.Get("Content-Type"), "application/json") {
		t.Fatalf("audit: %d %v %s", res.Status, res.Header, res.Body)
	}
	if strings.Contains(string(res.Body), opHash) || strings.Contains(string(res.Body), sampleBody) {
		t.Fatalf("audit carries the operator's whole hash or a payload: %s", res.Body)
	}
	var p1 page
	res.json(t, &p1)
	if len(p1.Records) != 20 || p1.NextBefore == "" {
		t.Fatalf("first page: %d records, next %q", len(p1.Records), p1.NextBefore)
	}
	mismatch, ok := p1.Records[0], p1.Records[1]
	if mismatch.Action != pg.AuditActionReplay || mismatch.JobRecordID != failed || mismatch.ReplayJobRecordID != "" ||
		mismatch.Outcome != codes.ReplayPayloadMismatch || mismatch.Operator != opHash[:8] {
		t.Fatalf("newest record: %+v", mismatch)
	}
	if ok.Action != pg.AuditActionReplay || ok.JobRecordID != failed || ok.ReplayJobRecordID != created.JobRecordID ||
		ok.Outcome != pg.AuditOutcomeOK || ok.Operator != opHash[:8] {
		t.Fatalf("replay record: %+v", ok)
	}
	if _, err := hex.DecodeString(ok.Operator); err != nil {
		t.Fatalf("operator %q is not a hash prefix", ok.Operator)
	}
	res = e.do(req{Method: "GET", Path: "/api/ops/audit?limit=20&before=" + p1.NextBefore, Principal: "operator"})
	var p2 page
	res.json(t, &p2)
	if res.Status != 200 || len(p2.Records) != 4 || p2.NextBefore != "" {
		t.Fatalf("second page: %d, %d records, next %q", res.Status, len(p2.Records), p2.NextBefore)
	}
	seen := map[string]bool{}
	for _, r := range append(p1.Records, p2.Records...) {
		if seen[r.AuditRecordID] {
			t.Fatalf("record %s listed twice", r.AuditRecordID)
		}
		seen[r.AuditRecordID] = true
	}

	for _, c := range []struct {
		r      req
		status int
		code   string
	}{
		{req{Method: "GET", Path: "/api/ops/audit?before=x", Principal: "operator"}, 400, codes.OpsInvalidFilter},
		{req{Method: "GET", Path: "/api/ops/audit?limit=7", Principal: "operator"}, 400, codes.OpsInvalidFilter},
		{req{Method: "GET", Path: "/api/ops/audit", Principal: "alice"}, 403, codes.OperatorRequired},
		{req{Method: "GET", Path: "/api/ops/audit"}, 401, codes.AuthenticationRequired},
		{req{Method: "DELETE", Path: "/api/ops/audit", Principal: "operator"}, 405, codes.MethodNotAllowed},
	} {
		res := e.do(c.r)
		if res.Status != c.status || res.problemCode(t) != c.code {
			t.Errorf("%s %s as %q: %d %s, want %d %s", c.r.Method, c.r.Path, c.r.Principal, res.Status, res.Body, c.status, c.code)
		}
	}
}
