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

func TestJWTMode(t *testing.T) {
	pub, priv, err := ed25519.GenerateKey(rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	_, otherPriv, _ := ed25519.GenerateKey(rand.Reader)
	jwks, _ := json.Marshal(map[string]any{"keys": []any{map[string]any{
		"kty": "OKP", "crv": "Ed25519", "kid": "k1", "alg": "EdDSA", "use": "sig",
		"x": base64.RawURLEncoding.EncodeToString(pub),
	}}})
	path := filepath.Join(t.TempDir(), "jwks.json")
	if err := os.WriteFile(path, jwks, 0o600); err != nil {
		t.Fatal(err)
	}
	j, err := auth.NewJWT(auth.JWTOptions{Issuer: "https://issuer.test", Audience: "mightyetl", JWKSFile: path, Leeway: time.Second})
	if err != nil {
		t.Fatal(err)
	}
	e := newEnv(t, withAuth(j))
	token := func(key ed25519.PrivateKey, sub string, exp time.Time) string {
		tok := jwt.NewWithClaims(jwt.SigningMethodEdDSA, jwt.MapClaims{
			"iss": "https://issuer.test", "aud": "mightyetl", "sub": sub, "exp": exp.Unix(),
		})
		tok.Header["kid"] = "k1"
		s, err := tok.SignedString(key)
		if err != nil {
			t.Fatal(err)
		}
		return s
	}
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
