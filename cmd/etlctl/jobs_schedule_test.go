package main_test

import (
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/mightyetl/mightyetl/client"
)

// TestJobsScheduleFlags runs the built binary against `etlctl dev`: submit
// with --priority and --not-before (+duration and RFC 3339) answers and
// stores them; get's table shows the priority and the not-before; list
// --priority filters; cancel of the scheduled job shows it CANCELLED; a
// replay takes --priority; bad values and a payload that goes through an
// upload are usage errors (exit 2) that send nothing.
func TestJobsScheduleFlags(t *testing.T) {
	d := startDevForCLI(t, "MIGHTYETL_WORKER_CONCURRENCY=1")
	dir := t.TempDir()
	batch := filepath.Join(dir, "batch.json")
	if err := os.WriteFile(batch, []byte(`[{"id":"s1","name":"jane"}]`), 0o600); err != nil {
		t.Fatal(err)
	}
	decode := func(s string, v any) {
		t.Helper()
		if err := json.Unmarshal([]byte(s), v); err != nil {
			t.Fatalf("decode %q: %v", s, err)
		}
	}
	before := time.Now()
	out, errOut, code := d.run(t, "", "jobs", "submit", "--file", batch, "--priority", "1", "--not-before", "+2h", "-o", "json")
	if code != 0 {
		t.Fatalf("submit: %d %s", code, errOut)
	}
	var sub client.Submission
	decode(out, &sub)
	if sub.Priority != 1 || sub.NotBefore == nil || sub.NotBefore.Before(before.Add(2*time.Hour-time.Second)) ||
		sub.NotBefore.After(time.Now().Add(2*time.Hour+time.Second)) {
		t.Fatalf("submission %+v", sub)
	}
	out, _, code = d.run(t, "", "jobs", "get", sub.JobID, "-o", "table")
	if code != 0 || !strings.Contains(out, "PRIORITY") || !strings.Contains(out, "NOT BEFORE") ||
		!strings.Contains(out, sub.NotBefore.UTC().Format(time.RFC3339)) {
		t.Fatalf("get: %d %q", code, out)
	}
	if f := strings.Fields(strings.Split(out, "\n")[1]); len(f) < 4 || f[1] != "PENDING" || f[2] != "1" {
		t.Fatalf("get row %q", f)
	}

	at := time.Now().Add(time.Hour).UTC().Truncate(time.Second)
	out, errOut, code = d.run(t, `[{"id":"s2"}]`, "jobs", "submit", "--priority", "4", "--not-before", at.Format(time.RFC3339), "-o", "json")
	var sub2 client.Submission
	decode(out, &sub2)
	if code != 0 || sub2.Priority != 4 || sub2.NotBefore == nil || !sub2.NotBefore.Equal(at) {
		t.Fatalf("submit from stdin: %d %q %s", code, out, errOut)
	}
	out, _, code = d.run(t, "", "jobs", "list", "--priority", "4", "-o", "json")
	var page client.Page
	decode(out, &page)
	if code != 0 || len(page.Jobs) != 1 || page.Jobs[0].ID != sub2.JobID || page.Jobs[0].Priority != 4 {
		t.Fatalf("list --priority 4: %d %q", code, out)
	}

	out, _, code = d.run(t, "", "jobs", "cancel", sub.JobID, "-o", "json")
	var cn client.Cancellation
	decode(out, &cn)
	if code != 0 || cn.Job.Status != client.StatusCancelled || cn.Job.Priority != 1 || cn.Job.NotBefore != nil {
		t.Fatalf("cancel of the scheduled job: %d %q", code, out)
	}
	out, _, code = d.run(t, "", "jobs", "get", sub.JobID, "-o", "json")
	var j client.Job
	decode(out, &j)
	if code != 0 || j.Status != client.StatusCancelled || j.NotBefore != nil {
		t.Fatalf("status after cancel: %d %q", code, out)
	}
	out, errOut, code = d.run(t, "", "jobs", "replay", sub.JobID, "--file", batch, "--priority", "3", "-o", "json")
	var rp client.Submission
	decode(out, &rp)
	if code != 0 || rp.Priority != 3 || rp.NotBefore != nil {
		t.Fatalf("replay --priority 3: %d %q %s", code, out, errOut)
	}

	jsonl := filepath.Join(dir, "big.jsonl")
	if err := os.WriteFile(jsonl, []byte("{\"id\":\"l1\"}\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	jobs := 3 // submitted above (the replay included)
	for _, args := range [][]string{
		{"submit", "--file", batch, "--priority", "0x"},
		{"submit", "--file", batch, "--priority", "5"},
		{"submit", "--file", batch, "--not-before", "tomorrow"},
		{"submit", "--file", batch, "--not-before", "+-5m"},
		{"submit", "--file", batch, "--not-before", "2030-01-02T03:04:05"},
		{"submit", "--file", jsonl, "--priority", "1"},
		{"submit", "--file", batch, "--gzip", "--not-before", "+1m"},
		{"list", "--priority", "x"},
	} {
		_, errOut, code := d.run(t, "", append([]string{"jobs"}, args...)...)
		if code != 2 || errOut == "" {
			t.Errorf("%v: exit %d %q, want 2", args, code, errOut)
		}
	}
	out, _, _ = d.run(t, "", "jobs", "list", "--all", "-o", "json")
	page = client.Page{}
	decode(out, &page)
	if len(page.Jobs) != jobs {
		t.Errorf("%d jobs after the refused commands, want %d", len(page.Jobs), jobs)
	}
	// A priority filter the service refuses is its problem (exit 5).
	if _, errOut, code := d.run(t, "", "jobs", "list", "--priority", "7"); code != 5 || !strings.Contains(errOut, string(client.CodeInvalidPriorityFilter)) {
		t.Errorf("list --priority 7: exit %d %q", code, errOut)
	}
}
