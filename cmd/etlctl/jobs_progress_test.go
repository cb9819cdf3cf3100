package main

import (
	"bytes"
	"context"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"

	"github.com/mightyetl/mightyetl/internal/app/apptest"
	"github.com/mightyetl/mightyetl/internal/auth"
	"github.com/mightyetl/mightyetl/internal/pg"
	"github.com/mightyetl/mightyetl/internal/pgtest"
)

// TestJobsGetPrintsProgress: `etlctl jobs get -o table` against a real
// intake prints a large job's progress line under its row (and a failed
// one's record number); JSON carries the representation's progress as it
// is; a small job gets no progress line.
func TestJobsGetPrintsProgress(t *testing.T) {
	pool, url := pgtest.NewDatabase(t)
	const hashKey = "etlctl-progress-principal-hash-key-0123456789"
	line, err := auth.CredentialLine("alice", []byte("alice-password-1"))
	if err != nil {
		t.Fatal(err)
	}
	creds := filepath.Join(t.TempDir(), "credentials")
	if err := os.WriteFile(creds, []byte(line+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	env := map[string]string{"DATABASE_URL": url, "MIGHTYETL_HTTP_ADDR": "127.0.0.1:0", "MIGHTYETL_AUTH_MODE": "basic",
		"MIGHTYETL_BASIC_CREDENTIALS_FILE": creds, "MIGHTYETL_PRINCIPAL_HASH_KEY": hashKey}
	in := apptest.Intake(t, func(k string) string { return env[k] }, "etlctl-progress")
	if err := in.Server.Start(context.Background()); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = in.Server.Stop(context.Background()) })
	cli := map[string]string{"MIGHTYETL_API_URL": "http://" + in.Server.Addr(), "MIGHTYETL_API_USER": "alice",
		"MIGHTYETL_API_PASSWORD": "alice-password-1"}
	run := func(args ...string) string {
		t.Helper()
		var out, errw bytes.Buffer
		if code := runJobsIO(args, strings.NewReader(""), &out, &errw, func(k string) string { return cli[k] }); code != exitOK {
			t.Fatalf("jobs %v: exit %d: %s", args, code, errw.String())
		}
		return out.String()
	}
	owner := auth.ScopeHash([]byte(hashKey), "alice")
	total, failedAt := int64(10000), int64(4321)
	running := pgtest.InsertChunkedJob(t, pool, pgtest.ChunkedJob{Owner: owner, Status: pg.StatusRunning, RecordsTotal: &total,
		PartBytes: []int64{3 << 20}, Checkpoint: &pgtest.ChunkedCheckpoint{ChunksDone: 6, RecordsLoaded: 5996, BadRecords: 4}})
	failed := pgtest.InsertChunkedJob(t, pool, pgtest.ChunkedJob{Owner: owner, Status: pg.StatusFailed,
		Checkpoint: &pgtest.ChunkedCheckpoint{ChunksDone: 4, RecordsLoaded: 4000, FailedRecordNumber: &failedAt}})
	small := pgtest.InsertJobs(t, pool, pg.NewJob{PrincipalScopeHash: owner})[0]

	out := run("get", running.String(), "-o", "table")
	want := regexp.MustCompile(`(?m)^progress: 6000 / 10000 records done \(60\.0%\): 5996 loaded, 4 bad, 6 chunks, ` +
		`last checkpoint \d{4}-\d\d-\d\dT\d\d:\d\d:\d\dZ, payload 3\.0 MiB$`)
	if !strings.Contains(out, running.String()) || !want.MatchString(out) {
		t.Fatalf("running job:\n%s", out)
	}
	out = run("get", failed.String(), "-o", "table")
	if !strings.Contains(out, "progress: 4000 loaded, 0 bad, 4 chunks, failed at record 4321, last checkpoint ") {
		t.Fatalf("failed job:\n%s", out)
	}
	if out := run("get", small.String(), "-o", "table"); strings.Contains(out, "progress") {
		t.Fatalf("small job:\n%s", out)
	}
	if out := run("get", running.String(), "-o", "json"); !strings.Contains(out, `"recordsLoaded":5996`) ||
		strings.Contains(out, "progress: ") {
		t.Fatalf("json:\n%s", out)
	}
}
