package auth

import (
	"errors"
	"net/http"
	"net/http/httptest"
	"testing"
	"time"

	"github.com/golang-jwt/jwt/v5"
)

// newOperatorJWT is the test JWT authenticator with the operator claim
// roles=mightyetl-operator (claim "" configures none).
func newOperatorJWT(t *testing.T, claim, value string) *JWT {
	t.Helper()
	k := loadTestKeys()
	j, err := NewJWT(JWTOptions{Issuer: testIssuer, Audience: testAudience, JWKSFile: writeJWKS(t, rsaJWK("rsa-1", &k.rsa.PublicKey)),
		Now: func() time.Time { return testNow }, OperatorClaim: claim, OperatorValue: value})
	if err != nil {
		t.Fatal(err)
	}
	return j
}

func bearerRequest(token string) *http.Request {
	r := httptest.NewRequest(http.MethodGet, "/api/ops/jobs", nil)
	r.Header.Set("Authorization", "Bearer "+token)
	return r
}

// TestJWTOperatorClaim: a valid token whose operator claim holds the
// configured value, as a string or as one member of an array of strings,
// is an operator's; any other shape or value, or no claim, is not (the
// principal still authenticates); an invalid token is refused whatever its
// claims.
func TestJWTOperatorClaim(t *testing.T) {
	j := newOperatorJWT(t, "roles", "mightyetl-operator")
	k := loadTestKeys()
	for _, tc := range []struct {
		name     string
		roles    any // nil: no roles claim
		operator bool
	}{
		{"string", "mightyetl-operator", true},
		{"array of strings", []string{"viewer", "mightyetl-operator"}, true},
		{"array of one", []string{"mightyetl-operator"}, true},
		{"array with a non-string member", []any{7, "mightyetl-operator"}, true},
		{"no claim", nil, false},
		{"other string", "viewer", false},
		{"value as a prefix", "mightyetl-operator-2", false},
		{"other case", "MightyETL-Operator", false},
		{"array without the value", []string{"viewer", "admin"}, false},
		{"empty array", []string{}, false},
		{"empty string", "", false},
		{"nested array", []any{[]string{"mightyetl-operator"}}, false},
		{"object", map[string]any{"mightyetl-operator": true}, false},
		{"number", 1, false},
		{"boolean", true, false},
	} {
		tok := sign(t, jwt.SigningMethodRS256, "rsa-1", with(validClaims(), "roles", tc.roles), k.rsa)
		p, op, err := j.AuthenticateRole(bearerRequest(tok))
		if err != nil || p != "alice" || op != tc.operator {
			t.Errorf("%s: AuthenticateRole = %q, %v, %v; want alice, %v", tc.name, p, op, err, tc.operator)
		}
		if p, err := j.Authenticate(bearerRequest(tok)); err != nil || p != "alice" {
			t.Errorf("%s: Authenticate = %q, %v", tc.name, p, err)
		}
	}

	// The claim's name is matched exactly.
	tok := sign(t, jwt.SigningMethodRS256, "rsa-1", with(validClaims(), "Roles", "mightyetl-operator"), k.rsa)
	if _, op, err := j.AuthenticateRole(bearerRequest(tok)); err != nil || op {
		t.Errorf("claim Roles: operator %v, %v", op, err)
	}
	// Invalid tokens carrying the claim are refused, never an operator.
	operatorClaims := with(validClaims(), "roles", "mightyetl-operator")
	for name, tok := range map[string]string{
		"expired":        sign(t, jwt.SigningMethodRS256, "rsa-1", with(operatorClaims, "exp", testNow.Add(-time.Hour).Unix()), k.rsa),
		"wrongly signed": sign(t, jwt.SigningMethodRS256, "rsa-1", operatorClaims, k.rsaOther),
		"other audience": sign(t, jwt.SigningMethodRS256, "rsa-1", with(operatorClaims, "aud", "other"), k.rsa),
		"tampered":       tamper(sign(t, jwt.SigningMethodRS256, "rsa-1", operatorClaims, k.rsa)),
	} {
		if p, op, err := j.AuthenticateRole(bearerRequest(tok)); !errors.Is(err, ErrUnauthenticated) || p != "" || op {
			t.Errorf("%s: AuthenticateRole = %q, %v, %v; want ErrUnauthenticated", name, p, op, err)
		}
	}
	// A valid operator token with an unusable subject is refused too.
	tok = sign(t, jwt.SigningMethodRS256, "rsa-1", with(operatorClaims, "sub", "  "), k.rsa)
	if _, op, err := j.AuthenticateRole(bearerRequest(tok)); !errors.Is(err, ErrPrincipalUnusable) || op {
		t.Errorf("blank subject: operator %v, %v; want ErrPrincipalUnusable", op, err)
	}
	if _, op, err := j.AuthenticateRole(httptest.NewRequest(http.MethodGet, "/api/ops/jobs", nil)); !errors.Is(err, ErrUnauthenticated) || op {
		t.Errorf("no credentials: operator %v, %v", op, err)
	}
}

// Without a configured claim no token is an operator's, whatever it holds.
func TestJWTWithoutOperatorClaimNamesNoOperator(t *testing.T) {
	j := newOperatorJWT(t, "", "")
	k := loadTestKeys()
	tok := sign(t, jwt.SigningMethodRS256, "rsa-1", with(validClaims(), "roles", "mightyetl-operator"), k.rsa)
	if p, op, err := j.AuthenticateRole(bearerRequest(tok)); err != nil || p != "alice" || op {
		t.Fatalf("AuthenticateRole = %q, %v, %v; want alice, not an operator", p, op, err)
	}
}

// The claim and the value are set together or not at all.
func TestNewJWTOperatorClaimNeedsItsValue(t *testing.T) {
	k := loadTestKeys()
	path := writeJWKS(t, rsaJWK("rsa-1", &k.rsa.PublicKey))
	for name, o := range map[string]JWTOptions{
		"claim without value": {OperatorClaim: "roles"},
		"value without claim": {OperatorValue: "mightyetl-operator"},
	} {
		o.Issuer, o.Audience, o.JWKSFile = testIssuer, testAudience, path
		if _, err := NewJWT(o); err == nil {
			t.Errorf("%s: NewJWT succeeded", name)
		}
	}
}

// Operators.Authenticate: the named principals are operators in every
// mode; in JWT mode so are holders of the claim value; everyone else is
// authenticated but not an operator; errors pass through unchanged.
func TestOperatorsAuthenticate(t *testing.T) {
	j := newOperatorJWT(t, "roles", "mightyetl-operator")
	k := loadTestKeys()
	ops := NewOperators([]string{" bob ", "", "carol"})
	token := func(sub string, roles any) *http.Request {
		return bearerRequest(sign(t, jwt.SigningMethodRS256, "rsa-1", with(with(validClaims(), "sub", sub), "roles", roles), k.rsa))
	}
	for _, tc := range []struct {
		name     string
		authn    Authenticator
		r        *http.Request
		ops      *Operators
		operator bool
	}{
		{"jwt claim", j, token("alice", []string{"mightyetl-operator"}), ops, true},
		{"jwt named principal without the claim", j, token("bob", nil), ops, true},
		{"jwt neither", j, token("alice", "viewer"), ops, false},
		{"jwt claim, nil operator set", j, token("alice", "mightyetl-operator"), nil, true},
		{"jwt named principal, nil operator set", j, token("bob", nil), nil, false},
		{"plain authenticator, named", staticAuth("carol"), nil, ops, true},
		{"plain authenticator, not named", staticAuth("alice"), nil, ops, false},
		{"plain authenticator, nil operator set", staticAuth("carol"), nil, nil, false},
	} {
		r := tc.r
		if r == nil {
			r = httptest.NewRequest(http.MethodGet, "/console/", nil)
		}
		_, op, err := tc.ops.Authenticate(tc.authn, r)
		if err != nil || op != tc.operator {
			t.Errorf("%s: operator %v, %v; want %v", tc.name, op, err, tc.operator)
		}
	}
	if _, op, err := ops.Authenticate(j, bearerRequest("a.b.c")); !errors.Is(err, ErrUnauthenticated) || op {
		t.Errorf("bad token: operator %v, %v", op, err)
	}
}

// staticAuth authenticates every request as itself.
type staticAuth string

func (s staticAuth) Authenticate(*http.Request) (string, error) { return string(s), nil }
func (staticAuth) Challenge() string                            { return `Test realm="t"` }
