package main_test

import (
	"context"
	"encoding/json"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/mightyetl/mightyetl/client"
	"github.com/mightyetl/mightyetl/internal/binarytest"
	"github.com/mightyetl/mightyetl/internal/testwait"
)

// readmeRun is what the README's "Run it" section tells a user to type.
type readmeRun struct {
	lines []string // every line of its ```sh blocks, in order
	build string   // the line that builds the CLI ("make build", "go install ./cmd/etlctl"); empty: none
	cli   string   // how the CLI is invoked: what precedes "jobs wait" on the wait line
	wait  string   // the wait line, with the placeholder "<JOB ID printed by submit>"
}

const jobIDPlaceholder = "<JOB ID printed by submit>"

// readREADMERun extracts the shell lines of the README's "## Run it"
// section and finds the build and wait lines among them.
func readREADMERun(t *testing.T) readmeRun {
	t.Helper()
	b, err := os.ReadFile("../../README.md")
	if err != nil {
		t.Fatal(err)
	}
	_, section, ok := strings.Cut(string(b), "\n## Run it\n")
	if !ok {
		t.Fatal(`README.md has no "## Run it" section`)
	}
	section, _, _ = strings.Cut(section, "\n## ")
	var r readmeRun
	in := false
	for _, l := range strings.Split(section, "\n") {
		switch {
		case strings.HasPrefix(l, "```sh"):
			in = true
		case strings.HasPrefix(l, "```"):
			in = false
		case in:
			l, _, _ = strings.Cut(l, " # ") // a comment after the command
			if l = strings.TrimSpace(l); l != "" {
				r.lines = append(r.lines, l)
			}
		}
	}
	for _, l := range r.lines {
		switch {
		case l == "make build" || strings.HasPrefix(l, "go install ") || strings.HasPrefix(l, "go build "):
			if r.build == "" {
				r.build = l
			}
		case strings.Contains(l, " jobs wait "):
			r.wait = l
			r.cli, _, _ = strings.Cut(l, " jobs wait ")
		}
	}
	if r.wait == "" || !strings.Contains(r.wait, jobIDPlaceholder) {
		t.Fatalf("the run section shows no `jobs wait %s` line: %q", jobIDPlaceholder, r.lines)
	}
	return r
}

// TestREADMEWaitExitCodes runs the README's run section as a user would:
// its build line (into a directory of the test's own instead of the tree's
// bin/: `make build BIN=<dir>/bin`, or `go install` with GOBIN=<dir>/bin
// first on PATH), then, from the repository root in a shell, the export
// line `etlctl dev` prints and the README's wait line for a SUCCEEDED, a
// FAILED, a CANCELLED and a still-running job (with --timeout). The shell's
// exit status must be the documented one: 0, 1, 3 and 4. Through `go run`
// every non-zero status becomes 1, so a README that runs the CLI that way
// fails here.
func TestREADMEWaitExitCodes(t *testing.T) {
	r := readREADMERun(t)
	root, err := filepath.Abs("../..")
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	binDir := filepath.Join(dir, "bin")
	// No mightyETL, database or NATS setting of the test's own reaches the
	// shell; the export line brings the CLI's.
	env := binarytest.Env(binarytest.Isolated, "PATH="+binDir+string(os.PathListSeparator)+os.Getenv("PATH"))
	sh := func(script string, extraEnv ...string) (string, int) {
		t.Helper()
		cmd := exec.Command("sh", "-c", script)
		cmd.Dir = root
		cmd.Env = append(append([]string(nil), env...), extraEnv...)
		out, err := cmd.CombinedOutput()
		var exit *exec.ExitError
		if err != nil && !errors.As(err, &exit) {
			t.Fatalf("sh -c %q: %v", script, err)
		}
		return string(out), cmd.ProcessState.ExitCode()
	}
	switch {
	case r.build == "":
	case r.build == "make build":
		if out, code := sh("make build BIN=" + binDir); code != 0 {
			t.Fatalf("%s: exit %d\n%s", r.build, code, out)
		}
	case strings.HasPrefix(r.build, "go install "):
		if out, code := sh(r.build, "GOBIN="+binDir); code != 0 {
			t.Fatalf("%s: exit %d\n%s", r.build, code, out)
		}
	default:
		t.Fatalf("the run section builds the CLI with %q, which this test cannot point at a directory of its own", r.build)
	}
	// The README's bin/ is the build directory, here the test's.
	wait := r.wait
	if strings.HasPrefix(r.cli, "bin/") {
		wait = filepath.Join(dir, r.cli) + strings.TrimPrefix(wait, r.cli)
	}

	d := startDevForCLI(t)
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	c := d.client(t)
	submit := func(req client.DiagnosticRequest) string {
		t.Helper()
		s, err := c.SubmitDiagnostic(ctx, req, "")
		if err != nil {
			t.Fatal(err)
		}
		return s.JobID
	}
	succeeded := submit(client.DiagnosticRequest{})
	failed := submit(client.DiagnosticRequest{FailWith: "permanent"})
	cancelled := submit(client.DiagnosticRequest{DurationMillis: 600_000})
	if _, err := c.Cancel(ctx, cancelled, ""); err != nil {
		t.Fatal(err)
	}
	running := submit(client.DiagnosticRequest{DurationMillis: 600_000})
	t.Cleanup(func() { _, _ = c.Cancel(context.WithoutCancel(ctx), running, "") })
	testwait.For(t, time.Minute, "the long job RUNNING", func() bool {
		j, err := c.Get(ctx, running)
		return err == nil && j.Status == client.StatusRunning
	})

	for _, tc := range []struct {
		name  string
		id    string
		flags string
		code  int
		state client.Status
	}{
		{"SUCCEEDED", succeeded, "", 0, client.StatusSucceeded},
		{"FAILED", failed, "", 1, client.StatusFailed},
		{"CANCELLED", cancelled, "", 3, client.StatusCancelled},
		{"timeout", running, " --timeout 2s", 4, client.StatusRunning},
	} {
		line := strings.Replace(wait, jobIDPlaceholder, tc.id, 1) + tc.flags
		out, code := sh(d.exportLine + "\n" + line)
		if code != tc.code {
			t.Errorf("%s: `%s` exited %d, want %d (README: %q)\n%s", tc.name, line, code, tc.code, r.wait, out)
			continue
		}
		// Standard output is not a terminal: the job as JSON, first line.
		var j client.Job
		first, _, _ := strings.Cut(out, "\n")
		if err := json.Unmarshal([]byte(first), &j); err != nil || j.ID != tc.id || j.Status != tc.state {
			t.Errorf("%s: printed %q", tc.name, out)
		}
	}
}
