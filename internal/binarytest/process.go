package binarytest

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"sync"
	"syscall"
	"time"
)

// ErrExited is returned (wrapped, with the exit status and the last lines
// of output) by the waits of a Process that exited while it was awaited.
var ErrExited = errors.New("process exited")

// ErrTimeout is returned (wrapped) by a wait whose deadline passed first.
var ErrTimeout = errors.New("timed out")

// keptBytes is how much of a process's output a Process keeps: the last
// MiB (a file given as Options.LogFile gets all of it).
const keptBytes = 1 << 20

// waitDelay bounds Wait after the process exited, should a child of it
// still hold its output open.
const waitDelay = 10 * time.Second

// Options describe a process to Start.
type Options struct {
	// Path is the binary. Required.
	Path string
	// Args are its arguments.
	Args []string
	// Env is its whole environment (see Env); nil means this process's.
	Env []string
	// Name names the process in errors and logs; empty means the base name
	// of Path.
	Name string
	// LogFile, when set, also receives all of the output (appended, the
	// file created 0600 when missing; kept open until the process exited).
	LogFile string
	// Stderr, when set, receives standard error, and the output the
	// Process keeps is standard output alone; nil keeps both, interleaved
	// as written.
	Stderr io.Writer
}

// Process is one started binary: its output kept as it is written, its
// exit awaited in the background. Its methods are safe for concurrent use.
// On Linux it is killed (SIGKILL) when the process that started it dies.
type Process struct {
	name string
	cmd  *exec.Cmd
	out  *output
	done chan struct{}
	err  error // cmd.Wait's result, read after done is closed
}

// Start starts o.Path and returns at once; see the Process's waits for its
// readiness.
func Start(o Options) (*Process, error) {
	if o.Name == "" {
		o.Name = filepath.Base(o.Path)
	}
	out := &output{changed: make(chan struct{})}
	var logf *os.File
	if o.LogFile != "" {
		f, err := os.OpenFile(o.LogFile, os.O_CREATE|os.O_APPEND|os.O_WRONLY, 0o600)
		if err != nil {
			return nil, fmt.Errorf("%s log file: %w", o.Name, err)
		}
		logf, out.tee = f, f
	}
	cmd := exec.Command(o.Path, o.Args...)
	cmd.Env = o.Env
	cmd.Stdout, cmd.Stderr = out, out
	if o.Stderr != nil {
		cmd.Stderr = o.Stderr
	}
	cmd.SysProcAttr = sysProcAttr()
	cmd.WaitDelay = waitDelay
	if err := cmd.Start(); err != nil {
		if logf != nil {
			logf.Close()
		}
		return nil, fmt.Errorf("start %s: %w", o.Name, err)
	}
	p := &Process{name: o.Name, cmd: cmd, out: out, done: make(chan struct{})}
	go func() {
		p.err = cmd.Wait()
		if logf != nil {
			logf.Close()
		}
		close(p.done)
	}()
	return p, nil
}

// Name is Options.Name.
func (p *Process) Name() string { return p.name }

// Pid is the process id.
func (p *Process) Pid() int { return p.cmd.Process.Pid }

// Done is closed once the process exited and its output was read.
func (p *Process) Done() <-chan struct{} { return p.done }

// ExitErr is the process's exit error (nil for status 0; an *exec.ExitError
// otherwise), valid once Done is closed; nil before.
func (p *Process) ExitErr() error {
	select {
	case <-p.done:
		return p.err
	default:
		return nil
	}
}

// Output is the output kept so far (the last MiB).
func (p *Process) Output() string { return p.out.String() }

// Tail is the last n lines of the kept output.
func (p *Process) Tail(n int) string { return LastLines([]byte(p.out.String()), n) }

// Alive returns nil while the process runs, else an error wrapping
// ErrExited with its exit status and the last lines of its output.
func (p *Process) Alive() error {
	select {
	case <-p.done:
		return p.exited()
	default:
		return nil
	}
}

func (p *Process) exited() error {
	return fmt.Errorf("%s: %w (%v); last output:\n%s", p.name, ErrExited, p.err, p.Tail(20))
}

// Signal sends sig; an error when the process already exited.
func (p *Process) Signal(sig os.Signal) error { return p.cmd.Process.Signal(sig) }

// Kill sends SIGKILL and waits until the process is gone. Safe to call
// more than once and on an exited process.
func (p *Process) Kill() {
	_ = p.cmd.Process.Signal(syscall.SIGKILL)
	<-p.done
}

// Wait waits up to within for the process to exit and returns its exit
// error; an error wrapping ErrTimeout (the process still runs) when within
// passes first.
func (p *Process) Wait(within time.Duration) error {
	t := time.NewTimer(within)
	defer t.Stop()
	select {
	case <-p.done:
		return p.err
	case <-t.C:
		return fmt.Errorf("%s still running after %s: %w", p.name, within, ErrTimeout)
	}
}

// Terminate sends SIGTERM and waits up to grace for the exit, then sends
// SIGKILL. It returns the exit error of a process that exited by itself in
// time (nil for status 0), or an error wrapping ErrTimeout when it had to
// be killed.
func (p *Process) Terminate(grace time.Duration) error {
	_ = p.cmd.Process.Signal(syscall.SIGTERM)
	if err := p.Wait(grace); !errors.Is(err, ErrTimeout) {
		return err
	}
	p.Kill()
	return fmt.Errorf("%s still running %s after SIGTERM, killed: %w", p.name, grace, ErrTimeout)
}

// pollEvery is how often WaitReady asks its condition.
const pollEvery = 20 * time.Millisecond

// WaitReady polls ready until it returns true (nil), the process exits (an
// error wrapping ErrExited), within passes (ErrTimeout) or ctx ends
// (ctx.Err()). what names the condition in the errors; ready gets a
// context that ends with ctx.
func (p *Process) WaitReady(ctx context.Context, within time.Duration, what string, ready func(context.Context) bool) error {
	deadline := time.NewTimer(within)
	defer deadline.Stop()
	tick := time.NewTicker(pollEvery)
	defer tick.Stop()
	for {
		if err := p.Alive(); err != nil {
			return fmt.Errorf("waiting for %s: %w", what, err)
		}
		if ready(ctx) {
			return nil
		}
		select {
		case <-p.done:
		case <-tick.C:
		case <-deadline.C:
			return fmt.Errorf("%s: %w after %s waiting for %s; last output:\n%s", p.name, ErrTimeout, within, what, p.Tail(20))
		case <-ctx.Done():
			return ctx.Err()
		}
	}
}

// WaitLine passes every line of the kept output to match, in order from the
// first line still kept, until match returns true (nil), the process exited
// and its last line was passed (an error wrapping ErrExited), within passes
// (ErrTimeout) or ctx ends (ctx.Err()). Each call starts from the first
// line again. A final line without a newline is passed once the process
// exited.
func (p *Process) WaitLine(ctx context.Context, within time.Duration, match func(line string) bool) error {
	deadline := time.NewTimer(within)
	defer deadline.Stop()
	var next int64 // offset in the whole output of the next unread line
	for {
		exited := p.Alive() != nil
		lines, changed := p.out.linesFrom(&next, exited)
		for _, l := range lines {
			if match(l) {
				return nil
			}
		}
		if exited {
			return p.exited()
		}
		select {
		case <-changed:
		case <-p.done:
		case <-deadline.C:
			return fmt.Errorf("%s: %w after %s waiting for a line; last output:\n%s", p.name, ErrTimeout, within, p.Tail(20))
		case <-ctx.Done():
			return ctx.Err()
		}
	}
}

// HTTPOK is a readiness condition for WaitReady: GET url answers 200
// within a second.
func HTTPOK(client *http.Client, url string) func(context.Context) bool {
	return func(ctx context.Context) bool {
		ctx, cancel := context.WithTimeout(ctx, time.Second)
		defer cancel()
		req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
		if err != nil {
			return false
		}
		res, err := client.Do(req)
		if err != nil {
			return false
		}
		_, _ = io.Copy(io.Discard, res.Body)
		res.Body.Close()
		return res.StatusCode == http.StatusOK
	}
}

// output keeps the last keptBytes of what a process wrote, copies it to
// tee when set, and wakes the waits of WaitLine on every write.
type output struct {
	mu      sync.Mutex
	buf     []byte
	dropped int64 // bytes cut from the front of buf so far
	tee     io.Writer
	changed chan struct{} // closed and replaced on every write
}

func (o *output) Write(b []byte) (int, error) {
	o.mu.Lock()
	defer o.mu.Unlock()
	if o.tee != nil {
		_, _ = o.tee.Write(b) // a full disk must not stall the process
	}
	o.buf = append(o.buf, b...)
	if len(o.buf) > keptBytes+keptBytes/4 {
		cut := len(o.buf) - keptBytes
		o.buf = append([]byte(nil), o.buf[cut:]...)
		o.dropped += int64(cut)
	}
	close(o.changed)
	o.changed = make(chan struct{})
	return len(b), nil
}

func (o *output) String() string {
	o.mu.Lock()
	defer o.mu.Unlock()
	return string(o.buf)
}

// linesFrom returns the complete lines from offset *next on (from the
// first kept byte when those were cut), and the final partial line too
// when all is true, advancing *next past them; and the channel the next
// write closes.
func (o *output) linesFrom(next *int64, all bool) ([]string, <-chan struct{}) {
	o.mu.Lock()
	defer o.mu.Unlock()
	start := max(*next, o.dropped)
	rest := o.buf[start-o.dropped:]
	var lines []string
	for {
		i := bytes.IndexByte(rest, '\n')
		if i < 0 {
			break
		}
		lines = append(lines, string(rest[:i]))
		rest = rest[i+1:]
		start += int64(i + 1)
	}
	if all && len(rest) > 0 {
		lines = append(lines, string(rest))
		start += int64(len(rest))
	}
	*next = start
	return lines, o.changed
}
