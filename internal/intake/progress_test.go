package intake

import (
	"context"
	"crypto/sha256"
	"encoding/base64"
	"encoding/hex"
	"encoding/json"
	"errors"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/mightyetl/mightyetl/internal/pg"
	"github.com/mightyetl/mightyetl/internal/pgtest"
)

// TestProgressViewAndETag: a chunked job's view carries progress with the
// optional members omitted when unset, and its tag appends "progress" and
// the seven members (N; for an absent one) after the contract's six; every
// member changes the tag; a job without progress keeps the contract's tag.
func TestProgressViewAndETag(t *testing.T) {
	at := time.Date(2026, 1, 2, 3, 4, 5, 6000, time.UTC)
	id := uuid.New()
	tag := func(s string) string {
		sum := sha256.Sum256([]byte(s))
		return `W/"` + hex.EncodeToString(sum[:]) + `"`
	}
	six := "V36:" + id.String() + "V7:RUNNINGV1:1N;V27:2026-01-02T03:04:05.000006ZV27:2026-01-02T03:04:05.000006Z"
	j := pg.Job{JobID: id, Kind: pg.KindETLChunked, Status: pg.StatusRunning, AttemptCount: 1, CreatedAt: at, UpdatedAt: at,
		Progress: &pg.Progress{PayloadBytes: 1200}}
	v := NewJobView(j)
	if got, want := v.ETag(), tag(six+"V8:progressV1:0N;V1:0V1:0N;N;V4:1200"); got != want {
		t.Errorf("fresh load tag %s, want %s", got, want)
	}
	body, err := json.Marshal(v)
	if err != nil {
		t.Fatal(err)
	}
	var p map[string]any
	if err := json.Unmarshal(mustField(t, body), &p); err != nil {
		t.Fatal(err)
	}
	if len(p) != 4 || p["recordsLoaded"] != 0.0 || p["chunksDone"] != 0.0 || p["badRecords"] != 0.0 || p["payloadBytes"] != 1200.0 {
		t.Errorf("fresh progress %s", body)
	}
	total, failed := int64(10), int64(7)
	cp := at.Add(time.Minute)
	j.Progress = &pg.Progress{RecordsLoaded: 5, RecordsTotal: &total, ChunksDone: 2, BadRecords: 1,
		FailedRecordNumber: &failed, LastCheckpointAt: &cp, PayloadBytes: 1200}
	full := NewJobView(j)
	if got, want := full.ETag(), tag(six+"V8:progressV1:5V2:10V1:2V1:1V1:7V27:2026-01-02T03:05:05.000006ZV4:1200"); got != want {
		t.Errorf("full tag %s, want %s", got, want)
	}
	if body, _ := json.Marshal(full); !json.Valid(body) || string(mustField(t, body)) !=
		`{"recordsLoaded":5,"recordsTotal":10,"chunksDone":2,"badRecords":1,"failedRecordNumber":7,"lastCheckpointAt":"2026-01-02T03:05:05.000006Z","payloadBytes":1200}` {
		t.Errorf("full progress %s", body)
	}
	// Each member moves the tag.
	seen := map[string]bool{full.ETag(): true, v.ETag(): true}
	for i, edit := range []func(p *pg.Progress){
		func(p *pg.Progress) { p.RecordsLoaded++ },
		func(p *pg.Progress) { p.RecordsTotal = nil },
		func(p *pg.Progress) { p.ChunksDone++ },
		func(p *pg.Progress) { p.BadRecords++ },
		func(p *pg.Progress) { p.FailedRecordNumber = nil },
		func(p *pg.Progress) { later := cp.Add(time.Microsecond); p.LastCheckpointAt = &later },
		func(p *pg.Progress) { p.PayloadBytes++ },
	} {
		p := *j.Progress
		edit(&p)
		k := j
		k.Progress = &p
		if got := NewJobView(k).ETag(); seen[got] {
			t.Errorf("edit %d leaves the tag unchanged", i)
		}
		seen[NewJobView(k).ETag()] = true
	}
	j.Progress = nil
	if got := NewJobView(j).ETag(); got != tag(six) {
		t.Errorf("no progress: %s", got)
	}
}

// mustField returns the raw "progress" member of a JSON object.
func mustField(t *testing.T, body []byte) json.RawMessage {
	t.Helper()
	var m map[string]json.RawMessage
	if err := json.Unmarshal(body, &m); err != nil {
		t.Fatal(err)
	}
	return m["progress"]
}

// TestBadRecordCursor: a cursor round-trips for its owner and job only,
// and anything not canonical is ErrInvalidPageCursor.
func TestBadRecordCursor(t *testing.T) {
	scope, other := SubmissionKeyHash("x", "y"), SubmissionKeyHash("x", "z")
	job := uuid.New()
	c := encodeBadRecordCursor(testKey, scope, job, 907)
	if n, err := decodeBadRecordCursor(testKey, scope, job, c); err != nil || n != 907 {
		t.Fatalf("round trip: %d %v", n, err)
	}
	for name, bad := range map[string]string{
		"other owner": c, "other job": c, "padded": c + "=", "garbage": "!!", "empty number": "fA",
	} {
		s, j := scope, job
		switch name {
		case "other owner":
			s = other
		case "other job":
			j = uuid.New()
		}
		if _, err := decodeBadRecordCursor(testKey, s, j, bad); !errors.Is(err, ErrInvalidPageCursor) {
			t.Errorf("%s: %v", name, err)
		}
	}
	for _, n := range []string{"0", "-1", "007", "x"} {
		raw := n + "|" + cursorMAC(testKey, scope, "bad-records|"+job.String()+"|"+n)
		if _, err := decodeBadRecordCursor(testKey, scope, job, base64.RawURLEncoding.EncodeToString([]byte(raw))); !errors.Is(err, ErrInvalidPageCursor) {
			t.Errorf("number %q: %v", n, err)
		}
	}
}

// TestServiceBadRecordsAndProgress: the service pages a job's bad records
// through cursors, answers a foreign job ErrJobNotFound, and Status and
// List carry the chunked job's progress.
func TestServiceBadRecordsAndProgress(t *testing.T) {
	t.Parallel()
	s, db := newService(t, nil)
	ctx := context.Background()
	scope, err := s.scope("alice")
	if err != nil {
		t.Fatal(err)
	}
	fixtures, ok := db.(pgtest.FixtureDB)
	if !ok {
		t.Fatalf("%T is not a pool", db)
	}
	id := pgtest.InsertChunkedJob(t, fixtures, pgtest.ChunkedJob{Owner: scope, Status: pg.StatusRunning, MaxBadRecords: 5,
		BadRecords: []int64{9, 4, 2}, Checkpoint: &pgtest.ChunkedCheckpoint{ChunksDone: 1, RecordsLoaded: 97, BadRecords: 3}})
	var got []int64
	cursor, pages := "", 0
	for {
		res, err := s.BadRecords(ctx, BadRecordsRequest{Principal: "alice", JobID: id, Limit: 2, Cursor: cursor})
		if err != nil {
			t.Fatal(err)
		}
		pages++
		for _, r := range res.Records {
			got = append(got, r.RecordNumber)
		}
		if cursor = res.NextCursor; cursor == "" {
			break
		}
	}
	if pages != 2 || len(got) != 3 || got[0] != 2 || got[1] != 4 || got[2] != 9 {
		t.Errorf("pages %d records %v", pages, got)
	}
	if _, err := s.BadRecords(ctx, BadRecordsRequest{Principal: "bob", JobID: id}); !errors.Is(err, ErrJobNotFound) {
		t.Errorf("foreign: %v", err)
	}
	first, err := s.BadRecords(ctx, BadRecordsRequest{Principal: "alice", JobID: id, Limit: 1})
	if err != nil || first.NextCursor == "" {
		t.Fatalf("first page: %+v %v", first, err)
	}
	if _, err := s.BadRecords(ctx, BadRecordsRequest{Principal: "bob", JobID: id, Cursor: first.NextCursor}); !errors.Is(err, ErrInvalidPageCursor) {
		t.Errorf("another owner's cursor: %v", err)
	}
	if _, err := s.BadRecords(ctx, BadRecordsRequest{Principal: "alice", JobID: id, Limit: 101}); !errors.Is(err, ErrInvalidPageLimit) {
		t.Errorf("limit 101: %v", err)
	}
	j, err := s.Status(ctx, "alice", id)
	if err != nil || j.Progress == nil || j.Progress.RecordsLoaded != 97 || j.Progress.BadRecords != 3 {
		t.Errorf("status: %+v %v", j.Progress, err)
	}
	list, err := s.List(ctx, ListRequest{Principal: "alice"})
	if err != nil || len(list.Jobs) != 1 || list.Jobs[0].Progress == nil {
		t.Errorf("list: %+v %v", list, err)
	}
	// A cancellation's answer carries the progress too.
	res, err := s.Cancel(ctx, CancelRequest{Principal: "alice", JobID: id, IdempotencyKey: "cancel-progress-0001"})
	if err != nil || res.Job.Status != pg.StatusCancelled || res.Job.Progress == nil || res.Job.Progress.RecordsLoaded != 97 {
		t.Errorf("cancel: %+v %v", res.Job, err)
	}
}
