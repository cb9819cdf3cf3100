package binarytest_test

import (
	"context"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"go.uber.org/goleak"

	"github.com/mightyetl/mightyetl/internal/binarytest"
)

// TestMain checks for leaked goroutines and removes the built binaries.
func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m, goleak.Cleanup(func(int) { _ = binarytest.RemoveBuilt() }))
}

// sh starts a shell script as a supervised process.
func sh(t *testing.T, script string, o binarytest.Options) *binarytest.Process {
	t.Helper()
	o.Path, o.Args = "/bin/sh", []string{"-c", script}
	return binarytest.Spawn(t, o)
}

// TestWaitLineTerminateAndLog: a line is awaited from the kept output (and
// the log file gets it too), SIGTERM ends the process within its grace, and
// its exit status is reported.
func TestWaitLineTerminateAndLog(t *testing.T) {
	logFile := filepath.Join(t.TempDir(), "p.log")
	p := sh(t, `trap 'echo bye; exit 3' TERM; echo starting; echo ready >&2; while :; do sleep 0.05; done`,
		binarytest.Options{LogFile: logFile, Env: binarytest.Env(binarytest.Isolated)})
	if err := p.WaitLine(context.Background(), 10*time.Second, func(l string) bool { return l == "ready" }); err != nil {
		t.Fatal(err)
	}
	if err := p.Alive(); err != nil {
		t.Fatalf("Alive: %v", err)
	}
	err := p.Terminate(10 * time.Second)
	var ee *exec.ExitError
	if !errors.As(err, &ee) || ee.ExitCode() != 3 {
		t.Fatalf("Terminate: %v, want exit status 3", err)
	}
	if got := p.Output(); got != "starting\nready\nbye\n" {
		t.Fatalf("output %q", got)
	}
	b, err := os.ReadFile(logFile)
	if err != nil || string(b) != "starting\nready\nbye\n" {
		t.Fatalf("log file %q, %v", b, err)
	}
	if err := p.Alive(); !errors.Is(err, binarytest.ErrExited) {
		t.Fatalf("Alive after exit: %v, want ErrExited", err)
	}
}

// TestWaitsEndOnExitAndDeadline: a wait ends with ErrExited when the
// process exits first (after the last line, even without a newline, was
// seen) and with ErrTimeout when its deadline passes; Terminate kills a
// process that ignores SIGTERM.
func TestWaitsEndOnExitAndDeadline(t *testing.T) {
	p := sh(t, `printf 'one\ntwo'`, binarytest.Options{})
	var seen []string
	err := p.WaitLine(context.Background(), 10*time.Second, func(l string) bool { seen = append(seen, l); return false })
	if !errors.Is(err, binarytest.ErrExited) || strings.Join(seen, ",") != "one,two" {
		t.Fatalf("WaitLine on an exiting process: %v, lines %q", err, seen)
	}
	if err := p.WaitReady(context.Background(), time.Second, "never", func(context.Context) bool { return false }); !errors.Is(err, binarytest.ErrExited) {
		t.Fatalf("WaitReady on an exited process: %v, want ErrExited", err)
	}

	stubborn := sh(t, `trap '' TERM; echo up; while :; do sleep 0.05; done`, binarytest.Options{})
	if err := stubborn.WaitLine(context.Background(), 10*time.Second, func(l string) bool { return l == "up" }); err != nil {
		t.Fatal(err)
	}
	if err := stubborn.WaitReady(context.Background(), 100*time.Millisecond, "never", func(context.Context) bool { return false }); !errors.Is(err, binarytest.ErrTimeout) {
		t.Fatalf("WaitReady past its deadline: %v, want ErrTimeout", err)
	}
	if err := stubborn.Terminate(200 * time.Millisecond); !errors.Is(err, binarytest.ErrTimeout) {
		t.Fatalf("Terminate of a process ignoring SIGTERM: %v, want ErrTimeout", err)
	}
	if err := stubborn.Wait(time.Second); err == nil || err.(*exec.ExitError).Sys().(syscall.WaitStatus).Signal() != syscall.SIGKILL {
		t.Fatalf("exit after Terminate: %v, want killed by SIGKILL", err)
	}
}

// TestBuildOnce: the shared builder builds a command once per test binary
// (the second call returns the same, existing file without building).
func TestBuildOnce(t *testing.T) {
	first := binarytest.Binary(t, "etlctl")
	st, err := os.Stat(first)
	if err != nil || st.Mode()&0o111 == 0 {
		t.Fatalf("built etlctl %s: %v", first, err)
	}
	if again := binarytest.Binary(t, "etlctl"); again != first {
		t.Fatalf("second Binary %q, want %q", again, first)
	}
	st2, err := os.Stat(first)
	if err != nil || !st2.ModTime().Equal(st.ModTime()) {
		t.Fatalf("the binary was built again (%v)", err)
	}
	p := binarytest.Spawn(t, binarytest.Options{Path: first, Args: []string{"credentials", "hash"}, Env: binarytest.Env(binarytest.Isolated)})
	if err := p.Wait(time.Minute); err == nil {
		t.Fatal("etlctl credentials hash without a principal succeeded")
	}
}
