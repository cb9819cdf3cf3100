package events

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/mightyetl/mightyetl/internal/natstest"
	"github.com/mightyetl/mightyetl/internal/startstop/startstoptest"
)

// TestRequestConsumerStartStop runs the shared start/stop stress test
// against real request consumers on the test NATS server (all rounds share
// one prefix, so one stream and one durable consumer; natstest.Prefix
// deletes the stream at the end). Against the
// hand-written Start/Stop it replaced, its StopBeforeStart case failed: a
// Stop before Start did not stop a later Start, which then ran a consumer
// nobody stopped.
func TestRequestConsumerStartStop(t *testing.T) {
	t.Parallel()
	nc := natstest.Connect(t, natstest.URL(t))
	s, _ := NewSubjects(natstest.Prefix(t))
	h := &fakeHandler{script: func(int, call) ([]byte, string, error) { return []byte("{}"), "", nil }}
	startstoptest.Stress(t, startstoptest.Built(func() (*RequestConsumer, error) {
		return NewRequestConsumer(nc, s.Prefix(), h, nil, nil, RequestConsumerOptions{
			Concurrency: 4, AckWait: 5 * time.Second, HandlerTimeout: 4 * time.Second, SetupRetry: 50 * time.Millisecond})
	}), 20*time.Second)
}

// TestRequestConsumerStopReturnsWhenItsContextEnds: a handler that ignores
// cancellation holds the consumer's Stop up to HandlerTimeout; a caller
// whose context ends first gets ctx.Err() at once, and a later Stop waits
// for the same stop to finish.
func TestRequestConsumerStopReturnsWhenItsContextEnds(t *testing.T) {
	t.Parallel()
	entered := make(chan struct{}, 1)
	release := make(chan struct{})
	h := &fakeHandler{script: func(int, call) ([]byte, string, error) {
		entered <- struct{}{}
		<-release // ignores its context
		return []byte("{}"), "", nil
	}}
	f := newRequestFixture(t, h)
	f.submit(t, f.requestsSubject(t, "alice"), "alice", "key-stop-0000000001", `[{"id":"a"}]`)
	<-entered
	ctx, cancel := context.WithCancel(context.Background())
	errs := make(chan error, 1)
	go func() { errs <- f.c.Stop(ctx) }()
	cancel()
	if err := <-errs; !errors.Is(err, context.Canceled) {
		t.Fatalf("Stop with a hanging handler and an ended context = %v, want context.Canceled", err)
	}
	close(release)
	stopCtx, stopCancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer stopCancel()
	if err := f.c.Stop(stopCtx); err != nil {
		t.Fatalf("Stop after the handler returned: %v", err)
	}
	select {
	case <-f.c.ss.Done():
	default:
		t.Fatal("Stop returned nil before the consumer's stop finished")
	}
}
