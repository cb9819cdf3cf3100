package main_test

import (
	"bytes"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"

	"github.com/mightyetl/mightyetl/internal/binarytest"
)

// tokenServer is a stand-in API that answers GET /api/etl/jobs/{id} with a
// PENDING job and records the Authorization header of every request.
type tokenServer struct {
	*httptest.Server
	mu   sync.Mutex
	auth []string
}

func newTokenServer(t *testing.T) *tokenServer {
	t.Helper()
	s := &tokenServer{}
	s.Server = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		s.mu.Lock()
		s.auth = append(s.auth, r.Header.Get("Authorization"))
		s.mu.Unlock()
		id := strings.TrimPrefix(r.URL.Path, "/api/etl/jobs/")
		w.Header().Set("Content-Type", "application/json")
		_, _ = w.Write([]byte(`{"jobRecordId":"` + id + `","jobStatus":"PENDING","attemptCount":0,` +
			`"createdAt":"2026-01-01T00:00:00Z","updatedAt":"2026-01-01T00:00:00Z"}`))
	}))
	t.Cleanup(s.Close)
	return s
}

func (s *tokenServer) authorizations() []string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return append([]string(nil), s.auth...)
}

// runEtlctl runs bin with args and env (isolated from the test's own
// MIGHTYETL_* settings) and returns stdout, stderr and the exit status.
func runEtlctl(t *testing.T, bin string, env []string, args ...string) (string, string, int) {
	t.Helper()
	cmd := exec.Command(bin, args...)
	cmd.Env = binarytest.Env(binarytest.Isolated, env...)
	var out, errOut bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errOut
	if err := cmd.Run(); err != nil {
		if _, ok := err.(*exec.ExitError); !ok {
			t.Fatal(err)
		}
	}
	return out.String(), errOut.String(), cmd.ProcessState.ExitCode()
}

// TestJobsTokenFileAndTokenFlagWarning: --token-file sends the file's token
// (its trailing line break trimmed) as the bearer token with nothing on
// standard error; --token works too but prints one warning line naming
// MIGHTYETL_API_TOKEN and --token-file (never the token), and so does
// --password; a missing or empty token file and --token with --token-file
// are usage errors that send nothing.
func TestJobsTokenFileAndTokenFlagWarning(t *testing.T) {
	bin := buildEtlctl(t)
	srv := newTokenServer(t)
	const token = "eyJhbGciOiJFUzI1NiJ9.token-file-secret-7c1e.sig"
	dir := t.TempDir()
	tokenFile := filepath.Join(dir, "token")
	if err := os.WriteFile(tokenFile, []byte(token+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	env := []string{"MIGHTYETL_API_URL=" + srv.URL}
	const id = "0b9d5a7e-8c1f-4e53-9a51-2f7c6a1d3e40"

	// --token-file: the request carries the token, nothing is warned.
	out, errOut, code := runEtlctl(t, bin, env, "jobs", "get", id, "--token-file", tokenFile, "-o", "json")
	if code != 0 || errOut != "" || !strings.Contains(out, id) {
		t.Fatalf("--token-file: exit %d, stdout %q, stderr %q", code, out, errOut)
	}
	if got := srv.authorizations(); len(got) != 1 || got[0] != "Bearer "+token {
		t.Fatalf("--token-file: Authorization %q, want the file's token", got)
	}
	// It takes precedence over MIGHTYETL_API_TOKEN, as --password-file over
	// MIGHTYETL_API_PASSWORD.
	if _, errOut, code := runEtlctl(t, bin, append(env, "MIGHTYETL_API_TOKEN=env-token-1"), "jobs", "get", id, "--token-file", tokenFile); code != 0 || errOut != "" {
		t.Fatalf("--token-file with MIGHTYETL_API_TOKEN: exit %d, stderr %q", code, errOut)
	}
	if got := srv.authorizations(); len(got) != 2 || got[1] != "Bearer "+token {
		t.Fatalf("--token-file with MIGHTYETL_API_TOKEN: Authorization %q", got)
	}

	// The variable: no warning.
	if _, errOut, code := runEtlctl(t, bin, append(env, "MIGHTYETL_API_TOKEN=env-token-1"), "jobs", "get", id); code != 0 || errOut != "" {
		t.Fatalf("MIGHTYETL_API_TOKEN: exit %d, stderr %q", code, errOut)
	}

	// --token: works, with one warning line that never holds the token.
	const flagToken = "flag-token-secret-93ab"
	out, errOut, code = runEtlctl(t, bin, env, "jobs", "get", id, "--token", flagToken)
	if code != 0 || !strings.Contains(out, id) {
		t.Fatalf("--token: exit %d, stdout %q, stderr %q", code, out, errOut)
	}
	if got := srv.authorizations(); got[len(got)-1] != "Bearer "+flagToken {
		t.Fatalf("--token: Authorization %q", got[len(got)-1])
	}
	if strings.Count(errOut, "\n") != 1 || !strings.Contains(errOut, "warning: --token") ||
		!strings.Contains(errOut, "process list") || !strings.Contains(errOut, "MIGHTYETL_API_TOKEN") ||
		!strings.Contains(errOut, "--token-file") || strings.Contains(errOut, flagToken) {
		t.Fatalf("--token: stderr %q, want one warning line naming MIGHTYETL_API_TOKEN and --token-file", errOut)
	}
	// --password likewise.
	_, errOut, code = runEtlctl(t, bin, env, "jobs", "get", id, "--user", "dev", "--password", "flag-password-5d1f")
	if code != 0 || strings.Count(errOut, "\n") != 1 || !strings.Contains(errOut, "warning: --password") ||
		!strings.Contains(errOut, "MIGHTYETL_API_PASSWORD") || !strings.Contains(errOut, "--password-file") ||
		strings.Contains(errOut, "flag-password-5d1f") {
		t.Fatalf("--password: exit %d, stderr %q", code, errOut)
	}

	// Usage errors send nothing.
	sent := len(srv.authorizations())
	empty := filepath.Join(dir, "empty")
	if err := os.WriteFile(empty, []byte("\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	for name, args := range map[string][]string{
		"missing file":              {"--token-file", filepath.Join(dir, "absent")},
		"empty file":                {"--token-file", empty},
		"--token and --token-file":  {"--token", flagToken, "--token-file", tokenFile},
		"--token-file and --user":   {"--token-file", tokenFile, "--user", "dev"},
		"--token-file, bad address": {"--token-file", tokenFile, "--url", "ftp://x"},
	} {
		_, errOut, code := runEtlctl(t, bin, env, append([]string{"jobs", "get", id}, args...)...)
		if code != 2 || errOut == "" || strings.Contains(errOut, token) || strings.Contains(errOut, flagToken) {
			t.Errorf("%s: exit %d, stderr %q; want 2 and a line without the token", name, code, errOut)
		}
	}
	if got := len(srv.authorizations()); got != sent {
		t.Errorf("usage errors sent %d requests", got-sent)
	}
}
