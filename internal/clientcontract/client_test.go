package clientcontract_test

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/mightyetl/mightyetl/client"
	"github.com/mightyetl/mightyetl/internal/testwait"
)

func ctxT(t *testing.T, d time.Duration) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), d)
	t.Cleanup(cancel)
	return ctx
}

const sample = `[{"id":"a1","name":"jane","email":"Jane@Example.COM","amount":"999.9"}]`

// TestEveryMethodAgainstARealStack drives each client method against a real
// intake, worker, PostgreSQL and NATS: submit without a key (a generated key
// comes back), the same submission again (replayed), get, wait, list,
// diagnostic submit, cancel (and its replay), replay of the cancelled job,
// and the synchronous process call with its ledger replay.
func TestEveryMethodAgainstARealStack(t *testing.T) {
	s := newStack(t, false)
	c := s.client()
	ctx := ctxT(t, 2*time.Minute)

	sub, err := c.Submit(ctx, []byte(sample), "")
	if err != nil {
		t.Fatal(err)
	}
	if !strings.HasPrefix(sub.Key, "mightyetl-") || sub.Replayed || sub.Status != client.StatusPending || sub.StatusURL != "/api/etl/jobs/"+sub.JobID {
		t.Fatalf("submission %+v", sub)
	}
	again, err := c.Submit(ctx, []byte(sample), sub.Key)
	if err != nil || again.JobID != sub.JobID || !again.Replayed {
		t.Fatalf("resubmission %+v, %v", again, err)
	}
	j, err := c.Get(ctx, sub.JobID)
	if err != nil || j.ID != sub.JobID || j.Status != client.StatusPending || !strings.HasPrefix(j.ETag, `W/"`) || j.RetryAfter != time.Second || j.CreatedAt.IsZero() {
		t.Fatalf("get %+v, %v", j, err)
	}
	if _, changed, err := c.GetIfChanged(ctx, sub.JobID, j.ETag); err != nil || changed {
		t.Fatalf("conditional get of an unchanged job: changed %v, %v", changed, err)
	}

	// A second job stays PENDING (no worker yet): cancel it, twice with
	// one key, then replay it.
	other := []byte(`[{"id":"b1","name":"bob"}]`)
	sub2, err := c.Submit(ctx, other, "")
	if err != nil {
		t.Fatal(err)
	}
	cn, err := c.Cancel(ctx, sub2.JobID, "")
	if err != nil || cn.Job.Status != client.StatusCancelled || cn.Replayed || cn.Key == "" {
		t.Fatalf("cancel %+v, %v", cn, err)
	}
	cn2, err := c.Cancel(ctx, sub2.JobID, cn.Key)
	if err != nil || !cn2.Replayed {
		t.Fatalf("cancel again %+v, %v", cn2, err)
	}
	rp, err := c.Replay(ctx, sub2.JobID, other, "")
	if err != nil || rp.JobID == sub2.JobID || rp.Status != client.StatusPending {
		t.Fatalf("replay %+v, %v", rp, err)
	}

	diag, err := c.SubmitDiagnostic(ctx, client.DiagnosticRequest{DurationMillis: 10}, "")
	if err != nil {
		t.Fatal(err)
	}

	s.startWorker()
	for _, id := range []string{sub.JobID, rp.JobID, diag.JobID} {
		done, err := c.Wait(ctx, id)
		if err != nil || done.Status != client.StatusSucceeded {
			t.Fatalf("wait %s: %+v, %v", id, done, err)
		}
	}
	rj, err := c.Get(ctx, rp.JobID)
	if err != nil || rj.ReplaySourceID != sub2.JobID || rj.ReplayRootID != sub2.JobID || rj.ReplayGeneration != 1 {
		t.Fatalf("replay job lineage %+v, %v", rj, err)
	}

	page, err := c.List(ctx, client.ListOptions{Limit: 100})
	if err != nil || len(page.Jobs) != 4 || page.NextCursor != "" {
		t.Fatalf("list %+v, %v", page, err)
	}
	page, err = c.List(ctx, client.ListOptions{Status: client.StatusCancelled})
	if err != nil || len(page.Jobs) != 1 || page.Jobs[0].ID != sub2.JobID {
		t.Fatalf("list cancelled %+v, %v", page, err)
	}

	recs := []byte(`[{"id":"p1","name":"x"},{"id":"p2","name":"y"}]`)
	pr, err := c.Process(ctx, recs, "")
	if err != nil || strings.Join(pr.Processed, ",") != "p1,p2" || pr.Replayed {
		t.Fatalf("process %+v, %v", pr, err)
	}
	pr2, err := c.Process(ctx, recs, pr.Key)
	if err != nil || !pr2.Replayed || strings.Join(pr2.Processed, ",") != "p1,p2" {
		t.Fatalf("process again %+v, %v", pr2, err)
	}
}

// TestRetryAfterALostAnswerConvergesOnOneJob: the intake commits the first
// submission and its connection is then dropped without an answer (as if the
// intake were killed mid-request); the client retries with the same key and
// body and gets the same job, replayed, and the database holds one job.
func TestRetryAfterALostAnswerConvergesOnOneJob(t *testing.T) {
	s := newStack(t, false)
	var dropped, bodies atomic.Int32
	var firstBody, firstKey atomic.Value
	s.setWrap(func(w http.ResponseWriter, r *http.Request, h http.Handler) {
		if r.Method != http.MethodPost {
			h.ServeHTTP(w, r)
			return
		}
		bodies.Add(1)
		if dropped.Add(1) == 1 {
			firstKey.Store(r.Header.Get("Idempotency-Key"))
			rec := httptest.NewRecorder()
			h.ServeHTTP(rec, r) // committed
			firstBody.Store(rec.Body.String())
			conn, _, err := http.NewResponseController(w).Hijack()
			if err != nil {
				t.Error(err)
				return
			}
			_ = conn.Close()
			return
		}
		if got := r.Header.Get("Idempotency-Key"); got != firstKey.Load() {
			t.Errorf("retry key %q, first %q", got, firstKey.Load())
		}
		h.ServeHTTP(w, r)
	})
	c := s.client(client.WithRetry(client.RetryPolicy{BaseDelay: time.Millisecond}))
	sub, err := c.Submit(ctxT(t, time.Minute), []byte(sample), "")
	if err != nil {
		t.Fatal(err)
	}
	if !sub.Replayed || sub.Key != firstKey.Load() {
		t.Fatalf("submission %+v: want the replay of the first attempt's job", sub)
	}
	var first struct{ JobRecordID string }
	if err := json.Unmarshal([]byte(firstBody.Load().(string)), &first); err != nil || first.JobRecordID != sub.JobID {
		t.Fatalf("first attempt created %q, the retry answered %q (%v)", first.JobRecordID, sub.JobID, err)
	}
	if n := s.countJobs(); n != 1 {
		t.Fatalf("%d jobs, want 1", n)
	}
	if bodies.Load() < 2 {
		t.Fatal("no retry reached the intake")
	}
}

// TestTransientProblemsAreRetriedAndDeterministicOnesAreNot: 503 and 429
// answers are retried with the same key and body bytes until the intake
// answers; a 422 is returned after one attempt; a retry budget that runs out
// returns the last transient problem.
func TestTransientProblemsAreRetriedAndDeterministicOnesAreNot(t *testing.T) {
	s := newStack(t, false)
	var n atomic.Int32
	var seen []string
	s.setWrap(func(w http.ResponseWriter, r *http.Request, h http.Handler) {
		if r.Method == http.MethodPost {
			b := make([]byte, 1024)
			k, _ := r.Body.Read(b)
			seen = append(seen, r.Header.Get("Idempotency-Key")+"|"+r.Header.Get("Content-Type")+"|"+string(b[:k]))
			r.Body = http.NoBody
			switch n.Add(1) {
			case 1:
				w.Header().Set("Content-Type", "application/problem+json")
				w.Header().Set("Retry-After", "1")
				w.WriteHeader(503)
				_, _ = w.Write([]byte(`{"type":"urn:mightyetl:problem:etl-server-busy","title":"Server busy","status":503,"detail":"busy","instance":"/api/etl/jobs","errorCode":"etl_server_busy"}`))
				return
			case 2:
				w.Header().Set("Content-Type", "application/problem+json")
				w.WriteHeader(429)
				_, _ = w.Write([]byte(`{"type":"urn:mightyetl:problem:etl-authentication-rate-limited","title":"x","status":429,"detail":"slow down","instance":"/api/etl/jobs","errorCode":"etl_authentication_rate_limited"}`))
				return
			}
			// Forward the recorded body.
			r.Body = ioNopCloser(strings.NewReader(seen[len(seen)-1][strings.LastIndex(seen[len(seen)-1], "|")+1:]))
		}
		h.ServeHTTP(w, r)
	})
	c := s.client(client.WithRetry(client.RetryPolicy{BaseDelay: time.Millisecond, MaxDelay: 2 * time.Second}))
	ctx := ctxT(t, time.Minute)
	sub, err := c.Submit(ctx, []byte(sample), "")
	if err != nil {
		t.Fatal(err)
	}
	if len(seen) != 3 || seen[0] != seen[1] || seen[1] != seen[2] || seen[0] != sub.Key+"|application/json|"+sample {
		t.Fatalf("attempts %q", seen)
	}
	// Deterministic: one attempt.
	before := n.Load()
	_, err = c.Submit(ctx, []byte(`[{"id":"x1"}]`), sub.Key)
	var p *client.Error
	if !errors.As(err, &p) || p.Code != client.CodeSubmissionKeyReused || p.Status != 422 || n.Load() != before+1 {
		t.Fatalf("key reuse: %v after %d attempts", err, n.Load()-before)
	}
	// A budget that runs out returns the last transient problem.
	s.setWrap(func(w http.ResponseWriter, r *http.Request, h http.Handler) {
		w.Header().Set("Content-Type", "application/problem+json")
		w.WriteHeader(503)
		_, _ = w.Write([]byte(`{"type":"urn:mightyetl:problem:etl-target-unavailable","title":"x","status":503,"detail":"down","instance":"/","errorCode":"etl_target_unavailable"}`))
	})
	c3 := s.client(client.WithRetry(client.RetryPolicy{MaxAttempts: 3, BaseDelay: time.Millisecond}))
	_, err = c3.Get(ctx, sub.JobID)
	if !errors.As(err, &p) || p.Code != client.CodeTargetUnavailable || !errors.Is(err, &client.Error{Code: client.CodeTargetUnavailable}) {
		t.Fatalf("exhausted budget: %v", err)
	}
}

// TestWaitPollsConditionallyAcrossNotModified: Wait on a RUNNING job gets
// 304 answers (counted at the transport) while it runs, and returns the
// terminal state once the job is cancelled.
func TestWaitPollsConditionallyAcrossNotModified(t *testing.T) {
	s := newStack(t, true)
	ctx := ctxT(t, 2*time.Minute)
	rt := newCounting()
	c := s.client(client.WithHTTPClient(&http.Client{Transport: rt}))
	sub, err := c.SubmitDiagnostic(ctx, client.DiagnosticRequest{DurationMillis: 600_000}, "")
	if err != nil {
		t.Fatal(err)
	}
	type result struct {
		job *client.Job
		err error
	}
	done := make(chan result, 1)
	go func() {
		j, err := c.Wait(ctx, sub.JobID)
		done <- result{j, err}
	}()
	testwait.For(t, time.Minute, "two 304 answers", func() bool { return rt.count(http.StatusNotModified) >= 2 })
	if _, err := c.Cancel(ctx, sub.JobID, ""); err != nil {
		t.Fatal(err)
	}
	r := <-done
	if r.err != nil || r.job.Status != client.StatusCancelled {
		t.Fatalf("wait: %+v, %v", r.job, r.err)
	}
	// A context that ends first returns the last state and the context's error.
	sub2, err := c.SubmitDiagnostic(ctx, client.DiagnosticRequest{DurationMillis: 600_000}, "")
	if err != nil {
		t.Fatal(err)
	}
	short, cancel := context.WithCancel(ctx)
	go func() {
		testwait.For(t, time.Minute, "a poll", func() bool { return rt.count(http.StatusNotModified) >= 3 })
		cancel()
	}()
	j, err := c.Wait(short, sub2.JobID)
	if !errors.Is(err, context.Canceled) || j == nil || j.Status.Terminal() {
		t.Fatalf("wait with a cancelled context: %+v, %v", j, err)
	}
	if _, err := c.Cancel(ctx, sub2.JobID, ""); err != nil {
		t.Fatal(err)
	}
}

// TestAllFollowsCursorsOverManyPages lists 23 jobs 4 at a time.
func TestAllFollowsCursorsOverManyPages(t *testing.T) {
	s := newStack(t, false)
	ctx := ctxT(t, time.Minute)
	rt := newCounting()
	c := s.client(client.WithHTTPClient(&http.Client{Transport: rt}))
	want := map[string]bool{}
	for i := range 23 {
		sub, err := c.Submit(ctx, fmt.Appendf(nil, `[{"id":"r%d"}]`, i), "")
		if err != nil {
			t.Fatal(err)
		}
		want[sub.JobID] = true
	}
	var got []string
	for j, err := range c.All(ctx, client.ListOptions{Limit: 4}) {
		if err != nil {
			t.Fatal(err)
		}
		if !want[j.ID] {
			t.Fatalf("unexpected or repeated job %s", j.ID)
		}
		delete(want, j.ID)
		got = append(got, j.ID)
	}
	if len(want) != 0 || len(got) != 23 {
		t.Fatalf("missing %d jobs, got %d", len(want), len(got))
	}
	pageRequests := func() int {
		n := 0
		for _, r := range rt.requests() {
			if strings.HasPrefix(r, "GET /api/etl/jobs?") {
				n++
			}
		}
		return n
	}
	if lists := pageRequests(); lists != 6 {
		t.Fatalf("%d page requests, want 6", lists)
	}
	// Breaking out of the loop stops fetching.
	for range c.All(ctx, client.ListOptions{Limit: 4}) {
		break
	}
	if n := pageRequests(); n != 7 {
		t.Fatalf("%d page requests after an early break, want 7", n)
	}
}

func ioNopCloser(r *strings.Reader) *nopCloser { return &nopCloser{bufio.NewReader(r)} }

type nopCloser struct{ *bufio.Reader }

func (nopCloser) Close() error { return nil }
