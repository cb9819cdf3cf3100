package auth

import (
	"cmp"
	"crypto/rand"
	"crypto/sha256"
	"encoding/base64"
	"errors"
	"fmt"
	"net/http"
	"runtime"
	"strings"
	"sync"
	"sync/atomic"
	"time"
	"unicode"
	"unicode/utf8"
)

// Defaults of [BasicOptions].
const (
	DefaultCacheTTL  = 60 * time.Second
	DefaultCacheSize = 10_000
)

// credentialsCheckInterval is how often, at most, a request re-reads the
// credentials file to notice a rewrite.
const credentialsCheckInterval = time.Second

// maxBasicCredentials bounds the base64 credentials of a Basic header, so
// a huge header is rejected before it is decoded or hashed.
const maxBasicCredentials = 8 << 10

// BasicOptions configures [NewBasic].
type BasicOptions struct {
	// CredentialsFile is the path of the credentials file
	// (MIGHTYETL_BASIC_CREDENTIALS_FILE). Required.
	CredentialsFile string
	// CacheTTL is how long a successful verification is remembered after
	// its last use. Zero means DefaultCacheTTL (60s); negative disables the
	// cache.
	CacheTTL time.Duration
	// CacheSize bounds the number of remembered verifications. Zero means
	// DefaultCacheSize (10,000); negative disables the cache.
	CacheSize int
	// FailureBurst is how many failed logins a client address may make
	// before it must wait FailureRefill per further attempt; an address
	// over its budget gets ErrRateLimited without a verification. Zero
	// means DefaultFailureBurst (10); negative disables the limit.
	FailureBurst int
	// FailureRefill is the time in which an address earns back one failed
	// login. Zero means DefaultFailureRefill (6s).
	FailureRefill time.Duration
	// MaxHashWait is the longest a request waits for a verification slot
	// before it gets ErrOverloaded. Zero means DefaultMaxHashWait (2s).
	MaxHashWait time.Duration
	// MaxHashWaiters bounds the requests waiting for a verification slot;
	// one more gets ErrOverloaded at once. Zero means
	// DefaultHashWaitersPerSlot (8) times the number of slots.
	MaxHashWaiters int
}

// Basic is the [ModeBasic] Authenticator. It verifies "Authorization: Basic"
// credentials against the argon2id or bcrypt hashes of a credentials file,
// in constant time, spending the same work on unknown principals as on wrong
// passwords. Successful verifications are cached (see [BasicOptions]);
// failures never are.
//
// Verification is slow and memory-hungry on purpose, so it is rationed:
// max(2, GOMAXPROCS) verifications run at once; the requests that wait are
// bounded in number and time and served round-robin across client addresses
// (see clientAddr), so a flood from one address cannot take every slot; and
// each address may fail only FailureBurst logins at once, then one per
// FailureRefill. A request refused for load gets a [*ThrottleError] at once,
// without a verification. A cache hit needs none of this.
//
// The file is re-read at most once per second, on use: when its content
// (SHA-256 of its bytes) changed it is reloaded and the cache dropped. A
// reload that fails (file missing, unreadable or malformed) fails closed:
// every request is rejected until the file loads again. Replace the file
// atomically (write a temporary file, then rename it) so a request never
// reads it half-written.
//
// A Basic is safe for concurrent use.
type Basic struct {
	path    string
	now     func() time.Time
	macs    *keyedMACs // HMAC-SHA256 under a random per-process key, reused by cacheKey
	cache   *verifiedCache
	limiter *failureLimiter // nil when disabled
	gate    *hashGate

	creds     atomic.Pointer[credentialSet]
	nextCheck atomic.Int64 // unix nanoseconds; before it, the file is not read
	reloadMu  sync.Mutex   // serialises checks and reloads
	lastGen   uint64       // guarded by reloadMu

	// verifications counts password hash verifications (test hook).
	verifications atomic.Int64
	// beforeVerify, when set, runs in a verification slot before the hash
	// (test hook: a barrier that holds slots).
	beforeVerify func(r *http.Request)
}

// NewBasic loads opts.CredentialsFile and returns a Basic. A missing or
// unreadable file is an error; a malformed one is an error that names the
// line number and the rule broken but never the line's content.
func NewBasic(opts BasicOptions) (*Basic, error) {
	return newBasic(opts, time.Now)
}

// newBasic is NewBasic with a clock, for tests.
func newBasic(opts BasicOptions, now func() time.Time) (*Basic, error) {
	if opts.CredentialsFile == "" {
		return nil, errors.New("new basic authenticator: credentials file not set")
	}
	set, err := loadCredentials(opts.CredentialsFile)
	if err != nil {
		return nil, fmt.Errorf("new basic authenticator: %w", err)
	}
	slots := max(2, runtime.GOMAXPROCS(0))
	b := &Basic{
		path: opts.CredentialsFile,
		now:  now,
		gate: newHashGate(slots,
			cmp.Or(opts.MaxHashWaiters, DefaultHashWaitersPerSlot*slots),
			cmp.Or(opts.MaxHashWait, DefaultMaxHashWait)),
	}
	macKey := make([]byte, 32) // random per process; keys the cache
	rand.Read(macKey)
	b.macs = newKeyedMACs(macKey)
	ttl := cmp.Or(opts.CacheTTL, DefaultCacheTTL)
	size := cmp.Or(opts.CacheSize, DefaultCacheSize)
	if ttl > 0 && size > 0 {
		b.cache = newVerifiedCache(ttl, size)
	}
	if burst := cmp.Or(opts.FailureBurst, DefaultFailureBurst); burst > 0 {
		b.limiter = newFailureLimiter(burst, cmp.Or(opts.FailureRefill, DefaultFailureRefill))
	}
	b.install(set)
	b.nextCheck.Store(b.now().Add(credentialsCheckInterval).UnixNano())
	return b, nil
}

// Challenge returns `Basic realm="mightyetl", charset="UTF-8"`.
func (b *Basic) Challenge() string { return basicChallenge }

// Authenticate returns the principal named by valid Basic credentials. It
// fails with ErrUnauthenticated (wrapped with a fixed reason) when the
// header is missing or malformed, the principal is unknown, the password is
// wrong, or the request's context ends while waiting to hash; and with a
// *ThrottleError (ErrRateLimited or ErrOverloaded) when the request is
// refused for load before its credentials are checked.
func (b *Basic) Authenticate(r *http.Request) (string, error) {
	hdr, err := singleAuthorization(r)
	if err != nil {
		return "", err
	}
	user, pass, ok := parseBasicHeader(hdr)
	if !ok {
		return "", errMalformedCredentials
	}
	now := b.now()
	set := b.current(now)
	h, known := set.hashes[user]
	if !known {
		h = set.dummyFor(user)
	}
	// The key covers only the password bytes the hash checks, so the
	// passwords bcrypt cannot tell apart share one entry.
	key := b.cacheKey(user, h.significant([]byte(pass)))
	if b.cache != nil {
		if p, hit := b.cache.get(key, set.gen, now); hit {
			return p, nil
		}
	}
	addr := clientAddr(r)
	suspect := false
	if b.limiter != nil {
		if suspect, err = b.limiter.allow(addr, now); err != nil {
			return "", err
		}
	}
	match, err := b.verify(r, addr, suspect, h, []byte(pass))
	if err != nil {
		return "", err
	}
	if !known || !match {
		if b.limiter != nil {
			b.limiter.fail(addr, b.now())
		}
		return "", errBadCredentials
	}
	if err := checkPrincipal(user); err != nil {
		return "", err
	}
	if b.cache != nil {
		b.cache.put(key, user, set.gen, now)
	}
	return user, nil
}

// verify checks password against h in a verification slot of the gate.
func (b *Basic) verify(r *http.Request, addr string, suspect bool, h passwordHash, password []byte) (bool, error) {
	release, err := b.gate.acquire(r.Context(), addr, suspect)
	if err != nil {
		return false, err
	}
	defer release()
	if b.beforeVerify != nil {
		b.beforeVerify(r)
	}
	b.verifications.Add(1)
	return h.verify(password), nil
}

// cacheKey is HMAC-SHA256 of "user:pass" under the per-process key, so the
// cache never holds a password or anything that can be checked offline
// against a guess without the key.
func (b *Basic) cacheKey(user string, pass []byte) [32]byte {
	return b.macs.sum([]byte(user), []byte{':'}, pass)
}

// current returns the credential set to use at now, first re-reading the
// file when a check is due and reloading it when its content changed.
func (b *Basic) current(now time.Time) *credentialSet {
	if now.UnixNano() < b.nextCheck.Load() {
		return b.creds.Load()
	}
	b.reloadMu.Lock()
	defer b.reloadMu.Unlock()
	if now.UnixNano() < b.nextCheck.Load() {
		return b.creds.Load() // another request checked meanwhile
	}
	b.nextCheck.Store(now.Add(credentialsCheckInterval).UnixNano())
	cur := b.creds.Load()
	data, err := readCredentialsFile(b.path)
	if err == nil && cur.loaded && sha256.Sum256(data) == cur.digest {
		return cur
	}
	var set *credentialSet
	if err == nil {
		set, err = parseCredentialSet(b.path, data)
	}
	if err != nil {
		if !cur.loaded {
			return cur // still broken; nothing cached to drop
		}
		set = &credentialSet{hashes: map[string]passwordHash{}, dummies: cur.dummies}
	}
	b.install(set)
	return set
}

// install makes set current with a new generation and drops the cache.
// Callers hold reloadMu, except NewBasic before b is shared.
func (b *Basic) install(set *credentialSet) {
	b.lastGen++
	set.gen = b.lastGen
	if b.cache != nil {
		b.cache.reset(set.gen)
	}
	b.creds.Store(set)
}

// parseBasicHeader parses an Authorization value `Basic <base64(user:pass)>`
// (RFC 7617): the scheme is case-insensitive, the credentials are padded
// standard base64 of at most maxBasicCredentials characters, and the
// user-id is everything before the first ':'. It rejects an empty user-id
// or password and a user-id that is not valid UTF-8 or contains a control
// character.
func parseBasicHeader(header string) (user, pass string, ok bool) {
	cred, ok := cutScheme(header, "Basic")
	if !ok || len(cred) > maxBasicCredentials {
		return "", "", false
	}
	raw, err := base64.StdEncoding.Strict().DecodeString(cred)
	if err != nil {
		return "", "", false
	}
	user, pass, ok = strings.Cut(string(raw), ":")
	if !ok || user == "" || pass == "" || !utf8.ValidString(user) || strings.ContainsFunc(user, unicode.IsControl) {
		return "", "", false
	}
	return user, pass, true
}
