package httpapi

import (
	"encoding/base64"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"testing"
	"time"

	"github.com/mightyetl/mightyetl/internal/auth"
)

// throttlingAuth refuses every request with err.
type throttlingAuth struct{ err error }

func (a throttlingAuth) Authenticate(*http.Request) (string, error) { return "", a.err }
func (throttlingAuth) Challenge() string                            { return `Basic realm="mightyetl"` }

// An authenticator's refusal for load is 429 or 503 with a problem body
// and Retry-After in whole seconds, never 401.
func TestAuthThrottledProblems(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		err        *auth.ThrottleError
		status     int
		code       string
		retryAfter string
	}{
		{&auth.ThrottleError{Err: auth.ErrRateLimited, RetryAfter: 10 * time.Second}, 429, "etl_authentication_rate_limited", "10"},
		{&auth.ThrottleError{Err: auth.ErrOverloaded, RetryAfter: 1500 * time.Millisecond}, 503, "etl_authentication_overloaded", "2"},
		{&auth.ThrottleError{Err: auth.ErrOverloaded}, 503, "etl_authentication_overloaded", "1"},
	} {
		e := newEnv(t, withAuth(throttlingAuth{tc.err}))
		for _, r := range []req{
			{Method: "GET", Path: "/api/etl/jobs"},
			{Method: "POST", Path: "/api/etl/jobs", Key: "key-throttle-0000001", Body: sampleBody},
		} {
			res := e.do(r)
			checkProblem(t, res, r.Path, tc.status, tc.code)
			if got := res.Header.Get("Retry-After"); got != tc.retryAfter {
				t.Errorf("%s: Retry-After %q, want %q", tc.code, got, tc.retryAfter)
			}
		}
	}
}

// With the real Basic authenticator, an address that keeps failing gets
// 429 with Retry-After instead of another password verification.
func TestBasicModeFailedLoginsGet429(t *testing.T) {
	t.Parallel()
	line, err := auth.CredentialLine("alice", []byte("correct horse"))
	if err != nil {
		t.Fatal(err)
	}
	path := filepath.Join(t.TempDir(), "credentials")
	if err := os.WriteFile(path, []byte(line+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	b, err := auth.NewBasic(auth.BasicOptions{CredentialsFile: path, FailureBurst: 2, FailureRefill: time.Hour})
	if err != nil {
		t.Fatal(err)
	}
	e := newEnv(t, withAuth(b))
	bad := map[string]string{"Authorization": "Basic " + base64.StdEncoding.EncodeToString([]byte("mallory:guess"))}
	r := req{Method: "GET", Path: "/api/etl/jobs", Header: bad}
	for range 2 {
		checkProblem(t, e.do(r), r.Path, 401, "etl_authentication_required")
	}
	res := e.do(r)
	checkProblem(t, res, r.Path, 429, "etl_authentication_rate_limited")
	// The bucket refills continuously from the first failure, so the wait
	// is an hour less the time the three requests took (whole seconds,
	// rounded up): 3600 on an idle machine, a little less on a loaded one.
	if s, err := strconv.Atoi(res.Header.Get("Retry-After")); err != nil || s > 3600 || s < 3600-60 {
		t.Errorf("Retry-After %q, want about 3600 (an hour less the test's elapsed seconds)", res.Header.Get("Retry-After"))
	}
}
