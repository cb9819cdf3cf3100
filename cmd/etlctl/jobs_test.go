package main_test

import (
	"bytes"
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
	"github.com/mightyetl/mightyetl/internal/pgtest"
	"github.com/mightyetl/mightyetl/internal/testwait"
)

// devCLI is a running `etlctl dev` and the CLI lines it printed.
type devCLI struct {
	bin        string
	exportLine string // export MIGHTYETL_API_URL=... MIGHTYETL_API_USER=... MIGHTYETL_API_PASSWORD=...
	submitLine string
	waitLine   string
	env        map[string]string
}

// startDevForCLI runs the built binary's `dev` with extra environment and
// returns the CLI lines it printed.
func startDevForCLI(t *testing.T, extra ...string) *devCLI {
	t.Helper()
	_, url := pgtest.NewDatabase(t)
	d := &devCLI{bin: buildEtlctl(t), env: map[string]string{}}
	dev := startDev(t, d.bin, url, extra...)
	dev.readUntil(t, func(l string) bool {
		switch {
		case strings.HasPrefix(l, "export MIGHTYETL_API_URL="):
			d.exportLine = l
		case strings.Contains(l, "jobs submit"):
			d.submitLine = l
		case strings.Contains(l, "jobs wait"):
			d.waitLine = l
		}
		return d.waitLine != ""
	}, "dev exited before printing the CLI lines", "no CLI lines within 90s")
	for _, kv := range strings.Fields(strings.TrimPrefix(d.exportLine, "export ")) {
		k, v, _ := strings.Cut(kv, "=")
		d.env[k] = v
	}
	if d.env["MIGHTYETL_API_URL"] == "" || d.env["MIGHTYETL_API_USER"] == "" || d.env["MIGHTYETL_API_PASSWORD"] == "" {
		t.Fatalf("export line %q", d.exportLine)
	}
	return d
}

// local replaces the printed "bin/etlctl" (what `make build` makes) with
// the test's built binary.
func (d *devCLI) local(line string) string {
	return strings.ReplaceAll(line, "bin/etlctl", d.bin)
}

// run runs the binary with args and the printed connection settings.
func (d *devCLI) run(t *testing.T, stdin string, args ...string) (stdout, stderr string, code int) {
	t.Helper()
	cmd := exec.Command(d.bin, args...)
	var env []string
	for _, kv := range os.Environ() {
		if !strings.HasPrefix(kv, "MIGHTYETL_") {
			env = append(env, kv)
		}
	}
	for k, v := range d.env {
		env = append(env, k+"="+v)
	}
	cmd.Env = env
	cmd.Stdin = strings.NewReader(stdin)
	var o, e bytes.Buffer
	cmd.Stdout, cmd.Stderr = &o, &e
	err := cmd.Run()
	var ee *exec.ExitError
	if err != nil && !errors.As(err, &ee) {
		t.Fatal(err)
	}
	if strings.Contains(o.String()+e.String(), d.env["MIGHTYETL_API_PASSWORD"]) {
		t.Fatalf("etlctl %v printed the password", args)
	}
	return o.String(), e.String(), cmd.ProcessState.ExitCode()
}

func (d *devCLI) client(t *testing.T) *client.Client {
	c, err := client.New(d.env["MIGHTYETL_API_URL"], client.WithBasicAuth(d.env["MIGHTYETL_API_USER"], d.env["MIGHTYETL_API_PASSWORD"]))
	if err != nil {
		t.Fatal(err)
	}
	return c
}

// TestREADMECLILinesWorkAgainstDev runs the export, submit and wait lines
// `etlctl dev` prints (the README's run section shows the same lines) in a
// shell exactly as printed, with the test's built binary standing in for
// `bin/etlctl`, and sees the job succeed (TestREADMEWaitExitCodes builds
// it as the README says and checks wait's exit statuses).
func TestREADMECLILinesWorkAgainstDev(t *testing.T) {
	d := startDevForCLI(t)
	readme, err := os.ReadFile("../../README.md")
	if err != nil {
		t.Fatal(err)
	}
	for _, l := range []string{d.submitLine, d.waitLine, "export MIGHTYETL_API_URL=http://127.0.0.1:8080 MIGHTYETL_API_USER=dev MIGHTYETL_API_PASSWORD="} {
		if !strings.Contains(string(readme), l) {
			t.Errorf("README does not show the line dev prints: %q", l)
		}
	}
	out, err := exec.Command("sh", "-c", d.exportLine+"\n"+d.local(d.submitLine)+" -o table").CombinedOutput()
	if err != nil {
		t.Fatalf("submit line: %v\n%s", err, out)
	}
	lines := strings.Split(strings.TrimSpace(string(out)), "\n")
	if len(lines) != 2 || !strings.HasPrefix(lines[0], "JOB ID") {
		t.Fatalf("submit printed %q", out)
	}
	id := strings.Fields(lines[1])[0]
	waitLine := strings.Replace(d.local(d.waitLine), "<JOB ID printed by submit>", id, 1)
	out, err = exec.Command("sh", "-c", d.exportLine+"\n"+waitLine+" -o table").CombinedOutput()
	if err != nil || !strings.Contains(string(out), "SUCCEEDED") {
		t.Fatalf("wait line: %v\n%s", err, out)
	}
}

// TestJobsCommands runs the built binary against `etlctl dev` with one
// worker slot: submit from a file, wait, get, list; with the slot held by a
// long diagnostic job, submit, cancel the PENDING job and see wait exit 3,
// replay it, free the slot and see the replay succeed. Also JSON Lines,
// wait's timeout, a problem's one-line error and --help.
func TestJobsCommands(t *testing.T) {
	d := startDevForCLI(t, "MIGHTYETL_WORKER_CONCURRENCY=1")
	dir := t.TempDir()
	batch := filepath.Join(dir, "batch.json")
	if err := os.WriteFile(batch, []byte(`[{"id":"a1","name":"jane"},{"id":"a2","name":"joe"}]`), 0o600); err != nil {
		t.Fatal(err)
	}
	var sub client.Submission
	decode := func(s string, v any) {
		t.Helper()
		if err := json.Unmarshal([]byte(s), v); err != nil {
			t.Fatalf("decode %q: %v", s, err)
		}
	}
	out, errOut, code := d.run(t, "", "jobs", "submit", "--file", batch, "--key", "cli-test-key-000001", "-o", "json")
	if code != 0 {
		t.Fatalf("submit: %d %s", code, errOut)
	}
	decode(out, &sub)
	if sub.Key != "cli-test-key-000001" || sub.JobID == "" {
		t.Fatalf("submit printed %q", out)
	}
	var j client.Job
	out, errOut, code = d.run(t, "", "jobs", "wait", sub.JobID, "--timeout", "60s", "-o", "json")
	decode(out, &j)
	if code != 0 || j.Status != client.StatusSucceeded {
		t.Fatalf("wait: %d %q %s", code, out, errOut)
	}
	out, _, code = d.run(t, "", "jobs", "get", sub.JobID, "-o", "table")
	if code != 0 || !strings.Contains(out, sub.JobID) || !strings.Contains(out, "SUCCEEDED") {
		t.Fatalf("get: %d %q", code, out)
	}
	out, _, code = d.run(t, "", "jobs", "list", "--all", "--limit", "1", "-o", "json")
	var page client.Page
	decode(out, &page)
	if code != 0 || len(page.Jobs) != 1 || page.Jobs[0].ID != sub.JobID {
		t.Fatalf("list: %d %q", code, out)
	}

	// Hold the only worker slot.
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	c := d.client(t)
	blocker, err := c.SubmitDiagnostic(ctx, client.DiagnosticRequest{DurationMillis: 600_000}, "")
	if err != nil {
		t.Fatal(err)
	}
	testwait.For(t, time.Minute, "the blocker RUNNING", func() bool {
		j, err := c.Get(ctx, blocker.JobID)
		return err == nil && j.Status == client.StatusRunning
	})
	_, errOut, code = d.run(t, "", "jobs", "wait", blocker.JobID, "--timeout", "1s", "-o", "json")
	if code != 4 || !strings.Contains(errOut, "timeout") {
		t.Fatalf("wait with a timeout: %d %q", code, errOut)
	}

	other := filepath.Join(dir, "other.json")
	if err := os.WriteFile(other, []byte(`[{"id":"b1","amount":"1.5"}]`), 0o600); err != nil {
		t.Fatal(err)
	}
	out, _, code = d.run(t, "", "jobs", "submit", "--file", other, "-o", "json")
	decode(out, &sub)
	if code != 0 || sub.Status != client.StatusPending || !strings.HasPrefix(sub.Key, "mightyetl-") {
		t.Fatalf("submit: %d %q", code, out)
	}
	out, _, code = d.run(t, "", "jobs", "cancel", sub.JobID, "-o", "json")
	var cn client.Cancellation
	decode(out, &cn)
	if code != 0 || cn.Job.Status != client.StatusCancelled || cn.Replayed || cn.Key != "etlctl-cancel-"+sub.JobID {
		t.Fatalf("cancel: %d %q", code, out)
	}
	// Cancelling again without --key (upper-case id, as the service reads
	// ids case-insensitively) replays the first cancellation: exit 0, the
	// same key and cancellation time, replayed.
	out, errOut, code = d.run(t, "", "jobs", "cancel", strings.ToUpper(sub.JobID), "-o", "json")
	var again client.Cancellation
	decode(out, &again)
	if code != 0 || !again.Replayed || again.Key != cn.Key || again.Job.Status != client.StatusCancelled ||
		!again.Job.UpdatedAt.Equal(cn.Job.UpdatedAt) {
		t.Fatalf("second cancel: %d %q %q", code, out, errOut)
	}
	out, _, code = d.run(t, "", "jobs", "wait", sub.JobID)
	if code != 3 || !strings.Contains(out, "CANCELLED") {
		t.Fatalf("wait on a cancelled job: %d %q", code, out)
	}
	var rp client.Submission
	out, _, code = d.run(t, "", "jobs", "replay", sub.JobID, "--file", other, "-o", "json")
	decode(out, &rp)
	if code != 0 || rp.JobID == sub.JobID || rp.Status != client.StatusPending {
		t.Fatalf("replay: %d %q", code, out)
	}
	if _, err := c.Cancel(ctx, blocker.JobID, ""); err != nil {
		t.Fatal(err)
	}
	out, _, code = d.run(t, "", "jobs", "wait", rp.JobID, "-o", "json")
	decode(out, &j)
	if code != 0 || j.Status != client.StatusSucceeded || j.ReplaySourceID != sub.JobID {
		t.Fatalf("wait on the replay: %d %q", code, out)
	}

	// JSON Lines from standard input: one job per line, keys <key>-<n>.
	out, _, code = d.run(t, "[{\"id\":\"l1\"}]\n[{\"id\":\"l2\"}]\n", "jobs", "submit", "--jsonl", "--key", "cli-jsonl-key-0001", "-o", "json")
	subs := strings.Split(strings.TrimSpace(out), "\n")
	if code != 0 || len(subs) != 2 || !strings.Contains(subs[1], `"idempotencyKey":"cli-jsonl-key-0001-2"`) {
		t.Fatalf("jsonl: %d %q", code, out)
	}
	// Synchronous processing.
	out, _, code = d.run(t, `[{"id":"s1"},{"id":"s2"}]`, "jobs", "process", "-o", "json")
	var pr client.ProcessResult
	decode(out, &pr)
	if code != 0 || strings.Join(pr.Processed, ",") != "s1,s2" {
		t.Fatalf("process: %d %q", code, out)
	}
	// A problem: one line with code and detail, exit 5.
	_, errOut, code = d.run(t, "", "jobs", "get", "00000000-0000-0000-0000-000000000000")
	if code != 5 || strings.Count(errOut, "\n") != 1 || !strings.Contains(errOut, "etl_job_not_found (404): ") {
		t.Fatalf("get of an absent job: %d %q", code, errOut)
	}
	// An invalid record: its position in the batch, never its content or id.
	_, errOut, code = d.run(t, `[{"id":"ok1"},{"id":"ok2"},{"id":"bad-3","amount":"1e3"}]`, "jobs", "submit")
	if code != 5 || !strings.HasPrefix(errOut, "etlctl jobs submit: record 2: etl_invalid_record (422): ") ||
		strings.Count(errOut, "\n") != 1 || strings.Contains(errOut, "bad-3") || strings.Contains(errOut, "1e3") {
		t.Fatalf("invalid record: %d %q", code, errOut)
	}
	// Wrong password: the password is never printed (run checks).
	d.env["MIGHTYETL_API_PASSWORD"] = "not-the-password-1234"
	_, errOut, code = d.run(t, "", "jobs", "list")
	if code != 5 || !strings.Contains(errOut, "etl_authentication_required (401)") {
		t.Fatalf("wrong password: %d %q", code, errOut)
	}
	out, _, code = d.run(t, "", "jobs", "--help")
	for _, w := range []string{"submit", "get", "list", "cancel", "replay", "wait", "process", "Examples:", "MIGHTYETL_API_TOKEN", "--password-file"} {
		if code != 0 || !strings.Contains(out, w) {
			t.Fatalf("--help lacks %q (exit %d)", w, code)
		}
	}
}
