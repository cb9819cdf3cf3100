package main

import (
	"context"
	"fmt"
	"os"
	"strconv"
	"strings"
	"time"

	"github.com/mightyetl/mightyetl/internal/binarytest"
)

// binary builds ./cmd/<name> with `go build` once per harness (per name)
// into the harness's temporary directory, and returns its path.
func (h *harness) binary(ctx context.Context, name string) (string, error) {
	return h.bins.Binary(ctx, name)
}

// moduleRoot is the directory of the mightyETL root module's go.mod.
func moduleRoot(ctx context.Context) (string, error) { return binarytest.ModuleRoot(ctx) }

// workerProc is one running product binary (cmd/worker or cmd/intake).
type workerProc struct {
	*binarytest.Process
	id string
}

// startBinary starts cmd/worker with the bench database and env settings
// (MIGHTYETL_* and NATS_* of this process are not inherited). It returns
// once the worker logged "worker ready".
func (h *harness) startBinary(ctx context.Context, id string, env ...string) (*workerProc, error) {
	env = append([]string{"MIGHTYETL_WORKER_ID=" + id, "MIGHTYETL_METRICS_ADDR=127.0.0.1:0"}, env...)
	p, err := h.spawn(ctx, "worker", env)
	if err != nil {
		return nil, err
	}
	p.id = id
	if err := p.WaitLine(ctx, 30*time.Second, func(l string) bool { return strings.Contains(l, `"worker ready"`) }); err != nil {
		p.Kill()
		return nil, fmt.Errorf("worker binary not ready: %w", err)
	}
	return p, nil
}

// spawn starts the cmd/<name> binary with DATABASE_URL set to the bench
// database (-binary-database-url when set), then env and -binary-env, on top of this process's environment without its
// MIGHTYETL_*, NATS_* and DATABASE_URL (so the caller decides every product
// setting).
func (h *harness) spawn(ctx context.Context, name string, env []string) (*workerProc, error) {
	bin, err := h.binary(ctx, name)
	if err != nil {
		return nil, err
	}
	p, err := binarytest.Start(binarytest.Options{Path: bin, Name: name + " binary",
		Env: binarytest.Env([]string{"MIGHTYETL_", "NATS_", "DATABASE_URL"}, append(append([]string{"DATABASE_URL=" + h.binaryURL()}, env...), h.binaryEnv()...)...)})
	if err != nil {
		return nil, err
	}
	return &workerProc{Process: p}, nil
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
