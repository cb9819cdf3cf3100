package auth

import (
	"cmp"
	"crypto/rand"
	"crypto/sha256"
	"encoding/base64"
	"errors"
	"fmt"
	"net/http"
	"net/netip"
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
	// HashSlots is how many verifications run at once. Zero means
	// max(2, GOMAXPROCS).
	HashSlots int
	// MaxHashWait is the longest a request waits for a verification slot
	// before it gets ErrOverloaded. Zero means DefaultMaxHashWait (2s).
	MaxHashWait time.Duration
	// MaxHashWaiters bounds the requests waiting for a verification slot;
	// one more gets ErrOverloaded at once. Zero means
	// DefaultHashWaitersPerSlot (8) times the number of slots.
	MaxHashWaiters int
	// MaxHashWaitersPerAddress bounds the requests of one client address
	// waiting for a verification slot; one more gets ErrRateLimited at
	// once. Zero means DefaultHashWaitersPerAddress (8). Requests waiting
	// on a verification of the same credential already in progress do not
	// wait for a slot and are not counted.
	MaxHashWaitersPerAddress int
	// TrustedProxies are the peers whose ForwardedHeader names the client
	// address that login limits and fair scheduling key by (see
	// clientAddr). Empty means none: the TCP peer is the client, and
	// forwarding headers are ignored.
	TrustedProxies []netip.Prefix
	// ForwardedHeader is the header the trusted proxies write:
	// HeaderXForwardedFor (also when empty) or HeaderForwarded. Only that
	// one is read: a proxy passes the other through from the client
	// unchanged.
	ForwardedHeader string
}

// WithDefaults returns o with every zero field set to its documented
// default (HashSlots and MaxHashWaiters resolved for this process);
// negative values, which disable the cache or the failure limit, are kept.
func (o BasicOptions) WithDefaults() BasicOptions {
	o.CacheTTL = cmp.Or(o.CacheTTL, DefaultCacheTTL)
	o.CacheSize = cmp.Or(o.CacheSize, DefaultCacheSize)
	o.FailureBurst = cmp.Or(o.FailureBurst, DefaultFailureBurst)
	o.FailureRefill = cmp.Or(o.FailureRefill, DefaultFailureRefill)
	o.HashSlots = cmp.Or(o.HashSlots, defaultHashSlots())
	o.MaxHashWait = cmp.Or(o.MaxHashWait, DefaultMaxHashWait)
	o.MaxHashWaiters = cmp.Or(o.MaxHashWaiters, DefaultHashWaitersPerSlot*o.HashSlots)
	o.MaxHashWaitersPerAddress = cmp.Or(o.MaxHashWaitersPerAddress, DefaultHashWaitersPerAddress)
	o.ForwardedHeader = cmp.Or(o.ForwardedHeader, HeaderXForwardedFor)
	return o
}

// Basic is the [ModeBasic] Authenticator. It verifies "Authorization: Basic"
// credentials against the argon2id or bcrypt hashes of a credentials file,
// in constant time, spending the same work on unknown principals as on wrong
// passwords. Successful verifications are cached (see [BasicOptions]);
// failures never are.
//
// Verification is slow and memory-hungry on purpose, so it is rationed:
// HashSlots verifications run at once; the requests that wait are bounded
// in number and time and served round-robin across client addresses (see
// clientAddr), so a flood from one address cannot take every slot; and
// each address may fail only FailureBurst logins at once, then one per
// FailureRefill. A request refused for load gets a [*ThrottleError] at once,
// without a verification. A cache hit needs none of this.
//
// Concurrent requests presenting the same credential (principal and
// password) share one verification: the first leads it through the
// rationing above, the others wait for its verdict without a slot, a place
// in the address's queue or a charge to its failure budget (they cost no
// hash and try no new password). So a client that opens many connections
// at once with valid credentials after a restart (a cold cache) pays one
// verification, not one per connection.
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
	flights *verifyFlights
	proxies *proxyTrust // nil: no trusted proxy

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
// line number and the rule broken but never the line's content. A negative
// HashSlots, MaxHashWait, MaxHashWaiters or MaxHashWaitersPerAddress, a
// non-positive FailureRefill with the failure limit on, and an unknown
// ForwardedHeader are errors.
func NewBasic(opts BasicOptions) (*Basic, error) {
	return newBasic(opts, time.Now)
}

// newBasic is NewBasic with a clock, for tests.
func newBasic(opts BasicOptions, now func() time.Time) (*Basic, error) {
	if opts.CredentialsFile == "" {
		return nil, errors.New("new basic authenticator: credentials file not set")
	}
	opts = opts.WithDefaults()
	switch {
	case opts.HashSlots < 0, opts.MaxHashWait < 0, opts.MaxHashWaiters < 0, opts.MaxHashWaitersPerAddress < 0:
		return nil, errors.New("new basic authenticator: negative hash slots, wait or waiters")
	case opts.FailureBurst > 0 && opts.FailureRefill <= 0:
		return nil, errors.New("new basic authenticator: failure refill must be positive")
	}
	proxies, err := newProxyTrust(opts.TrustedProxies, opts.ForwardedHeader)
	if err != nil {
		return nil, fmt.Errorf("new basic authenticator: %w", err)
	}
	set, err := loadCredentials(opts.CredentialsFile)
	if err != nil {
		return nil, fmt.Errorf("new basic authenticator: %w", err)
	}
	b := &Basic{
		path:    opts.CredentialsFile,
		now:     now,
		gate:    newHashGate(opts.HashSlots, opts.MaxHashWaiters, opts.MaxHashWaitersPerAddress, opts.MaxHashWait),
		flights: newVerifyFlights(),
		proxies: proxies,
	}
	macKey := make([]byte, 32) // random per process; keys the cache and the flights
	rand.Read(macKey)
	b.macs = newKeyedMACs(macKey)
	if opts.CacheTTL > 0 && opts.CacheSize > 0 {
		b.cache = newVerifiedCache(opts.CacheTTL, opts.CacheSize)
	}
	if opts.FailureBurst > 0 {
		b.limiter = newFailureLimiter(opts.FailureBurst, opts.FailureRefill)
	}
	b.install(set)
	b.nextCheck.Store(b.now().Add(credentialsCheckInterval).UnixNano())
	return b, nil
}

// Challenge returns `Basic realm="mightyetl", charset="UTF-8"`.
func (b *Basic) Challenge() string { return basicChallenge }

// maxFlightRounds is how many times a request waits on another request's
// verification of the same credential that ended without a verdict (its
// leader was refused for load or gave up) before it leads one of its own
// without waiting again.
const maxFlightRounds = 3

// Authenticate returns the principal named by valid Basic credentials. It
// fails with ErrUnauthenticated (wrapped with a fixed reason) when the
// header is missing or malformed, the principal is unknown, the password is
// wrong, or the request's context ends while waiting to hash; and with a
// *ThrottleError (ErrRateLimited or ErrOverloaded) when the request is
// refused for load before its credentials are checked.
//
// A request whose credential is being verified for another request waits
// for that verdict instead of verifying it again (see [Basic]); only the
// request that verified is charged a failed login for a wrong password.
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
	addr := clientAddr(r, b.proxies)
	fk := flightKey{cred: key, gen: set.gen}
	for round := 0; ; round++ {
		if b.cache != nil {
			if p, hit := b.cache.get(key, set.gen, now); hit {
				return p, nil
			}
		}
		suspect := false
		if b.limiter != nil {
			if suspect, err = b.limiter.allow(addr, now); err != nil {
				return "", err
			}
		}
		fl, leader := b.flights.join(fk, round < maxFlightRounds)
		if !leader {
			if !b.flights.wait(fl, r.Context().Done()) {
				return "", errRequestEnded
			}
			if !fl.decided {
				now = b.now()
				continue // its leader was refused or gave up: try again
			}
			return b.verdict(user, fl.ok)
		}
		return b.lead(r, fk, fl, addr, suspect, user, known, h, []byte(pass), now)
	}
}

// lead verifies the credential of r as the leader of fl and publishes the
// verdict to the requests waiting on fl. The success is cached before it is
// published, so a request that finds no flight finds the cache entry.
func (b *Basic) lead(r *http.Request, fk flightKey, fl *verifyFlight, addr string, suspect bool,
	user string, known bool, h passwordHash, pass []byte, now time.Time) (principal string, err error) {
	decided, ok := false, false
	defer func() { b.flights.finish(fk, fl, decided, ok) }()
	if b.cache != nil {
		// A flight that finished between the caller's cache look-up and
		// join left its success here.
		if p, hit := b.cache.get(fk.cred, fk.gen, now); hit {
			decided, ok = true, true
			return p, nil
		}
	}
	match, err := b.verify(r, addr, suspect, h, pass)
	if err != nil {
		return "", err
	}
	decided, ok = true, known && match
	if !ok {
		if b.limiter != nil {
			b.limiter.fail(addr, b.now())
		}
		return "", errBadCredentials
	}
	if err := checkPrincipal(user); err != nil {
		return "", err
	}
	if b.cache != nil {
		b.cache.put(fk.cred, user, fk.gen, now)
	}
	return user, nil
}

// verdict is the answer to a request that waited on another's verification
// of its credential: ok means a known principal and a matching password.
func (b *Basic) verdict(user string, ok bool) (string, error) {
	if !ok {
		return "", errBadCredentials
	}
	if err := checkPrincipal(user); err != nil {
		return "", err
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
// cache and the verifications in progress never hold a password or anything
// that can be checked offline against a guess without the key.
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
