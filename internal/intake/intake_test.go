package intake

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/mightyetl/mightyetl/internal/auth"
	"github.com/mightyetl/mightyetl/internal/codes"
	"github.com/mightyetl/mightyetl/internal/pg"
	"github.com/mightyetl/mightyetl/internal/pgtest"
	"go.uber.org/goleak"
)

func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m,
		goleak.IgnoreTopFunction("github.com/jackc/pgx/v5/pgxpool.(*Pool).backgroundHealthCheck"),
		goleak.IgnoreTopFunction("internal/poll.runtime_pollWait"),
	)
}

var testKey = []byte("0123456789abcdef0123456789abcdef")

const body = `[{"id":"a1","name":"jane"}]`

func newService(t *testing.T, mod func(*Options)) (*Service, DB) {
	t.Helper()
	pool, _ := pgtest.NewDatabase(t, pgtest.Options{MaxConns: 16})
	o := Options{DB: pool, PrincipalHashKey: testKey}
	if mod != nil {
		mod(&o)
	}
	s, err := New(o)
	if err != nil {
		t.Fatal(err)
	}
	startService(t, s)
	return s, pool
}

// startService starts s and stops it when t ends.
func startService(t testing.TB, s *Service) {
	t.Helper()
	if err := s.Start(context.Background()); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := s.Stop(context.Background()); err != nil {
			t.Errorf("stop intake service: %v", err)
		}
	})
}

// TestGroupCommitDedupesWithinBatch: identical and conflicting requests
// that share one group-commit transaction get exactly one new job per key,
// and every caller sees the right outcome.
func TestGroupCommitDedupesWithinBatch(t *testing.T) {
	t.Parallel()
	const n = 40
	s, db := newService(t, func(o *Options) {
		o.GroupCommitWindow = time.Hour // only a full batch flushes
		o.GroupCommitMaxBatch = n
	})
	ctx := context.Background()
	type outcome struct {
		res SubmitResult
		err error
	}
	out := make([]outcome, n)
	var wg sync.WaitGroup
	for i := range n {
		wg.Go(func() {
			req := SubmitRequest{Principal: "alice", IdempotencyKey: "key-shared-000000001", Body: []byte(body)}
			switch {
			case i%4 == 1: // same key, other body
				req.Body = []byte(`[{"id":"other"}]`)
			case i%4 == 2: // distinct keys
				req.IdempotencyKey = fmt.Sprintf("key-distinct-%06d", i)
			case i%4 == 3: // same key, other principal
				req.Principal = "bob"
			}
			res, err := s.Submit(ctx, req)
			out[i] = outcome{res, err}
		})
	}
	wg.Wait()
	fresh := map[string]int{}
	for i, o := range out {
		switch i % 4 {
		case 1:
			// Whoever reached the batch first with this key decides; with the
			// body variant second in the array order it must be rejected
			// unless it came first.
			if o.err != nil && !errors.Is(o.err, ErrSubmissionKeyReused) {
				t.Errorf("%d: %v", i, o.err)
			}
		default:
			if o.err != nil {
				if i%4 == 0 && errors.Is(o.err, ErrSubmissionKeyReused) {
					continue // the other body won the key
				}
				t.Fatalf("%d: %v", i, o.err)
			}
		}
		if o.err == nil && !o.res.Replayed {
			fresh[fmt.Sprint(i%4)]++
		}
	}
	if fresh["0"]+fresh["1"] != 1 || fresh["2"] != n/4 || fresh["3"] != 1 {
		t.Errorf("fresh outcomes %v", fresh)
	}
	var jobs int
	if err := db.QueryRow(ctx, "SELECT count(*) FROM etl_job_records").Scan(&jobs); err != nil || jobs != n/4+2 {
		t.Errorf("jobs %d %v", jobs, err)
	}
	var events int
	if err := db.QueryRow(ctx, "SELECT count(*) FROM etl_outbox_job_events").Scan(&events); err != nil || events != jobs {
		t.Errorf("outbox rows %d for %d jobs", events, jobs)
	}
}

func TestSubmitConcurrentIdentical(t *testing.T) {
	t.Parallel()
	s, _ := newService(t, nil)
	const n = 50
	var wg sync.WaitGroup
	start := make(chan struct{})
	results := make([]SubmitResult, n)
	errs := make([]error, n)
	for i := range n {
		wg.Go(func() {
			<-start
			results[i], errs[i] = s.Submit(context.Background(), SubmitRequest{Principal: "alice", IdempotencyKey: "key-same-00000000001", Body: []byte(body)})
		})
	}
	close(start)
	wg.Wait()
	fresh := 0
	for i := range n {
		if errs[i] != nil {
			t.Fatal(errs[i])
		}
		if results[i].Job.JobID != results[0].Job.JobID {
			t.Fatal("two jobs")
		}
		if !results[i].Replayed {
			fresh++
		}
	}
	if fresh != 1 {
		t.Errorf("%d fresh", fresh)
	}
}

func TestSubmitRejectsBeforeWriting(t *testing.T) {
	t.Parallel()
	s, db := newService(t, func(o *Options) { o.MaxBatchRecords = 2 })
	ctx := context.Background()
	for _, tc := range []struct {
		req  SubmitRequest
		code string
	}{
		{SubmitRequest{Principal: "alice", IdempotencyKey: "short", Body: []byte(body)}, codes.InvalidIdempotencyKey},
		{SubmitRequest{Principal: " ", IdempotencyKey: "key-00000000000000001", Body: []byte(body)}, codes.PrincipalRequired},
		{SubmitRequest{Principal: "alice", IdempotencyKey: "key-00000000000000001", Body: []byte(`[{"id":"a"},{"id":"b"},{"id":"c"}]`)}, codes.BatchTooLarge},
		{SubmitRequest{Principal: "alice", IdempotencyKey: "key-00000000000000001", Body: []byte(`[{"id":"a"},{"x":1}]`)}, codes.InvalidRecord},
		{SubmitRequest{Principal: "alice", IdempotencyKey: "key-00000000000000001", Body: nil}, codes.InvalidJSON},
		{SubmitRequest{Principal: "alice", IdempotencyKey: "key-00000000000000001", Body: []byte(`{}`), Kind: pg.KindDiagnostic}, ""},
	} {
		_, err := s.Submit(ctx, tc.req)
		if CodeOf(err) != tc.code {
			t.Errorf("%q: code %q, want %q", tc.req.Body, CodeOf(err), tc.code)
		}
	}
	var jobs int
	if err := db.QueryRow(ctx, "SELECT count(*) FROM etl_job_records").Scan(&jobs); err != nil || jobs != 1 {
		t.Errorf("jobs %d %v", jobs, err)
	}
	var e *Error
	_, err := s.Submit(ctx, SubmitRequest{Principal: "alice", IdempotencyKey: "key-00000000000000001", Body: []byte(`[{"id":"a"},{"x":1}]`)})
	if !errors.As(err, &e) || e.Index != 1 || strings.Contains(err.Error(), "alice") {
		t.Errorf("record error %+v %q", e, err)
	}
}

func TestCursorRoundTrip(t *testing.T) {
	scope := auth.ScopeHash(testKey, "alice")
	k := pg.PageKey{CreatedAt: time.Date(2025, 1, 2, 3, 4, 5, 123456000, time.UTC), JobID: uuid.New()}
	c := encodeCursor(testKey, scope, k)
	if len(c) > MaxCursorLength {
		t.Fatalf("cursor of %d characters", len(c))
	}
	got, err := decodeCursor(testKey, scope, c)
	if err != nil || !got.CreatedAt.Equal(k.CreatedAt) || got.JobID != k.JobID {
		t.Fatalf("round trip: %+v %v", got, err)
	}
	if _, err := decodeCursor(testKey, auth.ScopeHash(testKey, "bob"), c); !errors.Is(err, ErrInvalidPageCursor) {
		t.Error("foreign cursor accepted")
	}
	if _, err := decodeCursor([]byte("another-key-another-key-another-k"), scope, c); err == nil {
		t.Error("cursor of another server key accepted")
	}
}

func FuzzDecodeCursor(f *testing.F) {
	scope := auth.ScopeHash(testKey, "alice")
	f.Add(encodeCursor(testKey, scope, pg.PageKey{CreatedAt: time.Unix(1700000000, 5000).UTC(), JobID: uuid.New()}))
	f.Add("")
	f.Add("MjAyNS0wMS0wMlQwMzowNDowNS4xMjM0NTZafA")
	f.Fuzz(func(t *testing.T, s string) {
		k, err := decodeCursor(testKey, scope, s)
		if err != nil {
			if !errors.Is(err, ErrInvalidPageCursor) {
				t.Fatalf("error %v", err)
			}
			return
		}
		// Whatever decodes re-encodes to the identical string.
		if again := encodeCursor(testKey, scope, k); again != s {
			t.Fatalf("%q re-encodes to %q", s, again)
		}
	})
}

func TestParseDiagnostic(t *testing.T) {
	spec, err := ParseDiagnostic([]byte(`{"durationMillis": 1500, "records": [{"id":"a"}], "failWith": "transient"}`), 10)
	if err != nil || spec.Duration != 1500*time.Millisecond || string(spec.Records) != `[{"id":"a"}]` || spec.FailWith != FailWithTransient {
		t.Fatalf("%+v %v", spec, err)
	}
	spec, err = ParseDiagnostic([]byte(`{}`), 10)
	if err != nil || spec.Duration != 0 || string(spec.Records) != "[]" || spec.FailWith != "" {
		t.Fatalf("empty: %+v %v", spec, err)
	}
	for in, code := range map[string]string{
		`{"durationMillis": 1.5}`:                         codes.InvalidJSON,
		`{"durationMillis": 86400000}`:                    "",
		`{"durationMillis": "1"}`:                         codes.InvalidJSON,
		`{"failWith": "permanent"}`:                       "",
		`{"failWith": 1}`:                                 codes.InvalidJSON,
		`{"records": {}}`:                                 codes.InvalidJSON,
		`{"records": [1]}`:                                codes.InvalidRecord,
		`{"records": [{"id":"a"},{"id":"b"},{"id":"c"}]}`: codes.BatchTooLarge,
		`{} {}`:                                 codes.InvalidJSON,
		"\xff":                                  codes.InvalidJSON,
		`{"records": [{"id":"a","x":1,"x":2}]}`: codes.InvalidJSON,
	} {
		_, err := ParseDiagnostic([]byte(in), 2)
		if CodeOf(err) != code {
			t.Errorf("%s: %q, want %q", in, CodeOf(err), code)
		}
	}
}

func FuzzParseDiagnostic(f *testing.F) {
	f.Add([]byte(`{"durationMillis": 10, "records": [{"id":"a"}], "failWith": null}`))
	f.Add([]byte(`{"records": null}`))
	f.Fuzz(func(t *testing.T, b []byte) {
		spec, err := ParseDiagnostic(b, 20)
		if err != nil {
			var e *Error
			if !errors.As(err, &e) || e.Code == codes.InternalError {
				t.Fatalf("unexpected error %v", err)
			}
			return
		}
		if spec.Duration < 0 || spec.Duration > MaxDiagnosticDuration {
			t.Fatalf("duration %v", spec.Duration)
		}
	})
}

func TestKeyHashes(t *testing.T) {
	// Pinned values: stored hashes must never change.
	scope := strings.Repeat("a", 64)
	for got, want := range map[string]string{
		SubmissionKeyHash(scope, "k"):        sha256Hex("mightyetl:durable-job-submission:v1:" + scope + ":k"),
		CancellationKeyHash(scope, "j", "k"): sha256Hex("mightyetl:durable-job-cancellation:v1:" + scope + ":j:k"),
		SyncProcessKeyHash(scope, "k"):       sha256Hex("mightyetl:sync-process:v1:" + scope + ":k"),
		RequestDigest([]byte("abc")):         "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad",
	} {
		if got != want {
			t.Errorf("%s != %s", got, want)
		}
	}
	for k, ok := range map[string]bool{
		"abcdefghijklmnop": true, "abcdefghijklmno": false, strings.Repeat("a", 128): true,
		strings.Repeat("a", 129): false, "abcdefghijklmnop ": false, "ABC.def_ghi:jkl-0": true,
	} {
		if ValidKey(k) != ok {
			t.Errorf("ValidKey(%q) != %v", k, ok)
		}
	}
}

// TestOutboxWakeReplacesNotify: with SetOutboxWake, a submission's and a
// replay's commit call the process's wake-up before the caller gets its
// answer; after SetOutboxWake(nil) they no longer do (they NOTIFY again).
func TestOutboxWakeReplacesNotify(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	s, _ := newService(t, nil)
	var mu sync.Mutex
	wakes := map[string]int{} // by phase
	phase := "submit"
	s.SetOutboxWake(func() {
		mu.Lock()
		wakes[phase]++
		mu.Unlock()
	})
	count := func(p string) int {
		mu.Lock()
		defer mu.Unlock()
		return wakes[p]
	}
	sub, err := s.Submit(ctx, SubmitRequest{Principal: "alice", IdempotencyKey: "wake-submit-000000001", Body: []byte(body)})
	if err != nil {
		t.Fatal(err)
	}
	if count("submit") == 0 {
		t.Fatal("submit committed without waking the process's relay")
	}
	if _, err := s.Cancel(ctx, CancelRequest{Principal: "alice", JobID: sub.Job.JobID, IdempotencyKey: "wake-cancel-000000001"}); err != nil {
		t.Fatal(err)
	}
	mu.Lock()
	phase = "replay"
	mu.Unlock()
	if _, err := s.Replay(ctx, ReplayRequest{Principal: "alice", IdempotencyKey: "wake-replay-000000001", JobID: sub.Job.JobID, Body: []byte(body)}); err != nil {
		t.Fatal(err)
	}
	if count("replay") != 1 {
		t.Fatalf("replay woke the relay %d times, want 1", count("replay"))
	}
	mu.Lock()
	phase = "after"
	mu.Unlock()
	s.SetOutboxWake(nil)
	if _, err := s.Submit(ctx, SubmitRequest{Principal: "alice", IdempotencyKey: "wake-submit-000000002", Body: []byte(body)}); err != nil {
		t.Fatal(err)
	}
	if n := count("after"); n != 0 {
		t.Fatalf("cleared wake-up called %d times", n)
	}
}

// TestAnnouncerReplacesTheAvailableRow: with an announcer set, a submission
// commits its job and claim-queue row without a job_available outbox row,
// and the announcer runs after that commit (the job is visible to another
// connection by then); replays keep their outbox row; nil restores the row
// and the relay wake-up.
func TestAnnouncerReplacesTheAvailableRow(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	s, db := newService(t, nil)
	availableRows := func() int {
		t.Helper()
		var n int
		if err := db.QueryRow(ctx, `SELECT coalesce(sum(cardinality(job_record_ids)), 0) FROM etl_outbox_events WHERE event_kind = 'job_available'`).Scan(&n); err != nil {
			t.Fatal(err)
		}
		return n
	}
	var mu sync.Mutex
	var announced int
	var visibleAtAnnounce []int // jobs of alice visible to another connection when announce ran
	s.SetAnnouncer(func() {
		var n int
		// A separate connection: what any worker would see when woken.
		if err := db.QueryRow(context.Background(), `SELECT count(*) FROM etl_job_records j JOIN etl_job_claim_queue q USING (job_record_id)`).Scan(&n); err != nil {
			n = -1
		}
		mu.Lock()
		announced++
		visibleAtAnnounce = append(visibleAtAnnounce, n)
		mu.Unlock()
	})
	var wakes atomic.Int64
	s.SetOutboxWake(func() { wakes.Add(1) })

	sub, err := s.Submit(ctx, SubmitRequest{Principal: "alice", IdempotencyKey: "announce-000000001", Body: []byte(body)})
	if err != nil {
		t.Fatal(err)
	}
	mu.Lock()
	if announced != 1 || len(visibleAtAnnounce) != 1 || visibleAtAnnounce[0] != 1 {
		mu.Unlock()
		t.Fatalf("announced %d times, jobs visible then %v; want once, after the commit (1)", announced, visibleAtAnnounce)
	}
	mu.Unlock()
	if n := availableRows(); n != 0 {
		t.Fatalf("an announced submission wrote %d job_available outbox entries", n)
	}
	if n := wakes.Load(); n != 0 {
		t.Fatalf("an announced submission woke the relay %d times", n)
	}

	// A replay is not a submission through the group commit: it keeps its
	// outbox row and its relay wake-up.
	if _, err := s.Cancel(ctx, CancelRequest{Principal: "alice", JobID: sub.Job.JobID, IdempotencyKey: "announce-cancel-001"}); err != nil {
		t.Fatal(err)
	}
	if _, err := s.Replay(ctx, ReplayRequest{Principal: "alice", IdempotencyKey: "announce-replay-001", JobID: sub.Job.JobID, Body: []byte(body)}); err != nil {
		t.Fatal(err)
	}
	if n := availableRows(); n != 1 {
		t.Fatalf("replay wrote %d job_available outbox entries, want 1", n)
	}

	s.SetAnnouncer(nil)
	if _, err := s.Submit(ctx, SubmitRequest{Principal: "alice", IdempotencyKey: "announce-000000002", Body: []byte(body)}); err != nil {
		t.Fatal(err)
	}
	mu.Lock()
	defer mu.Unlock()
	if announced != 1 {
		t.Fatalf("a cleared announcer ran (%d calls)", announced)
	}
	if n := availableRows(); n != 2 {
		t.Fatalf("after clearing the announcer, job_available outbox entries = %d, want 2", n)
	}
}
