package main_test

import (
	"bufio"
	"io"
	"os"
	"os/exec"
	"strings"
	"testing"
	"time"
)

// devProcess is a running `etlctl dev` and the lines it prints.
type devProcess struct {
	cmd *exec.Cmd
	// done receives the result of cmd.Wait once; the cleanup reads it, so a
	// test that reads it first puts it back.
	done  chan error
	lines chan string
}

// startDev runs bin's `dev` against the database at dbURL, on loopback ports
// picked by the system, without NATS_URL or MIGHTYETL_* from the test's
// environment, plus extra; standard error is discarded. The process is
// killed when the test ends.
func startDev(t *testing.T, bin, dbURL string, extra ...string) *devProcess {
	t.Helper()
	cmd := exec.Command(bin, "dev")
	var env []string
	for _, kv := range os.Environ() {
		if !strings.HasPrefix(kv, "NATS_URL=") && !strings.HasPrefix(kv, "MIGHTYETL_") {
			env = append(env, kv)
		}
	}
	cmd.Env = append(append(env, "DATABASE_URL="+dbURL, "MIGHTYETL_HTTP_ADDR=127.0.0.1:0", "MIGHTYETL_METRICS_ADDR=127.0.0.1:0"), extra...)
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	cmd.Stderr = io.Discard
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	d := &devProcess{cmd: cmd, done: make(chan error, 1), lines: make(chan string, 32)}
	go func() { d.done <- cmd.Wait() }()
	t.Cleanup(func() {
		_ = cmd.Process.Kill()
		<-d.done
	})
	go func() {
		sc := bufio.NewScanner(stdout)
		for sc.Scan() {
			d.lines <- sc.Text()
		}
		close(d.lines)
	}()
	return d
}

// readUntil passes each printed line to seen until seen returns true. It
// fails the test with exited when dev ends first, and with timeout when 90s
// pass first.
func (d *devProcess) readUntil(t *testing.T, seen func(line string) bool, exited, timeout string) {
	t.Helper()
	deadline := time.After(90 * time.Second)
	for {
		select {
		case l, ok := <-d.lines:
			if !ok {
				t.Fatal(exited)
			}
			if seen(l) {
				return
			}
		case <-deadline:
			t.Fatal(timeout)
		}
	}
}
