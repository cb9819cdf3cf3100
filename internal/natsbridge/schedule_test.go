package natsbridge_test

import (
	"context"
	"encoding/json"
	"testing"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/mightyetl/mightyetl/internal/codes"
	"github.com/mightyetl/mightyetl/internal/events"
	"github.com/mightyetl/mightyetl/internal/intake"
)

// TestRequestScheduleHeaders: a NATS request's Mightyetl-Priority and
// Mightyetl-Not-Before set the job's priority and notBefore (the reply
// shows both; the database holds them); a malformed one is terminated with
// a payload-free rejection carrying its code (etl_invalid_priority,
// etl_invalid_not_before), on the rejection subject and in the reply, and
// makes no job.
func TestRequestScheduleHeaders(t *testing.T) {
	t.Parallel()
	b := setup(t)
	pool, url, prefix, nc, js := b.pool, b.url, b.prefix, b.nc, b.js
	rejections := make(chan *nats.Msg, 16)
	sub, err := nc.ChanSubscribe(prefix+".rejections", rejections)
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = sub.Unsubscribe() }()
	startRequestBridge(t, pool, js, url, prefix, "schedule-test")
	subject := prefix + ".requests.alice"
	inbox := events.NewReplyInbox("alice")
	replies, err := nc.SubscribeSync(inbox)
	if err != nil {
		t.Fatal(err)
	}

	var now time.Time
	if err := pool.QueryRow(context.Background(), `SELECT clock_timestamp()`).Scan(&now); err != nil {
		t.Fatal(err)
	}
	at := now.Add(time.Hour).UTC()
	publish(t, js, subject, "nats-schedule-key-001", `[{"id":"s1"}]`, events.ReplyToHeader, inbox,
		events.PriorityHeader, "1", events.NotBeforeHeader, at.Format(time.RFC3339Nano))
	reply, err := replies.NextMsg(30 * time.Second)
	if err != nil {
		t.Fatal(err)
	}
	var rep intake.RequestReply
	if err := json.Unmarshal(reply.Data, &rep); err != nil || rep.JobStatus != "PENDING" || rep.Priority != 1 ||
		rep.NotBefore != intake.FormatTime(at) || reply.Header.Get(events.ErrorCodeHeader) != "" {
		t.Fatalf("reply %s: %v", reply.Data, err)
	}
	var priority int
	var availableAt time.Time
	if err := pool.QueryRow(context.Background(), `SELECT job_priority, available_at FROM etl_job_records WHERE job_record_id = $1`,
		rep.JobRecordID).Scan(&priority, &availableAt); err != nil || priority != 1 || !availableAt.Equal(at.Truncate(time.Microsecond)) {
		t.Fatalf("stored priority %d available_at %v (%v), want 1 and %v", priority, availableAt, err, at)
	}

	for _, c := range []struct {
		header []string
		code   string
	}{
		{[]string{events.PriorityHeader, "0"}, codes.InvalidPriority},
		{[]string{events.PriorityHeader, "urgent"}, codes.InvalidPriority},
		{[]string{events.NotBeforeHeader, "next tuesday"}, codes.InvalidNotBefore},
		{[]string{events.NotBeforeHeader, now.Add(400 * 24 * time.Hour).UTC().Format(time.RFC3339)}, codes.InvalidNotBefore},
	} {
		publish(t, js, subject, "nats-schedule-key-002", `[{"id":"s2"}]`, append([]string{events.ReplyToHeader, inbox}, c.header...)...)
		select {
		case m := <-rejections:
			var r events.Rejection
			if err := json.Unmarshal(m.Data, &r); err != nil || r.ErrorCode != c.code {
				t.Fatalf("%v: rejection %s (%v), want %s", c.header, m.Data, err, c.code)
			}
		case <-time.After(30 * time.Second):
			t.Fatalf("%v: no rejection", c.header)
		}
		reply, err := replies.NextMsg(30 * time.Second)
		if err != nil || reply.Header.Get(events.ErrorCodeHeader) != c.code {
			t.Fatalf("%v: reply %v %v", c.header, reply, err)
		}
	}
	if n := jobs(t, pool); n != 1 {
		t.Fatalf("%d jobs, want the scheduled one only", n)
	}
}
