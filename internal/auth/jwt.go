package auth

import (
	"context"
	"crypto/ecdsa"
	"crypto/ed25519"
	"crypto/elliptic"
	"crypto/rsa"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"math/big"
	"net/http"
	"os"
	"sync/atomic"
	"time"

	"github.com/golang-jwt/jwt/v5"
)

// DefaultLeeway is the clock skew allowed on exp and nbf when
// [JWTOptions.Leeway] is zero.
const DefaultLeeway = 30 * time.Second

// maxBearerToken bounds the size of an accepted bearer token.
const maxBearerToken = 16 << 10

// maxJWKSFileBytes bounds how much of a JWKS file is read.
const maxJWKSFileBytes = 1 << 20

// The only accepted algorithms, each tied to one key type.
const (
	algRS256 = "RS256" // kty RSA, at least 2048 bits
	algES256 = "ES256" // kty EC, crv P-256
	algEdDSA = "EdDSA" // kty OKP, crv Ed25519
)

// JWTOptions configures [NewJWT].
type JWTOptions struct {
	// Issuer is the required iss claim (MIGHTYETL_JWT_ISSUER). Required.
	Issuer string
	// Audience must be one of the token's aud values
	// (MIGHTYETL_JWT_AUDIENCE). Required.
	Audience string
	// JWKSFile is the path of an RFC 7517 JWK Set of verification keys
	// (MIGHTYETL_JWT_JWKS_FILE), read once by NewJWT. Exactly one of
	// JWKSFile and JWKSURL is required.
	JWKSFile string
	// JWKSURL is the identity provider's JWK Set URL
	// (MIGHTYETL_JWT_JWKS_URL): https, or http to a loopback host (see
	// CheckJWKSURL). NewJWT fetches it once and fails when it cannot; the
	// keys are then fetched again every RefreshInterval and when a token
	// names an unknown kid, never more than once per JWKSMinFetchGap, and
	// the last keys fetched stay in use while the URL fails.
	JWKSURL string
	// RefreshInterval is the age after which the keys of JWKSURL are
	// fetched again (MIGHTYETL_JWT_JWKS_REFRESH_INTERVAL). Zero means
	// DefaultJWKSRefreshInterval (5m); it must be at least JWKSMinFetchGap.
	RefreshInterval time.Duration
	// Logger receives a warning for each failed fetch of JWKSURL and an
	// info line when its key set changed (no URL, key or token content);
	// nil discards.
	Logger *slog.Logger
	// Leeway is the clock skew allowed on exp and nbf. Zero means
	// DefaultLeeway (30s); negative is an error.
	Leeway time.Duration
	// Now is the clock; nil means time.Now. For tests.
	Now func() time.Time
	// OperatorClaim and OperatorValue (MIGHTYETL_JWT_OPERATOR_CLAIM,
	// MIGHTYETL_JWT_OPERATOR_VALUE) make a token whose OperatorClaim holds
	// OperatorValue (a string, or an array of strings containing it) an
	// operator's; both empty means no claim makes an operator.
	OperatorClaim, OperatorValue string
}

// JWT is the [ModeJWT] Authenticator. It accepts "Authorization: Bearer"
// tokens signed with RS256, ES256 or EdDSA by a key of the JWKS file, each
// key used only with the one algorithm of its type (no algorithm confusion,
// no "none", no HMAC). A token must carry exp, and iss and aud matching the
// options; exp and nbf are checked with the leeway. The principal is sub.
//
// A JWKS file is read once; rotating its keys needs a restart. A JWKS URL
// is fetched again as JWTOptions.JWKSURL says, so the identity provider
// can rotate keys without one. A JWT is safe for concurrent use.
type JWT struct {
	parser *jwt.Parser
	keys   atomic.Pointer[keySet]
	source *jwksSource // nil: a JWKS file

	operatorClaim, operatorValue string
}

// keySet is one parsed JWK Set; it is never changed once built.
type keySet struct {
	byKid map[string]verificationKey
	byAlg map[string][]jwt.VerificationKey // keys of each algorithm, for tokens without kid
}

type verificationKey struct {
	alg string
	key jwt.VerificationKey
}

// NewJWT reads the JWKS file, or fetches the JWKS URL, and returns a JWT.
// It is an error when an option is missing or invalid, both or neither of
// JWKSFile and JWKSURL are set, the file is unreadable or the URL does not
// answer 200 within JWKSFetchTimeout, the content is not a JWK Set, a
// supported key is malformed or carries private material, two keys share a
// kid, or no usable key remains. Keys of other types, curves or
// algorithms, and keys with "use" other than "sig", are ignored; a later
// fetch of the URL that breaks one of these rules keeps the keys in use.
func NewJWT(opts JWTOptions) (*JWT, error) {
	switch {
	case opts.Issuer == "":
		return nil, errors.New("new jwt authenticator: issuer not set")
	case opts.Audience == "":
		return nil, errors.New("new jwt authenticator: audience not set")
	case opts.JWKSFile == "" && opts.JWKSURL == "":
		return nil, errors.New("new jwt authenticator: JWKS file or URL not set")
	case opts.JWKSFile != "" && opts.JWKSURL != "":
		return nil, errors.New("new jwt authenticator: both a JWKS file and a JWKS URL set; set one")
	case opts.RefreshInterval != 0 && opts.RefreshInterval < JWKSMinFetchGap:
		return nil, fmt.Errorf("new jwt authenticator: JWKS refresh interval below %s", JWKSMinFetchGap)
	case opts.Leeway < 0:
		return nil, errors.New("new jwt authenticator: negative leeway")
	case (opts.OperatorClaim == "") != (opts.OperatorValue == ""):
		return nil, errors.New("new jwt authenticator: operator claim and value must be set together")
	}
	leeway := opts.Leeway
	if leeway == 0 {
		leeway = DefaultLeeway
	}
	now := opts.Now
	if now == nil {
		now = time.Now
	}
	j := &JWT{operatorClaim: opts.OperatorClaim, operatorValue: opts.OperatorValue}
	if opts.JWKSURL != "" {
		src, err := newJWKSSource(opts, now, j.keys.Store)
		if err != nil {
			return nil, fmt.Errorf("new jwt authenticator: %w", err)
		}
		j.source = src
	} else {
		data, err := readJWKSFile(opts.JWKSFile)
		if err != nil {
			return nil, fmt.Errorf("new jwt authenticator: %w", err)
		}
		set, err := parseKeySet(data)
		if err != nil {
			return nil, fmt.Errorf("new jwt authenticator: JWKS file %s: %w", opts.JWKSFile, err)
		}
		j.keys.Store(set)
	}
	j.parser = jwt.NewParser(
		jwt.WithValidMethods([]string{algRS256, algES256, algEdDSA}),
		jwt.WithIssuer(opts.Issuer),
		jwt.WithAudience(opts.Audience),
		jwt.WithLeeway(leeway),
		jwt.WithExpirationRequired(),
		jwt.WithTimeFunc(now),
		jwt.WithStrictDecoding(),
	)
	return j, nil
}

func readJWKSFile(path string) ([]byte, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, fmt.Errorf("open JWKS file: %w", err)
	}
	defer f.Close()
	data, err := io.ReadAll(io.LimitReader(f, maxJWKSFileBytes+1))
	if err != nil {
		return nil, fmt.Errorf("read JWKS file: %w", err)
	}
	if len(data) > maxJWKSFileBytes {
		return nil, fmt.Errorf("read JWKS file %s: larger than %d bytes", path, maxJWKSFileBytes)
	}
	return data, nil
}

// jwk holds the members of an RFC 7517 JSON Web Key that matter here.
type jwk struct {
	Kty string `json:"kty"`
	Kid string `json:"kid"`
	Alg string `json:"alg"`
	Use string `json:"use"`
	Crv string `json:"crv"`
	N   string `json:"n"`
	E   string `json:"e"`
	X   string `json:"x"`
	Y   string `json:"y"`
	D   string `json:"d"`
}

// parseKeySet parses a JWK Set, from a file or a URL alike. Errors name
// keys by index, never by content.
func parseKeySet(data []byte) (*keySet, error) {
	var doc struct {
		Keys []jwk `json:"keys"`
	}
	if err := json.Unmarshal(data, &doc); err != nil {
		return nil, errors.New("not a JSON JWK Set")
	}
	set := &keySet{byKid: map[string]verificationKey{}, byAlg: map[string][]jwt.VerificationKey{}}
	for i, k := range doc.Keys {
		alg, key, err := parseJWK(k)
		if err != nil {
			return nil, fmt.Errorf("key %d: %w", i, err)
		}
		if key == nil {
			continue // not a key for this service
		}
		if k.Kid != "" {
			if _, dup := set.byKid[k.Kid]; dup {
				return nil, fmt.Errorf("key %d: kid used by an earlier key", i)
			}
			set.byKid[k.Kid] = verificationKey{alg: alg, key: key}
		}
		set.byAlg[alg] = append(set.byAlg[alg], key)
	}
	if len(set.byAlg) == 0 {
		return nil, errors.New("no RS256, ES256 or EdDSA signature key")
	}
	return set, nil
}

// parseJWK returns the algorithm and public key of k, or a nil key when k
// is not a signature key of a supported type or declares another algorithm.
func parseJWK(k jwk) (string, jwt.VerificationKey, error) {
	if k.Use != "" && k.Use != "sig" {
		return "", nil, nil
	}
	var alg string
	switch {
	case k.Kty == "RSA":
		alg = algRS256
	case k.Kty == "EC" && k.Crv == "P-256":
		alg = algES256
	case k.Kty == "OKP" && k.Crv == "Ed25519":
		alg = algEdDSA
	default:
		return "", nil, nil
	}
	if k.Alg != "" && k.Alg != alg {
		return "", nil, nil // declared for another algorithm: never use it for ours
	}
	if k.D != "" {
		return "", nil, errors.New("contains private key material (d)")
	}
	switch alg {
	case algRS256:
		key, err := parseRSA(k)
		return alg, key, err
	case algES256:
		x, errX := decodeFixed(k.X, 32)
		y, errY := decodeFixed(k.Y, 32)
		if errX != nil || errY != nil {
			return "", nil, errors.New("EC x and y must be 32 bytes of base64url")
		}
		key, err := ecdsa.ParseUncompressedPublicKey(elliptic.P256(), append(append([]byte{4}, x...), y...))
		if err != nil {
			return "", nil, errors.New("EC point is not on P-256")
		}
		return alg, key, nil
	default: // algEdDSA
		x, err := decodeFixed(k.X, ed25519.PublicKeySize)
		if err != nil {
			return "", nil, errors.New("Ed25519 x must be 32 bytes of base64url")
		}
		return alg, ed25519.PublicKey(x), nil
	}
}

// Bounds on accepted RSA keys.
const (
	minRSABits = 2048
	maxRSABits = 16384
)

func parseRSA(k jwk) (*rsa.PublicKey, error) {
	enc := base64.RawURLEncoding.Strict()
	nb, err := enc.DecodeString(k.N)
	if err != nil {
		return nil, errors.New("RSA n is not base64url")
	}
	eb, err := enc.DecodeString(k.E)
	if err != nil || len(eb) == 0 || len(eb) > 4 {
		return nil, errors.New("RSA e is not a base64url integer of at most 4 bytes")
	}
	n := new(big.Int).SetBytes(nb)
	if n.BitLen() < minRSABits || n.BitLen() > maxRSABits {
		return nil, fmt.Errorf("RSA modulus must be %d..%d bits", minRSABits, maxRSABits)
	}
	e := new(big.Int).SetBytes(eb).Int64()
	if e < 3 || e > 1<<31-1 || e%2 == 0 {
		return nil, errors.New("RSA exponent must be odd, 3..2^31-1")
	}
	return &rsa.PublicKey{N: n, E: int(e)}, nil
}

func decodeFixed(s string, size int) ([]byte, error) {
	b, err := base64.RawURLEncoding.Strict().DecodeString(s)
	if err != nil || len(b) != size {
		return nil, errors.New("bad length")
	}
	return b, nil
}

// Challenge returns `Bearer realm="mightyetl"`.
func (j *JWT) Challenge() string { return bearerChallenge }

// Fixed reasons wrapped around ErrUnauthenticated by JWT.Authenticate.
var (
	errTokenExpired     = unauthenticated("token expired")
	errTokenNotYetValid = unauthenticated("token not yet valid")
	errTokenIssuer      = unauthenticated("token issuer mismatch")
	errTokenAudience    = unauthenticated("token audience mismatch")
	errTokenClaim       = unauthenticated("token lacks a required claim")
	errTokenSignature   = unauthenticated("token signature, algorithm or key rejected")
	errTokenMalformed   = unauthenticated("malformed token")
	errTokenInvalid     = unauthenticated("invalid token")
)

// Authenticate returns the sub claim of a valid bearer token. It fails with
// ErrUnauthenticated (wrapped with a fixed reason) for a missing or
// malformed header or an invalid token, and with ErrPrincipalUnusable when
// a valid token's sub is missing, blank or longer than MaxPrincipalRunes.
func (j *JWT) Authenticate(r *http.Request) (string, error) {
	var claims jwt.RegisteredClaims
	if err := j.parseBearer(r, &claims); err != nil {
		return "", err
	}
	if err := checkPrincipal(claims.Subject); err != nil {
		return "", err
	}
	return claims.Subject, nil
}

// parseBearer verifies the bearer token of r into claims.
func (j *JWT) parseBearer(r *http.Request, claims jwt.Claims) error {
	hdr, err := singleAuthorization(r)
	if err != nil {
		return err
	}
	tok, ok := cutScheme(hdr, "Bearer")
	if !ok || len(tok) > maxBearerToken {
		return errMalformedCredentials
	}
	if j.source != nil {
		j.source.refreshIfStale() // in the background; this request uses the keys in hand
	}
	if _, err := j.parser.ParseWithClaims(tok, claims, j.keyFor(r.Context())); err != nil {
		return tokenError(err)
	}
	return nil
}

// jsonUnmarshal is json.Unmarshal (a seam for operatorClaims).
var jsonUnmarshal = json.Unmarshal

// keyFor returns the key selection of a request with context ctx: the key
// named by kid, else every key of the token's algorithm. A key is only ever
// returned for its own algorithm, whatever the token header claims. With a
// JWKS URL, a kid missing from the keys in hand makes the keys be fetched
// again (or a fetch in progress awaited, within ctx) unless a fetch started
// less than JWKSMinFetchGap ago.
func (j *JWT) keyFor(ctx context.Context) jwt.Keyfunc {
	return func(t *jwt.Token) (any, error) { return j.selectKey(ctx, t) }
}

func (j *JWT) selectKey(ctx context.Context, t *jwt.Token) (any, error) {
	alg := t.Method.Alg()
	switch t.Method {
	case jwt.SigningMethodRS256, jwt.SigningMethodES256, jwt.SigningMethodEdDSA:
	default:
		return nil, errors.New("algorithm not accepted")
	}
	if raw, present := t.Header["kid"]; present {
		kid, ok := raw.(string)
		if !ok {
			return nil, errors.New("kid is not a string")
		}
		k, ok := j.keys.Load().byKid[kid]
		if !ok && j.source != nil && j.source.refreshForUnknownKID(ctx) {
			k, ok = j.keys.Load().byKid[kid]
		}
		if !ok || k.alg != alg {
			return nil, errors.New("no key with this kid for this algorithm")
		}
		return k.key, nil
	}
	keys := j.keys.Load().byAlg[alg]
	if len(keys) == 0 {
		return nil, errors.New("no key for this algorithm")
	}
	return jwt.VerificationKeySet{Keys: keys}, nil
}

// tokenError maps a jwt error to a fixed-text error, because jwt errors may
// quote parts of the token.
func tokenError(err error) error {
	switch {
	case errors.Is(err, jwt.ErrTokenExpired):
		return errTokenExpired
	case errors.Is(err, jwt.ErrTokenNotValidYet):
		return errTokenNotYetValid
	case errors.Is(err, jwt.ErrTokenInvalidIssuer):
		return errTokenIssuer
	case errors.Is(err, jwt.ErrTokenInvalidAudience):
		return errTokenAudience
	case errors.Is(err, jwt.ErrTokenRequiredClaimMissing):
		return errTokenClaim
	case errors.Is(err, jwt.ErrTokenSignatureInvalid), errors.Is(err, jwt.ErrTokenUnverifiable):
		return errTokenSignature
	case errors.Is(err, jwt.ErrTokenMalformed):
		return errTokenMalformed
	}
	return errTokenInvalid
}
