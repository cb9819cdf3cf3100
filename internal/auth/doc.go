// Package auth authenticates HTTP API requests and names their principal.
//
// One [Authenticator] is chosen at start-up from MIGHTYETL_AUTH_MODE (see
// [ParseMode]):
//
//   - [ModeDeny] (the default): [NewDeny] rejects every request, so every
//     /api/** route answers 401 until authentication is configured.
//   - [ModeBasic]: [NewBasic] checks "Authorization: Basic" credentials against
//     a credentials file of "principal:hash" lines, where hash is an argon2id
//     PHC string (see [HashPassword] and [CredentialLine]) or a bcrypt hash.
//   - [ModeJWT]: [NewJWT] checks "Authorization: Bearer <JWT>" tokens signed
//     with RS256, ES256 or EdDSA by a key of a JWKS file, or of the identity
//     provider's JWKS URL (fetched again every refresh interval and for an
//     unknown kid, at most once per [JWKSMinFetchGap]); the principal is the
//     token's sub claim.
//
// Invariants every Authenticator keeps:
//
//   - A returned principal is usable: non-blank after trimming white space and
//     at most [MaxPrincipalRunes] code points. Otherwise the request fails with
//     [ErrPrincipalUnusable]; HTTP maps that to 401
//     etl_idempotency_principal_required.
//   - Every other failure matches [ErrUnauthenticated]; HTTP answers 401 with
//     the WWW-Authenticate value of [Authenticator.Challenge].
//   - Errors never contain a principal, password, token or file content, so
//     they may be logged as they are.
//   - Nothing raw is persisted: stores key rows by [ScopeHash] of the
//     principal, never the principal itself.
//
// Basic authentication is slow on purpose (password hashing), so [Basic]
// remembers successful verifications in a bounded in-memory cache (one entry
// per principal, expiring a while after its last use) keyed by an HMAC of
// the presented credentials under a random per-process key; failures are
// never cached and the cache is dropped when the credentials file's content
// changes. Concurrent requests presenting the same credential share one
// verification. Verifications are rationed: a fixed number run at once,
// waiting is bounded and fair across client addresses, and each address may
// fail only so many logins. The client address is the TCP peer, or behind
// trusted proxies ([BasicOptions].TrustedProxies) the right-most untrusted
// address of their forwarding header. A request refused for load gets a
// [*ThrottleError] ([ErrRateLimited]: HTTP 429, [ErrOverloaded]: HTTP 503,
// both with Retry-After) before its credentials are looked at.
package auth
