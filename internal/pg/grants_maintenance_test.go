package pg_test

import (
	"context"
	"testing"
	"time"

	"github.com/mightyetl/mightyetl/internal/pg"
)

// The maintenance role of the grant script runs the elected retention (the
// leader row and every fenced prune) and nothing more: it reads no payload,
// ledger response or principal, writes no job state, and inserts no job.
func TestMaintenanceRoleRunsRetentionAndNothingMore(t *testing.T) {
	admin, url := grantsSetup(t)
	ctx := context.Background()
	retentionFixture(t, admin)
	mp := rolePool(t, url, "mightyetl_maintenance_role")

	term, held, err := pg.TakeLeadership(ctx, mp, testLeader, "worker-m", time.Hour)
	if err != nil || !held {
		t.Fatalf("take as maintenance: %v %v", held, err)
	}
	if ok, err := pg.RenewLeadership(ctx, mp, term, time.Hour); err != nil || !ok {
		t.Fatalf("renew as maintenance: %v %v", ok, err)
	}
	fenced := pg.FencedPrune{Term: term, TTL: time.Hour, StatementTimeout: time.Minute}
	deleted := map[pg.PruneKind]int64{}
	for _, kind := range pg.PruneKinds {
		n, err := fenced.Prune(ctx, mp, kind, retentionWindows[kind], 2)
		if err != nil {
			t.Fatalf("prune %s as maintenance: %v", kind, err)
		}
		deleted[kind] = n
	}
	if deleted[pg.PruneKindTerminalJobs] != 5 || deleted[pg.PruneKindLedger] != 3 || deleted[pg.PruneKindOrphanQueue] != 1 ||
		deleted[pg.PruneKindOutbox] != 3 || deleted[pg.PruneKindAudit] != 2 {
		t.Fatalf("deleted by kind as maintenance: %v", deleted)
	}
	if err := pg.ResignLeadership(ctx, mp, term); err != nil {
		t.Fatalf("resign as maintenance: %v", err)
	}

	denied := map[string]string{
		"read a payload":             `SELECT request_payload FROM etl_job_records`,
		"read a principal":           `SELECT principal_scope_hash FROM etl_job_records`,
		"read a ledger response":     `SELECT response_text FROM etl_idempotency_records`,
		"read an outbox row":         `SELECT job_record_id FROM etl_outbox_events`,
		"read an audit operator":     `SELECT operator_principal_scope_hash FROM etl_operator_audit_records`,
		"write a job state":          `UPDATE etl_job_records SET job_status = 'PENDING'`,
		"insert a job":               `INSERT INTO etl_job_records (job_record_id) VALUES (gen_random_uuid())`,
		"queue a job":                `INSERT INTO etl_job_claim_queue (job_record_id, claimable_at) VALUES (gen_random_uuid(), now())`,
		"insert an outbox row":       `INSERT INTO etl_outbox_events (event_kind, job_record_id) VALUES ('job_available', gen_random_uuid())`,
		"draw a fencing token":       `SELECT nextval('etl_lease_fencing_token_sequence')`,
		"write the target":           `INSERT INTO processed_data (data, normalized_record) VALUES ('x', '{}')`,
		"truncate the outbox":        `TRUNCATE etl_outbox_events`,
		"run the operator cancel":    `SELECT etl_ops_counters()`,
		"change the compat contract": `DELETE FROM etl_schema_compatibility`,
	}
	for k, v := range appRoleDenials {
		denied[k] = v
	}
	assertDenied(t, mp, "mightyetl_maintenance_role", denied)
}
