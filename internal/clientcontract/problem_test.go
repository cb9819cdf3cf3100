package clientcontract_test

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/google/uuid"

	"github.com/mightyetl/mightyetl/client"
)

type tokenFunc func(context.Context) (string, error)

func (f tokenFunc) Token(ctx context.Context) (string, error) { return f(ctx) }

// TestProblemsAreTypedErrors meets every contract problem a client call can
// meet against a real intake (limits set low: 64 KiB, 50 records) and checks
// that it comes back as an *Error with the code and status, matchable with
// errors.As and errors.Is. Not met here: codes of routes the client does not
// call (route/method not found, the operator routes), media type (the client
// always sends JSON), and server-side load and outages (429 and 503, covered
// by the retry tests).
func TestProblemsAreTypedErrors(t *testing.T) {
	s := newStack(t, true)
	c := s.client()
	ctx := ctxT(t, 3*time.Minute)
	must := func(sub *client.Submission, err error) *client.Submission {
		t.Helper()
		if err != nil {
			t.Fatal(err)
		}
		return sub
	}
	waitFor := func(id string, st client.Status) {
		t.Helper()
		j, err := c.Wait(ctx, id)
		if err != nil || j.Status != st {
			t.Fatalf("job %s: %+v, %v", id, j, err)
		}
	}
	succeeded := must(c.Submit(ctx, []byte(sample), ""))
	waitFor(succeeded.JobID, client.StatusSucceeded)
	failedBody := []byte(`{"failWith":"permanent"}`)
	failed := must(c.SubmitDiagnostic(ctx, client.DiagnosticRequest{FailWith: "permanent"}, ""))
	waitFor(failed.JobID, client.StatusFailed)
	running := must(c.SubmitDiagnostic(ctx, client.DiagnosticRequest{DurationMillis: 600_000}, ""))
	cancelled := must(c.SubmitDiagnostic(ctx, client.DiagnosticRequest{DurationMillis: 600_001}, ""))
	if _, err := c.Cancel(ctx, cancelled.JobID, "cancel-key-0000001"); err != nil {
		t.Fatal(err)
	}
	waitFor(cancelled.JobID, client.StatusCancelled)
	t.Cleanup(func() { _, _ = c.Cancel(context.Background(), running.JobID, "") })
	replayKey := "replay-key-00000001"
	if _, err := c.Replay(ctx, failed.JobID, failedBody, replayKey); err != nil {
		t.Fatal(err)
	}
	many := "[" + strings.Repeat(`{"id":"x"},`, 50) + `{"id":"y"}]`
	big := `[{"id":"a","pad":"` + strings.Repeat("x", 70_000) + `"}]`
	procKey := "process-key-000001"
	if _, err := c.Process(ctx, []byte(sample), procKey); err != nil {
		t.Fatal(err)
	}
	wrongPassword, err := client.New(s.srv.URL, client.WithBasicAuth(testUser, "wrong"))
	if err != nil {
		t.Fatal(err)
	}
	bearer, err := client.New(s.srv.URL, client.WithBearerToken(tokenFunc(func(context.Context) (string, error) { return "not-a-jwt", nil })))
	if err != nil {
		t.Fatal(err)
	}
	bob, err := client.New(s.srv.URL, client.WithBasicAuth("bob", testPassword))
	if err != nil {
		t.Fatal(err)
	}

	cases := []struct {
		code   client.ErrorCode
		status int
		call   func() error
	}{
		{client.CodeInvalidJSON, 400, func() error { _, err := c.Submit(ctx, []byte(`{"id":"a"}`), ""); return err }},
		{client.CodeInvalidIdempotencyKey, 400, func() error { _, err := c.Submit(ctx, []byte(sample), "short"); return err }},
		{client.CodeAuthenticationRequired, 401, func() error { _, err := wrongPassword.Get(ctx, succeeded.JobID); return err }},
		{client.CodeAuthenticationRequired, 401, func() error { _, err := bearer.Get(ctx, succeeded.JobID); return err }},
		{client.CodePayloadTooLarge, 413, func() error { _, err := c.Submit(ctx, []byte(big), ""); return err }},
		{client.CodeBatchTooLarge, 413, func() error { _, err := c.Submit(ctx, []byte(many), ""); return err }},
		{client.CodeInvalidRecord, 422, func() error { _, err := c.Submit(ctx, []byte(`[{"name":"no id"}]`), ""); return err }},
		{client.CodeSubmissionKeyReused, 422, func() error { _, err := c.Submit(ctx, []byte(`[{"id":"other"}]`), succeeded.Key); return err }},
		{client.CodeIdempotencyKeyReused, 422, func() error { _, err := c.Process(ctx, []byte(`[{"id":"other"}]`), procKey); return err }},
		{client.CodeInvalidPageLimit, 400, func() error { _, err := c.List(ctx, client.ListOptions{Limit: 101}); return err }},
		{client.CodeInvalidPageCursor, 400, func() error { _, err := c.List(ctx, client.ListOptions{Cursor: "bogus"}); return err }},
		{client.CodeInvalidStatusFilter, 400, func() error { _, err := c.List(ctx, client.ListOptions{Status: "DONE"}); return err }},
		{client.CodeCancellationKeyRequired, 400, func() error { _, err := c.Cancel(ctx, running.JobID, "bad key"); return err }},
		{client.CodeCancellationKeyReused, 422, func() error { _, err := c.Cancel(ctx, cancelled.JobID, "cancel-key-0000002"); return err }},
		{client.CodeAlreadySucceeded, 409, func() error { _, err := c.Cancel(ctx, succeeded.JobID, ""); return err }},
		{client.CodeAlreadyFailed, 409, func() error { _, err := c.Cancel(ctx, failed.JobID, ""); return err }},
		{client.CodeReplayKeyRequired, 400, func() error { _, err := c.Replay(ctx, failed.JobID, failedBody, "x"); return err }},
		{client.CodeReplayKeyReused, 422, func() error {
			_, err := c.Replay(ctx, cancelled.JobID, []byte(`{"durationMillis":600001}`), replayKey)
			return err
		}},
		{client.CodeReplayPayloadMismatch, 422, func() error { _, err := c.Replay(ctx, failed.JobID, []byte(`{}`), ""); return err }},
		{client.CodeReplaySourceActive, 409, func() error {
			_, err := c.Replay(ctx, running.JobID, []byte(`{"durationMillis":600000}`), "")
			return err
		}},
		{client.CodeReplaySourceSucceeded, 409, func() error { _, err := c.Replay(ctx, succeeded.JobID, []byte(sample), ""); return err }},
		{client.CodeJobNotFound, 404, func() error { _, err := c.Get(ctx, uuid.NewString()); return err }},
		{client.CodeJobNotFound, 404, func() error { _, err := c.Get(ctx, "not-a-uuid"); return err }},
		{client.CodeJobNotFound, 404, func() error { _, err := bob.Get(ctx, succeeded.JobID); return err }},
		{client.CodeJobNotFound, 404, func() error { _, err := c.Cancel(ctx, uuid.NewString(), ""); return err }},
	}
	for i, tc := range cases {
		t.Run(fmt.Sprintf("%02d_%s", i, tc.code), func(t *testing.T) {
			err := tc.call()
			var p *client.Error
			if !errors.As(err, &p) {
				t.Fatalf("error %v (%T), want *client.Error", err, err)
			}
			if p.Code != tc.code || p.Status != tc.status || p.Detail == "" {
				t.Fatalf("got %d %s %q, want %d %s", p.Status, p.Code, p.Detail, tc.status, tc.code)
			}
			if !errors.Is(err, &client.Error{Code: tc.code}) {
				t.Fatal("errors.Is by code does not match")
			}
			if strings.Contains(err.Error(), testPassword) || strings.Contains(err.Error(), "\n") {
				t.Fatalf("message %q", err)
			}
			// Only etl_invalid_record names a record (its case's first).
			switch {
			case tc.code != client.CodeInvalidRecord && p.RecordIndex != nil:
				t.Fatalf("RecordIndex %d for %s", *p.RecordIndex, tc.code)
			case tc.code == client.CodeInvalidRecord && (p.RecordIndex == nil || *p.RecordIndex != 0):
				t.Fatalf("RecordIndex %v, want 0", p.RecordIndex)
			}
		})
	}
	// The position of the first invalid record, never its content or id.
	_, err = c.Submit(ctx, []byte(`[{"id":"a"},{"id":"b"},{"id":" bad"},{"id":""}]`), "")
	var p *client.Error
	if !errors.As(err, &p) || p.Code != client.CodeInvalidRecord || p.RecordIndex == nil || *p.RecordIndex != 2 ||
		!strings.Contains(p.Error(), "record 2") || strings.Contains(p.Error(), "bad") {
		t.Fatalf("third record invalid: %v", err)
	}
}

// TestReplayGenerationExhausted replays a cancelled job 100 times (each
// replay cancelled at once, no worker running) and the 101st is refused.
func TestReplayGenerationExhausted(t *testing.T) {
	s := newStack(t, false)
	c := s.client()
	ctx := ctxT(t, 3*time.Minute)
	body := []byte(sample)
	sub, err := c.Submit(ctx, body, "")
	if err != nil {
		t.Fatal(err)
	}
	id := sub.JobID
	for gen := 0; ; gen++ {
		if _, err := c.Cancel(ctx, id, ""); err != nil {
			t.Fatal(err)
		}
		next, err := c.Replay(ctx, id, bytes.Clone(body), "")
		if gen == 100 {
			var p *client.Error
			if !errors.As(err, &p) || p.Code != client.CodeReplayGenerationExhausted || p.Status != 409 {
				t.Fatalf("replay of generation 100: %v", err)
			}
			return
		}
		if err != nil {
			t.Fatalf("replay %d: %v", gen+1, err)
		}
		id = next.JobID
	}
}
