package httpapi

import (
	"context"
	"errors"
	"io"
	"net"
	"net/http"
	"testing"
	"time"

	"github.com/mightyetl/mightyetl/internal/startstop"
	"github.com/mightyetl/mightyetl/internal/startstop/startstoptest"
	"github.com/mightyetl/mightyetl/internal/testwait"
)

// newTestServer is an unstarted Server on a free loopback port with e's
// options (console included, so its sampler runs too).
func newTestServer(t *testing.T, e *env) *Server {
	t.Helper()
	o := e.opts
	o.Addr = "127.0.0.1:0"
	srv, err := NewServer(o)
	if err != nil {
		t.Fatal(err)
	}
	return srv
}

func TestServerStartStopStress(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	startstoptest.Stress(t, func(t *testing.T) startstop.Service { return newTestServer(t, e) }, 20*time.Second)
}

// blockingServer is a started Server whose every request blocks (ignoring
// cancellation) until release closes; entered receives once per request.
func blockingServer(t *testing.T) (srv *Server, entered chan struct{}, release chan struct{}) {
	t.Helper()
	srv = newTestServer(t, newEnv(t))
	entered, release = make(chan struct{}, 1), make(chan struct{})
	srv.srv.Handler = http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		entered <- struct{}{}
		<-release
	})
	if err := srv.Start(t.Context()); err != nil {
		t.Fatal(err)
	}
	return srv, entered, release
}

// request sends one GET without keep-alive and reports its status (0 when
// it failed) on the returned channel.
func request(t *testing.T, srv *Server) <-chan int {
	t.Helper()
	status := make(chan int, 1)
	client := &http.Client{Transport: &http.Transport{DisableKeepAlives: true}}
	go func() {
		res, err := client.Get("http://" + srv.Addr() + "/healthz")
		if err != nil {
			status <- 0
			return
		}
		_, _ = io.Copy(io.Discard, res.Body)
		res.Body.Close()
		status <- res.StatusCode
	}()
	return status
}

// TestServerStopJoiningARunningStopWaitsForIt: while one Stop drains a
// request in flight, a second Stop does not report the server stopped.
// The hand-written Stop this replaced returned nil at once to every Stop
// after the first (it only checked a stopped flag), so a caller could go on
// to close the pools under a request still running.
func TestServerStopJoiningARunningStopWaitsForIt(t *testing.T) {
	t.Parallel()
	srv, entered, release := blockingServer(t)
	status := request(t, srv)
	<-entered
	first := make(chan error, 1)
	go func() {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		first <- srv.Stop(ctx)
	}()
	addr := srv.Addr()
	testwait.For(t, 10*time.Second, "the first Stop closed the listener", func() bool {
		c, err := net.DialTimeout("tcp", addr, time.Second)
		if err != nil {
			return true
		}
		c.Close()
		return false
	})
	ended, cancel := context.WithCancel(context.Background())
	cancel()
	if err := srv.Stop(ended); !errors.Is(err, context.Canceled) {
		t.Fatalf("second Stop while a request still runs = %v, want context.Canceled (not stopped yet)", err)
	}
	close(release)
	if err := <-first; err != nil {
		t.Fatalf("first Stop: %v", err)
	}
	if got := <-status; got != http.StatusOK {
		t.Fatalf("request drained by Stop: status %d, want 200", got)
	}
	if err := srv.Stop(context.Background()); err != nil {
		t.Fatalf("Stop after Stop: %v", err)
	}
}

// TestServerStopReturnsContextErrorWhenTheDrainDoesNotEnd: a request that
// ignores cancellation cannot hold Stop beyond the caller's context; the
// server closes what remains, and a later Stop returns nil.
func TestServerStopReturnsContextErrorWhenTheDrainDoesNotEnd(t *testing.T) {
	t.Parallel()
	srv, entered, release := blockingServer(t)
	defer close(release)
	status := request(t, srv)
	<-entered
	ctx, cancel := context.WithCancel(context.Background())
	errs := make(chan error, 1)
	go func() { errs <- srv.Stop(ctx) }()
	cancel()
	if err := <-errs; !errors.Is(err, context.Canceled) {
		t.Fatalf("Stop with a hanging request and an ended context = %v, want context.Canceled", err)
	}
	stopCtx, stopCancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer stopCancel()
	if err := srv.Stop(stopCtx); err != nil {
		t.Fatalf("Stop after the forced close: %v", err)
	}
	if got := <-status; got != 0 {
		t.Fatalf("request on a closed connection: status %d, want a failed request", got)
	}
}
