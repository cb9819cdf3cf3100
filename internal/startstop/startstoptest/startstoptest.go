// Package startstoptest is the one stress test every startstop.Service runs
// (after River's rivershared/startstop/startstoptest): Start and Stop many
// times, concurrently, and Stop before Start.
package startstoptest

import (
	"context"
	"errors"
	"sync"
	"testing"
	"time"

	"github.com/mightyetl/mightyetl/internal/startstop"
)

// Rounds is how many fresh services Stress drives through each case.
const Rounds = 5

// Built adapts a constructor that can fail to Stress's newService: each
// call builds a fresh service and fails the test on the constructor's error.
func Built[S startstop.Service](build func() (S, error)) func(t *testing.T) startstop.Service {
	return func(t *testing.T) startstop.Service {
		t.Helper()
		s, err := build()
		if err != nil {
			t.Fatal(err)
		}
		return s
	}
}

// Stress drives services made by newService through every start/stop
// pattern: Stop before Start, concurrent Starts (exactly one wins), a Start
// after Stop, concurrent Stops (all agree), and a Stop whose context has
// already ended (returns at once). newService must return a fresh,
// unstarted service each call; stopWithin bounds how long a normal Stop may
// take before the test fails (the service never blocks forever).
func Stress(t *testing.T, newService func(t *testing.T) startstop.Service, stopWithin time.Duration) {
	t.Helper()
	ctx := context.Background()

	t.Run("StopBeforeStart", func(t *testing.T) {
		for range Rounds {
			s := newService(t)
			if err := s.Stop(ctx); err != nil {
				t.Fatalf("Stop before Start: %v, want nil", err)
			}
			if err := s.Stop(ctx); err != nil {
				t.Fatalf("second Stop before Start: %v, want nil", err)
			}
			if err := s.Start(ctx); !errors.Is(err, startstop.ErrStopped) {
				t.Fatalf("Start after Stop: %v, want ErrStopped", err)
			}
		}
	})

	t.Run("ConcurrentStartsOneWins", func(t *testing.T) {
		for range Rounds {
			s := newService(t)
			const n = 8
			errs := make(chan error, n)
			var ready sync.WaitGroup
			ready.Add(n)
			gate := make(chan struct{})
			for range n {
				go func() {
					ready.Done()
					<-gate
					errs <- s.Start(ctx)
				}()
			}
			ready.Wait()
			close(gate)
			won := 0
			for range n {
				err := <-errs
				switch {
				case err == nil:
					won++
				case errors.Is(err, startstop.ErrAlreadyStarted):
				default:
					t.Fatalf("concurrent Start: %v", err)
				}
			}
			if won != 1 {
				t.Fatalf("%d concurrent Starts succeeded, want exactly 1", won)
			}
			stopBounded(t, s, stopWithin)
			if err := s.Start(ctx); !errors.Is(err, startstop.ErrStopped) {
				t.Fatalf("Start after Stop: %v, want ErrStopped", err)
			}
		}
	})

	t.Run("ConcurrentStopsAgree", func(t *testing.T) {
		for range Rounds {
			s := newService(t)
			if err := s.Start(ctx); err != nil {
				t.Fatalf("Start: %v", err)
			}
			const n = 8
			errs := make(chan error, n)
			gate := make(chan struct{})
			for range n {
				go func() {
					<-gate
					sctx, cancel := context.WithTimeout(ctx, stopWithin)
					defer cancel()
					errs <- s.Stop(sctx)
				}()
			}
			close(gate)
			for range n {
				if err := <-errs; err != nil {
					t.Fatalf("concurrent Stop: %v", err)
				}
			}
			if err := s.Stop(ctx); err != nil {
				t.Fatalf("Stop after Stop: %v", err)
			}
		}
	})

	t.Run("StopWithEndedContextReturns", func(t *testing.T) {
		for range Rounds {
			s := newService(t)
			if err := s.Start(ctx); err != nil {
				t.Fatalf("Start: %v", err)
			}
			ended, cancel := context.WithCancel(ctx)
			cancel()
			done := make(chan error, 1)
			go func() { done <- s.Stop(ended) }()
			select {
			case err := <-done:
				if err != nil && !errors.Is(err, context.Canceled) {
					t.Fatalf("Stop with an ended context: %v, want nil or context.Canceled", err)
				}
			case <-time.After(stopWithin):
				t.Fatalf("Stop with an ended context did not return within %v", stopWithin)
			}
			// The stop goes on in the background; a later Stop waits for it.
			stopBounded(t, s, stopWithin)
		}
	})
}

func stopBounded(t *testing.T, s startstop.Service, within time.Duration) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), within)
	defer cancel()
	if err := s.Stop(ctx); err != nil {
		t.Fatalf("Stop: %v (bound %v)", err, within)
	}
}
