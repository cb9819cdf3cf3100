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

// workerBinary builds cmd/worker with `go build` once per harness.
func (h *harness) workerBinary(ctx context.Context) (string, error) {
	h.binOnce.Do(func() {
		root, err := moduleRoot(ctx)
		if err != nil {
			h.binErr = err
			return
		}
		dir, err := os.MkdirTemp("", "mightyetl-bench-bin")
		if err != nil {
			h.binErr = err
			return
		}
		h.binDir = dir
		h.binPath = filepath.Join(dir, "worker")
		cmd := exec.CommandContext(ctx, "go", "build", "-o", h.binPath, "./cmd/worker")
		cmd.Dir = root
		if out, err := cmd.CombinedOutput(); err != nil {
			h.binErr = fmt.Errorf("go build ./cmd/worker: %v\n%s", err, out)
		}
	})
	return h.binPath, h.binErr
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

// workerProc is one running cmd/worker process.
type workerProc struct {
	cmd   *exec.Cmd
	id    string
	ready chan struct{}
	done  chan struct{}
	mu    sync.Mutex
	tail  []string
}

// startBinary starts cmd/worker with the bench database and env settings
// (MIGHTYETL_* and NATS_* of this process are not inherited). It returns
// once the worker logged "worker ready".
func (h *harness) startBinary(ctx context.Context, id string, env ...string) (*workerProc, error) {
	bin, err := h.workerBinary(ctx)
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
	cmd.Env = append(cmd.Env, "DATABASE_URL="+h.url, "MIGHTYETL_WORKER_ID="+id, "MIGHTYETL_METRICS_ADDR=127.0.0.1:0")
	cmd.Env = append(cmd.Env, env...)
	stderr, err := cmd.StderrPipe()
	if err != nil {
		return nil, err
	}
	p := &workerProc{cmd: cmd, id: id, ready: make(chan struct{}), done: make(chan struct{})}
	if err := cmd.Start(); err != nil {
		return nil, fmt.Errorf("start worker binary: %w", err)
	}
	go p.scan(stderr)
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

func (p *workerProc) scan(r io.Reader) {
	defer func() {
		_ = p.cmd.Wait()
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
		if strings.Contains(line, `"worker ready"`) {
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
