package intake

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/mightyetl/mightyetl/internal/codes"
	"github.com/mightyetl/mightyetl/internal/pg"
)

func TestReplayKeyHashIsDomainSeparated(t *testing.T) {
	scope := SubmissionKeyHash("x", "y") // any 64-hex value
	const key = "replay-key-00000001"
	sum := sha256.Sum256([]byte("mightyetl:durable-job-replay:v1:" + scope + ":" + key))
	if got := ReplayKeyHash(scope, key); got != hex.EncodeToString(sum[:]) {
		t.Fatalf("ReplayKeyHash %s", got)
	}
	if ReplayKeyHash(scope, key) == SubmissionKeyHash(scope, key) || ReplayKeyHash(scope, key) == SyncProcessKeyHash(scope, key) {
		t.Fatal("replay keys share a domain with another key kind")
	}
	if ReplayKeyHash(scope, key) == ReplayKeyHash(SubmissionKeyHash("x", "z"), key) {
		t.Fatal("replay key hash is not principal-scoped")
	}
}

// The canonical string: exactly the contract's six fields for a job without
// lineage, the three lineage fields appended for a replay job.
func TestETagCanonicalString(t *testing.T) {
	at := time.Date(2026, 1, 2, 3, 4, 5, 6000, time.UTC)
	id, src, root := uuid.New(), uuid.New(), uuid.New()
	code := codes.TargetFailure
	tag := func(s string) string {
		sum := sha256.Sum256([]byte(s))
		return `W/"` + hex.EncodeToString(sum[:]) + `"`
	}
	six := "V36:" + id.String() + "V6:FAILEDV1:2V18:" + code + "V27:2026-01-02T03:04:05.000006ZV27:2026-01-02T03:04:05.000006Z"
	plain := pg.Job{JobID: id, Status: pg.StatusFailed, AttemptCount: 2, FailureCode: &code, CreatedAt: at, UpdatedAt: at}
	if got := NewJobView(plain).ETag(); got != tag(six) {
		t.Errorf("plain ETag %s, want %s", got, tag(six))
	}
	replayJob := plain
	replayJob.Lineage = &pg.Lineage{SourceJobID: src, RootJobID: root, Generation: 12}
	want := tag(six + "V36:" + src.String() + "V36:" + root.String() + "V2:12")
	if got := NewJobView(replayJob).ETag(); got != want {
		t.Errorf("replay ETag %s, want %s", got, want)
	}
	pendingNoCode := pg.Job{JobID: id, Status: pg.StatusPending, CreatedAt: at, UpdatedAt: at}
	wantPending := tag("V36:" + id.String() + "V7:PENDINGV1:0N;V27:2026-01-02T03:04:05.000006ZV27:2026-01-02T03:04:05.000006Z")
	if got := NewJobView(pendingNoCode).ETag(); got != wantPending {
		t.Errorf("pending ETag %s, want %s", got, wantPending)
	}
}

func TestReplayValidatesBeforeTheDatabase(t *testing.T) {
	t.Parallel()
	s, _ := newService(t, nil)
	ctx := context.Background()
	if _, err := s.Replay(ctx, ReplayRequest{Principal: " ", IdempotencyKey: "replay-key-00000001", JobID: uuid.New()}); !errors.Is(err, ErrPrincipalRequired) {
		t.Errorf("blank principal: %v", err)
	}
	for _, key := range []string{"", "short", "has space 000000000", `"quoted-000000000001"`} {
		if _, err := s.Replay(ctx, ReplayRequest{Principal: "alice", IdempotencyKey: key, JobID: uuid.New()}); !errors.Is(err, ErrReplayKeyRequired) {
			t.Errorf("key %q: %v", key, err)
		}
	}
	if _, err := s.Replay(ctx, ReplayRequest{Principal: "alice", IdempotencyKey: "replay-key-00000001", JobID: uuid.New(), Body: []byte(body)}); !errors.Is(err, ErrJobNotFound) {
		t.Errorf("absent source: %v", err)
	}
	// A replay round trip through the Service.
	sub, err := s.Submit(ctx, SubmitRequest{Principal: "alice", IdempotencyKey: "submit-key-00000001", Body: []byte(body)})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := s.Replay(ctx, ReplayRequest{Principal: "alice", IdempotencyKey: "replay-key-00000001", JobID: sub.Job.JobID, Body: []byte(body)}); !errors.Is(err, ErrReplaySourceActive) {
		t.Errorf("pending source: %v", err)
	}
	if _, err := s.Cancel(ctx, CancelRequest{Principal: "alice", JobID: sub.Job.JobID, IdempotencyKey: "cancel-key-00000001"}); err != nil {
		t.Fatal(err)
	}
	res, err := s.Replay(ctx, ReplayRequest{Principal: "alice", IdempotencyKey: "replay-key-00000001", JobID: sub.Job.JobID, Body: []byte(body)})
	if err != nil || res.Replayed || res.Job.Lineage == nil || res.Job.Lineage.SourceJobID != sub.Job.JobID {
		t.Fatalf("replay: %+v %v", res, err)
	}
	again, err := s.Replay(ctx, ReplayRequest{Principal: "alice", IdempotencyKey: "replay-key-00000001", JobID: sub.Job.JobID, Body: []byte(body)})
	if err != nil || !again.Replayed || again.Job.JobID != res.Job.JobID {
		t.Fatalf("again: %+v %v", again, err)
	}
	// The same value as a submission key is another key.
	sub2, err := s.Submit(ctx, SubmitRequest{Principal: "alice", IdempotencyKey: "replay-key-00000001", Body: []byte(body)})
	if err != nil || sub2.Replayed || sub2.Job.JobID == res.Job.JobID {
		t.Fatalf("submission with the replay key's value: %+v %v", sub2, err)
	}
}
