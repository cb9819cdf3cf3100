// Package binarytest builds mightyETL's commands (cmd/intake, cmd/worker,
// cmd/etlctl) and supervises them as child processes, for the black-box
// tests, the fault-injection harness and the bench: build each command once
// per process, start it with a given environment, keep its output, wait for
// a readiness condition with a deadline, signal it, wait for its exit with a
// deadline.
//
// The core (Builder, Start, Process) returns errors and needs no testing.T,
// so non-test code (the bench, internal/faultinject) uses it too; Binaries,
// Spawn and Main are the thin wrappers for tests.
//
// Binaries are built without -race, as every user built them before: the
// race detector's cost would slow the system under test, and the packages'
// own tests run the same code under -race.
package binarytest

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"sync"
)

// modulePath is the module whose commands a Builder builds.
const modulePath = "github.com/mightyetl/mightyetl"

// Builder builds the module's commands (cmd/<name>), each at most once:
// later calls for a built name return its path (or its build error) at
// once. Safe for concurrent use; concurrent builds wait for each other. The
// zero Builder is ready.
type Builder struct {
	// ModuleDir is the root of the mightyETL module; empty means the module
	// of the working directory (`go env GOMOD`).
	ModuleDir string
	// Dir receives the binaries; empty means a directory of the Builder's
	// own under os.TempDir, made on the first build and removed by Close.
	Dir string

	mu     sync.Mutex
	ownDir string
	built  map[string]built
}

type built struct {
	path string
	err  error
}

// Build builds the named commands not built before, in one `go build`, and
// returns every name's path. The error names the first command whose build
// failed (with the compiler's last lines); a failed build is not retried.
func (b *Builder) Build(ctx context.Context, names ...string) (map[string]string, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.built == nil {
		b.built = map[string]built{}
	}
	var missing []string
	for _, n := range names {
		if _, ok := b.built[n]; !ok && !slices.Contains(missing, n) {
			missing = append(missing, n)
		}
	}
	if len(missing) > 0 {
		paths, err := b.buildLocked(ctx, missing)
		for _, n := range missing {
			b.built[n] = built{path: paths[n], err: err}
		}
	}
	out := make(map[string]string, len(names))
	for _, n := range names {
		r := b.built[n]
		if r.err != nil {
			return nil, r.err
		}
		out[n] = r.path
	}
	return out, nil
}

// Binary builds one command (see Build) and returns its path.
func (b *Builder) Binary(ctx context.Context, name string) (string, error) {
	paths, err := b.Build(ctx, name)
	if err != nil {
		return "", err
	}
	return paths[name], nil
}

func (b *Builder) buildLocked(ctx context.Context, names []string) (map[string]string, error) {
	root := b.ModuleDir
	if root == "" {
		var err error
		if root, err = ModuleRoot(ctx); err != nil {
			return nil, err
		}
	}
	dir := b.Dir
	if dir == "" {
		if b.ownDir == "" {
			d, err := os.MkdirTemp("", "mightyetl-bin-")
			if err != nil {
				return nil, fmt.Errorf("binary directory: %w", err)
			}
			b.ownDir = d
		}
		dir = b.ownDir
	} else if err := os.MkdirAll(dir, 0o755); err != nil {
		return nil, fmt.Errorf("binary directory: %w", err)
	}
	args := []string{"build", "-o", dir + string(filepath.Separator)}
	paths := map[string]string{}
	for _, n := range names {
		args = append(args, "./cmd/"+n)
		paths[n] = filepath.Join(dir, n)
	}
	cmd := exec.CommandContext(ctx, "go", args...)
	cmd.Dir = root
	if out, err := cmd.CombinedOutput(); err != nil {
		return nil, fmt.Errorf("go build ./cmd/{%s}: %v\n%s", strings.Join(names, ","), err, LastLines(out, 20))
	}
	return paths, nil
}

// Close removes the Builder's own directory (not a given Dir) and forgets
// what it built; a later Build builds again.
func (b *Builder) Close() error {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.built = nil
	if b.ownDir == "" {
		return nil
	}
	dir := b.ownDir
	b.ownDir = ""
	return os.RemoveAll(dir)
}

// ModuleRoot is the directory of the mightyETL module's go.mod, as `go env
// GOMOD` finds it from the working directory.
func ModuleRoot(ctx context.Context) (string, error) {
	out, err := exec.CommandContext(ctx, "go", "env", "GOMOD").Output()
	if err != nil {
		return "", fmt.Errorf("go env GOMOD: %w", err)
	}
	gomod := strings.TrimSpace(string(out))
	b, err := os.ReadFile(gomod)
	if err != nil || !bytes.Contains(b, []byte("module "+modulePath+"\n")) {
		return "", fmt.Errorf("run inside the mightyETL module (found go.mod %q)", gomod)
	}
	return filepath.Dir(gomod), nil
}

// Env is this process's environment without every variable whose name
// starts with one of drop, followed by extra (which thus decides every
// setting it names).
func Env(drop []string, extra ...string) []string {
	var env []string
	for _, kv := range os.Environ() {
		name, _, _ := strings.Cut(kv, "=")
		if !hasAnyPrefix(name, drop) {
			env = append(env, kv)
		}
	}
	return append(env, extra...)
}

// Isolated are the name prefixes of every setting a product binary reads
// (its own, the database's, NATS's, OpenTelemetry's, libpq's) and of the
// tests' own: Env(Isolated, ...) starts a binary that sees only the
// settings the caller passes.
var Isolated = []string{"MIGHTYETL_", "DATABASE_URL", "NATS_", "OTEL_", "PG", "TEST_"}

func hasAnyPrefix(s string, prefixes []string) bool {
	for _, p := range prefixes {
		if strings.HasPrefix(s, p) {
			return true
		}
	}
	return false
}

// LastLines is the last n lines of out, for error messages.
func LastLines(out []byte, n int) string {
	lines := strings.Split(strings.TrimRight(string(out), "\n"), "\n")
	if len(lines) > n {
		lines = lines[len(lines)-n:]
	}
	return strings.Join(lines, "\n")
}
