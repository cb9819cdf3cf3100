package console

import (
	"testing"
	"time"

	"github.com/mightyetl/mightyetl/internal/pg"
)

// TestJobViewTexts: what the job page says for the records and asks for in
// the replay form, by state and kind.
func TestJobViewTexts(t *testing.T) {
	view := func(kind, status string) jobView {
		return jobView{JobDetail: JobDetail{OpsDetail: pg.OpsDetail{OpsJob: pg.OpsJob{Kind: kind, Status: status}}}}
	}
	for _, tc := range []struct{ kind, status, records string }{
		{pg.KindDiagnostic, pg.StatusRunning, "none: a diagnostic job submitted without records"},
		{pg.KindDiagnostic, pg.StatusPending, "none: a diagnostic job submitted without records"},
		{pg.KindDiagnostic, pg.StatusFailed, "not kept: a terminal job keeps no payload, only its digest"},
		{pg.KindETLRecords, pg.StatusSucceeded, "not kept: a terminal job keeps no payload, only its digest"},
		{pg.KindETLRecords, pg.StatusCancelled, "not kept: a terminal job keeps no payload, only its digest"},
		{pg.KindETLRecords, pg.StatusRunning, "not known: the payload is not a JSON array of records"},
		{pg.KindETLChunked, pg.StatusRunning, "see Progress: a large job's payload is stored in chunks, not in the job"},
		{pg.KindETLChunked, pg.StatusFailed, "see Progress: a large job's payload is stored in chunks, not in the job"},
	} {
		if got := view(tc.kind, tc.status).RecordsNote(); got != tc.records {
			t.Errorf("%s %s: records %q, want %q", tc.kind, tc.status, got, tc.records)
		}
	}
	if got := view(pg.KindDiagnostic, pg.StatusFailed).BodyShape(); got != `a JSON object {"durationMillis", "records", "failWith"}, as submitted` {
		t.Errorf("diagnostic body %q", got)
	}
	if got := view(pg.KindETLRecords, pg.StatusFailed).BodyShape(); got != "a JSON array of records, as submitted" {
		t.Errorf("etl_records body %q", got)
	}
}

// TestJobViewNotBefore: the page shows a not-before time only for a
// PENDING job whose available_at is after the database clock at the read.
func TestJobViewNotBefore(t *testing.T) {
	now := time.Date(2030, 1, 1, 0, 0, 0, 0, time.UTC)
	view := func(status string, available time.Time) jobView {
		return jobView{JobDetail: JobDetail{OpsDetail: pg.OpsDetail{DatabaseNow: now,
			OpsJob: pg.OpsJob{Status: status, AvailableAt: available}}}}
	}
	if nb := view(pg.StatusPending, now.Add(time.Minute)).NotBefore(); nb == nil || !nb.Equal(now.Add(time.Minute)) {
		t.Errorf("scheduled PENDING job: %v", nb)
	}
	for _, v := range []jobView{view(pg.StatusPending, now), view(pg.StatusPending, now.Add(-time.Second)),
		view(pg.StatusRunning, now.Add(time.Minute)), view(pg.StatusCancelled, now.Add(time.Minute))} {
		if nb := v.NotBefore(); nb != nil {
			t.Errorf("%s available %v: not before %v, want none", v.Status, v.AvailableAt, nb)
		}
	}
}
