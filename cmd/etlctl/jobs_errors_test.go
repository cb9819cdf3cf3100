package main_test

import (
	"bytes"
	"os/exec"
	"strings"
	"testing"

	"github.com/mightyetl/mightyetl/internal/binarytest"
)

// TestJobsURLWithCredentialsNamesTheCLISettings: an address holding
// credentials is refused before anything is sent, with exit 2 and one line
// that names the CLI's own settings (not the Go client's WithBasicAuth) and
// never the password, whether or not the credential variables are set too.
func TestJobsURLWithCredentialsNamesTheCLISettings(t *testing.T) {
	bin := buildEtlctl(t)
	const password = "url-secret-pw-7731"
	for name, extra := range map[string][]string{
		"no credential variables": nil,
		"with Basic variables":    {"MIGHTYETL_API_USER=dev", "MIGHTYETL_API_PASSWORD=other-secret-pw-1"},
		"with a token":            {"MIGHTYETL_API_TOKEN=token-secret-1"},
	} {
		t.Run(name, func(t *testing.T) {
			cmd := exec.Command(bin, "jobs", "get", "x")
			cmd.Env = binarytest.Env(binarytest.Isolated, append([]string{"MIGHTYETL_API_URL=http://u:" + password + "@127.0.0.1:1"}, extra...)...)
			var out, errOut bytes.Buffer
			cmd.Stdout, cmd.Stderr = &out, &errOut
			_ = cmd.Run()
			if code := cmd.ProcessState.ExitCode(); code != 2 {
				t.Fatalf("exit %d, want 2; stderr %q", code, errOut.String())
			}
			line := errOut.String()
			if strings.Count(line, "\n") != 1 || out.Len() != 0 {
				t.Fatalf("want one line on stderr, got stdout %q stderr %q", out.String(), line)
			}
			for _, w := range []string{"MIGHTYETL_API_URL", "must not hold credentials", "MIGHTYETL_API_USER", "MIGHTYETL_API_PASSWORD", "--password-file", "MIGHTYETL_API_TOKEN"} {
				if !strings.Contains(line, w) {
					t.Errorf("line lacks %q: %q", w, line)
				}
			}
			for _, never := range []string{"WithBasicAuth", "WithBearerToken", password, "other-secret-pw-1", "token-secret-1"} {
				if strings.Contains(line, never) {
					t.Errorf("line contains %q: %q", never, line)
				}
			}
		})
	}
}
