package auth

import (
	"context"
	"errors"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"

	"go.uber.org/goleak"
)

// testArgon2 keeps hashing fast in tests; TestHashPasswordProductionParams
// covers the production parameters once.
var testArgon2 = argon2Params{memoryKiB: 64, time: 1, threads: 1, saltLen: 16, keyLen: 32}

func TestMain(m *testing.M) {
	hashArgon2 = testArgon2
	goleak.VerifyTestMain(m)
}

func TestParseMode(t *testing.T) {
	for _, tc := range []struct {
		in   string
		want Mode
		ok   bool
	}{
		{"", ModeDeny, true},
		{"deny", ModeDeny, true},
		{"basic", ModeBasic, true},
		{"jwt", ModeJWT, true},
		{"JWT", "", false},
		{" basic", "", false},
		{"none", "", false},
	} {
		got, err := ParseMode(tc.in)
		if (err == nil) != tc.ok || got != tc.want {
			t.Errorf("ParseMode(%q) = %q, %v; want %q, ok=%v", tc.in, got, err, tc.want, tc.ok)
		}
	}
}

func TestDeny(t *testing.T) {
	a := NewDeny()
	for _, h := range []string{"", "Basic YWxpY2U6c2VjcmV0", "Bearer abc.def.ghi"} {
		r := httptest.NewRequest(http.MethodGet, "/api/etl/jobs", nil)
		if h != "" {
			r.Header.Set("Authorization", h)
		}
		p, err := a.Authenticate(r)
		if p != "" || !errors.Is(err, ErrUnauthenticated) {
			t.Errorf("Authenticate(%q) = %q, %v; want ErrUnauthenticated", h, p, err)
		}
	}
	if got := a.Challenge(); got != `Bearer realm="mightyetl"` {
		t.Errorf("Challenge() = %q", got)
	}
}

func TestScopeHash(t *testing.T) {
	// RFC 4231 test case 2: HMAC-SHA256("Jefe", "what do ya want for nothing?").
	got := ScopeHash([]byte("Jefe"), "what do ya want for nothing?")
	want := "5bdcc146bf60754e6a042426089575c75a003f089d2739839dec58b964ec3843"
	if got != want {
		t.Errorf("ScopeHash = %s, want %s", got, want)
	}
	if ScopeHash([]byte("k"), "alice") == ScopeHash([]byte("other"), "alice") {
		t.Error("ScopeHash ignores the key")
	}
}

// TestScopeHasher pins that the reusing hasher gives ScopeHash's value,
// also when its states are reused concurrently and the caller's key slice
// changes afterwards.
func TestScopeHasher(t *testing.T) {
	key := []byte("Jefe")
	h := NewScopeHasher(key)
	key[0] = 'X'
	principals := []string{"what do ya want for nothing?", "", "alice", "ünïcødé", strings.Repeat("p", 512)}
	var wg sync.WaitGroup
	for range 4 {
		wg.Go(func() {
			for range 50 {
				for _, p := range principals {
					if got, want := h.Hash(p), ScopeHash([]byte("Jefe"), p); got != want {
						t.Errorf("Hash(%q) = %s, want %s", p, got, want)
					}
				}
			}
		})
	}
	wg.Wait()
}

func TestCheckPrincipal(t *testing.T) {
	for _, tc := range []struct {
		name string
		p    string
		ok   bool
	}{
		{"plain", "alice", true},
		{"empty", "", false},
		{"blank", " \t ", false},
		{"512 code points", strings.Repeat("é", 512), true},
		{"513 code points", strings.Repeat("é", 513), false},
		{"513 ascii", strings.Repeat("a", 513), false},
	} {
		err := checkPrincipal(tc.p)
		if (err == nil) != tc.ok || (err != nil && !errors.Is(err, ErrPrincipalUnusable)) {
			t.Errorf("%s: checkPrincipal = %v, want ok=%v", tc.name, err, tc.ok)
		}
	}
}

func TestHashPasswordProductionParams(t *testing.T) {
	if productionArgon2 != (argon2Params{memoryKiB: 19456, time: 2, threads: 1, saltLen: 16, keyLen: 32}) {
		t.Fatalf("production argon2 parameters changed: %+v", productionArgon2)
	}
	phc, err := hashPasswordWith(productionArgon2, []byte("correct horse"))
	if err != nil {
		t.Fatal(err)
	}
	if !strings.HasPrefix(phc, "$argon2id$v=19$m=19456,t=2,p=1$") {
		t.Fatalf("unexpected PHC prefix: %s", phc)
	}
	h, err := parsePasswordHash(phc)
	if err != nil {
		t.Fatal(err)
	}
	if a := h.(*argon2Hash); len(a.salt) != 16 || len(a.key) != 32 {
		t.Fatalf("salt %d bytes, key %d bytes; want 16, 32", len(a.salt), len(a.key))
	}
	if !h.verify([]byte("correct horse")) || h.verify([]byte("correct horsE")) {
		t.Fatal("production hash does not verify as expected")
	}
}

func TestHashPassword(t *testing.T) {
	a, err := HashPassword([]byte("pw"))
	if err != nil {
		t.Fatal(err)
	}
	b, _ := HashPassword([]byte("pw"))
	if a == b {
		t.Error("two hashes of one password are equal: salt not random")
	}
	if _, err := HashPassword(nil); err == nil {
		t.Error("HashPassword(empty) succeeded")
	}
}

func TestCredentialLine(t *testing.T) {
	line, err := CredentialLine("alice@example.com", []byte("s3cret"))
	if err != nil {
		t.Fatal(err)
	}
	p, phc, _ := strings.Cut(line, ":")
	if p != "alice@example.com" || !strings.HasPrefix(phc, "$argon2id$v=19$") {
		t.Fatalf("CredentialLine = %q", line)
	}
	for _, bad := range []string{"", "   ", "a:b", "a\x00b", "tab\there", "bad\xffutf8", strings.Repeat("x", 513)} {
		_, err := CredentialLine(bad, []byte("pw"))
		if err == nil {
			t.Errorf("CredentialLine(%q) succeeded", bad)
			continue
		}
		if bad != "" && strings.Contains(err.Error(), bad) {
			t.Errorf("error %q contains the principal", err)
		}
	}
	if _, err := CredentialLine("ok", nil); err == nil {
		t.Error("CredentialLine with empty password succeeded")
	}
}

func TestParsePasswordHashRejects(t *testing.T) {
	good, _ := hashPasswordWith(testArgon2, []byte("pw"))
	parts := strings.Split(good, "$")
	salt, key := parts[4], parts[5]
	for _, bad := range []string{
		"",
		"plaintext",
		"$argon2i$v=19$m=64,t=1,p=1$" + salt + "$" + key,
		"$argon2id$v=16$m=64,t=1,p=1$" + salt + "$" + key,
		"$argon2id$v=19$m=64,t=1$" + salt + "$" + key,
		"$argon2id$v=19$t=1,m=64,p=1$" + salt + "$" + key,
		"$argon2id$v=19$m=0,t=1,p=1$" + salt + "$" + key,
		"$argon2id$v=19$m=064,t=1,p=1$" + salt + "$" + key,
		"$argon2id$v=19$m=8,t=1,p=2$" + salt + "$" + key,
		"$argon2id$v=19$m=4294967295,t=1,p=1$" + salt + "$" + key,
		"$argon2id$v=19$m=64,t=1,p=1$" + salt + "==$" + key,
		"$argon2id$v=19$m=64,t=1,p=1$c2FsdA$" + key,
		"$argon2id$v=19$m=64,t=1,p=1$" + salt + "$" + key + "$",
		"$2b$10$short",
		"$2b$03$" + strings.Repeat("a", 53),
		"$2b$10$" + strings.Repeat("!", 53),
		"$2x$10$" + strings.Repeat("a", 53),
	} {
		if _, err := parsePasswordHash(bad); err == nil {
			t.Errorf("parsePasswordHash(%q) succeeded", bad)
		}
	}
}

// contextCancelled returns an already cancelled context derived from r's.
func contextCancelled(r *http.Request) (context.Context, context.CancelFunc) {
	ctx, cancel := context.WithCancel(r.Context())
	cancel()
	return ctx, cancel
}
