package faultinject

import (
	"context"
	"testing"

	"github.com/google/uuid"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/mightyetl/mightyetl/internal/events"
)

// checkerSelfTest proves the checker is not vacuous: after a clean check it
// breaks four invariants on purpose, once each, and requires the checker to
// count exactly those four violations and nothing else. It runs on the
// converged system, so it changes nothing the real check saw.
func checkerSelfTest(ctx context.Context, t *testing.T, sys *System, ledger *Ledger, c *Checker) {
	t.Helper()
	// 1. A SUCCEEDED job loses one of its target rows.
	var lostRow string
	if err := sys.DB.QueryRow(ctx, `DELETE FROM processed_data WHERE processed_data_id = (
		SELECT min(p.processed_data_id) FROM processed_data p JOIN etl_job_records j USING (job_record_id)
		WHERE j.job_status = 'SUCCEEDED') RETURNING job_record_id::text`).Scan(&lostRow); err != nil {
		t.Fatalf("self-test: delete a target row: %v", err)
	}
	// 2. A FAILED (or else CANCELLED) job gains a target row.
	var extraRow string
	if err := sys.DB.QueryRow(ctx, `INSERT INTO processed_data (job_record_id, data, normalized_record)
		SELECT job_record_id, 'ID:self-test,', '{}' FROM etl_job_records
		WHERE job_status IN ('FAILED', 'CANCELLED') ORDER BY job_status DESC LIMIT 1
		RETURNING job_record_id::text`).Scan(&extraRow); err != nil {
		t.Fatalf("self-test: add a target row: %v", err)
	}
	// 3. An acknowledgement of a key that has no job.
	ghost := &Submission{Kind: KindETL, Principal: sys.HTTP[0].Name, Key: newKey("fi-selftest")}
	ledger.add(ghost)
	ledger.acked(ghost, uuid.NewString())
	// 4. Every copy of one other job's lifecycle event leaves the stream
	// (not the stream's last message, so the stream's end stays put).
	if err := deleteEventsOfOneJob(ctx, sys, c, lostRow, extraRow); err != nil {
		t.Fatalf("self-test: delete lifecycle events: %v", err)
	}

	report, err := c.Check(ctx)
	if err != nil {
		t.Fatalf("self-test: checker: %v", err)
	}
	want := map[string]int{InvSucceededRows: 1, InvNoRowsUnlessSuccess: 1, InvAckedKeyOneJob: 1, InvPublished: 1}
	for _, inv := range AllInvariants {
		if got := report.Violations[inv]; got != want[inv] {
			t.Errorf("checker self-test: %q counted %d violations, want %d", inv, got, want[inv])
		}
	}
	if !t.Failed() {
		t.Logf("checker self-test: 4 deliberate corruptions (a lost target row, a target row of a failed job, an acknowledged key without a job, an unpublished terminal event), each counted once and nothing else")
	}
}

// deleteEventsOfOneJob deletes every stream message of one job other than
// the excluded ones, none of them the stream's last.
func deleteEventsOfOneJob(ctx context.Context, sys *System, c *Checker, exclude ...string) error {
	nc, err := nats.Connect(sys.NATS.URL(), nats.Name("faultinject-selftest"))
	if err != nil {
		return err
	}
	defer nc.Close()
	js, err := jetstream.New(nc)
	if err != nil {
		return err
	}
	subjects, err := events.NewSubjects(sys.Prefix)
	if err != nil {
		return err
	}
	st, err := js.Stream(ctx, subjects.LifecycleStream())
	if err != nil {
		return err
	}
	info, err := st.Info(ctx)
	if err != nil {
		return err
	}
	for _, job := range sortedKeys(c.eventSeqs) {
		seqs := c.eventSeqs[job]
		if job == exclude[0] || job == exclude[1] || len(seqs) == 0 || slicesMax(seqs) >= info.State.LastSeq {
			continue
		}
		for _, seq := range seqs {
			if err := st.DeleteMsg(ctx, seq); err != nil {
				return err
			}
		}
		return nil
	}
	return nil
}

func slicesMax(s []uint64) uint64 {
	var m uint64
	for _, v := range s {
		m = max(m, v)
	}
	return m
}
