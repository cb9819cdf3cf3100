package auth

import (
	"net/http"
	"strings"

	"github.com/golang-jwt/jwt/v5"
)

// RoleAuthenticator is an [Authenticator] whose credentials can carry the
// operator role themselves (a JWT claim). AuthenticateRole returns what
// Authenticate returns, and whether the credentials carry the role.
type RoleAuthenticator interface {
	Authenticator
	AuthenticateRole(r *http.Request) (principal string, operator bool, err error)
}

// Operators decides which authenticated principals are operators of the
// console: the principals named in MIGHTYETL_OPERATOR_PRINCIPALS, and in JWT
// mode the holders of the configured operator claim value. The zero value
// names nobody. Safe for concurrent use once built.
type Operators struct {
	principals map[string]bool
}

// NewOperators returns the operator set of principals (exact matches;
// blank entries are ignored).
func NewOperators(principals []string) *Operators {
	o := &Operators{principals: map[string]bool{}}
	for _, p := range principals {
		if p = strings.TrimSpace(p); p != "" {
			o.principals[p] = true
		}
	}
	return o
}

// Authenticate authenticates r with authn and reports whether the
// principal is an operator. Errors are authn's, unchanged.
func (o *Operators) Authenticate(authn Authenticator, r *http.Request) (string, bool, error) {
	if ra, ok := authn.(RoleAuthenticator); ok {
		p, op, err := ra.AuthenticateRole(r)
		if err != nil {
			return "", false, err
		}
		return p, op || (o != nil && o.principals[p]), nil
	}
	p, err := authn.Authenticate(r)
	if err != nil {
		return "", false, err
	}
	return p, o != nil && o.principals[p], nil
}

// AuthenticateRole is Authenticate plus whether the token's operator claim
// (JWTOptions.OperatorClaim) holds OperatorValue, as a string or as one
// member of an array of strings. Without a configured claim it is never true.
func (j *JWT) AuthenticateRole(r *http.Request) (string, bool, error) {
	if j.operatorClaim == "" {
		p, err := j.Authenticate(r)
		return p, false, err
	}
	var claims operatorClaims
	if err := j.parseBearer(r, &claims); err != nil {
		return "", false, err
	}
	if err := checkPrincipal(claims.Subject); err != nil {
		return "", false, err
	}
	return claims.Subject, claims.has(j.operatorClaim, j.operatorValue), nil
}

// operatorClaims are the registered claims plus every other member.
type operatorClaims struct {
	jwt.RegisteredClaims
	Extra map[string]any `json:"-"`
}

func (c *operatorClaims) UnmarshalJSON(b []byte) error {
	if err := jsonUnmarshal(b, &c.RegisteredClaims); err != nil {
		return err
	}
	return jsonUnmarshal(b, &c.Extra)
}

func (c *operatorClaims) has(claim, value string) bool {
	switch v := c.Extra[claim].(type) {
	case string:
		return v == value
	case []any:
		for _, m := range v {
			if s, ok := m.(string); ok && s == value {
				return true
			}
		}
	}
	return false
}
