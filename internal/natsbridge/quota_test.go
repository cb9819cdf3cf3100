package natsbridge_test

import (
	"context"
	"encoding/json"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/mightyetl/mightyetl/internal/codes"
	"github.com/mightyetl/mightyetl/internal/events"
	"github.com/mightyetl/mightyetl/internal/intake"
	"github.com/mightyetl/mightyetl/internal/lease"
	"github.com/mightyetl/mightyetl/internal/natsbridge"
	"github.com/mightyetl/mightyetl/internal/outbox"
	"github.com/mightyetl/mightyetl/internal/pgtest"
	"github.com/mightyetl/mightyetl/internal/testclock"
	"github.com/mightyetl/mightyetl/internal/testwait"
)

// quotaBridge starts a request bridge in front of an intake with quotas q
// and returns a channel of the rejections published on its prefix.
func quotaBridge(t *testing.T, b bundle, q intake.QuotaOptions) <-chan events.Rejection {
	t.Helper()
	rejections := make(chan events.Rejection, 16)
	sub, err := b.nc.Subscribe(b.prefix+".rejections", func(m *nats.Msg) {
		var r events.Rejection
		if json.Unmarshal(m.Data, &r) == nil {
			rejections <- r
		}
	})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = sub.Unsubscribe() })
	if err := b.nc.Flush(); err != nil {
		t.Fatal(err)
	}
	svc, err := intake.New(intake.Options{DB: b.pool, PrincipalHashKey: []byte(hashKey), MaxBatchRecords: 10, Quotas: q})
	if err != nil {
		t.Fatal(err)
	}
	if err := svc.Start(context.Background()); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = svc.Stop(context.Background()) })
	bridge := natsbridge.New(natsbridge.Options{
		Conn: events.Options{URL: b.url, Name: "bridge-quota-test"}, SubjectPrefix: b.prefix, ConsumeRequests: true,
		Relay: outbox.Options{PollInterval: time.Second, BatchSize: 100}, Requests: events.RequestConsumerOptions{MaxRequestBytes: 64 << 10},
		Pool: b.pool, Service: svc, Registry: prometheus.NewRegistry(),
	})
	if err := bridge.Start(context.Background()); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = bridge.Stop(context.Background()) })
	testwait.For(t, 30*time.Second, "request stream", func() bool {
		_, err := b.js.Stream(context.Background(), strings.ToUpper(b.prefix)+"_REQUESTS")
		return err == nil
	})
	return rejections
}

// quotaRejected waits for one rejection and requires the quota code.
func quotaRejected(t *testing.T, rejections <-chan events.Rejection) {
	t.Helper()
	select {
	case r := <-rejections:
		if r.ErrorCode != codes.OwnerQuotaExceeded {
			t.Fatalf("rejection %q, want %q", r.ErrorCode, codes.OwnerQuotaExceeded)
		}
	case <-time.After(30 * time.Second):
		t.Fatal("no rejection")
	}
}

// streamDrained waits until the request stream holds no message: every
// request was acked or terminated, none left to redeliver.
func streamDrained(t *testing.T, b bundle) {
	t.Helper()
	testwait.For(t, 30*time.Second, "stream drained", func() bool {
		s, err := b.js.Stream(context.Background(), strings.ToUpper(b.prefix)+"_REQUESTS")
		if err != nil {
			return false
		}
		info, err := s.Info(context.Background())
		return err == nil && info.State.Msgs == 0
	})
}

func natsQuotaKey(i int) string { return fmt.Sprintf("nats-quota-key-%05d", i) }

// The pending cap on the NATS request path: over the cap, the request is
// terminated (not redelivered) with a payload-free etl_owner_quota_exceeded
// rejection and makes no job; once a job finished and the count window
// passed, the owner's next request makes its job.
func TestRequestPendingCap(t *testing.T) {
	t.Parallel()
	b := setup(t)
	clock := testclock.New()
	rejections := quotaBridge(t, b, intake.QuotaOptions{Default: intake.OwnerLimits{MaxPendingJobs: 2}, Now: clock.Now})
	subject := b.prefix + ".requests.alice"
	publish(t, b.js, subject, natsQuotaKey(1), `[{"id":"a1"}]`)
	publish(t, b.js, subject, natsQuotaKey(2), `[{"id":"a2"}]`)
	testwait.For(t, 30*time.Second, "two jobs", func() bool { return jobs(t, b.pool) == 2 })
	publish(t, b.js, subject, natsQuotaKey(3), `[{"id":"a3"}]`)
	quotaRejected(t, rejections)
	streamDrained(t, b)
	if n := jobs(t, b.pool); n != 2 {
		t.Fatalf("a refused request made a job: %d", n)
	}

	ctx := context.Background()
	res, err := lease.ClaimJobs(ctx, b.pool, lease.ClaimParams{OwnerID: "quota-nats-worker", Limit: 1, LeaseDuration: time.Minute})
	if err != nil || len(res.Claimed) != 1 {
		t.Fatalf("claim: %+v, %v", res, err)
	}
	if _, err := pgtest.SucceedOne(ctx, b.pool, res.Claimed[0].Ref); err != nil {
		t.Fatal(err)
	}
	clock.Advance(intake.DefaultPendingWindow)
	publish(t, b.js, subject, natsQuotaKey(3), `[{"id":"a3"}]`)
	testwait.For(t, 30*time.Second, "the third job", func() bool { return jobs(t, b.pool) == 3 })
	streamDrained(t, b)
}

// The submission rate on the NATS request path: with a burst of 2 and a
// rate that refills nothing during the test, the third request is
// rejected with the quota code, and the requester's reply carries it in
// Mightyetl-Error-Code.
func TestRequestSubmitRate(t *testing.T) {
	t.Parallel()
	b := setup(t)
	clock := testclock.New()
	rejections := quotaBridge(t, b, intake.QuotaOptions{Default: intake.OwnerLimits{SubmitRate: 0.001, SubmitBurst: 2}, Now: clock.Now})
	subject := b.prefix + ".requests.bob"
	publish(t, b.js, subject, natsQuotaKey(1), `[{"id":"b1"}]`)
	publish(t, b.js, subject, natsQuotaKey(2), `[{"id":"b2"}]`)
	testwait.For(t, 30*time.Second, "two jobs", func() bool { return jobs(t, b.pool) == 2 })
	inbox := events.NewReplyInbox("bob")
	replies, err := b.nc.SubscribeSync(inbox)
	if err != nil {
		t.Fatal(err)
	}
	defer replies.Unsubscribe()
	publish(t, b.js, subject, natsQuotaKey(3), `[{"id":"b3"}]`, events.ReplyToHeader, inbox)
	quotaRejected(t, rejections)
	reply, err := replies.NextMsg(30 * time.Second)
	if err != nil {
		t.Fatal(err)
	}
	if code := reply.Header.Get(events.ErrorCodeHeader); code != codes.OwnerQuotaExceeded {
		t.Fatalf("reply code %q, want %q", code, codes.OwnerQuotaExceeded)
	}
	streamDrained(t, b)
	if n := jobs(t, b.pool); n != 2 {
		t.Fatalf("%d jobs, want 2", n)
	}
}
