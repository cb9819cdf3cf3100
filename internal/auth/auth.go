package auth

import (
	"bytes"
	"crypto/hmac"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"hash"
	"net/http"
	"strings"
	"sync"
	"time"
	"unicode/utf8"
)

// Mode selects how requests are authenticated (MIGHTYETL_AUTH_MODE).
type Mode string

const (
	// ModeDeny rejects every request; it is the default when no mode is set.
	ModeDeny Mode = "deny"
	// ModeBasic authenticates "Authorization: Basic" against a credentials file.
	ModeBasic Mode = "basic"
	// ModeJWT authenticates "Authorization: Bearer <JWT>" against a JWKS file or URL.
	ModeJWT Mode = "jwt"
)

// ParseMode parses a MIGHTYETL_AUTH_MODE value. The empty string (unset)
// means [ModeDeny]; otherwise the value must be exactly "deny", "basic" or
// "jwt". Any other value is an error, never a silent fallback.
func ParseMode(s string) (Mode, error) {
	switch Mode(s) {
	case "":
		return ModeDeny, nil
	case ModeDeny, ModeBasic, ModeJWT:
		return Mode(s), nil
	}
	return "", fmt.Errorf("parse auth mode %q: want deny, basic or jwt", s)
}

// MaxPrincipalRunes is the largest principal, in Unicode code points, that
// an [Authenticator] returns.
const MaxPrincipalRunes = 512

// Realm is the protection space named in every challenge.
const Realm = "mightyetl"

var (
	// ErrUnauthenticated means the request carried no credentials or bad
	// ones. Errors returned by Authenticate may wrap it with a fixed reason
	// text; match it with errors.Is.
	ErrUnauthenticated = errors.New("auth: unauthenticated")

	// ErrPrincipalUnusable means the credentials were valid but name a
	// principal that is blank or longer than [MaxPrincipalRunes] code points.
	ErrPrincipalUnusable = errors.New("auth: principal unusable")

	// ErrRateLimited means the request was refused before its credentials
	// were checked because its client address made too many failed logins
	// recently, or has too many verifications waiting. HTTP answers 429.
	// It comes wrapped in a [*ThrottleError].
	ErrRateLimited = errors.New("auth: too many login attempts from this address")

	// ErrOverloaded means the request was refused before its credentials
	// were checked because every password verification slot is busy and the
	// bounded wait for one is full or ran out. HTTP answers 503. It comes
	// wrapped in a [*ThrottleError].
	ErrOverloaded = errors.New("auth: password verification at capacity")
)

// ThrottleError is an Authenticate error that refuses a request for load
// rather than for its credentials. Err is [ErrRateLimited] or
// [ErrOverloaded] (match with errors.Is); RetryAfter is when the client may
// try again, at least one second. It never matches [ErrUnauthenticated].
type ThrottleError struct {
	Err        error
	RetryAfter time.Duration
}

func (e *ThrottleError) Error() string { return e.Err.Error() }

// Unwrap returns Err.
func (e *ThrottleError) Unwrap() error { return e.Err }

// RetryAfterSeconds is RetryAfter in whole seconds, rounded up, at least 1:
// the value of an HTTP Retry-After header.
func (e *ThrottleError) RetryAfterSeconds() int64 {
	s := int64((e.RetryAfter + time.Second - 1) / time.Second)
	return max(1, s)
}

// Authenticator decides who sent a request. Implementations are safe for
// concurrent use.
type Authenticator interface {
	// Authenticate returns the principal of the request, or an error that
	// matches ErrUnauthenticated (no or bad credentials) or
	// ErrPrincipalUnusable (valid credentials, unusable principal), or
	// a [*ThrottleError] (refused for load before the credentials were
	// checked; [Basic] only).
	// It reads only the request's headers and context, never its body.
	Authenticate(r *http.Request) (string, error)

	// Challenge is the WWW-Authenticate header value for a 401, e.g.
	// `Basic realm="mightyetl", charset="UTF-8"` or `Bearer realm="mightyetl"`.
	// It is constant for the life of the Authenticator.
	Challenge() string
}

// unauthenticated wraps ErrUnauthenticated with a fixed reason. The reason
// must never contain request or file content.
func unauthenticated(reason string) error {
	return fmt.Errorf("%w: %s", ErrUnauthenticated, reason)
}

var (
	errNoCredentials        = unauthenticated("no credentials")
	errMalformedCredentials = unauthenticated("malformed credentials")
	errBadCredentials       = unauthenticated("invalid credentials")
	errRequestEnded         = unauthenticated("request ended before verification")
)

// checkPrincipal returns ErrPrincipalUnusable unless p is non-blank after
// trimming white space and at most MaxPrincipalRunes code points long.
func checkPrincipal(p string) error {
	if strings.TrimSpace(p) == "" {
		return fmt.Errorf("%w: blank", ErrPrincipalUnusable)
	}
	if utf8.RuneCountInString(p) > MaxPrincipalRunes {
		return fmt.Errorf("%w: longer than %d code points", ErrPrincipalUnusable, MaxPrincipalRunes)
	}
	return nil
}

// singleAuthorization returns the one Authorization header value of r.
// A missing header gives errNoCredentials; several headers are malformed.
func singleAuthorization(r *http.Request) (string, error) {
	vals := r.Header.Values("Authorization")
	switch len(vals) {
	case 0:
		return "", errNoCredentials
	case 1:
		if vals[0] == "" {
			return "", errNoCredentials
		}
		return vals[0], nil
	}
	return "", errMalformedCredentials
}

// cutScheme splits an Authorization value "<scheme> 1*SP <token68>" when
// its scheme equals scheme case-insensitively (RFC 9110 section 11.4).
// Trailing spaces and tabs are ignored; the credentials must be a token68.
func cutScheme(header, scheme string) (string, bool) {
	if len(header) <= len(scheme) || !strings.EqualFold(header[:len(scheme)], scheme) || header[len(scheme)] != ' ' {
		return "", false
	}
	cred := strings.TrimLeft(header[len(scheme):], " ")
	cred = strings.TrimRight(cred, " \t")
	if !isToken68(cred) {
		return "", false
	}
	return cred, true
}

// isToken68 reports whether s is a non-empty RFC 9110 token68:
// 1*( ALPHA / DIGIT / "-" / "." / "_" / "~" / "+" / "/" ) *"=".
func isToken68(s string) bool {
	body := strings.TrimRight(s, "=")
	if body == "" {
		return false
	}
	for i := 0; i < len(body); i++ {
		c := body[i]
		switch {
		case 'a' <= c && c <= 'z', 'A' <= c && c <= 'Z', '0' <= c && c <= '9':
		case c == '-', c == '.', c == '_', c == '~', c == '+', c == '/':
		default:
			return false
		}
	}
	return true
}

// ScopeHash returns the lowercase hex HMAC-SHA256 of principal under key
// (MIGHTYETL_PRINCIPAL_HASH_KEY): the principal_scope_hash that stores key
// rows by instead of the raw principal. It is deterministic and safe for
// concurrent use; an empty key is accepted but gives no secrecy.
func ScopeHash(key []byte, principal string) string {
	m := hmac.New(sha256.New, key)
	m.Write([]byte(principal))
	return hex.EncodeToString(m.Sum(nil))
}

// ScopeHasher computes [ScopeHash] under one key, reusing keyed HMAC states
// across calls instead of keying a new one each time. Build it with
// [NewScopeHasher]; it is safe for concurrent use.
type ScopeHasher struct {
	macs *keyedMACs
}

// NewScopeHasher returns a ScopeHasher for key (copied).
func NewScopeHasher(key []byte) *ScopeHasher {
	return &ScopeHasher{macs: newKeyedMACs(key)}
}

// Hash returns ScopeHash(key, principal).
func (s *ScopeHasher) Hash(principal string) string {
	sum := s.macs.sum([]byte(principal))
	return hex.EncodeToString(sum[:])
}

// keyedMACs hands out HMAC-SHA256 states keyed once with one key and reused
// (keying a state costs two SHA-256 blocks). Safe for concurrent use.
type keyedMACs struct {
	pool sync.Pool // of hash.Hash
}

// newKeyedMACs returns the states for key (copied).
func newKeyedMACs(key []byte) *keyedMACs {
	key = bytes.Clone(key)
	return &keyedMACs{pool: sync.Pool{New: func() any { return hmac.New(sha256.New, key) }}}
}

// sum returns the HMAC of the concatenation of parts.
func (k *keyedMACs) sum(parts ...[]byte) [sha256.Size]byte {
	m := k.pool.Get().(hash.Hash)
	m.Reset()
	for _, p := range parts {
		m.Write(p)
	}
	var out [sha256.Size]byte
	m.Sum(out[:0])
	k.pool.Put(m)
	return out
}

// Deny is the [ModeDeny] Authenticator: it rejects every request.
type Deny struct{}

// NewDeny returns an Authenticator whose Authenticate always fails with
// ErrUnauthenticated and whose Challenge is `Bearer realm="mightyetl"` (a
// Bearer challenge, so browsers do not prompt for a password that can never
// work).
func NewDeny() Authenticator { return Deny{} }

// Authenticate always returns an error matching ErrUnauthenticated.
func (Deny) Authenticate(*http.Request) (string, error) {
	return "", unauthenticated("authentication mode deny")
}

// Challenge returns `Bearer realm="mightyetl"`.
func (Deny) Challenge() string { return bearerChallenge }

const (
	basicChallenge  = `Basic realm="` + Realm + `", charset="UTF-8"`
	bearerChallenge = `Bearer realm="` + Realm + `"`
)
