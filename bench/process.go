package main

import (
	"bufio"
	"bytes"
	"context"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"
)

// binary builds ./cmd/<name> with `go build` once per harness (per name)
// into the harness's temporary directory, and returns its path.
func (h *harness) binary(ctx context.Context, name string) (string, error) {
	h.binMu.Lock()
	b, ok := h.bins[name]
	if !ok {
		b = &builtBinary{}
		if h.bins == nil {
			h.bins = map[string]*builtBinary{}
		}
		h.bins[name] = b
	}
	h.binMu.Unlock()
	b.once.Do(func() { b.path, b.err = h.build(ctx, name) })
	return b.path, b.err
}

// build runs `go build -o <binDir>/<name> ./cmd/<name>` in the module root.
func (h *harness) build(ctx context.Context, name string) (string, error) {
	root, err := moduleRoot(ctx)
	if err != nil {
		return "", err
	}
	dir, err := h.binaryDir()
	if err != nil {
		return "", err
	}
	path := filepath.Join(dir, name)
	cmd := exec.CommandContext(ctx, "go", "build", "-o", path, "./cmd/"+name)
	cmd.Dir = root
	if out, err := cmd.CombinedOutput(); err != nil {
		return "", fmt.Errorf("go build ./cmd/%s: %v\n%s", name, err, out)
	}
	return path, nil
}

// binaryDir creates the harness's binary directory on first use; close
// removes it.
func (h *harness) binaryDir() (string, error) {
	h.binMu.Lock()
	defer h.binMu.Unlock()
	if h.binDir == "" {
		dir, err := os.MkdirTemp("", "mightyetl-bench-bin")
		if err != nil {
			return "", err
		}
		h.binDir = dir
	}
	return h.binDir, nil
}

// moduleRoot is the directory of the mightyETL root module's go.mod.
func moduleRoot(ctx context.Context) (string, error) {
	out, err := exec.CommandContext(ctx, "go", "env", "GOMOD").Output()
	if err != nil {
		return "", fmt.Errorf("go env GOMOD: %w", err)
	}
	gomod := strings.TrimSpace(string(out))
	b, err := os.ReadFile(gomod)
	if err != nil || !bytes.Contains(b, []byte("module github.com/mightyetl/mightyetl\n")) {
		return "", fmt.Errorf("run the bench inside the mightyETL module (found go.mod %q)", gomod)
	}
	return filepath.Dir(gomod), nil
}

// workerProc is one running product binary (cmd/worker or cmd/intake).
type workerProc struct {
	cmd *exec.Cmd
	id  string
	// readyMark is the log text that closes ready; empty never does.
	readyMark string
	ready     chan struct{}
	done      chan struct{}
	waitErr   error // the exit status; read after done is closed
	mu        sync.Mutex
	tail      []string
}

// startBinary starts cmd/worker with the bench database and env settings
// (MIGHTYETL_* and NATS_* of this process are not inherited). It returns
// once the worker logged "worker ready".
func (h *harness) startBinary(ctx context.Context, id string, env ...string) (*workerProc, error) {
	env = append([]string{"MIGHTYETL_WORKER_ID=" + id, "MIGHTYETL_METRICS_ADDR=127.0.0.1:0"}, env...)
	p, err := h.spawn(ctx, "worker", `"worker ready"`, env)
	if err != nil {
		return nil, err
	}
	p.id = id
	select {
	case <-p.ready:
		return p, nil
	case <-p.done:
		return nil, fmt.Errorf("worker binary exited at start: %s", p.lastLines())
	case <-time.After(30 * time.Second):
		p.kill()
		return nil, fmt.Errorf("worker binary not ready after 30s: %s", p.lastLines())
	case <-ctx.Done():
		p.kill()
		return nil, ctx.Err()
	}
}

// spawn starts the cmd/<name> binary with DATABASE_URL set to the bench
// database, then env, on top of this process's environment without its
// MIGHTYETL_*, NATS_* and DATABASE_URL (so the caller decides every product
// setting), and scans its stderr for readyMark.
func (h *harness) spawn(ctx context.Context, name, readyMark string, env []string) (*workerProc, error) {
	bin, err := h.binary(ctx, name)
	if err != nil {
		return nil, err
	}
	cmd := exec.Command(bin)
	for _, kv := range os.Environ() {
		if strings.HasPrefix(kv, "MIGHTYETL_") || strings.HasPrefix(kv, "NATS_") || strings.HasPrefix(kv, "DATABASE_URL=") {
			continue
		}
		cmd.Env = append(cmd.Env, kv)
	}
	cmd.Env = append(cmd.Env, "DATABASE_URL="+h.url)
	cmd.Env = append(cmd.Env, env...)
	stderr, err := cmd.StderrPipe()
	if err != nil {
		return nil, err
	}
	p := &workerProc{cmd: cmd, readyMark: readyMark, ready: make(chan struct{}), done: make(chan struct{})}
	if err := cmd.Start(); err != nil {
		return nil, fmt.Errorf("start %s binary: %w", name, err)
	}
	go p.scan(stderr)
	return p, nil
}

func (p *workerProc) scan(r io.Reader) {
	defer func() {
		p.waitErr = p.cmd.Wait()
		close(p.done)
	}()
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 64*1024), 1024*1024)
	readyOnce := sync.Once{}
	for sc.Scan() {
		line := sc.Text()
		p.mu.Lock()
		p.tail = append(p.tail, line)
		if len(p.tail) > 20 {
			p.tail = p.tail[1:]
		}
		p.mu.Unlock()
		if p.readyMark != "" && strings.Contains(line, p.readyMark) {
			readyOnce.Do(func() { close(p.ready) })
		}
	}
}

func (p *workerProc) lastLines() string {
	p.mu.Lock()
	defer p.mu.Unlock()
	return strings.Join(p.tail, "\n")
}

// kill SIGKILLs the process and waits for it to be reaped.
func (p *workerProc) kill() {
	_ = p.cmd.Process.Signal(syscall.SIGKILL)
	<-p.done
}

// terminate sends SIGTERM and waits up to grace for a clean exit, then
// SIGKILLs. It returns the exit error, or an error saying it had to kill.
func (p *workerProc) terminate(grace time.Duration) error {
	_ = p.cmd.Process.Signal(syscall.SIGTERM)
	select {
	case <-p.done:
		return p.waitErr
	case <-time.After(grace):
		p.kill()
		return fmt.Errorf("still running %s after SIGTERM; killed", grace)
	}
}

// procStatus reads VmRSS and VmHWM (bytes) of pid.
func procStatus(pid int) (rss, hwm int64, err error) {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		return 0, 0, err
	}
	for _, line := range strings.Split(string(b), "\n") {
		f := strings.Fields(line)
		if len(f) < 2 {
			continue
		}
		v, _ := strconv.ParseInt(f[1], 10, 64)
		switch f[0] {
		case "VmRSS:":
			rss = v * 1024
		case "VmHWM:":
			hwm = v * 1024
		}
	}
	return rss, hwm, nil
}

// procCPU reads the user+system CPU time of pid from /proc/<pid>/stat
// (clock ticks of 10ms, USER_HZ 100 on Linux).
func procCPU(pid int) (time.Duration, error) {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return 0, err
	}
	s := string(b)
	f := strings.Fields(s[strings.LastIndexByte(s, ')')+2:])
	if len(f) < 13 {
		return 0, fmt.Errorf("short /proc/%d/stat", pid)
	}
	ut, _ := strconv.ParseInt(f[11], 10, 64)
	st, _ := strconv.ParseInt(f[12], 10, 64)
	return time.Duration(ut+st) * 10 * time.Millisecond, nil
}
