package auth

import (
	"crypto/hmac"
	"crypto/rand"
	"crypto/sha256"
	"encoding/base64"
	"errors"
	"fmt"
	"net/http"
	"os"
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

// credentialsCheckInterval is how often, at most, a request stats the
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
	// CacheTTL is how long a successful verification is remembered. Zero
	// means DefaultCacheTTL (60s); negative disables the cache.
	CacheTTL time.Duration
	// CacheSize bounds the number of remembered verifications. Zero means
	// DefaultCacheSize (10,000); negative disables the cache.
	CacheSize int
}

// Basic is the [ModeBasic] Authenticator. It verifies "Authorization: Basic"
// credentials against the argon2id or bcrypt hashes of a credentials file,
// in constant time, spending the same work on unknown principals as on wrong
// passwords. Successful verifications are cached (see [BasicOptions]);
// failures never are.
//
// The file is re-checked at most once per second, on use: when its
// modification time or size changed it is reloaded and the cache dropped.
// A reload that fails (file missing, unreadable or malformed) fails closed:
// every request is rejected until the file loads again. Replace the file
// atomically (write a temporary file, then rename it) so a request never
// reads it half-written.
//
// A Basic is safe for concurrent use.
type Basic struct {
	path   string
	now    func() time.Time
	macKey []byte // random per process; keys the cache
	cache  *verifiedCache

	creds     atomic.Pointer[credentialSet]
	nextCheck atomic.Int64 // unix nanoseconds; before it, the file is not stat'ed
	reloadMu  sync.Mutex   // serialises checks and reloads
	lastGen   uint64       // guarded by reloadMu

	// hashing bounds concurrent password hashing so bursts cannot allocate
	// argon2 memory without limit.
	hashing chan struct{}

	// verifications counts password hash verifications (test hook).
	verifications atomic.Int64
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
	b := &Basic{
		path:    opts.CredentialsFile,
		now:     now,
		macKey:  make([]byte, 32),
		hashing: make(chan struct{}, max(2, runtime.GOMAXPROCS(0))),
	}
	rand.Read(b.macKey)
	ttl, size := opts.CacheTTL, opts.CacheSize
	if ttl == 0 {
		ttl = DefaultCacheTTL
	}
	if size == 0 {
		size = DefaultCacheSize
	}
	if ttl > 0 && size > 0 {
		b.cache = newVerifiedCache(ttl, size)
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
// wrong, or the request's context ends while waiting to hash.
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
	key := b.cacheKey(user, pass)
	if b.cache != nil {
		if p, hit := b.cache.get(key, set.gen, now); hit {
			return p, nil
		}
	}
	h, known := set.hashes[user]
	if !known {
		h = set.dummy
	}
	match, err := b.verify(r, h, []byte(pass))
	if err != nil {
		return "", err
	}
	if !known || !match {
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

// verify checks password against h, waiting for a hashing slot.
func (b *Basic) verify(r *http.Request, h passwordHash, password []byte) (bool, error) {
	select {
	case b.hashing <- struct{}{}:
	case <-r.Context().Done():
		return false, unauthenticated("request ended before verification")
	}
	defer func() { <-b.hashing }()
	b.verifications.Add(1)
	return h.verify(password), nil
}

// cacheKey is HMAC-SHA256 of "user:pass" under the per-process key, so the
// cache never holds a password or anything that can be checked offline
// against a guess without the key.
func (b *Basic) cacheKey(user, pass string) [32]byte {
	m := hmac.New(sha256.New, b.macKey)
	m.Write([]byte(user))
	m.Write([]byte{':'})
	m.Write([]byte(pass))
	var k [32]byte
	m.Sum(k[:0])
	return k
}

// current returns the credential set to use at now, first reloading the
// file when a check is due and its stamp changed.
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
	if fi, err := os.Stat(b.path); err == nil && cur.loaded && stampOf(fi).equal(cur.stamp) {
		return cur
	}
	set, err := loadCredentials(b.path)
	if err != nil {
		if !cur.loaded {
			return cur // still broken; nothing cached to drop
		}
		set = &credentialSet{hashes: map[string]passwordHash{}, dummy: cur.dummy}
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
