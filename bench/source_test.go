package main

import (
	"context"
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"runtime/debug"
	"testing"
	"time"
)

func TestSourceFromBuildInfo(t *testing.T) {
	setting := func(kv ...string) *debug.BuildInfo {
		bi := &debug.BuildInfo{}
		for i := 0; i < len(kv); i += 2 {
			bi.Settings = append(bi.Settings, debug.BuildSetting{Key: kv[i], Value: kv[i+1]})
		}
		return bi
	}
	cases := []struct {
		name string
		bi   *debug.BuildInfo
		want source
		ok   bool
	}{
		{"clean", setting("vcs", "git", "vcs.revision", "abc123", "vcs.modified", "false"), source{"abc123", false}, true},
		{"dirty", setting("vcs.revision", "abc123", "vcs.modified", "true"), source{"abc123", true}, true},
		{"no stamp (go run, go test)", setting("-compiler", "gc"), source{}, false},
		{"revision without modified", setting("vcs.revision", "abc123"), source{}, false},
		{"empty revision", setting("vcs.revision", "", "vcs.modified", "false"), source{}, false},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			got, ok := sourceFromBuildInfo(tc.bi)
			if ok != tc.ok || (ok && got != tc.want) {
				t.Fatalf("got (%+v, %v), want (%+v, %v)", got, ok, tc.want, tc.ok)
			}
		})
	}
}

func TestSourceFromGitSeesCommitAndChanges(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	dir := t.TempDir()
	git := func(args ...string) string {
		t.Helper()
		cmd := exec.CommandContext(ctx, "git", append([]string{"-C", dir, "-c", "user.name=bench", "-c", "user.email=bench@invalid", "-c", "commit.gpgsign=false"}, args...)...)
		out, err := cmd.CombinedOutput()
		if err != nil {
			t.Fatalf("git %v: %v\n%s", args, err, out)
		}
		return string(out)
	}
	git("init", "-q")
	file := filepath.Join(dir, "a.txt")
	if err := os.WriteFile(file, []byte("one\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	git("add", "a.txt")
	git("commit", "-q", "-m", "one")
	head := regexp.MustCompile(`^[0-9a-f]{40}`).FindString(git("rev-parse", "HEAD"))
	if head == "" {
		t.Fatal("no commit hash from git rev-parse")
	}

	got, err := sourceFromGit(ctx, dir)
	if err != nil || got != (source{Commit: head, Dirty: false}) {
		t.Fatalf("clean tree: got (%+v, %v), want %s clean", got, err, head)
	}
	if err := os.WriteFile(file, []byte("two\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	if got, err = sourceFromGit(ctx, dir); err != nil || got != (source{Commit: head, Dirty: true}) {
		t.Fatalf("modified file: got (%+v, %v), want %s dirty", got, err, head)
	}
	git("checkout", "-q", "--", "a.txt")
	if err := os.WriteFile(filepath.Join(dir, "new.txt"), nil, 0o600); err != nil {
		t.Fatal(err)
	}
	if got, err = sourceFromGit(ctx, dir); err != nil || !got.Dirty {
		t.Fatalf("untracked file: got (%+v, %v), want dirty", got, err)
	}
	if _, err := sourceFromGit(ctx, t.TempDir()); err == nil {
		t.Fatal("a directory outside any work tree gave a source, want an error")
	}
}

// TestWriteJSONRecordsCommitAndDirty checks that a written result carries
// the commit and dirty flag beside the report's own fields.
func TestWriteJSONRecordsCommitAndDirty(t *testing.T) {
	path := filepath.Join(t.TempDir(), "result.json")
	rep := &Report{StartedAt: time.Date(2026, 12, 1, 0, 0, 0, 0, time.UTC),
		Results: []Result{{System: "mightyetl", Scenario: "burndown", Metrics: map[string]float64{"jobs_per_s": 1}}}}
	if err := writeJSON(path, rep); err != nil {
		t.Fatal(err)
	}
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	var got map[string]any
	if err := json.Unmarshal(b, &got); err != nil {
		t.Fatalf("decode %s: %v", b, err)
	}
	want := measuredSource()
	if got["commit"] != want.Commit || got["dirty"] != want.Dirty {
		t.Fatalf("commit %v, dirty %v; want %q, %v", got["commit"], got["dirty"], want.Commit, want.Dirty)
	}
	if want.Commit == unknownCommit || !regexp.MustCompile(`^[0-9a-f]{40}$`).MatchString(want.Commit) {
		t.Fatalf("commit %q inside this checkout, want a 40-digit hash", want.Commit)
	}
	if got["started_at"] != "2026-12-01T00:00:00Z" {
		t.Fatalf("started_at %v, want the report's own fields kept", got["started_at"])
	}
	if rs, ok := got["results"].([]any); !ok || len(rs) != 1 {
		t.Fatalf("results %v, want the one result", got["results"])
	}
}
