package clientcontract_test

import (
	"errors"
	"testing"
	"time"

	"github.com/mightyetl/mightyetl/client"
)

// TestScheduleAgainstARealStack: the client's schedule options and fields
// against the real intake, PostgreSQL and NATS: a submission with
// WithPriority and WithNotBefore answers them, Get and List (filtered by
// priority) show them, a resubmission with other options answers the first
// job as it is, the scheduled job cancels (CANCELLED, priority kept,
// notBefore gone), a replay takes the source's priority or its own options,
// the Producer's options reach the job, and a notBefore beyond the horizon
// is CodeInvalidNotBefore over HTTP and NATS.
func TestScheduleAgainstARealStack(t *testing.T) {
	s := newStack(t, false)
	c := s.client()
	ctx := ctxT(t, 2*time.Minute)
	at := time.Now().Add(time.Hour).UTC().Truncate(time.Microsecond)

	sub, err := c.Submit(ctx, []byte(sample), "", client.WithPriority(1), client.WithNotBefore(at))
	if err != nil {
		t.Fatal(err)
	}
	if sub.Priority != 1 || sub.NotBefore == nil || !sub.NotBefore.Equal(at) || sub.Status != client.StatusPending {
		t.Fatalf("submission %+v", sub)
	}
	again, err := c.Submit(ctx, []byte(sample), sub.Key, client.WithPriority(4))
	if err != nil || !again.Replayed || again.JobID != sub.JobID || again.Priority != 1 || again.NotBefore == nil {
		t.Fatalf("resubmission %+v %v", again, err)
	}
	j, err := c.Get(ctx, sub.JobID)
	if err != nil || j.Priority != 1 || j.NotBefore == nil || !j.NotBefore.Equal(at) {
		t.Fatalf("get %+v %v", j, err)
	}
	if _, err := c.Submit(ctx, []byte(`[{"id":"plain"}]`), ""); err != nil {
		t.Fatal(err)
	}
	page, err := c.List(ctx, client.ListOptions{Priority: 1})
	if err != nil || len(page.Jobs) != 1 || page.Jobs[0].ID != sub.JobID || page.Jobs[0].NotBefore == nil {
		t.Fatalf("list priority 1: %+v %v", page, err)
	}
	var n int
	for job, err := range c.All(ctx, client.ListOptions{Priority: client.DefaultPriority, Limit: 1}) {
		if err != nil || job.Priority != client.DefaultPriority || job.NotBefore != nil {
			t.Fatalf("all priority 2: %+v %v", job, err)
		}
		n++
	}
	if n != 1 {
		t.Fatalf("%d jobs of priority 2, want 1", n)
	}

	cn, err := c.Cancel(ctx, sub.JobID, "")
	if err != nil || cn.Job.Status != client.StatusCancelled || cn.Job.Priority != 1 || cn.Job.NotBefore != nil {
		t.Fatalf("cancel of the scheduled job %+v %v", cn, err)
	}
	if j, err := c.Get(ctx, sub.JobID); err != nil || j.Status != client.StatusCancelled || j.ETag != cn.Job.ETag {
		t.Fatalf("status after cancel %+v %v (cancel ETag %s)", j, err, cn.Job.ETag)
	}
	rp, err := c.Replay(ctx, sub.JobID, []byte(sample), "")
	if err != nil || rp.Priority != 1 || rp.NotBefore != nil {
		t.Fatalf("replay %+v %v", rp, err)
	}
	rp2, err := c.Replay(ctx, sub.JobID, []byte(sample), "", client.WithPriority(3), client.WithNotBefore(at))
	if err != nil || rp2.Priority != 3 || rp2.NotBefore == nil || !rp2.NotBefore.Equal(at) {
		t.Fatalf("scheduled replay %+v %v", rp2, err)
	}

	p := s.producer(testUser)
	ps, err := p.PublishAndWait(ctx, []byte(`[{"id":"nats"}]`), "", client.WithPriority(4), client.WithNotBefore(at))
	if err != nil || ps.Priority != 4 || ps.NotBefore == nil || !ps.NotBefore.Equal(at) {
		t.Fatalf("producer %+v %v", ps, err)
	}
	if j, err := c.Get(ctx, ps.JobID); err != nil || j.Priority != 4 || j.NotBefore == nil {
		t.Fatalf("producer's job %+v %v", j, err)
	}

	far := client.WithNotBefore(time.Now().Add(400 * 24 * time.Hour))
	var pe *client.Error
	if _, err := c.Submit(ctx, []byte(`[{"id":"far"}]`), "", far); !errors.As(err, &pe) || pe.Code != client.CodeInvalidNotBefore || pe.Status != 400 {
		t.Fatalf("far notBefore over HTTP: %v", err)
	}
	if _, err := p.PublishAndWait(ctx, []byte(`[{"id":"far"}]`), "", far); !errors.As(err, &pe) || pe.Code != client.CodeInvalidNotBefore {
		t.Fatalf("far notBefore over NATS: %v", err)
	}
	if _, err := c.List(ctx, client.ListOptions{Priority: 7}); !errors.As(err, &pe) || pe.Code != client.CodeInvalidPriorityFilter {
		t.Fatalf("list priority 7: %v", err)
	}
}
