package httpapi

import (
	"crypto/ed25519"
	"crypto/rand"
	"encoding/base64"
	"encoding/json"
	"net/http"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/golang-jwt/jwt/v5"
	"github.com/mightyetl/mightyetl/internal/auth"
	"github.com/mightyetl/mightyetl/internal/intake"
)

// withAuth replaces the test authenticator.
func withAuth(a auth.Authenticator) envOption {
	return func(o *Options, _ *intake.Options) { o.Authenticator = a }
}

func TestDenyMode(t *testing.T) {
	t.Parallel()
	e := newEnv(t, withAuth(auth.NewDeny()))
	for _, r := range []req{
		{Method: "POST", Path: "/api/etl/jobs", Key: "key-deny-00000000001", Body: sampleBody},
		{Method: "GET", Path: "/api/etl/jobs"},
		{Method: "GET", Path: "/api/etl/jobs/00000000-0000-0000-0000-000000000000"},
		{Method: "POST", Path: "/api/etl/jobs/00000000-0000-0000-0000-000000000000/cancellation"},
		{Method: "POST", Path: "/api/etl/process", Body: sampleBody},
		{Method: "POST", Path: "/api/etl/diagnostic-jobs", Body: "{}"},
		{Method: "GET", Path: "/api/anything"},
		{Method: "DELETE", Path: "/api/etl/jobs"},
	} {
		res := e.do(r)
		checkProblem(t, res, r.Path, 401, "etl_authentication_required")
		if res.Header.Get("WWW-Authenticate") != `Bearer realm="mightyetl"` {
			t.Errorf("%s %s: challenge %q", r.Method, r.Path, res.Header.Get("WWW-Authenticate"))
		}
	}
	for _, p := range []string{"/healthz", "/readyz", "/metrics"} {
		if res := e.do(req{Method: "GET", Path: p}); res.Status != 200 {
			t.Errorf("%s: %d %s", p, res.Status, res.Body)
		}
	}
}

func TestBasicMode(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	line, err := auth.CredentialLine("alice", []byte("correct horse"))
	if err != nil {
		t.Fatal(err)
	}
	path := filepath.Join(dir, "credentials")
	if err := os.WriteFile(path, []byte(line+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	b, err := auth.NewBasic(auth.BasicOptions{CredentialsFile: path})
	if err != nil {
		t.Fatal(err)
	}
	e := newEnv(t, withAuth(b))
	basic := func(user, pass string) map[string]string {
		return map[string]string{"Authorization": "Basic " + base64.StdEncoding.EncodeToString([]byte(user+":"+pass))}
	}
	ok := e.do(req{Method: "POST", Path: "/api/etl/jobs", Key: "key-basic-0000000001", Body: sampleBody, Header: basic("alice", "correct horse")})
	if ok.Status != 202 {
		t.Fatalf("valid credentials: %d %s", ok.Status, ok.Body)
	}
	for name, h := range map[string]map[string]string{
		"wrong password":    basic("alice", "wrong"),
		"unknown principal": basic("mallory", "correct horse"),
		"bearer in basic":   {"Authorization": "Bearer abc"},
		"no credentials":    nil,
	} {
		r := req{Method: "GET", Path: "/api/etl/jobs", Header: h}
		res := e.do(r)
		checkProblem(t, res, r.Path, 401, "etl_authentication_required")
		if res.Header.Get("WWW-Authenticate") != `Basic realm="mightyetl", charset="UTF-8"` {
			t.Errorf("%s: challenge %q", name, res.Header.Get("WWW-Authenticate"))
		}
	}
}

// jwtFixture is an EdDSA JWKS of one key (kid k1) in a temporary file and
// the authenticator opts configure over it (issuer https://issuer.test,
// audience mightyetl), with a signer for any claims.
type jwtFixture struct {
	authn *auth.JWT
	priv  ed25519.PrivateKey
}

func newJWTFixture(t *testing.T, opts auth.JWTOptions) jwtFixture {
	t.Helper()
	pub, priv, err := ed25519.GenerateKey(rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	jwks, _ := json.Marshal(map[string]any{"keys": []any{map[string]any{
		"kty": "OKP", "crv": "Ed25519", "kid": "k1", "alg": "EdDSA", "use": "sig",
		"x": base64.RawURLEncoding.EncodeToString(pub),
	}}})
	path := filepath.Join(t.TempDir(), "jwks.json")
	if err := os.WriteFile(path, jwks, 0o600); err != nil {
		t.Fatal(err)
	}
	opts.Issuer, opts.Audience, opts.JWKSFile = "https://issuer.test", "mightyetl", path
	j, err := auth.NewJWT(opts)
	if err != nil {
		t.Fatal(err)
	}
	return jwtFixture{authn: j, priv: priv}
}

// sign signs claims (plus iss, aud and an exp an hour ahead unless given)
// with key, or with the fixture's key when key is nil.
func (f jwtFixture) sign(t *testing.T, key ed25519.PrivateKey, claims jwt.MapClaims) string {
	t.Helper()
	all := jwt.MapClaims{"iss": "https://issuer.test", "aud": "mightyetl", "exp": time.Now().Add(time.Hour).Unix()}
	for k, v := range claims {
		all[k] = v
	}
	tok := jwt.NewWithClaims(jwt.SigningMethodEdDSA, all)
	tok.Header["kid"] = "k1"
	if key == nil {
		key = f.priv
	}
	s, err := tok.SignedString(key)
	if err != nil {
		t.Fatal(err)
	}
	return s
}

func TestJWTMode(t *testing.T) {
	t.Parallel()
	f := newJWTFixture(t, auth.JWTOptions{Leeway: time.Second})
	_, otherPriv, _ := ed25519.GenerateKey(rand.Reader)
	e := newEnv(t, withAuth(f.authn))
	token := func(key ed25519.PrivateKey, sub string, exp time.Time) string {
		return f.sign(t, key, jwt.MapClaims{"sub": sub, "exp": exp.Unix()})
	}
	priv := f.priv
	bearer := func(s string) map[string]string { return map[string]string{"Authorization": "Bearer " + s} }
	good := e.do(req{Method: "POST", Path: "/api/etl/jobs", Key: "key-jwt-000000000001", Body: sampleBody,
		Header: bearer(token(priv, "alice", time.Now().Add(time.Hour)))})
	if good.Status != 202 {
		t.Fatalf("valid token: %d %s", good.Status, good.Body)
	}
	none := base64.RawURLEncoding.EncodeToString([]byte(`{"alg":"none","typ":"JWT"}`)) + "." +
		base64.RawURLEncoding.EncodeToString([]byte(`{"iss":"https://issuer.test","aud":"mightyetl","sub":"alice","exp":9999999999}`)) + "."
	for name, h := range map[string]map[string]string{
		"expired":        bearer(token(priv, "alice", time.Now().Add(-time.Hour))),
		"wrongly signed": bearer(token(otherPriv, "alice", time.Now().Add(time.Hour))),
		"alg none":       bearer(none),
		"basic in jwt":   {"Authorization": "Basic YWxpY2U6eA=="},
		"no credentials": nil,
		"garbage token":  bearer("a.b.c"),
	} {
		r := req{Method: "GET", Path: "/api/etl/jobs", Header: h}
		res := e.do(r)
		checkProblem(t, res, r.Path, http.StatusUnauthorized, "etl_authentication_required")
		if res.Header.Get("WWW-Authenticate") == "" {
			t.Errorf("%s: no challenge", name)
		}
	}
	// A valid token whose subject is unusable.
	r := req{Method: "GET", Path: "/api/etl/jobs", Header: bearer(token(priv, "   ", time.Now().Add(time.Hour)))}
	checkProblem(t, e.do(r), r.Path, 401, "etl_idempotency_principal_required")
}

// TestJWTOperatorClaim: with MIGHTYETL_JWT_OPERATOR_CLAIM=roles and
// MIGHTYETL_JWT_OPERATOR_VALUE=mightyetl-operator, a token whose roles
// claim holds the value (a string, or an array of strings containing it)
// opens the operator API and the console; a valid token without it gets
// 403 etl_operator_required (the console's 403 page), and no token 401.
// A principal named in the operator list needs no claim.
func TestJWTOperatorClaim(t *testing.T) {
	t.Parallel()
	f := newJWTFixture(t, auth.JWTOptions{OperatorClaim: "roles", OperatorValue: "mightyetl-operator"})
	e := newEnv(t, withAuth(f.authn))
	bearer := func(claims jwt.MapClaims) map[string]string {
		return map[string]string{"Authorization": "Bearer " + f.sign(t, nil, claims)}
	}
	for _, tc := range []struct {
		name   string
		header map[string]string
		status int
	}{
		{"claim as a string", bearer(jwt.MapClaims{"sub": "alice", "roles": "mightyetl-operator"}), http.StatusOK},
		{"claim as an array", bearer(jwt.MapClaims{"sub": "alice", "roles": []string{"viewer", "mightyetl-operator"}}), http.StatusOK},
		{"named operator without the claim", bearer(jwt.MapClaims{"sub": "operator"}), http.StatusOK},
		{"no claim", bearer(jwt.MapClaims{"sub": "alice"}), http.StatusForbidden},
		{"other value", bearer(jwt.MapClaims{"sub": "alice", "roles": []string{"viewer"}}), http.StatusForbidden},
		{"value under another claim", bearer(jwt.MapClaims{"sub": "alice", "groups": "mightyetl-operator"}), http.StatusForbidden},
		{"no credentials", nil, http.StatusUnauthorized},
	} {
		res := e.do(req{Method: "GET", Path: "/api/ops/jobs", Header: tc.header})
		switch {
		case res.Status != tc.status:
			t.Errorf("%s: /api/ops/jobs %d, want %d (%s)", tc.name, res.Status, tc.status, res.Body)
		case tc.status == http.StatusForbidden:
			checkProblem(t, res, "/api/ops/jobs", http.StatusForbidden, "etl_operator_required")
		case tc.status == http.StatusUnauthorized:
			checkProblem(t, res, "/api/ops/jobs", http.StatusUnauthorized, "etl_authentication_required")
		}
		if page := e.do(req{Method: "GET", Path: "/console/", Header: tc.header}); page.Status != tc.status {
			t.Errorf("%s: /console/ %d, want %d", tc.name, page.Status, tc.status)
		}
	}
}
