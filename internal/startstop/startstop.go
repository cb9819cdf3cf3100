// Package startstop gives every long-running part of mightyETL (worker and
// its roles, outbox relay, NATS request consumer, HTTP server, intake
// batcher) one Start/Stop behaviour, after River's
// rivershared/startstop.BaseStartStop:
//
//   - Start runs the part's start function once; a second Start returns
//     ErrAlreadyStarted (at once, also while the first one still runs), and
//     a Start after Stop returns ErrStopped.
//   - Stop runs the part's stop function once, whoever calls it first, and
//     every caller waits for it to finish or for its own context to end, in
//     which case Stop returns ctx.Err() and the stop goes on in the
//     background. Stop never blocks forever on a context that ends.
//   - The stop function runs on the first Stop caller's context. When it
//     returns that context's error (it was cut short: a drain that did not
//     finish in time), the part is stopped all the same: that caller gets
//     ctx.Err(), every later Stop nil.
//   - Stop before Start (or on a part whose Start failed) returns nil at
//     once. A Stop while the start function still runs waits for it like
//     for the stop, within its own context; once the start succeeds the
//     part is stopped, on that Stop's context.
//
// A part embeds or holds a Base and calls Base.Start and Base.Stop from its
// own Start and Stop.
package startstop

import (
	"context"
	"errors"
	"sync"
)

// ErrAlreadyStarted is returned by Start on a part started before.
var ErrAlreadyStarted = errors.New("already started")

// ErrStopped is returned by Start on a part already stopped: a part runs
// once.
var ErrStopped = errors.New("already stopped")

// Service is the shape every long-running part has.
type Service interface {
	Start(ctx context.Context) error
	Stop(ctx context.Context) error
}

// StopFunc stops what a StartFunc started and waits for it. ctx is the first
// Stop caller's context: when it ends the stop function should hurry (cancel
// what still runs) but it must still return; Stop itself returns ctx.Err()
// at once.
type StopFunc func(ctx context.Context) error

// StartFunc starts a part's goroutines and returns the function that stops
// them. An error means nothing was started: the part is marked stopped
// (a part runs once) and Stop returns nil.
type StartFunc func(ctx context.Context) (StopFunc, error)

const (
	stateNew = iota
	stateStarting
	stateStarted
	stateStopped
)

// Base holds the start/stop state of one part. The zero value is ready.
type Base struct {
	mu       sync.Mutex
	state    int
	starting chan struct{} // closed when the start function returned
	// stopCtx is the context of a Stop that came while the start function
	// ran; the stop runs on it once the start succeeded.
	stopCtx context.Context
	stop    StopFunc
	stopped chan struct{} // closed when the stop function returned
	err     error         // the stop function's result, read after stopped closes
	cut     bool          // the stop function returned its ctx's error (err is nil then)
	began   bool          // the stop function was launched
}

// Start runs start once, outside the part's lock (so a Stop is not held up
// by it). The returned StopFunc is kept for Stop. An error from start leaves
// the part stopped (Stop returns nil) and is returned.
func (b *Base) Start(ctx context.Context, start StartFunc) error {
	b.mu.Lock()
	switch b.state {
	case stateStarting, stateStarted:
		b.mu.Unlock()
		return ErrAlreadyStarted
	case stateStopped:
		b.mu.Unlock()
		return ErrStopped
	}
	b.state = stateStarting
	starting := make(chan struct{})
	b.starting = starting
	b.mu.Unlock()

	stop, err := start(ctx)

	b.mu.Lock()
	defer b.mu.Unlock()
	defer close(starting)
	if err != nil {
		b.state = stateStopped
		return err
	}
	b.stop = stop
	if b.stopCtx != nil { // a Stop came meanwhile
		b.state = stateStopped
		b.launchLocked(b.stopCtx)
		return nil
	}
	b.state = stateStarted
	return nil
}

// Started reports whether Start succeeded (even if Stop ran since).
func (b *Base) Started() bool {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.stop != nil
}

// Stop runs the stop function once and waits for it, or until ctx ends
// (then it returns ctx.Err()). Every later or concurrent call waits for the
// same stop and returns its result (nil when the stop function returned the
// first caller's ctx error). Stop before Start returns nil and makes
// a later Start return ErrStopped.
func (b *Base) Stop(ctx context.Context) error {
	b.mu.Lock()
	if b.state == stateStarting {
		// The stop runs when the start returns (see Start), on the first
		// such Stop's context; wait for it like for any stop.
		if b.stopCtx == nil {
			b.stopCtx = ctx
		}
		starting := b.starting
		b.mu.Unlock()
		select {
		case <-starting:
		case <-ctx.Done():
			return ctx.Err()
		}
		b.mu.Lock()
	}
	if b.stop == nil {
		b.state = stateStopped
		b.mu.Unlock()
		return nil
	}
	b.state = stateStopped
	b.launchLocked(ctx)
	stopped := b.stopped
	b.mu.Unlock()
	select {
	case <-stopped:
		b.mu.Lock()
		defer b.mu.Unlock()
		if b.cut && ctx.Err() != nil {
			return ctx.Err() // whichever of the two ready cases select chose
		}
		return b.err
	case <-ctx.Done():
		return ctx.Err()
	}
}

// launchLocked runs the stop function on ctx in the background, unless it
// was launched before. b.mu is held and b.stop is set.
func (b *Base) launchLocked(ctx context.Context) {
	if b.began {
		return
	}
	b.began = true
	b.stopped = make(chan struct{})
	stop, stopped := b.stop, b.stopped
	go func() {
		err := stop(ctx)
		cut := ctx.Err() != nil && errors.Is(err, ctx.Err())
		if cut {
			err = nil // stopped, if not gracefully: only ctx's owner hears of it
		}
		b.mu.Lock()
		b.err, b.cut = err, cut
		b.mu.Unlock()
		close(stopped)
	}()
}

// Done is closed once a Stop has finished stopping the part; nil before the
// first Stop of a started part.
func (b *Base) Done() <-chan struct{} {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.stopped
}

// Loop is the start of a part that is one loop: it runs loop on a goroutine
// of its own and returns the StopFunc that closes stopping (loop must
// return once it is closed), waits for loop to return, then calls cleanup
// (when not nil), for example to cancel the part's context.
func Loop(stopping chan struct{}, loop func(), cleanup func()) StopFunc {
	done := make(chan struct{})
	go func() {
		defer close(done)
		loop()
	}()
	return func(context.Context) error {
		close(stopping)
		<-done
		if cleanup != nil {
			cleanup()
		}
		return nil
	}
}
