package faultinject

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"sync"
	"syscall"
	"time"
)

// Binaries are the paths of the built product binaries.
type Binaries struct {
	Intake, Worker, Etlctl string
}

// BuildBinaries runs `go build` for cmd/intake, cmd/worker and cmd/etlctl
// of the module at moduleDir into outDir. They are built without -race: the
// race detector's cost would slow the system under test, and its own
// tests run the same code under -race.
func BuildBinaries(ctx context.Context, moduleDir, outDir string) (Binaries, error) {
	goBin, err := exec.LookPath("go")
	if err != nil {
		return Binaries{}, fmt.Errorf("%w: go not on PATH", ErrMissingTool)
	}
	cmd := exec.CommandContext(ctx, goBin, "build", "-o", outDir+string(filepath.Separator), "./cmd/intake", "./cmd/worker", "./cmd/etlctl")
	cmd.Dir = moduleDir
	if out, err := cmd.CombinedOutput(); err != nil {
		return Binaries{}, fmt.Errorf("go build: %v: %s", err, lastLines(out, 20))
	}
	return Binaries{
		Intake: filepath.Join(outDir, "intake"),
		Worker: filepath.Join(outDir, "worker"),
		Etlctl: filepath.Join(outDir, "etlctl"),
	}, nil
}

// Process is one supervised product process. Start runs it; while it is
// supervised, an exit the harness did not cause is counted and the process
// is started again after a short pause (a binary that refuses to start
// because PostgreSQL is down exits with status 1 and is retried the same
// way). Kill sends SIGKILL and keeps the process down until Restart. Safe
// for concurrent use.
type Process struct {
	Name  string
	bin   string
	env   []string
	log   string // path of the process's stdout and stderr
	ready func(context.Context) bool

	mu          sync.Mutex
	cmd         *exec.Cmd
	done        chan struct{}
	startedAt   time.Time
	wantDown    bool // killed by the harness: stay down until Restart
	stopping    bool
	starts      int
	unexpected  int // exits after startupWindow that the harness did not cause
	failedStart int // exits within startupWindow (e.g. database down at start)
	restart     chan struct{}
	supervising sync.WaitGroup
}

// NewProcess describes a process; ready reports whether it serves (e.g.
// GET /readyz answers 200).
func NewProcess(name, bin string, env []string, logPath string, ready func(context.Context) bool) *Process {
	return &Process{Name: name, bin: bin, env: env, log: logPath, ready: ready, restart: make(chan struct{}, 1)}
}

// Start starts the supervision loop and waits until the process is ready
// or within passes.
func (p *Process) Start(ctx context.Context, within time.Duration) error {
	p.supervising.Add(1)
	go p.supervise(ctx)
	return p.WaitReady(ctx, within)
}

// WaitReady waits until the process runs and its readiness check passes.
func (p *Process) WaitReady(ctx context.Context, within time.Duration) error {
	return waitFor(ctx, within, 50*time.Millisecond, p.Name+" to be ready", func() bool {
		p.mu.Lock()
		running := p.cmd != nil
		p.mu.Unlock()
		return running && p.ready(ctx)
	})
}

// startupWindow separates a failed start (the binary checks the database
// and exits with status 1 while PostgreSQL is down) from an unexpected exit
// of a running process.
const startupWindow = 5 * time.Second

var errStopping = errors.New("process is stopping")

func (p *Process) supervise(ctx context.Context) {
	defer p.supervising.Done()
	for ctx.Err() == nil {
		done, err := p.spawn()
		if errors.Is(err, errStopping) {
			return
		}
		if err != nil {
			select {
			case <-ctx.Done():
				return
			case <-time.After(500 * time.Millisecond):
			}
			continue
		}
		select {
		case <-done:
		case <-ctx.Done():
			p.mu.Lock()
			p.stopping = true
			cmd := p.cmd
			p.mu.Unlock()
			if cmd != nil {
				_ = cmd.Process.Kill()
			}
			<-done
			return
		}
		p.mu.Lock()
		p.cmd = nil
		down, stopping := p.wantDown, p.stopping
		if !down && !stopping {
			if time.Since(p.startedAt) > startupWindow {
				p.unexpected++
			} else {
				p.failedStart++
			}
		}
		p.mu.Unlock()
		if stopping {
			return
		}
		if down {
			select {
			case <-p.restart:
			case <-ctx.Done():
				return
			}
			continue
		}
		select {
		case <-ctx.Done():
			return
		case <-time.After(250 * time.Millisecond):
		}
	}
}

func (p *Process) spawn() (chan struct{}, error) {
	logf, err := os.OpenFile(p.log, os.O_CREATE|os.O_APPEND|os.O_WRONLY, 0o600)
	if err != nil {
		return nil, err
	}
	defer logf.Close()
	cmd := exec.Command(p.bin)
	cmd.Env = p.env
	cmd.Stdout, cmd.Stderr = logf, logf
	// The product processes must not outlive a test binary that dies.
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.stopping {
		return nil, errStopping
	}
	if err := cmd.Start(); err != nil {
		return nil, fmt.Errorf("start %s: %w", p.Name, err)
	}
	done := make(chan struct{})
	go func() {
		_ = cmd.Wait()
		close(done)
	}()
	p.cmd, p.done, p.startedAt, p.wantDown = cmd, done, time.Now(), false
	p.starts++
	return done, nil
}

// Kill sends SIGKILL and waits until the process is gone. It stays down
// until Restart. It returns false when the process was not running.
func (p *Process) Kill() bool {
	p.mu.Lock()
	cmd, done := p.cmd, p.done
	if cmd == nil {
		p.mu.Unlock()
		return false
	}
	p.wantDown = true
	p.mu.Unlock()
	_ = cmd.Process.Signal(syscall.SIGKILL)
	<-done
	// Wait for the supervisor to see the exit, so Restart is not lost.
	for {
		p.mu.Lock()
		gone := p.cmd == nil
		p.mu.Unlock()
		if gone {
			return true
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// Restart starts a process stopped by Kill.
func (p *Process) Restart() {
	select {
	case p.restart <- struct{}{}:
	default:
	}
}

// Stop sends SIGTERM, waits up to grace for the process to exit (SIGKILL
// then), and ends supervision. The context given to Start must be cancelled
// by the caller afterwards or before; Stop returns once supervision ended.
func (p *Process) Stop(grace time.Duration) {
	p.mu.Lock()
	p.stopping = true
	cmd, done := p.cmd, p.done
	p.mu.Unlock()
	p.Restart() // release a supervisor waiting after Kill
	if cmd != nil {
		_ = cmd.Process.Signal(syscall.SIGTERM)
		select {
		case <-done:
		case <-time.After(grace):
			_ = cmd.Process.Kill()
			<-done
		}
	}
	p.supervising.Wait()
}

// ProcessStats are a process's counters.
type ProcessStats struct {
	Starts          int // every start, the first included
	UnexpectedExits int // exits the harness did not cause, after startupWindow
	FailedStarts    int // exits within startupWindow of a start (e.g. database down)
}

// Stats returns the counters.
func (p *Process) Stats() ProcessStats {
	p.mu.Lock()
	defer p.mu.Unlock()
	return ProcessStats{Starts: p.starts, UnexpectedExits: p.unexpected, FailedStarts: p.failedStart}
}

// httpOK reports whether GET url answers 200 within a second.
func httpOK(ctx context.Context, client *http.Client, url string) bool {
	ctx, cancel := context.WithTimeout(ctx, time.Second)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err != nil {
		return false
	}
	resp, err := client.Do(req)
	if err != nil {
		return false
	}
	resp.Body.Close()
	return resp.StatusCode == http.StatusOK
}
