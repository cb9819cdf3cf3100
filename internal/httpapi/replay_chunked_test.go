package httpapi

import (
	"context"
	"net/http"
	"testing"

	"github.com/mightyetl/mightyetl/internal/codes"
	"github.com/mightyetl/mightyetl/internal/pg"
	"github.com/mightyetl/mightyetl/internal/pgtest"
)

// A large (etl_chunked) job is replayed by uploading its payload again with
// replayOf: the owner's POST /api/etl/jobs/{id}/replays and the operator's
// POST /api/ops/jobs/{id}/replays of a FAILED or CANCELLED chunked job are
// 409 etl_job_replay_requires_upload, and nothing is inserted; another
// owner's chunked job stays 404.
func TestReplayOfChunkedJobRequiresUpload(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	failed := pgtest.InsertChunkedJob(t, e.pool, pgtest.ChunkedJob{Owner: intakeScope("alice"), Status: pg.StatusFailed})
	cancelled := pgtest.InsertChunkedJob(t, e.pool, pgtest.ChunkedJob{Owner: intakeScope("alice")})
	if out, err := pg.CancelJob(context.Background(), e.pool, pg.CancelParams{PrincipalScopeHash: intakeScope("alice"),
		JobID: cancelled, CancellationKeyHash: pgtest.SHA("cancel")}); err != nil || !out.Cancelled {
		t.Fatalf("cancel: %+v %v", out, err)
	}
	const count = `SELECT (SELECT count(*) FROM etl_job_records) + (SELECT count(*) FROM etl_job_claim_queue)
		+ (SELECT count(*) FROM etl_outbox_events)`
	before := e.count(count)
	for _, c := range []struct {
		name   string
		r      req
		status int
		code   string
	}{
		{"owner failed", replayReq("alice", failed.String(), "replay-chunked-0001", sampleBody), http.StatusConflict, codes.ReplayRequiresUpload},
		{"owner cancelled", replayReq("alice", cancelled.String(), "replay-chunked-0002", sampleBody), http.StatusConflict, codes.ReplayRequiresUpload},
		{"foreign", replayReq("bob", failed.String(), "replay-chunked-0003", sampleBody), http.StatusNotFound, codes.JobNotFound},
		{"operator failed", req{Method: "POST", Path: "/api/ops/jobs/" + failed.String() + "/replays", Principal: "operator",
			Key: "replay-chunked-0004", Body: sampleBody}, http.StatusConflict, codes.ReplayRequiresUpload},
		{"operator cancelled", req{Method: "POST", Path: "/api/ops/jobs/" + cancelled.String() + "/replays", Principal: "operator",
			Key: "replay-chunked-0005", Body: sampleBody}, http.StatusConflict, codes.ReplayRequiresUpload},
	} {
		res := e.do(c.r)
		if res.Status != c.status || res.problemCode(t) != c.code {
			t.Errorf("%s: %d %s, want %d %s", c.name, res.Status, res.Body, c.status, c.code)
		}
	}
	if after := e.count(count); after != before {
		t.Fatalf("refused replays wrote %d rows", after-before)
	}
}
