package outbox

import (
	"net/url"
	"testing"
	"time"

	"github.com/google/uuid"

	"github.com/mightyetl/mightyetl/internal/faultinject"
	"github.com/mightyetl/mightyetl/internal/natstest"
)

// TestFinishGroupIsPublishedWhileAcksAreSlow: while every JetStream
// acknowledgement takes longer than nats.go's 200 ms stall wait (a proxy
// delays each chunk 150 ms in both directions), a finish group row of 1,024
// events, the worker's default FinishBatch and more than twice the default
// batch size, is published whole in one batch, and the row behind it in the
// next: the relay's window holds any group row, and a publish waits for a
// free slot within PublishTimeout instead of failing.
func TestFinishGroupIsPublishedWhileAcksAreSlow(t *testing.T) {
	t.Parallel()
	u, err := url.Parse(natstest.URL(t))
	if err != nil {
		t.Fatal(err)
	}
	proxy, err := faultinject.NewProxy(u.Host)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(proxy.Close)
	proxy.SetLatency(150 * time.Millisecond)
	f := newFixture(t, "nats://"+proxy.Addr())
	t.Cleanup(func() { proxy.SetLatency(0) }) // runs first: the fixture's clean-up goes at full speed
	r := f.relay(t, nil, Options{PublishTimeout: time.Minute})

	jobs := make([]uuid.UUID, 1024)
	for i := range jobs {
		jobs[i] = uuid.New()
	}
	f.insertGroup(t, "SUCCEEDED", jobs)
	f.insert(t, lifecycle("FAILED", "etl_record_invalid"))
	if n, err := r.RunOnce(t.Context()); err != nil || n != len(jobs) {
		t.Fatalf("group batch = %d, %v; want %d events, nil", n, err, len(jobs))
	}
	if n, err := r.RunOnce(t.Context()); err != nil || n != 1 {
		t.Fatalf("next batch = %d, %v; want the row behind the group", n, err)
	}
	if n := f.count(t, "true"); n != 0 {
		t.Fatalf("outbox rows left = %d, want 0", n)
	}
	if got := f.streamMsgs(t); got != uint64(len(jobs))+1 {
		t.Fatalf("stream messages = %d, want %d", got, len(jobs)+1)
	}
}
