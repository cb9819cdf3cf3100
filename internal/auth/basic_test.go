package auth

import (
	"encoding/base64"
	"errors"
	"fmt"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"golang.org/x/crypto/bcrypt"
)

// testClock is a settable clock.
type testClock struct {
	mu  sync.Mutex
	now time.Time
}

func newTestClock() *testClock { return &testClock{now: time.Unix(1_800_000_000, 0)} }

func (c *testClock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.now
}

func (c *testClock) Advance(d time.Duration) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.now = c.now.Add(d)
}

// writeFile replaces path atomically (write, then rename) with a
// modification time distinct from any earlier version, so a rewrite is
// always noticed.
func writeFile(t *testing.T, path, content string) {
	t.Helper()
	if err := replaceFile(path, content); err != nil {
		t.Fatal(err)
	}
}

func replaceFile(path, content string) error {
	mtime := time.Now()
	if fi, err := os.Stat(path); err == nil {
		mtime = fi.ModTime().Add(time.Hour)
	}
	tmp := path + ".tmp"
	if err := os.WriteFile(tmp, []byte(content), 0o600); err != nil {
		return err
	}
	if err := os.Chtimes(tmp, mtime, mtime); err != nil {
		return err
	}
	return os.Rename(tmp, path)
}

func credLine(t *testing.T, principal, password string) string {
	t.Helper()
	line, err := CredentialLine(principal, []byte(password))
	if err != nil {
		t.Fatal(err)
	}
	return line
}

func bcryptLine(t *testing.T, principal, password, prefix string) string {
	t.Helper()
	h, err := bcrypt.GenerateFromPassword([]byte(password), bcrypt.MinCost)
	if err != nil {
		t.Fatal(err)
	}
	return principal + ":" + prefix + string(h[4:])
}

// newTestBasic writes lines to a credentials file and returns a Basic on it
// with a test clock.
func newTestBasic(t *testing.T, opts BasicOptions, lines ...string) (*Basic, *testClock, string) {
	t.Helper()
	path := filepath.Join(t.TempDir(), "credentials")
	writeFile(t, path, strings.Join(lines, "\n")+"\n")
	opts.CredentialsFile = path
	clock := newTestClock()
	b, err := newBasic(opts, clock.Now)
	if err != nil {
		t.Fatal(err)
	}
	return b, clock, path
}

func basicRequest(user, pass string) *http.Request {
	r := httptest.NewRequest(http.MethodGet, "/api/etl/jobs", nil)
	r.SetBasicAuth(user, pass)
	return r
}

// mustAuth authenticates user:pass and fails the test unless the result is
// principal (want != "") or an error matching wantErr.
func mustAuth(t *testing.T, a Authenticator, user, pass, want string, wantErr error) {
	t.Helper()
	got, err := a.Authenticate(basicRequest(user, pass))
	if want != "" {
		if err != nil || got != want {
			t.Fatalf("Authenticate(%s) = %q, %v; want %q", user, got, err, want)
		}
		return
	}
	if got != "" || !errors.Is(err, wantErr) {
		t.Fatalf("Authenticate(%s) = %q, %v; want %v", user, got, err, wantErr)
	}
	if strings.Contains(err.Error(), pass) || (user != "" && strings.Contains(err.Error(), user)) {
		t.Fatalf("error %q leaks credentials", err)
	}
}

func TestBasicPasswords(t *testing.T) {
	b, _, _ := newTestBasic(t, BasicOptions{CacheTTL: -1},
		"# operators",
		"",
		credLine(t, "alice", "wonderland"),
		"   # indented comment",
		bcryptLine(t, "bob", "builder", "$2a$"),
		bcryptLine(t, "bert", "ernie", "$2b$"),
		bcryptLine(t, "yan", "yolo", "$2y$")+"\r",
		credLine(t, "ünï cödé", "pässwörd"),
	)
	if b.Challenge() != `Basic realm="mightyetl", charset="UTF-8"` {
		t.Errorf("Challenge() = %q", b.Challenge())
	}
	mustAuth(t, b, "alice", "wonderland", "alice", nil)
	mustAuth(t, b, "bob", "builder", "bob", nil)
	mustAuth(t, b, "bert", "ernie", "bert", nil)
	mustAuth(t, b, "yan", "yolo", "yan", nil)
	mustAuth(t, b, "ünï cödé", "pässwörd", "ünï cödé", nil)

	mustAuth(t, b, "alice", "Wonderland", "", ErrUnauthenticated)
	mustAuth(t, b, "bob", "builder ", "", ErrUnauthenticated)
	mustAuth(t, b, "alice", "builder", "", ErrUnauthenticated)
	mustAuth(t, b, "Alice", "wonderland", "", ErrUnauthenticated)
}

func TestBasicUnknownPrincipalCostsAVerification(t *testing.T) {
	b, _, _ := newTestBasic(t, BasicOptions{CacheTTL: -1},
		credLine(t, "alice", "wonderland"),
		credLine(t, "carol", "x"),
		bcryptLine(t, "bob", "builder", "$2b$"),
	)
	set := b.creds.Load()
	if len(set.dummies) != 2 || set.dummies[0].count != 2 || set.dummies[1].count != 1 {
		t.Fatalf("dummies %+v, want two cost classes of 2 and 1 principals", set.dummies)
	}
	before := b.verifications.Load()
	mustAuth(t, b, "mallory", "wonderland", "", ErrUnauthenticated)
	mustAuth(t, b, "alice", "wrong", "", ErrUnauthenticated)
	if got := b.verifications.Load() - before; got != 2 {
		t.Fatalf("%d verifications for an unknown principal and a wrong password, want 2", got)
	}
}

func TestBasicDummyForEmptyFileUsesProductionParams(t *testing.T) {
	b, _, _ := newTestBasic(t, BasicOptions{}, "# nobody yet")
	d, ok := b.creds.Load().dummyFor("anyone").(*argon2Hash)
	if !ok || d.p.memoryKiB != productionArgon2.memoryKiB || d.p.time != productionArgon2.time {
		t.Fatalf("dummy = %+v, want production argon2id", b.creds.Load().dummies)
	}
	mustAuth(t, b, "anyone", "pw", "", ErrUnauthenticated)
}

func TestBasicMalformedHeader(t *testing.T) {
	b, _, _ := newTestBasic(t, BasicOptions{}, credLine(t, "alice", "wonderland"))
	b64 := func(s string) string { return base64.StdEncoding.EncodeToString([]byte(s)) }
	for _, tc := range []struct {
		name    string
		headers []string
	}{
		{"none", nil},
		{"empty", []string{""}},
		{"bearer", []string{"Bearer " + b64("alice:wonderland")}},
		{"scheme only", []string{"Basic"}},
		{"scheme and space", []string{"Basic "}},
		{"no space", []string{"Basic" + b64("alice:wonderland")}},
		{"not base64", []string{"Basic !!!"}},
		{"unpadded", []string{"Basic " + strings.TrimRight(b64("alice:wonderla"), "=")}},
		{"no colon", []string{"Basic " + b64("alicewonderland")}},
		{"empty user", []string{"Basic " + b64(":wonderland")}},
		{"empty password", []string{"Basic " + b64("alice:")}},
		{"control in user", []string{"Basic " + b64("ali\x01ce:wonderland")}},
		{"two headers", []string{"Basic " + b64("alice:wonderland"), "Basic " + b64("alice:wonderland")}},
		{"huge", []string{"Basic " + b64("alice:"+strings.Repeat("x", 10<<10))}},
	} {
		r := httptest.NewRequest(http.MethodGet, "/api/etl/jobs", nil)
		for _, h := range tc.headers {
			r.Header.Add("Authorization", h)
		}
		p, err := b.Authenticate(r)
		if p != "" || !errors.Is(err, ErrUnauthenticated) {
			t.Errorf("%s: Authenticate = %q, %v; want ErrUnauthenticated", tc.name, p, err)
		}
	}
	if b.verifications.Load() != 0 {
		t.Errorf("malformed headers caused %d verifications", b.verifications.Load())
	}
	for _, h := range []string{"basic " + b64("alice:wonderland"), "BASIC   " + b64("alice:wonderland") + " "} {
		r := httptest.NewRequest(http.MethodGet, "/api/etl/jobs", nil)
		r.Header.Set("Authorization", h)
		if p, err := b.Authenticate(r); err != nil || p != "alice" {
			t.Errorf("Authenticate(%q) = %q, %v", h, p, err)
		}
	}
}

func TestBasicPasswordWithColon(t *testing.T) {
	b, _, _ := newTestBasic(t, BasicOptions{}, credLine(t, "alice", "a:b:c"))
	mustAuth(t, b, "alice", "a:b:c", "alice", nil)
}

func TestBasicCacheHit(t *testing.T) {
	b, _, _ := newTestBasic(t, BasicOptions{}, credLine(t, "alice", "wonderland"))
	mustAuth(t, b, "alice", "wonderland", "alice", nil)
	mustAuth(t, b, "alice", "wonderland", "alice", nil)
	mustAuth(t, b, "alice", "wonderland", "alice", nil)
	if got := b.verifications.Load(); got != 1 {
		t.Fatalf("%d verifications for three identical successes, want 1", got)
	}
	// Failures are never cached, and a cached success does not vouch for
	// another password.
	mustAuth(t, b, "alice", "wrong", "", ErrUnauthenticated)
	mustAuth(t, b, "alice", "wrong", "", ErrUnauthenticated)
	mustAuth(t, b, "mallory", "wonderland", "", ErrUnauthenticated)
	if got := b.verifications.Load(); got != 4 {
		t.Fatalf("%d verifications, want 4 (failures must not be cached)", got)
	}
	if got := b.cache.len(); got != 1 {
		t.Fatalf("cache holds %d entries, want 1", got)
	}
}

func TestBasicCacheKeyNeverHoldsPassword(t *testing.T) {
	b, _, _ := newTestBasic(t, BasicOptions{}, credLine(t, "alice", "wonderland"))
	mustAuth(t, b, "alice", "wonderland", "alice", nil)
	for el := b.cache.lru.Front(); el != nil; el = el.Next() {
		e := el.Value.(*cacheEntry)
		if strings.Contains(string(e.key[:]), "wonderland") || e.principal != "alice" {
			t.Fatalf("unexpected cache entry %+v", e)
		}
	}
	other, _, _ := newTestBasic(t, BasicOptions{}, credLine(t, "alice", "wonderland"))
	if b.cacheKey("alice", []byte("wonderland")) == other.cacheKey("alice", []byte("wonderland")) {
		t.Fatal("cache keys equal across instances: HMAC key is not random")
	}
	// "principal:password" is unambiguous because a parsed principal never
	// contains ':' (parseBasicHeader splits at the first one).
}

func TestBasicCacheDroppedWhenFileChanges(t *testing.T) {
	b, clock, path := newTestBasic(t, BasicOptions{}, credLine(t, "alice", "old-password"))
	mustAuth(t, b, "alice", "old-password", "alice", nil)
	mustAuth(t, b, "alice", "old-password", "alice", nil)
	if got := b.verifications.Load(); got != 1 {
		t.Fatalf("%d verifications, want 1", got)
	}

	writeFile(t, path, credLine(t, "alice", "new-password")+"\n")
	clock.Advance(credentialsCheckInterval)
	mustAuth(t, b, "alice", "old-password", "", ErrUnauthenticated)
	mustAuth(t, b, "alice", "new-password", "alice", nil)
	if got := b.cache.len(); got != 1 {
		t.Fatalf("cache holds %d entries after reload, want 1", got)
	}
}

func TestBasicFileCheckedAtMostOncePerSecond(t *testing.T) {
	b, clock, path := newTestBasic(t, BasicOptions{CacheTTL: -1}, credLine(t, "alice", "old"))
	writeFile(t, path, credLine(t, "alice", "new")+"\n")
	clock.Advance(credentialsCheckInterval / 2)
	mustAuth(t, b, "alice", "old", "alice", nil) // not re-checked yet
	clock.Advance(credentialsCheckInterval / 2)
	mustAuth(t, b, "alice", "old", "", ErrUnauthenticated)
	mustAuth(t, b, "alice", "new", "alice", nil)
}

func TestBasicReloadFailsClosed(t *testing.T) {
	good := credLine(t, "alice", "wonderland") + "\n"
	b, clock, path := newTestBasic(t, BasicOptions{}, strings.TrimSuffix(good, "\n"))
	mustAuth(t, b, "alice", "wonderland", "alice", nil)

	writeFile(t, path, good+"broken line\n")
	clock.Advance(credentialsCheckInterval)
	mustAuth(t, b, "alice", "wonderland", "", ErrUnauthenticated)

	writeFile(t, path, good)
	clock.Advance(credentialsCheckInterval)
	mustAuth(t, b, "alice", "wonderland", "alice", nil)

	if err := os.Remove(path); err != nil {
		t.Fatal(err)
	}
	clock.Advance(credentialsCheckInterval)
	mustAuth(t, b, "alice", "wonderland", "", ErrUnauthenticated)
}

func TestBasicCacheTTL(t *testing.T) {
	b, clock, _ := newTestBasic(t, BasicOptions{CacheTTL: 10 * time.Second}, credLine(t, "alice", "wonderland"))
	mustAuth(t, b, "alice", "wonderland", "alice", nil)
	clock.Advance(9 * time.Second)
	mustAuth(t, b, "alice", "wonderland", "alice", nil)
	if got := b.verifications.Load(); got != 1 {
		t.Fatalf("%d verifications within the TTL, want 1", got)
	}
	clock.Advance(10 * time.Second) // 10s after the last use: expired
	mustAuth(t, b, "alice", "wonderland", "alice", nil)
	if got := b.verifications.Load(); got != 2 {
		t.Fatalf("%d verifications after the TTL, want 2", got)
	}
}

func TestBasicCacheDefaults(t *testing.T) {
	b, _, _ := newTestBasic(t, BasicOptions{}, credLine(t, "alice", "wonderland"))
	if b.cache == nil || b.cache.ttl != DefaultCacheTTL || b.cache.size != DefaultCacheSize {
		t.Fatalf("cache = %+v, want TTL %v size %d", b.cache, DefaultCacheTTL, DefaultCacheSize)
	}
	for _, opts := range []BasicOptions{{CacheTTL: -1}, {CacheSize: -1}} {
		b, _, _ := newTestBasic(t, opts, credLine(t, "alice", "wonderland"))
		mustAuth(t, b, "alice", "wonderland", "alice", nil)
		mustAuth(t, b, "alice", "wonderland", "alice", nil)
		if b.cache != nil || b.verifications.Load() != 2 {
			t.Fatalf("%+v: cache not disabled", opts)
		}
	}
}

func TestBasicCacheBounded(t *testing.T) {
	b, _, _ := newTestBasic(t, BasicOptions{CacheSize: 2},
		credLine(t, "a", "pa"), credLine(t, "b", "pb"), credLine(t, "c", "pc"))
	mustAuth(t, b, "a", "pa", "a", nil)
	mustAuth(t, b, "b", "pb", "b", nil)
	mustAuth(t, b, "a", "pa", "a", nil) // a is now most recently used
	mustAuth(t, b, "c", "pc", "c", nil) // evicts b
	if got := b.cache.len(); got != 2 {
		t.Fatalf("cache holds %d entries, want at most 2", got)
	}
	n := b.verifications.Load()
	mustAuth(t, b, "a", "pa", "a", nil)
	mustAuth(t, b, "c", "pc", "c", nil)
	if got := b.verifications.Load() - n; got != 0 {
		t.Fatalf("%d verifications for cached a and c, want 0", got)
	}
	mustAuth(t, b, "b", "pb", "b", nil)
	if got := b.verifications.Load() - n; got != 1 {
		t.Fatalf("%d verifications for evicted b, want 1", got)
	}
}

func TestBasicCacheDropsStaleGeneration(t *testing.T) {
	c := newVerifiedCache(time.Minute, 10)
	now := time.Unix(0, 0)
	c.reset(2)
	c.put([32]byte{1}, "alice", 1, now) // verified against the old file
	if c.len() != 0 {
		t.Fatal("cache accepted an entry of an old generation")
	}
	c.put([32]byte{1}, "alice", 2, now)
	if _, ok := c.get([32]byte{1}, 2, now); !ok {
		t.Fatal("cache miss for a current entry")
	}
	if _, ok := c.get([32]byte{1}, 3, now); ok {
		t.Fatal("cache hit for another generation")
	}
}

func TestBasicConcurrent(t *testing.T) {
	lines := []string{credLine(t, "a", "pa"), credLine(t, "b", "pb"), credLine(t, "c", "pc"), credLine(t, "d", "pd")}
	b, clock, path := newTestBasic(t, BasicOptions{CacheSize: 3, FailureBurst: -1}, lines...)
	var wg sync.WaitGroup
	for i := range 8 {
		wg.Go(func() {
			for j := range 50 {
				u := string(rune('a' + (i+j)%4))
				if p, err := b.Authenticate(basicRequest(u, "p"+u)); err != nil || p != u {
					t.Errorf("Authenticate(%s) = %q, %v", u, p, err)
					return
				}
				_, _ = b.Authenticate(basicRequest(u, "wrong"))
			}
		})
	}
	wg.Go(func() {
		for range 5 {
			if err := replaceFile(path, strings.Join(lines, "\n")); err != nil {
				t.Error(err)
				return
			}
			clock.Advance(credentialsCheckInterval)
		}
	})
	wg.Wait()
	if b.cache.len() > 3 {
		t.Fatalf("cache holds %d entries, bound is 3", b.cache.len())
	}
}

func TestBasicCancelledWhileWaitingToHash(t *testing.T) {
	b, _, _ := newTestBasic(t, BasicOptions{MaxHashWait: time.Hour}, credLine(t, "alice", "wonderland"))
	var releases []func()
	for i := range b.gate.slots {
		release, err := b.gate.acquire(t.Context(), fmt.Sprintf("198.51.100.%d", i), false)
		if err != nil {
			t.Fatal(err)
		}
		releases = append(releases, release)
	}
	defer func() {
		for _, release := range releases {
			release()
		}
	}()
	r := basicRequest("alice", "wonderland")
	ctx, cancel := contextCancelled(r)
	defer cancel()
	if p, err := b.Authenticate(r.WithContext(ctx)); p != "" || !errors.Is(err, ErrUnauthenticated) {
		t.Fatalf("Authenticate = %q, %v; want ErrUnauthenticated", p, err)
	}
	if running, waiting := b.gate.stats(); running != b.gate.slots || waiting != 0 {
		t.Fatalf("gate running %d waiting %d after a cancelled wait", running, waiting)
	}
}

func TestNewBasicErrors(t *testing.T) {
	if _, err := NewBasic(BasicOptions{}); err == nil {
		t.Error("NewBasic without a file succeeded")
	}
	if _, err := NewBasic(BasicOptions{CredentialsFile: filepath.Join(t.TempDir(), "missing")}); err == nil {
		t.Error("NewBasic with a missing file succeeded")
	}
	good := credLine(t, "alice", "wonderland")
	secret := "TOPSECRET"
	for _, tc := range []struct {
		name string
		line string
	}{
		{"no colon", secret},
		{"not a hash", "alice2:" + secret},
		{"blank principal", "  :" + strings.SplitN(good, ":", 2)[1]},
		{"duplicate", good},
		{"control character", secret + "\x7f:" + strings.SplitN(good, ":", 2)[1]},
		{"long principal", strings.Repeat(secret, 60) + ":" + strings.SplitN(good, ":", 2)[1]},
		{"truncated bcrypt", "bob:" + bcryptLine(t, "x", "y", "$2b$")[2:50] + secret},
	} {
		path := filepath.Join(t.TempDir(), "credentials")
		writeFile(t, path, "# header\n"+good+"\n"+tc.line+"\n")
		_, err := NewBasic(BasicOptions{CredentialsFile: path})
		if err == nil {
			t.Errorf("%s: NewBasic succeeded", tc.name)
			continue
		}
		if !strings.Contains(err.Error(), "line 3") {
			t.Errorf("%s: error %q does not name line 3", tc.name, err)
		}
		if strings.Contains(err.Error(), secret) || strings.Contains(err.Error(), "alice") || strings.Contains(err.Error(), "$argon2id$v") {
			t.Errorf("%s: error %q leaks file content", tc.name, err)
		}
	}
}

func TestParseBasicHeader(t *testing.T) {
	enc := func(s string) string { return base64.StdEncoding.EncodeToString([]byte(s)) }
	for _, tc := range []struct {
		header, user, pass string
		ok                 bool
	}{
		{"Basic " + enc("alice:pw"), "alice", "pw", true},
		{"bAsIc " + enc("alice:pw:x"), "alice", "pw:x", true},
		{"Basic " + enc("ünï:pw"), "ünï", "pw", true},
		{"Basic " + enc("alice:pw") + "\t", "alice", "pw", true},
		{"Basic\t" + enc("alice:pw"), "", "", false},
		{"Basic " + enc("alice:pw")[:4] + "\n" + enc("alice:pw")[4:], "", "", false},
		{"Basic " + enc("alice:pw") + "==", "", "", false},
		{"Basic " + enc("\xff:pw"), "", "", false},
		{"Basic=" + enc("alice:pw"), "", "", false},
		{"Basi " + enc("alice:pw"), "", "", false},
	} {
		u, p, ok := parseBasicHeader(tc.header)
		if ok != tc.ok || u != tc.user || p != tc.pass {
			t.Errorf("parseBasicHeader(%q) = %q, %q, %v; want %q, %q, %v", tc.header, u, p, ok, tc.user, tc.pass, tc.ok)
		}
	}
}

func FuzzParseBasicHeader(f *testing.F) {
	for _, s := range []string{
		"Basic YWxpY2U6cHc=", "basic YWxpY2U6cHc=", "Basic", "Basic ", "Basic  YTpi  ", "Bearer x.y.z",
		"Basic Og==", "Basic YTo=", "Basic OmI=", "Basic YQ==", "Basic !!", "Basic YWxp\nY2U6cHc=",
	} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, header string) {
		user, pass, ok := parseBasicHeader(header)
		if !ok {
			if user != "" || pass != "" {
				t.Fatalf("rejected header returned %q, %q", user, pass)
			}
			return
		}
		if user == "" || pass == "" || strings.ContainsRune(user, ':') {
			t.Fatalf("accepted header gave user %q pass %q", user, pass)
		}
		if !strings.EqualFold(header[:6], "basic ") {
			t.Fatalf("accepted header %q without the Basic scheme", header)
		}
		again := "Basic " + base64.StdEncoding.EncodeToString([]byte(user+":"+pass))
		u2, p2, ok2 := parseBasicHeader(again)
		if !ok2 || u2 != user || p2 != pass {
			t.Fatalf("round trip of %q gave %q, %q, %v", header, u2, p2, ok2)
		}
	})
}

// Example of a credentials file line, as `etlctl credentials` prints it.
func ExampleCredentialLine() {
	line, err := CredentialLine("alice", []byte("correct horse battery staple"))
	if err != nil {
		panic(err)
	}
	principal, hash, _ := strings.Cut(line, ":")
	fmt.Println(principal, strings.HasPrefix(hash, "$argon2id$v=19$"))
	// Output: alice true
}

// The cache expires an entry ttl after its last use, not after it was
// written: a principal that keeps calling never pays a verification again.
func TestBasicCacheExpiresFromLastUse(t *testing.T) {
	b, clock, _ := newTestBasic(t, BasicOptions{CacheTTL: 10 * time.Second}, credLine(t, "alice", "wonderland"))
	mustAuth(t, b, "alice", "wonderland", "alice", nil)
	for range 5 {
		clock.Advance(9 * time.Second) // each use is within 10s of the last
		mustAuth(t, b, "alice", "wonderland", "alice", nil)
	}
	if got := b.verifications.Load(); got != 1 {
		t.Fatalf("%d verifications for uses 9s apart over 45s with a 10s TTL, want 1", got)
	}
}

// bcrypt checks only the first 72 bytes of a password, so every longer
// password sharing them verifies. They must share one cache entry (and one
// verification), not fill the cache with entries of one principal.
func TestBasicBcryptLongPasswordsShareOneCacheEntry(t *testing.T) {
	prefix := strings.Repeat("p", 72)
	b, _, _ := newTestBasic(t, BasicOptions{CacheSize: 100},
		bcryptLine(t, "bob", prefix, "$2b$"), credLine(t, "alice", "wonderland"))
	mustAuth(t, b, "alice", "wonderland", "alice", nil)
	for i := range 150 {
		mustAuth(t, b, "bob", fmt.Sprintf("%s-%d", prefix, i), "bob", nil)
	}
	if got := b.cache.len(); got != 2 {
		t.Errorf("cache holds %d entries after 150 long bcrypt passwords of one principal, want 2 (alice, bob)", got)
	}
	if got := b.verifications.Load(); got != 2 {
		t.Errorf("%d verifications, want 2 (alice once, bob once)", got)
	}
	n := b.verifications.Load()
	mustAuth(t, b, "alice", "wonderland", "alice", nil) // not evicted by bob
	if got := b.verifications.Load() - n; got != 0 {
		t.Errorf("alice needed %d verifications after bob's passwords, want 0 (cached)", got)
	}
	// A wrong 72-byte prefix still fails.
	mustAuth(t, b, "bob", strings.Repeat("q", 72)+"-0", "", ErrUnauthenticated)
}

// The cache keeps at most one entry per principal, whatever the hash.
func TestVerifiedCacheOneEntryPerPrincipal(t *testing.T) {
	c := newVerifiedCache(time.Minute, 10)
	now := time.Unix(0, 0)
	c.reset(1)
	for i := range 5 {
		c.put([32]byte{byte(i)}, "bob", 1, now)
	}
	c.put([32]byte{9}, "alice", 1, now)
	if c.len() != 2 {
		t.Fatalf("cache holds %d entries, want 2", c.len())
	}
	if _, ok := c.get([32]byte{4}, 1, now); !ok {
		t.Fatal("bob's latest entry missing")
	}
	if _, ok := c.get([32]byte{0}, 1, now); ok {
		t.Fatal("bob's replaced entry still cached")
	}
}

// rewriteKeepingStamp replaces path with content of the same size and
// gives it the old modification time, as a copy with preserved times or a
// rewrite within the file system's time granularity does.
func rewriteKeepingStamp(t *testing.T, path, content string) {
	t.Helper()
	fi, err := os.Stat(path)
	if err != nil {
		t.Fatal(err)
	}
	if int64(len(content)) != fi.Size() {
		t.Fatalf("test bug: new content is %d bytes, old %d", len(content), fi.Size())
	}
	if err := os.WriteFile(path, []byte(content), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.Chtimes(path, fi.ModTime(), fi.ModTime()); err != nil {
		t.Fatal(err)
	}
}

// A reload is decided by the file's content: a rewrite with the same size
// and modification time is noticed.
func TestBasicReloadDetectsContentWithSameSizeAndTime(t *testing.T) {
	b, clock, path := newTestBasic(t, BasicOptions{}, credLine(t, "alice", "old-password"))
	mustAuth(t, b, "alice", "old-password", "alice", nil)
	rewriteKeepingStamp(t, path, credLine(t, "alice", "new-password")+"\n")
	clock.Advance(credentialsCheckInterval)
	mustAuth(t, b, "alice", "old-password", "", ErrUnauthenticated)
	mustAuth(t, b, "alice", "new-password", "alice", nil)
}

// A new modification time alone (touch, a rewrite of the same bytes) is not
// a change: the cache is kept.
func TestBasicReloadIgnoresUnchangedContent(t *testing.T) {
	line := credLine(t, "alice", "wonderland") + "\n"
	b, clock, path := newTestBasic(t, BasicOptions{}, strings.TrimSuffix(line, "\n"))
	mustAuth(t, b, "alice", "wonderland", "alice", nil)
	gen := b.creds.Load().gen
	writeFile(t, path, line) // same bytes, new modification time
	clock.Advance(credentialsCheckInterval)
	mustAuth(t, b, "alice", "wonderland", "alice", nil)
	if got := b.verifications.Load(); got != 1 {
		t.Errorf("%d verifications, want 1: rewriting the same bytes dropped the cache", got)
	}
	if b.creds.Load().gen != gen {
		t.Error("rewriting the same bytes reloaded the credentials")
	}
}

// Unknown principals are verified against dummies of every cost class of
// the file, in proportion to the principals of each class, each unknown
// principal always against the same one: so how long an unknown principal
// takes matches some known principal and does not reveal that it is
// unknown.
func TestBasicUnknownPrincipalsMatchEachCostClass(t *testing.T) {
	b, _, _ := newTestBasic(t, BasicOptions{CacheTTL: -1},
		credLine(t, "alice", "wonderland"),
		credLine(t, "carol", "x"),
		bcryptLine(t, "bob", "builder", "$2b$"),
		bcryptLine(t, "bert", "ernie", "$2b$"),
	)
	set := b.creds.Load()
	fileClasses := map[string]bool{}
	for _, h := range set.hashes {
		fileClasses[h.costKey()] = true
	}
	seen := map[string]int{}
	for i := range 400 {
		name := fmt.Sprintf("unknown-%d", i)
		d := set.dummyFor(name)
		if !fileClasses[d.costKey()] {
			t.Fatalf("dummy of class %s, not a class of the file", d.costKey())
		}
		if set.dummyFor(name) != d {
			t.Fatal("an unknown principal's dummy changed between calls")
		}
		seen[d.costKey()]++
	}
	if len(seen) != len(fileClasses) {
		t.Fatalf("unknown principals used cost classes %v, want every class of %v", seen, fileClasses)
	}
	for k, n := range seen {
		if n < 100 { // 2 of 4 principals each: expect ~200 of 400
			t.Errorf("class %s used by %d of 400 unknown principals, want about half", k, n)
		}
	}
}
