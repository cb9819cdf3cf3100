package deploy_test

import (
	"io"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/moby/patternmatcher"
	"github.com/moby/patternmatcher/ignorefile"
)

// dockerContext returns the slash-separated paths of the regular files that
// `docker build .` in root sends as its context: every file under root
// that ../.dockerignore does not exclude, matched by the pattern matcher the
// Docker CLI uses. An excluded directory is not entered unless an exception
// pattern ("!dir/...") names something below it, as Docker does.
func dockerContext(t *testing.T, root string) []string {
	t.Helper()
	f, err := os.Open(filepath.Join(root, ".dockerignore"))
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	patterns, err := ignorefile.ReadAll(f)
	if err != nil {
		t.Fatal(err)
	}
	pm, err := patternmatcher.New(patterns)
	if err != nil {
		t.Fatal(err)
	}
	var files []string
	err = filepath.WalkDir(root, func(path string, d fs.DirEntry, err error) error {
		if err != nil || path == root {
			return err
		}
		rel, err := filepath.Rel(root, path)
		if err != nil {
			return err
		}
		rel = filepath.ToSlash(rel)
		excluded, err := pm.MatchesOrParentMatches(rel)
		if err != nil {
			return err
		}
		if d.IsDir() {
			if excluded && !reincludesBelow(pm, rel) {
				return filepath.SkipDir
			}
			return nil
		}
		if !excluded && d.Type().IsRegular() {
			files = append(files, rel)
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	return files
}

// reincludesBelow reports whether an exception pattern of pm names a path
// below the directory dir.
func reincludesBelow(pm *patternmatcher.PatternMatcher, dir string) bool {
	for _, p := range pm.Patterns() {
		if p.Exclusion() && strings.HasPrefix(p.String(), dir+"/") {
			return true
		}
	}
	return false
}

// TestDockerContextBuildsTheBinaries: the files the .dockerignore allowlist
// lets into the build context are enough for the Dockerfile's build
// (`CGO_ENABLED=0 go build -trimpath ./cmd/...`, embedded migrations and
// console assets included), and the context carries none of the history,
// build outputs, documents, benchmarks or tools the image does not need.
func TestDockerContextBuildsTheBinaries(t *testing.T) {
	root, err := filepath.Abs("..")
	if err != nil {
		t.Fatal(err)
	}
	files := dockerContext(t, root)
	for _, f := range files {
		top, _, _ := strings.Cut(f, "/")
		switch {
		case top == ".git", top == "bin", top == "docs", top == "bench", top == "tools", top == "deploy",
			strings.HasSuffix(f, "_test.go"), strings.Contains(f, "node_modules/"), strings.HasSuffix(f, ".test"):
			t.Errorf("%s is in the Docker build context", f)
		}
	}
	if t.Failed() {
		return
	}

	dir := t.TempDir()
	for _, f := range files {
		copyFile(t, filepath.Join(root, filepath.FromSlash(f)), filepath.Join(dir, filepath.FromSlash(f)))
	}
	bin := t.TempDir()
	cmd := exec.Command("go", "build", "-trimpath", "-o", bin+string(filepath.Separator), "./cmd/...")
	cmd.Dir = dir
	cmd.Env = append(os.Environ(), "CGO_ENABLED=0", "GOWORK=off")
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("go build ./cmd/... in the Docker build context (%d files): %v\n%s", len(files), err, out)
	}
	for _, name := range []string{"etlctl", "intake", "worker"} {
		if _, err := os.Stat(filepath.Join(bin, name)); err != nil {
			t.Errorf("the build in the Docker context made no %s: %v", name, err)
		}
	}
}

func copyFile(t *testing.T, src, dst string) {
	t.Helper()
	if err := os.MkdirAll(filepath.Dir(dst), 0o755); err != nil {
		t.Fatal(err)
	}
	in, err := os.Open(src)
	if err != nil {
		t.Fatal(err)
	}
	defer in.Close()
	out, err := os.Create(dst)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := io.Copy(out, in); err != nil {
		t.Fatal(err)
	}
	if err := out.Close(); err != nil {
		t.Fatal(err)
	}
}
