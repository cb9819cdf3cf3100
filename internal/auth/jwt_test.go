package auth

import (
	"crypto/ecdsa"
	"crypto/ed25519"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/rsa"
	"crypto/x509"
	"encoding/base64"
	"encoding/json"
	"encoding/pem"
	"errors"
	"math/big"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/golang-jwt/jwt/v5"
)

const (
	testIssuer   = "https://issuer.example"
	testAudience = "mightyetl-api"
)

var testNow = time.Unix(1_800_000_000, 0)

type testKeys struct {
	rsa, rsaOther *rsa.PrivateKey
	ec            *ecdsa.PrivateKey
	ed            ed25519.PrivateKey
}

var loadTestKeys = sync.OnceValue(func() testKeys {
	r1, err := rsa.GenerateKey(rand.Reader, 2048)
	if err != nil {
		panic(err)
	}
	r2, err := rsa.GenerateKey(rand.Reader, 2048)
	if err != nil {
		panic(err)
	}
	ec, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		panic(err)
	}
	_, ed, err := ed25519.GenerateKey(rand.Reader)
	if err != nil {
		panic(err)
	}
	return testKeys{rsa: r1, rsaOther: r2, ec: ec, ed: ed}
})

var b64u = base64.RawURLEncoding.EncodeToString

func rsaJWK(kid string, k *rsa.PublicKey) map[string]any {
	return map[string]any{"kty": "RSA", "kid": kid, "alg": "RS256", "use": "sig",
		"n": b64u(k.N.Bytes()), "e": b64u(big.NewInt(int64(k.E)).Bytes())}
}

func ecJWK(kid string, k *ecdsa.PublicKey) map[string]any {
	b, err := k.Bytes()
	if err != nil {
		panic(err)
	}
	return map[string]any{"kty": "EC", "kid": kid, "alg": "ES256", "crv": "P-256", "x": b64u(b[1:33]), "y": b64u(b[33:])}
}

func edJWK(kid string, k ed25519.PublicKey) map[string]any {
	return map[string]any{"kty": "OKP", "kid": kid, "alg": "EdDSA", "crv": "Ed25519", "x": b64u(k)}
}

func writeJWKS(t *testing.T, keys ...map[string]any) string {
	t.Helper()
	data, err := json.Marshal(map[string]any{"keys": keys})
	if err != nil {
		t.Fatal(err)
	}
	path := filepath.Join(t.TempDir(), "jwks.json")
	if err := os.WriteFile(path, data, 0o600); err != nil {
		t.Fatal(err)
	}
	return path
}

func newTestJWT(t *testing.T) *JWT {
	t.Helper()
	k := loadTestKeys()
	path := writeJWKS(t,
		rsaJWK("rsa-1", &k.rsa.PublicKey),
		ecJWK("ec-1", &k.ec.PublicKey),
		edJWK("ed-1", k.ed.Public().(ed25519.PublicKey)),
		map[string]any{"kty": "RSA", "kid": "enc-1", "use": "enc", "n": "AQAB", "e": "AQAB"},
		map[string]any{"kty": "oct", "kid": "hmac", "k": "c2VjcmV0"},
		map[string]any{"kty": "EC", "kid": "p384", "crv": "P-384", "x": "AA", "y": "AA"},
	)
	j, err := NewJWT(JWTOptions{Issuer: testIssuer, Audience: testAudience, JWKSFile: path, Now: func() time.Time { return testNow }})
	if err != nil {
		t.Fatal(err)
	}
	return j
}

func validClaims() jwt.MapClaims {
	return jwt.MapClaims{
		"iss": testIssuer,
		"aud": testAudience,
		"sub": "alice",
		"exp": testNow.Add(5 * time.Minute).Unix(),
		"iat": testNow.Unix(),
	}
}

func sign(t *testing.T, m jwt.SigningMethod, kid string, claims jwt.MapClaims, key any) string {
	t.Helper()
	tok := jwt.NewWithClaims(m, claims)
	if kid != "" {
		tok.Header["kid"] = kid
	}
	s, err := tok.SignedString(key)
	if err != nil {
		t.Fatal(err)
	}
	return s
}

func bearer(j *JWT, token string) (string, error) {
	r := httptest.NewRequest(http.MethodGet, "/api/etl/jobs", nil)
	r.Header.Set("Authorization", "Bearer "+token)
	return j.Authenticate(r)
}

func with(c jwt.MapClaims, k string, v any) jwt.MapClaims {
	out := jwt.MapClaims{}
	for key, val := range c {
		out[key] = val
	}
	if v == nil {
		delete(out, k)
	} else {
		out[k] = v
	}
	return out
}

func TestJWTValid(t *testing.T) {
	j := newTestJWT(t)
	k := loadTestKeys()
	if j.Challenge() != `Bearer realm="mightyetl"` {
		t.Errorf("Challenge() = %q", j.Challenge())
	}
	for _, tc := range []struct {
		name   string
		token  string
		claims jwt.MapClaims
	}{
		{"RS256", sign(t, jwt.SigningMethodRS256, "rsa-1", validClaims(), k.rsa), nil},
		{"ES256", sign(t, jwt.SigningMethodES256, "ec-1", validClaims(), k.ec), nil},
		{"EdDSA", sign(t, jwt.SigningMethodEdDSA, "ed-1", validClaims(), k.ed), nil},
		{"RS256 without kid", sign(t, jwt.SigningMethodRS256, "", validClaims(), k.rsa), nil},
		{"ES256 without kid", sign(t, jwt.SigningMethodES256, "", validClaims(), k.ec), nil},
		{"EdDSA without kid", sign(t, jwt.SigningMethodEdDSA, "", validClaims(), k.ed), nil},
		{"audience list", sign(t, jwt.SigningMethodRS256, "rsa-1", with(validClaims(), "aud", []string{"other", testAudience}), k.rsa), nil},
		{"expired within leeway", sign(t, jwt.SigningMethodRS256, "rsa-1", with(validClaims(), "exp", testNow.Add(-29*time.Second).Unix()), k.rsa), nil},
		{"nbf within leeway", sign(t, jwt.SigningMethodRS256, "rsa-1", with(validClaims(), "nbf", testNow.Add(29*time.Second).Unix()), k.rsa), nil},
	} {
		p, err := bearer(j, tc.token)
		if err != nil || p != "alice" {
			t.Errorf("%s: Authenticate = %q, %v; want alice", tc.name, p, err)
		}
	}
}

func TestJWTRejected(t *testing.T) {
	j := newTestJWT(t)
	k := loadTestKeys()
	c := validClaims()

	pubDER, err := x509.MarshalPKIXPublicKey(&k.rsa.PublicKey)
	if err != nil {
		t.Fatal(err)
	}
	pubPEM := pem.EncodeToMemory(&pem.Block{Type: "PUBLIC KEY", Bytes: pubDER})
	none := func(kid string) string {
		return sign(t, jwt.SigningMethodNone, kid, c, jwt.UnsafeAllowNoneSignatureType)
	}
	// A token whose header says RS256 but whose signature is an ES256 one.
	esAsRS := func() string {
		es := sign(t, jwt.SigningMethodES256, "ec-1", c, k.ec)
		rs := sign(t, jwt.SigningMethodRS256, "ec-1", c, k.rsa)
		return rs[:strings.LastIndexByte(rs, '.')] + es[strings.LastIndexByte(es, '.'):]
	}

	for _, tc := range []struct {
		name  string
		token string
		want  error
	}{
		{"expired", sign(t, jwt.SigningMethodRS256, "rsa-1", with(c, "exp", testNow.Add(-31*time.Second).Unix()), k.rsa), errTokenExpired},
		{"nbf in future", sign(t, jwt.SigningMethodRS256, "rsa-1", with(c, "nbf", testNow.Add(31*time.Second).Unix()), k.rsa), errTokenNotYetValid},
		{"no exp", sign(t, jwt.SigningMethodRS256, "rsa-1", with(c, "exp", nil), k.rsa), errTokenClaim},
		{"wrong issuer", sign(t, jwt.SigningMethodRS256, "rsa-1", with(c, "iss", "https://evil.example"), k.rsa), errTokenIssuer},
		{"no issuer", sign(t, jwt.SigningMethodRS256, "rsa-1", with(c, "iss", nil), k.rsa), ErrUnauthenticated},
		{"wrong audience", sign(t, jwt.SigningMethodRS256, "rsa-1", with(c, "aud", "other"), k.rsa), errTokenAudience},
		{"no audience", sign(t, jwt.SigningMethodRS256, "rsa-1", with(c, "aud", nil), k.rsa), ErrUnauthenticated},
		{"other RSA key, right kid", sign(t, jwt.SigningMethodRS256, "rsa-1", c, k.rsaOther), errTokenSignature},
		{"other RSA key, no kid", sign(t, jwt.SigningMethodRS256, "", c, k.rsaOther), errTokenSignature},
		{"unknown kid", sign(t, jwt.SigningMethodRS256, "rsa-9", c, k.rsa), errTokenSignature},
		{"RSA token naming the EC kid", sign(t, jwt.SigningMethodRS256, "ec-1", c, k.rsa), errTokenSignature},
		{"ES256 signature under RS256 header", esAsRS(), errTokenSignature},
		{"tampered signature", sign(t, jwt.SigningMethodRS256, "rsa-1", c, k.rsa) + "AA", errTokenSignature},
		{"tampered claims", tamper(sign(t, jwt.SigningMethodEdDSA, "ed-1", c, k.ed)), errTokenSignature},
		{"alg none", none(""), errTokenSignature},
		{"alg none with kid", none("rsa-1"), errTokenSignature},
		{"HS256 with RSA public key PEM", sign(t, jwt.SigningMethodHS256, "rsa-1", c, pubPEM), errTokenSignature},
		{"HS256 with RSA public key DER", sign(t, jwt.SigningMethodHS256, "", c, pubDER), errTokenSignature},
		{"HS256 with oct key", sign(t, jwt.SigningMethodHS256, "hmac", c, []byte("secret")), errTokenSignature},
		{"RS512", sign(t, jwt.SigningMethodRS512, "rsa-1", c, k.rsa), errTokenSignature},
		{"PS256", sign(t, jwt.SigningMethodPS256, "rsa-1", c, k.rsa), errTokenSignature},
		{"garbage", "not-a-jwt", errTokenMalformed},
		{"sub not a string", sign(t, jwt.SigningMethodRS256, "rsa-1", with(c, "sub", 42), k.rsa), ErrUnauthenticated},
	} {
		p, err := bearer(j, tc.token)
		if p != "" || !errors.Is(err, tc.want) || !errors.Is(err, ErrUnauthenticated) {
			t.Errorf("%s: Authenticate = %q, %v; want %v", tc.name, p, err, tc.want)
			continue
		}
		if len(tc.token) > 8 && strings.Contains(err.Error(), tc.token[:8]) {
			t.Errorf("%s: error %q quotes the token", tc.name, err)
		}
	}
}

func TestJWTKidNotString(t *testing.T) {
	j := newTestJWT(t)
	k := loadTestKeys()
	tok := jwt.NewWithClaims(jwt.SigningMethodRS256, validClaims())
	tok.Header["kid"] = 7
	s, err := tok.SignedString(k.rsa)
	if err != nil {
		t.Fatal(err)
	}
	if p, err := bearer(j, s); p != "" || !errors.Is(err, errTokenSignature) {
		t.Fatalf("Authenticate = %q, %v; want signature error", p, err)
	}
}

func TestJWTPrincipal(t *testing.T) {
	j := newTestJWT(t)
	k := loadTestKeys()
	for _, tc := range []struct {
		name string
		sub  any
		want error
	}{
		{"missing sub", nil, ErrPrincipalUnusable},
		{"empty sub", "", ErrPrincipalUnusable},
		{"blank sub", " \t ", ErrPrincipalUnusable},
		{"sub of 513 code points", strings.Repeat("é", 513), ErrPrincipalUnusable},
		{"sub of 512 code points", strings.Repeat("é", 512), nil},
		{"sub with spaces kept", " bob ", nil},
	} {
		tok := sign(t, jwt.SigningMethodEdDSA, "ed-1", with(validClaims(), "sub", tc.sub), k.ed)
		p, err := bearer(j, tok)
		if tc.want == nil {
			if err != nil || p != tc.sub {
				t.Errorf("%s: Authenticate = %q, %v", tc.name, p, err)
			}
			continue
		}
		if p != "" || !errors.Is(err, tc.want) || errors.Is(err, ErrUnauthenticated) {
			t.Errorf("%s: Authenticate = %q, %v; want %v", tc.name, p, err, tc.want)
		}
	}
}

func TestJWTMalformedHeader(t *testing.T) {
	j := newTestJWT(t)
	k := loadTestKeys()
	good := sign(t, jwt.SigningMethodRS256, "rsa-1", validClaims(), k.rsa)
	for _, tc := range []struct {
		name    string
		headers []string
	}{
		{"none", nil},
		{"basic", []string{"Basic YWxpY2U6cHc="}},
		{"scheme only", []string{"Bearer"}},
		{"space only", []string{"Bearer "}},
		{"not token68", []string{"Bearer " + good[:10] + " " + good[10:]}},
		{"too long", []string{"Bearer " + good + strings.Repeat("A", maxBearerToken)}},
		{"two headers", []string{"Bearer " + good, "Bearer " + good}},
	} {
		r := httptest.NewRequest(http.MethodGet, "/api/etl/jobs", nil)
		for _, h := range tc.headers {
			r.Header.Add("Authorization", h)
		}
		if p, err := j.Authenticate(r); p != "" || !errors.Is(err, ErrUnauthenticated) {
			t.Errorf("%s: Authenticate = %q, %v; want ErrUnauthenticated", tc.name, p, err)
		}
	}
	r := httptest.NewRequest(http.MethodGet, "/api/etl/jobs", nil)
	r.Header.Set("Authorization", "bearer  "+good)
	if p, err := j.Authenticate(r); err != nil || p != "alice" {
		t.Errorf("lower-case scheme: Authenticate = %q, %v", p, err)
	}
}

func TestJWTLeewayOption(t *testing.T) {
	k := loadTestKeys()
	path := writeJWKS(t, rsaJWK("rsa-1", &k.rsa.PublicKey))
	j, err := NewJWT(JWTOptions{Issuer: testIssuer, Audience: testAudience, JWKSFile: path, Leeway: time.Second,
		Now: func() time.Time { return testNow }})
	if err != nil {
		t.Fatal(err)
	}
	tok := sign(t, jwt.SigningMethodRS256, "rsa-1", with(validClaims(), "exp", testNow.Add(-2*time.Second).Unix()), k.rsa)
	if _, err := bearer(j, tok); !errors.Is(err, errTokenExpired) {
		t.Fatalf("Authenticate = %v; want expired with 1s leeway", err)
	}
}

func TestNewJWTErrors(t *testing.T) {
	k := loadTestKeys()
	good := rsaJWK("rsa-1", &k.rsa.PublicKey)
	withKey := func(m map[string]any, key string, v any) map[string]any {
		out := map[string]any{}
		for kk, vv := range m {
			out[kk] = vv
		}
		out[key] = v
		return out
	}
	weak := new(big.Int).Lsh(big.NewInt(1), 1023)
	ecPub := ecJWK("ec-1", &k.ec.PublicKey)
	offCurve := withKey(ecPub, "y", b64u(make([]byte, 32)))
	priv := withKey(good, "d", "AQAB")
	for _, tc := range []struct {
		name string
		opts func(path string) JWTOptions
		keys []map[string]any
		raw  string
	}{
		{name: "no issuer", opts: func(p string) JWTOptions { return JWTOptions{Audience: "a", JWKSFile: p} }, keys: []map[string]any{good}},
		{name: "no audience", opts: func(p string) JWTOptions { return JWTOptions{Issuer: "i", JWKSFile: p} }, keys: []map[string]any{good}},
		{name: "no file", opts: func(string) JWTOptions { return JWTOptions{Issuer: "i", Audience: "a"} }},
		{name: "missing file", opts: func(p string) JWTOptions { return JWTOptions{Issuer: "i", Audience: "a", JWKSFile: p + ".missing"} }, keys: []map[string]any{good}},
		{name: "negative leeway", opts: func(p string) JWTOptions { return JWTOptions{Issuer: "i", Audience: "a", JWKSFile: p, Leeway: -1} }, keys: []map[string]any{good}},
		{name: "not JSON", raw: "SECRET-CONTENT"},
		{name: "no keys", keys: []map[string]any{}},
		{name: "only unusable keys", keys: []map[string]any{withKey(good, "alg", "RS512"), withKey(good, "use", "enc"), {"kty": "oct", "k": "c2VjcmV0"}}},
		{name: "private key", keys: []map[string]any{priv}},
		{name: "duplicate kid", keys: []map[string]any{good, edJWK("rsa-1", k.ed.Public().(ed25519.PublicKey))}},
		{name: "weak RSA", keys: []map[string]any{withKey(good, "n", b64u(weak.Bytes()))}},
		{name: "even exponent", keys: []map[string]any{withKey(good, "e", b64u([]byte{2}))}},
		{name: "padded n", keys: []map[string]any{withKey(good, "n", base64.URLEncoding.EncodeToString(k.rsa.N.Bytes()))}},
		{name: "EC off curve", keys: []map[string]any{offCurve}},
		{name: "EC short x", keys: []map[string]any{withKey(ecPub, "x", b64u([]byte{1, 2, 3}))}},
		{name: "Ed25519 short x", keys: []map[string]any{withKey(edJWK("ed", k.ed.Public().(ed25519.PublicKey)), "x", "AAAA")}},
	} {
		var path string
		if tc.raw != "" {
			path = filepath.Join(t.TempDir(), "jwks.json")
			if err := os.WriteFile(path, []byte(tc.raw), 0o600); err != nil {
				t.Fatal(err)
			}
		} else {
			path = writeJWKS(t, tc.keys...)
		}
		opts := JWTOptions{Issuer: "i", Audience: "a", JWKSFile: path}
		if tc.opts != nil {
			opts = tc.opts(path)
		}
		_, err := NewJWT(opts)
		if err == nil {
			t.Errorf("%s: NewJWT succeeded", tc.name)
			continue
		}
		if strings.Contains(err.Error(), "SECRET") || strings.Contains(err.Error(), "AQAB") {
			t.Errorf("%s: error %q leaks file content", tc.name, err)
		}
	}
}

func TestJWTKeyDeclaredForOtherAlgIsNeverUsed(t *testing.T) {
	k := loadTestKeys()
	rs512 := rsaJWK("rsa-512", &k.rsa.PublicKey)
	rs512["alg"] = "RS512"
	path := writeJWKS(t, rs512, ecJWK("ec-1", &k.ec.PublicKey))
	j, err := NewJWT(JWTOptions{Issuer: testIssuer, Audience: testAudience, JWKSFile: path, Now: func() time.Time { return testNow }})
	if err != nil {
		t.Fatal(err)
	}
	for _, tok := range []string{
		sign(t, jwt.SigningMethodRS256, "rsa-512", validClaims(), k.rsa),
		sign(t, jwt.SigningMethodRS256, "", validClaims(), k.rsa),
	} {
		if _, err := bearer(j, tok); !errors.Is(err, ErrUnauthenticated) {
			t.Errorf("token verified by a key declared RS512: %v", err)
		}
	}
}

// tamper replaces the claims of token with validClaims for sub "mallory",
// keeping header and signature.
func tamper(token string) string {
	parts := strings.Split(token, ".")
	body, _ := json.Marshal(with(validClaims(), "sub", "mallory"))
	return parts[0] + "." + b64u(body) + "." + parts[2]
}
