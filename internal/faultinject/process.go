package faultinject

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"sync"
	"time"

	"github.com/mightyetl/mightyetl/internal/binarytest"
)

// Binaries are the paths of the built product binaries.
type Binaries struct {
	Intake, Worker, Etlctl string
}

// BuildBinaries builds cmd/intake, cmd/worker and cmd/etlctl (one `go build`
// through binarytest.Builder) of the module at moduleDir and places them in
// outDir. They are built without -race: the race detector's cost would slow
// the system under test, and its own tests run the same code under -race.
//
// Each module directory is built once per test process (the scenarios of
// this package run in parallel, and each would otherwise link the three
// binaries again while the others compete for the same cores): the build
// goes to a directory shared by the process (removed by
// RemoveSharedBuilds) and each caller's outDir gets hard links to it (a
// copy where linking fails), so a failed run's directory still holds the
// binaries it ran.
func BuildBinaries(ctx context.Context, moduleDir, outDir string) (Binaries, error) {
	if _, err := exec.LookPath("go"); err != nil {
		return Binaries{}, fmt.Errorf("%w: go not on PATH", ErrMissingTool)
	}
	b, err := sharedBuilder(moduleDir)
	if err != nil {
		return Binaries{}, err
	}
	paths, err := b.Build(ctx, "intake", "worker", "etlctl")
	if err != nil {
		return Binaries{}, err
	}
	if err := os.MkdirAll(outDir, 0o755); err != nil {
		return Binaries{}, fmt.Errorf("binaries directory: %w", err)
	}
	var bins Binaries
	for name, dst := range map[string]*string{"intake": &bins.Intake, "worker": &bins.Worker, "etlctl": &bins.Etlctl} {
		*dst = filepath.Join(outDir, name)
		if err := linkOrCopy(paths[name], *dst); err != nil {
			return Binaries{}, fmt.Errorf("place %s binary: %w", name, err)
		}
	}
	return bins, nil
}

var (
	sharedBuildsMu  sync.Mutex
	sharedBuildsDir string
	sharedBuilds    = map[string]*binarytest.Builder{}
)

// sharedBuilder returns the process's Builder for moduleDir.
func sharedBuilder(moduleDir string) (*binarytest.Builder, error) {
	sharedBuildsMu.Lock()
	defer sharedBuildsMu.Unlock()
	if b, ok := sharedBuilds[moduleDir]; ok {
		return b, nil
	}
	if sharedBuildsDir == "" {
		d, err := os.MkdirTemp("", "mightyetl-faultinject-bin-")
		if err != nil {
			return nil, fmt.Errorf("shared build directory: %w", err)
		}
		sharedBuildsDir = d
	}
	dir := filepath.Join(sharedBuildsDir, strconv.Itoa(len(sharedBuilds)))
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return nil, fmt.Errorf("shared build directory: %w", err)
	}
	b := &binarytest.Builder{ModuleDir: moduleDir, Dir: dir}
	sharedBuilds[moduleDir] = b
	return b, nil
}

// RemoveSharedBuilds removes the binaries BuildBinaries built for this
// process (the links in each run's directory stay valid). TestMain calls it
// after the tests.
func RemoveSharedBuilds() {
	sharedBuildsMu.Lock()
	defer sharedBuildsMu.Unlock()
	if sharedBuildsDir != "" {
		_ = os.RemoveAll(sharedBuildsDir)
	}
	sharedBuildsDir = ""
	sharedBuilds = map[string]*binarytest.Builder{}
}

func linkOrCopy(src, dst string) error {
	_ = os.Remove(dst)
	if err := os.Link(src, dst); err == nil {
		return nil
	}
	in, err := os.Open(src)
	if err != nil {
		return err
	}
	defer in.Close()
	out, err := os.OpenFile(dst, os.O_CREATE|os.O_WRONLY|os.O_TRUNC, 0o755)
	if err != nil {
		return err
	}
	if _, err := io.Copy(out, in); err != nil {
		_ = out.Close()
		return err
	}
	return out.Close()
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
	proc        *binarytest.Process // nil while down
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
		running := p.proc != nil
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
			proc := p.proc
			p.mu.Unlock()
			if proc != nil {
				proc.Kill()
			}
			<-done
			return
		}
		p.mu.Lock()
		p.proc = nil
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

func (p *Process) spawn() (<-chan struct{}, error) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.stopping {
		return nil, errStopping
	}
	proc, err := binarytest.Start(binarytest.Options{Path: p.bin, Env: p.env, Name: p.Name, LogFile: p.log})
	if err != nil {
		return nil, err
	}
	p.proc, p.startedAt, p.wantDown = proc, time.Now(), false
	p.starts++
	return proc.Done(), nil
}

// Kill sends SIGKILL and waits until the process is gone. It stays down
// until Restart. It returns false when the process was not running.
func (p *Process) Kill() bool {
	p.mu.Lock()
	proc := p.proc
	if proc == nil {
		p.mu.Unlock()
		return false
	}
	p.wantDown = true
	p.mu.Unlock()
	proc.Kill()
	// Wait for the supervisor to see the exit, so Restart is not lost.
	for {
		p.mu.Lock()
		gone := p.proc == nil
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
	proc := p.proc
	p.mu.Unlock()
	p.Restart() // release a supervisor waiting after Kill
	if proc != nil {
		_ = proc.Terminate(grace) // SIGKILL after grace
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
	return binarytest.HTTPOK(client, url)(ctx)
}
