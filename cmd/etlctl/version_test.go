package main_test

import (
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
	"testing"
)

// buildEtlctlWith builds etlctl with extra `go build` arguments.
func buildEtlctlWith(t *testing.T, args ...string) string {
	t.Helper()
	bin := filepath.Join(t.TempDir(), "etlctl")
	cmd := exec.Command("go", append(append([]string{"build", "-o", bin}, args...), ".")...)
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("go build %v: %v\n%s", args, err, out)
	}
	return bin
}

func etlctlVersion(t *testing.T, bin string) map[string]string {
	t.Helper()
	out, err := exec.Command(bin, "version").Output()
	if err != nil {
		t.Fatalf("etlctl version: %v", err)
	}
	fields := map[string]string{}
	for _, line := range strings.Split(strings.TrimSuffix(string(out), "\n"), "\n") {
		k, v, ok := strings.Cut(line, ": ")
		if !ok {
			t.Fatalf("line %q is not \"key: value\" in\n%s", line, out)
		}
		fields[k] = v
	}
	return fields
}

// The Makefile's and the Dockerfile's -ldflags -X values are what `etlctl
// version` prints.
func TestVersionPrintsTheLinkerValues(t *testing.T) {
	t.Parallel()
	const pkg = "github.com/mightyetl/mightyetl/internal/buildinfo"
	const commit = "0123456789abcdef0123456789abcdef01234567"
	bin := buildEtlctlWith(t, "-ldflags", "-X "+pkg+".version=v1.2.3-4-gabcdef0-dirty -X "+pkg+".commit="+commit+" -X "+pkg+".modified=true")
	got := etlctlVersion(t, bin)
	want := map[string]string{"version": "v1.2.3-4-gabcdef0-dirty", "commit": commit, "modified": "true", "go": runtime.Version()}
	for k, v := range want {
		if got[k] != v {
			t.Errorf("%s: %q, want %q", k, got[k], v)
		}
	}
}

// Without -ldflags, `etlctl version` prints what the toolchain stamped into
// the binary (`go version -m`): the module version and, when the build had
// VCS information, the revision; "unknown" when it had none.
func TestVersionPrintsTheToolchainStamp(t *testing.T) {
	t.Parallel()
	bin := buildEtlctlWith(t)
	out, err := exec.Command("go", "version", "-m", bin).Output()
	if err != nil {
		t.Fatalf("go version -m: %v", err)
	}
	want := map[string]string{"commit": "unknown", "modified": "false"}
	for _, line := range strings.Split(string(out), "\n") {
		f := strings.Fields(line)
		switch {
		case len(f) >= 3 && f[0] == "mod" && f[1] == "github.com/mightyetl/mightyetl":
			want["version"] = f[2]
		case len(f) == 2 && f[0] == "build" && strings.HasPrefix(f[1], "vcs.revision="):
			want["commit"] = strings.TrimPrefix(f[1], "vcs.revision=")
		case len(f) == 2 && f[0] == "build" && strings.HasPrefix(f[1], "vcs.modified="):
			want["modified"] = strings.TrimPrefix(f[1], "vcs.modified=")
		}
	}
	if want["version"] == "" {
		t.Fatalf("go version -m names no main module version:\n%s", out)
	}
	got := etlctlVersion(t, bin)
	for k, v := range want {
		if got[k] != v {
			t.Errorf("%s: %q, want %q (go version -m:\n%s)", k, got[k], v, out)
		}
	}
}
