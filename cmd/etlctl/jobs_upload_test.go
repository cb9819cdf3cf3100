package main_test

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"net/http/httputil"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/mightyetl/mightyetl/client"
)

// cuttingProxy forwards to the intake and, while cut is set, drops the
// connection of every PUT of part cutPart without an answer; it counts the
// part PUTs it forwarded.
type cuttingProxy struct {
	srv     *httptest.Server
	cut     atomic.Bool
	cutPart string
	mu      sync.Mutex
	parts   map[string]int
}

func newCuttingProxy(t *testing.T, target, cutPart string) *cuttingProxy {
	t.Helper()
	u, err := url.Parse(target)
	if err != nil {
		t.Fatal(err)
	}
	p := &cuttingProxy{cutPart: cutPart, parts: map[string]int{}}
	rp := httputil.NewSingleHostReverseProxy(u)
	p.srv = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Method == http.MethodPut {
			_, n, _ := strings.Cut(r.URL.Path, "/parts/")
			if n == p.cutPart && p.cut.Load() {
				if conn, _, err := http.NewResponseController(w).Hijack(); err == nil {
					_ = conn.Close()
				}
				return
			}
			p.mu.Lock()
			p.parts[n]++
			p.mu.Unlock()
		}
		rp.ServeHTTP(w, r)
	}))
	t.Cleanup(p.srv.Close)
	return p
}

func (p *cuttingProxy) forwarded() string {
	p.mu.Lock()
	defer p.mu.Unlock()
	return fmt.Sprint(p.parts)
}

// bigJSONLines writes n records of JSON Lines (about 80 bytes each) to a
// file and returns its path.
func bigJSONLines(t *testing.T, n int) (string, []byte) {
	t.Helper()
	var b bytes.Buffer
	for i := 1; i <= n; i++ {
		fmt.Fprintf(&b, `{"id":"r%07d","name":"name %d","email":"User%d@Example.COM","amount":"%d.25"}`+"\n", i, i, i, i)
	}
	path := filepath.Join(t.TempDir(), "big.jsonl")
	if err := os.WriteFile(path, b.Bytes(), 0o600); err != nil {
		t.Fatal(err)
	}
	return path, b.Bytes()
}

// TestJobsSubmitLargeFile runs the built binary against `etlctl dev`: a
// JSON Lines file of more than 1 MiB goes through an upload (progress lines
// with --progress plain, the job a chunked one: it reports progress); an
// upload cut in part 3 (through a proxy that drops that part's
// connection) exits 5 and prints the command that resumes it, which sends
// only parts 3..N and makes the job; upload flags with --jsonl are bad
// usage.
func TestJobsSubmitLargeFile(t *testing.T) {
	d := startDevForCLI(t)
	path, payload := bigJSONLines(t, 15000)
	if len(payload) <= 1<<20 {
		t.Fatalf("payload of %d bytes is not above 1 MiB", len(payload))
	}
	const partSize = 256 << 10
	parts := (len(payload) + partSize - 1) / partSize
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	c := d.client(t)

	out, errOut, code := d.run(t, "", "jobs", "submit", "--file", path, "--part-size", fmt.Sprint(partSize),
		"--max-bad-records", "2", "--progress", "plain", "-o", "json")
	if code != 0 {
		t.Fatalf("submit: %d %s", code, errOut)
	}
	var sub client.Submission
	if err := json.Unmarshal([]byte(out), &sub); err != nil || sub.UploadID == "" || sub.Replayed || sub.JobID == "" {
		t.Fatalf("submit printed %q (%v)", out, err)
	}
	lines := strings.Split(strings.TrimSpace(errOut), "\n")
	if len(lines) != parts+1 || !strings.Contains(lines[len(lines)-1], " 100% ") ||
		!strings.Contains(lines[len(lines)-1], fmt.Sprintf("%d parts", parts)) {
		t.Fatalf("progress lines (%d parts): %q", parts, errOut)
	}
	j, err := c.Get(ctx, sub.JobID)
	if err != nil || j.Progress == nil || j.Progress.PayloadBytes != int64(len(payload)) || j.Status == client.StatusFailed {
		t.Fatalf("job %+v (progress %+v), %v", j, j.Progress, err)
	}

	// wait shows the load's progress from the job's representation, one
	// line per new state with --progress plain, until the job succeeds
	// with every record loaded.
	out, errOut, code = d.run(t, "", "jobs", "wait", sub.JobID, "--timeout", "2m", "--progress", "plain", "-o", "json")
	if code != 0 || !regexp.MustCompile(`(?m)^SUCCEEDED .*\b15000 .*records.*, \d+ chunks, .*records/s`).MatchString(errOut) {
		t.Fatalf("wait: %d %q %q", code, out, errOut)
	}
	if err := json.Unmarshal([]byte(out), &j); err != nil || j.Progress == nil || j.Progress.RecordsLoaded != 15000 {
		t.Fatalf("wait printed %q (%v)", out, err)
	}

	// Cut part 3: every retry of it fails, the command exits 5 and says how
	// to resume.
	proxy := newCuttingProxy(t, d.env["MIGHTYETL_API_URL"], "3")
	proxy.cut.Store(true)
	realURL := d.env["MIGHTYETL_API_URL"]
	d.env["MIGHTYETL_API_URL"] = proxy.srv.URL
	_, errOut, code = d.run(t, "", "jobs", "submit", "--file", path, "--part-size", fmt.Sprint(partSize), "--progress", "none")
	m := regexp.MustCompile(`resume it with: (etlctl jobs submit --file \S+ --resume ([0-9a-f-]{36}) --key (\S+) --part-size \d+)\n$`).FindStringSubmatch(errOut)
	if code != 5 || m == nil {
		t.Fatalf("cut upload: %d %q", code, errOut)
	}
	if got := proxy.forwarded(); got != "map[1:1 2:1]" {
		t.Fatalf("parts forwarded before the cut: %s", got)
	}
	proxy.cut.Store(false)
	out, errOut, code = d.run(t, "", strings.Fields(strings.TrimPrefix(m[1], "etlctl "))...)
	if code != 0 {
		t.Fatalf("resume: %d %s", code, errOut)
	}
	if err := json.Unmarshal([]byte(out), &sub); err != nil || sub.UploadID != m[2] || sub.Key != m[3] || sub.Replayed {
		t.Fatalf("resume printed %q (%v)", out, err)
	}
	want := map[string]int{"1": 1, "2": 1}
	for n := 3; n <= parts; n++ {
		want[fmt.Sprint(n)] = 1
	}
	if got := proxy.forwarded(); got != fmt.Sprint(want) {
		t.Fatalf("parts forwarded after the resume: %s, want %v", got, want)
	}
	d.env["MIGHTYETL_API_URL"] = realURL
	u, err := c.GetUpload(ctx, sub.UploadID)
	if err != nil || u.State != client.UploadSubmitted || u.JobID != sub.JobID || len(u.Parts) != parts {
		t.Fatalf("upload %+v, %v", u, err)
	}

	// A chunked job that fails (record 3 is invalid) or is cancelled first
	// is replayed through an upload with the same file; other bytes are
	// refused.
	bad := filepath.Join(t.TempDir(), "bad.jsonl")
	if err := os.WriteFile(bad, []byte("{\"id\":\"b1\"}\n{\"id\":\"b2\"}\n{\"id\":\"b3\",\"amount\":\"1e3\"}\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	out, errOut, code = d.run(t, "", "jobs", "submit", "--file", bad, "--progress", "none", "-o", "json")
	var src client.Submission
	if err := json.Unmarshal([]byte(out), &src); code != 0 || err != nil {
		t.Fatalf("submit bad.jsonl: %d %q %q", code, out, errOut)
	}
	if _, errOut, code = d.run(t, "", "jobs", "cancel", src.JobID); code != 0 && !strings.Contains(errOut, "etl_job_already_failed") {
		t.Fatalf("cancel: %d %q", code, errOut)
	}
	_, errOut, code = d.run(t, "", "jobs", "replay", src.JobID, "--file", path, "--progress", "none")
	if code != 5 || !strings.Contains(errOut, "etl_job_replay_payload_mismatch (422)") {
		t.Fatalf("replay with other bytes: %d %q", code, errOut)
	}
	out, errOut, code = d.run(t, "", "jobs", "replay", src.JobID, "--file", bad, "--progress", "none", "-o", "json")
	var rp client.Submission
	if err := json.Unmarshal([]byte(out), &rp); code != 0 || err != nil || rp.JobID == src.JobID || rp.UploadID == "" {
		t.Fatalf("replay: %d %q %q", code, out, errOut)
	}
	if j, err := c.Get(ctx, rp.JobID); err != nil || j.ReplaySourceID != src.JobID || j.Progress == nil {
		t.Fatalf("replay job %+v, %v", j, err)
	}

	// The README's "Loading a large file" lines, in a shell as shown, with
	// the test's binary for bin/etlctl and big.jsonl in the directory.
	submitLine, waitLine := readmeLargeFileLines(t)
	sh := func(line string) (string, error) {
		cmd := exec.Command("sh", "-c", d.exportLine+"\n"+d.local(line))
		cmd.Dir = filepath.Dir(path)
		b, err := cmd.CombinedOutput()
		return string(b), err
	}
	out, err = sh(submitLine + " -o table")
	rows := strings.Split(strings.TrimSpace(out), "\n")
	if err != nil || len(rows) != 2 || !strings.HasPrefix(rows[0], "JOB ID") {
		t.Fatalf("README submit line: %v\n%s", err, out)
	}
	out, err = sh(strings.Replace(waitLine, "<JOB ID printed by submit>", strings.Fields(rows[1])[0], 1) + " -o table")
	if err != nil || !strings.Contains(out, "SUCCEEDED") {
		t.Fatalf("README wait line: %v\n%s", err, out)
	}

	_, errOut, code = d.run(t, "", "jobs", "submit", "--jsonl", "--gzip", "--file", path)
	if code != 2 || !strings.Contains(errOut, "--jsonl (one job per line) takes no --gzip") {
		t.Fatalf("--jsonl with --gzip: %d %q", code, errOut)
	}
}

// readmeLargeFileLines returns the submit and wait lines of the README's
// "Loading a large file" section.
func readmeLargeFileLines(t *testing.T) (submit, wait string) {
	t.Helper()
	b, err := os.ReadFile("../../README.md")
	if err != nil {
		t.Fatal(err)
	}
	_, section, ok := strings.Cut(string(b), "\n## Loading a large file\n")
	if !ok {
		t.Fatal(`README.md has no "## Loading a large file" section`)
	}
	section, _, _ = strings.Cut(section, "\n## ")
	for _, l := range strings.Split(section, "\n") {
		l, _, _ = strings.Cut(l, " # ")
		switch l = strings.TrimSpace(l); {
		case strings.Contains(l, " jobs submit --file big.jsonl"):
			submit = l
		case strings.Contains(l, " jobs wait <JOB ID printed by submit>"):
			wait = l
		}
	}
	if submit == "" || wait == "" {
		t.Fatalf("the README's large-file section shows no `jobs submit --file big.jsonl` or `jobs wait` line: %q", section)
	}
	return submit, wait
}
