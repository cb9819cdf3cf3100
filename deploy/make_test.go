package deploy_test

import (
	"bytes"
	"errors"
	"os"
	"os/exec"
	"strings"
	"testing"
)

// TestRulesCheckFailsWithoutPromtool: `make test` never passes while
// checking nothing: without promtool the alert-rule check fails with one
// line saying how to install it, in CI or not.
func TestRulesCheckFailsWithoutPromtool(t *testing.T) {
	if _, err := exec.LookPath("make"); err != nil {
		t.Fatal("make is not installed: apt-get install make")
	}
	cmd := exec.Command("make", "--no-print-directory", "-C", "..", "rules", "PROMTOOL=/nonexistent/promtool")
	cmd.Env = append(os.Environ(), "CI=")
	var out bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &out
	err := cmd.Run()
	var exit *exec.ExitError
	if !errors.As(err, &exit) {
		t.Fatalf("make rules without promtool: %v, want a non-zero exit; output:\n%s", err, out.String())
	}
	if !strings.Contains(out.String(), "promtool not found: install it (apt-get install prometheus") {
		t.Fatalf("make rules without promtool printed:\n%s\nwant one line saying how to install it", out.String())
	}
	if strings.Contains(strings.ToLower(out.String()), "skipping") {
		t.Fatalf("make rules without promtool skipped:\n%s", out.String())
	}
}

// TestStaticcheckComesWithTheModules: staticcheck is a tool of go.mod,
// downloaded with the modules and checked by go.sum, not fetched by
// `go run …@version` on each machine's first run.
func TestStaticcheckComesWithTheModules(t *testing.T) {
	gomod, err := os.ReadFile("../go.mod")
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(string(gomod), "\ntool honnef.co/go/tools/cmd/staticcheck\n") {
		t.Error("go.mod has no `tool honnef.co/go/tools/cmd/staticcheck` line: go get -tool honnef.co/go/tools/cmd/staticcheck@<version>")
	}
	mk, err := os.ReadFile("../Makefile")
	if err != nil {
		t.Fatal(err)
	}
	if strings.Contains(string(mk), "staticcheck@") {
		t.Error("the Makefile runs staticcheck by `go run …@version`; build the go.mod tool instead")
	}
}
