package faultinject

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"runtime"
	"sort"
	"strconv"
	"strings"
)

// PreviousReleaseFile names the previous release's commit, relative to the
// module root. Each release sets it to its own commit (docs/reliability.md,
// "Version skew"), so the next release is tested against it.
const PreviousReleaseFile = "compat/previous-release"

var commitPattern = regexp.MustCompile(`^[0-9a-f]{40}$`)

// ReadPreviousRelease returns the commit PreviousReleaseFile names: its
// first line that is neither blank nor a comment (#), a full 40-hex sha.
func ReadPreviousRelease(moduleDir string) (string, error) {
	path := filepath.Join(moduleDir, PreviousReleaseFile)
	b, err := os.ReadFile(path)
	if err != nil {
		return "", fmt.Errorf("previous release: %w", err)
	}
	sc := bufio.NewScanner(bytes.NewReader(b))
	for sc.Scan() {
		line := strings.TrimSpace(sc.Text())
		if line == "" || strings.HasPrefix(line, "#") {
			continue
		}
		if !commitPattern.MatchString(line) {
			return "", fmt.Errorf("%s: want a full 40-hex commit sha, got %q", PreviousReleaseFile, line)
		}
		return line, nil
	}
	return "", fmt.Errorf("%s names no commit", PreviousReleaseFile)
}

// Release is one build of the product: its binaries and the newest
// migration of its source tree (the schema its `etlctl migrate up` makes).
type Release struct {
	Name   string // "previous" or "current", for the log
	Commit string // empty for the working tree
	Bins   Binaries
	// Schema is the newest migration number in its migrations/ directory.
	Schema int64
	// Migrations are the numbers of every migration file, ascending.
	Migrations []int64
}

// MigrationsAfter are r's migrations newer than schema, ascending.
func (r Release) MigrationsAfter(schema int64) []int64 {
	var out []int64
	for _, v := range r.Migrations {
		if v > schema {
			out = append(out, v)
		}
	}
	return out
}

// CurrentRelease builds the working tree's binaries into outDir.
func CurrentRelease(ctx context.Context, moduleDir, outDir string) (Release, error) {
	bins, err := BuildBinaries(ctx, moduleDir, outDir)
	if err != nil {
		return Release{}, err
	}
	r := Release{Name: "current", Bins: bins}
	if r.Migrations, err = migrationVersions(filepath.Join(moduleDir, "migrations")); err != nil {
		return Release{}, err
	}
	r.Schema = r.Migrations[len(r.Migrations)-1]
	return r, nil
}

// BuildRelease extracts commit from the git repository holding moduleDir
// (`git archive <commit> | tar -x`) and builds its cmd/intake, cmd/worker
// and cmd/etlctl with its own go.mod (GOFLAGS=-buildvcs=false: the
// extracted tree is no checkout). Tree and binaries go to one directory per
// commit under os.TempDir, made once and then reused: a commit never
// changes, so its binaries are kept per Go toolchain, and the Go build
// cache, which keys a package by its directory, serves a rebuild from the
// same directory. A commit missing from the history fails in one line
// naming the fix.
func BuildRelease(ctx context.Context, moduleDir, commit string) (Release, error) {
	for _, tool := range []string{"git", "tar", "go"} {
		if _, err := exec.LookPath(tool); err != nil {
			return Release{}, fmt.Errorf("%w: %s not on PATH (the version-skew test builds the previous release from git)", ErrMissingTool, tool)
		}
	}
	if !commitPattern.MatchString(commit) {
		return Release{}, fmt.Errorf("previous release %q is not a full 40-hex commit sha", commit)
	}
	if out, err := exec.CommandContext(ctx, "git", "-C", moduleDir, "cat-file", "-e", commit+"^{commit}").CombinedOutput(); err != nil {
		return Release{}, fmt.Errorf("previous release %s (%s) is not in this repository's history: fetch it (a full clone, or git fetch --unshallow) [git: %s]",
			commit, PreviousReleaseFile, lastLines(out, 1))
	}
	// The module may sit below the repository's top level; the archive
	// holds the whole tree.
	prefix, err := exec.CommandContext(ctx, "git", "-C", moduleDir, "rev-parse", "--show-prefix").Output()
	if err != nil {
		return Release{}, fmt.Errorf("git rev-parse --show-prefix: %w", err)
	}
	src, err := releaseSource(ctx, moduleDir, commit)
	if err != nil {
		return Release{}, err
	}
	relModule := filepath.Join(src, filepath.FromSlash(strings.TrimSpace(string(prefix))))
	r := Release{Name: "previous", Commit: commit}
	if r.Migrations, err = migrationVersions(filepath.Join(relModule, "migrations")); err != nil {
		return Release{}, err
	}
	r.Schema = r.Migrations[len(r.Migrations)-1]
	binDir := filepath.Join(src, "bin-"+runtime.Version())
	r.Bins = Binaries{Intake: filepath.Join(binDir, "intake"), Worker: filepath.Join(binDir, "worker"),
		Etlctl: filepath.Join(binDir, "etlctl")}
	if _, err := os.Stat(binDir); err == nil {
		return r, nil
	}
	tmp, err := os.MkdirTemp(src, "bin-build-")
	if err != nil {
		return Release{}, fmt.Errorf("release binary directory: %w", err)
	}
	if err := os.Chmod(tmp, 0o755); err != nil {
		return Release{}, fmt.Errorf("release binary directory: %w", err)
	}
	defer os.RemoveAll(tmp) // a no-op once renamed
	const buildinfo = "github.com/mightyetl/mightyetl/internal/buildinfo"
	cmd := exec.CommandContext(ctx, "go", "build",
		"-ldflags", "-X "+buildinfo+".version=previous-release -X "+buildinfo+".commit="+commit,
		"-o", tmp+string(filepath.Separator), "./cmd/intake", "./cmd/worker", "./cmd/etlctl")
	cmd.Dir = relModule
	cmd.Env = buildEnv()
	if out, err := cmd.CombinedOutput(); err != nil {
		return Release{}, fmt.Errorf("go build the previous release %s: %v\n%s", commit[:12], err, lastLines(out, 20))
	}
	if err := os.Rename(tmp, binDir); err != nil {
		if _, serr := os.Stat(binDir); serr != nil {
			return Release{}, fmt.Errorf("release binary directory: %w", err)
		}
		// Another process put its (identical) build there first.
	}
	return r, nil
}

// releaseSource returns the directory holding commit's tree, extracting it
// when no complete one exists: into a fresh directory that is renamed into
// place once complete, so concurrent test processes never build from a
// half-written tree (the loser of a rename race removes its copy).
func releaseSource(ctx context.Context, repoDir, commit string) (string, error) {
	dir := filepath.Join(os.TempDir(), "mightyetl-release-"+commit)
	if _, err := os.Stat(filepath.Join(dir, ".complete")); err == nil {
		return dir, nil
	}
	tmp, err := os.MkdirTemp(os.TempDir(), "mightyetl-release-extract-")
	if err != nil {
		return "", fmt.Errorf("release source directory: %w", err)
	}
	defer os.RemoveAll(tmp) // a no-op once renamed
	if err := extract(ctx, repoDir, commit, tmp); err != nil {
		return "", err
	}
	if err := os.WriteFile(filepath.Join(tmp, ".complete"), nil, 0o644); err != nil {
		return "", fmt.Errorf("release source directory: %w", err)
	}
	if err := os.Chmod(tmp, 0o755); err != nil {
		return "", fmt.Errorf("release source directory: %w", err)
	}
	if err := os.Rename(tmp, dir); err != nil {
		if _, serr := os.Stat(filepath.Join(dir, ".complete")); serr == nil {
			return dir, nil // another process put it there first
		}
		return "", fmt.Errorf("release source directory: %w", err)
	}
	return dir, nil
}

// extract writes commit's tree into dst: git archive piped into tar.
func extract(ctx context.Context, repoDir, commit, dst string) error {
	archive := exec.CommandContext(ctx, "git", "-C", repoDir, "archive", "--format=tar", commit)
	untar := exec.CommandContext(ctx, "tar", "-x", "-C", dst)
	pipe, err := archive.StdoutPipe()
	if err != nil {
		return fmt.Errorf("git archive: %w", err)
	}
	untar.Stdin = pipe
	var archiveErr, untarErr bytes.Buffer
	archive.Stderr, untar.Stderr = &archiveErr, &untarErr
	if err := untar.Start(); err != nil {
		return fmt.Errorf("tar: %w", err)
	}
	if err := archive.Run(); err != nil {
		_ = untar.Wait()
		return fmt.Errorf("git archive %s: %v: %s", commit[:12], err, lastLines(archiveErr.Bytes(), 1))
	}
	if err := untar.Wait(); err != nil {
		return fmt.Errorf("tar -x: %v: %s", err, lastLines(untarErr.Bytes(), 1))
	}
	return nil
}

// buildEnv is this process's environment for go build with
// GOFLAGS=-buildvcs=false and no workspace file.
func buildEnv() []string {
	var env []string
	for _, kv := range os.Environ() {
		name, _, _ := strings.Cut(kv, "=")
		if name == "GOFLAGS" || name == "GOWORK" {
			continue
		}
		env = append(env, kv)
	}
	return append(env, "GOFLAGS=-buildvcs=false", "GOWORK=off")
}

var migrationFile = regexp.MustCompile(`^([0-9]+)_[^/]*\.sql$`)

// migrationVersions are the numbers of the goose migration files in dir,
// ascending.
func migrationVersions(dir string) ([]int64, error) {
	entries, err := os.ReadDir(dir)
	if err != nil {
		return nil, fmt.Errorf("read migrations: %w", err)
	}
	var out []int64
	for _, e := range entries {
		m := migrationFile.FindStringSubmatch(e.Name())
		if m == nil || e.IsDir() {
			continue
		}
		v, err := strconv.ParseInt(m[1], 10, 64)
		if err != nil {
			return nil, fmt.Errorf("migration %s: %w", e.Name(), err)
		}
		out = append(out, v)
	}
	if len(out) == 0 {
		return nil, errors.New("no migrations in " + dir)
	}
	sort.Slice(out, func(i, j int) bool { return out[i] < out[j] })
	return out, nil
}
