package startstop_test

import (
	"context"
	"errors"
	"fmt"
	"sync/atomic"
	"testing"
	"time"

	"github.com/mightyetl/mightyetl/internal/startstop"
	"github.com/mightyetl/mightyetl/internal/startstop/startstoptest"
)

// loop is the smallest service: one goroutine until stopped.
type loop struct {
	startstop.Base
	starts, stops atomic.Int32
	// ignore makes the goroutine ignore the stop signal until release
	// closes: a handler that ignores cancellation.
	ignore  bool
	release chan struct{}
}

func (l *loop) Start(ctx context.Context) error {
	return l.Base.Start(ctx, func(context.Context) (startstop.StopFunc, error) {
		l.starts.Add(1)
		quit, done := make(chan struct{}), make(chan struct{})
		go func() {
			defer close(done)
			<-quit
			if l.ignore {
				<-l.release
			}
		}()
		return func(ctx context.Context) error {
			l.stops.Add(1)
			close(quit)
			<-done
			return nil
		}, nil
	})
}

func (l *loop) Stop(ctx context.Context) error { return l.Base.Stop(ctx) }

func TestBaseStress(t *testing.T) {
	t.Parallel()
	startstoptest.Stress(t, func(t *testing.T) startstop.Service { return &loop{} }, 10*time.Second)
}

func TestStopRunsTheStopFunctionOnce(t *testing.T) {
	t.Parallel()
	l := &loop{}
	if err := l.Start(context.Background()); err != nil {
		t.Fatal(err)
	}
	for range 3 {
		if err := l.Stop(context.Background()); err != nil {
			t.Fatal(err)
		}
	}
	if got := l.stops.Load(); got != 1 {
		t.Fatalf("stop function ran %d times, want 1", got)
	}
}

func TestStopReturnsContextErrorWhenThePartHangs(t *testing.T) {
	t.Parallel()
	l := &loop{ignore: true, release: make(chan struct{})}
	if err := l.Start(context.Background()); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	errs := make(chan error, 1)
	go func() { errs <- l.Stop(ctx) }()
	cancel()
	if err := <-errs; !errors.Is(err, context.Canceled) {
		t.Fatalf("Stop on a hanging part with a cancelled context: %v, want context.Canceled", err)
	}
	select {
	case <-l.Done():
		t.Fatal("the part reported stopped while its goroutine still runs")
	default:
	}
	close(l.release)
	if err := l.Stop(context.Background()); err != nil {
		t.Fatalf("Stop after the part let go: %v", err)
	}
	<-l.Done()
}

func TestFailedStartLeavesThePartStopped(t *testing.T) {
	t.Parallel()
	var b startstop.Base
	boom := errors.New("boom")
	if err := b.Start(context.Background(), func(context.Context) (startstop.StopFunc, error) { return nil, boom }); !errors.Is(err, boom) {
		t.Fatalf("Start: %v, want boom", err)
	}
	if err := b.Stop(context.Background()); err != nil {
		t.Fatalf("Stop after failed Start: %v", err)
	}
	if err := b.Start(context.Background(), func(context.Context) (startstop.StopFunc, error) {
		t.Fatal("start function ran after a failed Start")
		return nil, nil
	}); !errors.Is(err, startstop.ErrStopped) {
		t.Fatalf("second Start: %v, want ErrStopped", err)
	}
}

func TestStopErrorIsReturnedToEveryCaller(t *testing.T) {
	t.Parallel()
	var b startstop.Base
	boom := errors.New("boom")
	if err := b.Start(context.Background(), func(context.Context) (startstop.StopFunc, error) {
		return func(context.Context) error { return boom }, nil
	}); err != nil {
		t.Fatal(err)
	}
	for range 2 {
		if err := b.Stop(context.Background()); !errors.Is(err, boom) {
			t.Fatalf("Stop: %v, want boom", err)
		}
	}
}

// TestStopCutShortReportsToTheCallerWhoseContextEnded: a stop function that
// returns its context's error (a drain cut short) leaves the part stopped:
// the caller whose context ended gets ctx.Err(), a later Stop nil.
func TestStopCutShortReportsToTheCallerWhoseContextEnded(t *testing.T) {
	t.Parallel()
	var b startstop.Base
	if err := b.Start(context.Background(), func(context.Context) (startstop.StopFunc, error) {
		return func(ctx context.Context) error {
			<-ctx.Done()
			return fmt.Errorf("drain: %w", ctx.Err())
		}, nil
	}); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if err := b.Stop(ctx); !errors.Is(err, context.Canceled) {
		t.Fatalf("Stop with the ended context: %v, want context.Canceled", err)
	}
	if err := b.Stop(context.Background()); err != nil {
		t.Fatalf("later Stop: %v, want nil (the part stopped)", err)
	}
	<-b.Done()
}

// TestStopDuringAStartThatHangsReturnsWithItsContext: Stop does not wait
// on a start function that does not return (a start-up check against an
// unreachable database) beyond its own context, and the start it raced
// is stopped once it completes. The first Base ran the start function under
// its lock and Stop took that lock first, so Stop blocked as long as the
// start did, whatever its context.
func TestStopDuringAStartThatHangsReturnsWithItsContext(t *testing.T) {
	t.Parallel()
	var b startstop.Base
	entered, release := make(chan struct{}), make(chan struct{})
	var stops atomic.Int32
	started := make(chan error, 1)
	go func() {
		started <- b.Start(context.Background(), func(context.Context) (startstop.StopFunc, error) {
			close(entered)
			<-release
			return func(context.Context) error { stops.Add(1); return nil }, nil
		})
	}()
	<-entered
	if err := b.Start(context.Background(), func(context.Context) (startstop.StopFunc, error) {
		t.Error("a second start function ran")
		return nil, nil
	}); !errors.Is(err, startstop.ErrAlreadyStarted) {
		t.Fatalf("Start during a start = %v, want ErrAlreadyStarted", err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	errs := make(chan error, 1)
	go func() { errs <- b.Stop(ctx) }()
	cancel()
	if err := <-errs; !errors.Is(err, context.Canceled) {
		t.Fatalf("Stop during a hanging start with an ended context = %v, want context.Canceled", err)
	}
	close(release)
	if err := <-started; err != nil {
		t.Fatalf("the raced Start: %v", err)
	}
	if err := b.Stop(context.Background()); err != nil {
		t.Fatalf("Stop after the start completed: %v", err)
	}
	if n := stops.Load(); n != 1 {
		t.Fatalf("stop function ran %d times, want 1 (the Stop that raced the start asked for it)", n)
	}
}

// Loop's stop closes stopping, waits for the loop to return, and only then
// cleans up.
func TestLoopStopsTheLoopThenCleansUp(t *testing.T) {
	t.Parallel()
	stopping := make(chan struct{})
	var returned, cleanedAfterReturn atomic.Bool
	var b startstop.Base
	if err := b.Start(context.Background(), func(context.Context) (startstop.StopFunc, error) {
		return startstop.Loop(stopping, func() {
			<-stopping
			returned.Store(true)
		}, func() { cleanedAfterReturn.Store(returned.Load()) }), nil
	}); err != nil {
		t.Fatal(err)
	}
	if err := b.Stop(context.Background()); err != nil {
		t.Fatal(err)
	}
	if !returned.Load() || !cleanedAfterReturn.Load() {
		t.Fatalf("loop returned %v, cleaned up after it returned %v", returned.Load(), cleanedAfterReturn.Load())
	}
}
