package binarytest

import (
	"context"
	"os"
	"time"
)

// TB is the part of testing.TB the test wrappers use.
type TB interface {
	Helper()
	Fatalf(format string, args ...any)
	Logf(format string, args ...any)
	Cleanup(func())
	Failed() bool
}

// shared is the test binary's Builder: every test of a package gets the
// same builds. Main removes its directory.
var shared Builder

// buildWithin bounds one `go build` of the test wrappers.
const buildWithin = 5 * time.Minute

// Binaries returns the paths of the named commands, built once per test
// binary (the first call builds, later calls wait for it), or fails t with
// the build's error.
func Binaries(t TB, names ...string) map[string]string {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), buildWithin)
	defer cancel()
	paths, err := shared.Build(ctx, names...)
	if err != nil {
		t.Fatalf("binarytest: %v", err)
	}
	return paths
}

// Binary is Binaries for one command.
func Binary(t TB, name string) string {
	t.Helper()
	return Binaries(t, name)[name]
}

// Spawn starts o for the test t, or fails t. When t ends the process is
// killed (SIGKILL) unless it exited, and waited for; when t failed, its
// output is logged.
func Spawn(t TB, o Options) *Process {
	t.Helper()
	p, err := Start(o)
	if err != nil {
		t.Fatalf("binarytest: %v", err)
	}
	t.Cleanup(func() {
		p.Kill()
		if t.Failed() {
			t.Logf("%s output:\n%s", p.Name(), p.Output())
		}
	})
	return p
}

// Main runs a package's tests and removes the binaries built for them:
// call it from TestMain (binarytest.Main(m)). It does not return.
func Main(m interface{ Run() int }) {
	code := m.Run()
	_ = RemoveBuilt()
	os.Exit(code)
}

// RemoveBuilt removes the binaries Binaries built, for a TestMain that
// does not call Main (one that runs goleak.VerifyTestMain, say).
func RemoveBuilt() error { return shared.Close() }
