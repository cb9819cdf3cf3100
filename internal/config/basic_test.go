package config

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/mightyetl/mightyetl/internal/auth"
)

// The Basic rationing and JWT key settings left unset are auth's defaults:
// configuration and library cannot disagree about them.
func TestAuthLimitDefaultsAreTheLibraryDefaults(t *testing.T) {
	c, _, err := LoadIntake(nil, func(string) string { return "" })
	if err != nil {
		t.Fatal(err)
	}
	lib := auth.BasicOptions{}.WithDefaults()
	got := c.Basic.Options("c").WithDefaults()
	for _, d := range []struct {
		name            string
		config, library any
	}{
		{"MIGHTYETL_BASIC_FAILURE_BURST", got.FailureBurst, lib.FailureBurst},
		{"MIGHTYETL_BASIC_FAILURE_REFILL", got.FailureRefill, lib.FailureRefill},
		{"MIGHTYETL_BASIC_HASH_SLOTS", got.HashSlots, lib.HashSlots},
		{"MIGHTYETL_BASIC_HASH_QUEUE", got.MaxHashWaiters, lib.MaxHashWaiters},
		{"MIGHTYETL_BASIC_HASH_QUEUE_PER_ADDRESS", got.MaxHashWaitersPerAddress, lib.MaxHashWaitersPerAddress},
		{"MIGHTYETL_BASIC_HASH_MAX_WAIT", got.MaxHashWait, lib.MaxHashWait},
		{"MIGHTYETL_TRUSTED_PROXY_HEADER", got.ForwardedHeader, lib.ForwardedHeader},
		{"MIGHTYETL_TRUSTED_PROXIES", len(got.TrustedProxies), 0},
		{"MIGHTYETL_JWT_JWKS_REFRESH_INTERVAL", c.JWTJWKSRefresh, auth.DefaultJWKSRefreshInterval},
	} {
		if d.config != d.library {
			t.Errorf("%s: configuration default %v, library default %v", d.name, d.config, d.library)
		}
	}
}

// TestBasicLimitAndTrustedProxySettings pins the Basic rationing and
// trusted-proxy settings: each is parsed into auth.BasicOptions, each
// range is enforced, and every refusal is one line naming the setting.
func TestBasicLimitAndTrustedProxySettings(t *testing.T) {
	const key = "0123456789abcdef0123456789abcdef"
	basic := map[string]string{"MIGHTYETL_AUTH_MODE": "basic", "MIGHTYETL_BASIC_CREDENTIALS_FILE": "c", "MIGHTYETL_PRINCIPAL_HASH_KEY": key}
	for _, c := range []struct {
		name    string
		env     map[string]string
		refused string                       // "" accepted; else the setting the error starts with
		want    func(auth.BasicOptions) bool // for accepted ones
	}{
		{"failure burst 1", withEnv(basic, "MIGHTYETL_BASIC_FAILURE_BURST", "1"), "", func(o auth.BasicOptions) bool { return o.FailureBurst == 1 }},
		{"failure burst 10000", withEnv(basic, "MIGHTYETL_BASIC_FAILURE_BURST", "10000"), "", func(o auth.BasicOptions) bool { return o.FailureBurst == 10000 }},
		{"failure burst 0", withEnv(basic, "MIGHTYETL_BASIC_FAILURE_BURST", "0"), "MIGHTYETL_BASIC_FAILURE_BURST", nil},
		{"failure burst -1", withEnv(basic, "MIGHTYETL_BASIC_FAILURE_BURST", "-1"), "MIGHTYETL_BASIC_FAILURE_BURST", nil},
		{"failure burst 10001", withEnv(basic, "MIGHTYETL_BASIC_FAILURE_BURST", "10001"), "MIGHTYETL_BASIC_FAILURE_BURST", nil},
		{"failure refill 100ms", withEnv(basic, "MIGHTYETL_BASIC_FAILURE_REFILL", "100ms"), "", func(o auth.BasicOptions) bool { return o.FailureRefill == 100*time.Millisecond }},
		{"failure refill 1h", withEnv(basic, "MIGHTYETL_BASIC_FAILURE_REFILL", "1h"), "", func(o auth.BasicOptions) bool { return o.FailureRefill == time.Hour }},
		{"failure refill 99ms", withEnv(basic, "MIGHTYETL_BASIC_FAILURE_REFILL", "99ms"), "MIGHTYETL_BASIC_FAILURE_REFILL", nil},
		{"failure refill 61m", withEnv(basic, "MIGHTYETL_BASIC_FAILURE_REFILL", "61m"), "MIGHTYETL_BASIC_FAILURE_REFILL", nil},
		{"failure refill 6", withEnv(basic, "MIGHTYETL_BASIC_FAILURE_REFILL", "6"), "MIGHTYETL_BASIC_FAILURE_REFILL", nil},
		{"hash slots 0 (automatic)", withEnv(basic, "MIGHTYETL_BASIC_HASH_SLOTS", "0"), "", func(o auth.BasicOptions) bool { return o.HashSlots == 0 }},
		{"hash slots 64", withEnv(basic, "MIGHTYETL_BASIC_HASH_SLOTS", "64"), "", func(o auth.BasicOptions) bool { return o.HashSlots == 64 }},
		{"hash slots 65", withEnv(basic, "MIGHTYETL_BASIC_HASH_SLOTS", "65"), "MIGHTYETL_BASIC_HASH_SLOTS", nil},
		{"hash slots -1", withEnv(basic, "MIGHTYETL_BASIC_HASH_SLOTS", "-1"), "MIGHTYETL_BASIC_HASH_SLOTS", nil},
		{"hash queue 0 (8 per slot)", withEnv(basic, "MIGHTYETL_BASIC_HASH_QUEUE", "0"), "", func(o auth.BasicOptions) bool { return o.MaxHashWaiters == 0 }},
		{"hash queue 10000", withEnv(basic, "MIGHTYETL_BASIC_HASH_QUEUE", "10000"), "", func(o auth.BasicOptions) bool { return o.MaxHashWaiters == 10000 }},
		{"hash queue 10001", withEnv(basic, "MIGHTYETL_BASIC_HASH_QUEUE", "10001"), "MIGHTYETL_BASIC_HASH_QUEUE", nil},
		{"hash queue below the per-address queue", withEnv(basic, "MIGHTYETL_BASIC_HASH_QUEUE", "4"), "MIGHTYETL_BASIC_HASH_QUEUE", nil},
		{"hash queue equal to the per-address queue", withEnv(basic, "MIGHTYETL_BASIC_HASH_QUEUE", "4", "MIGHTYETL_BASIC_HASH_QUEUE_PER_ADDRESS", "4"), "",
			func(o auth.BasicOptions) bool { return o.MaxHashWaiters == 4 && o.MaxHashWaitersPerAddress == 4 }},
		{"per-address queue 1000", withEnv(basic, "MIGHTYETL_BASIC_HASH_QUEUE_PER_ADDRESS", "1000"), "", func(o auth.BasicOptions) bool { return o.MaxHashWaitersPerAddress == 1000 }},
		{"per-address queue 0", withEnv(basic, "MIGHTYETL_BASIC_HASH_QUEUE_PER_ADDRESS", "0"), "MIGHTYETL_BASIC_HASH_QUEUE_PER_ADDRESS", nil},
		{"per-address queue 1001", withEnv(basic, "MIGHTYETL_BASIC_HASH_QUEUE_PER_ADDRESS", "1001"), "MIGHTYETL_BASIC_HASH_QUEUE_PER_ADDRESS", nil},
		{"hash max wait 10ms", withEnv(basic, "MIGHTYETL_BASIC_HASH_MAX_WAIT", "10ms"), "", func(o auth.BasicOptions) bool { return o.MaxHashWait == 10*time.Millisecond }},
		{"hash max wait 1m", withEnv(basic, "MIGHTYETL_BASIC_HASH_MAX_WAIT", "1m"), "", func(o auth.BasicOptions) bool { return o.MaxHashWait == time.Minute }},
		{"hash max wait 9ms", withEnv(basic, "MIGHTYETL_BASIC_HASH_MAX_WAIT", "9ms"), "MIGHTYETL_BASIC_HASH_MAX_WAIT", nil},
		{"hash max wait 2m", withEnv(basic, "MIGHTYETL_BASIC_HASH_MAX_WAIT", "2m"), "MIGHTYETL_BASIC_HASH_MAX_WAIT", nil},
		{"trusted proxies", withEnv(basic, "MIGHTYETL_TRUSTED_PROXIES", " 10.0.0.0/8, 192.0.2.1 ,2001:db8::/32"), "", func(o auth.BasicOptions) bool {
			return fmt.Sprint(o.TrustedProxies) == "[10.0.0.0/8 192.0.2.1/32 2001:db8::/32]" && o.ForwardedHeader == auth.HeaderXForwardedFor
		}},
		{"trusted proxies empty", withEnv(basic, "MIGHTYETL_TRUSTED_PROXIES", " , "), "", func(o auth.BasicOptions) bool { return len(o.TrustedProxies) == 0 }},
		{"trusted proxies bad prefix", withEnv(basic, "MIGHTYETL_TRUSTED_PROXIES", "10.0.0.0/33"), "MIGHTYETL_TRUSTED_PROXIES", nil},
		{"trusted proxies host name", withEnv(basic, "MIGHTYETL_TRUSTED_PROXIES", "proxy.internal"), "MIGHTYETL_TRUSTED_PROXIES", nil},
		{"proxy header Forwarded, any case", withEnv(basic, "MIGHTYETL_TRUSTED_PROXY_HEADER", "forwarded"), "", func(o auth.BasicOptions) bool { return o.ForwardedHeader == auth.HeaderForwarded }},
		{"proxy header X-Real-IP", withEnv(basic, "MIGHTYETL_TRUSTED_PROXY_HEADER", "X-Real-IP"), "MIGHTYETL_TRUSTED_PROXY_HEADER", nil},
	} {
		cfg, _, err := LoadIntake(nil, env(c.env))
		switch {
		case c.refused == "" && err != nil:
			t.Errorf("%s: refused: %v", c.name, err)
		case c.refused == "" && !c.want(cfg.Basic.Options(cfg.BasicCredentialsFile)):
			t.Errorf("%s: options %+v", c.name, cfg.Basic.Options(cfg.BasicCredentialsFile))
		case c.refused != "" && err == nil:
			t.Errorf("%s: accepted, want refused naming %s", c.name, c.refused)
		case c.refused != "" && (!strings.HasPrefix(err.Error(), c.refused+":") || strings.Contains(err.Error(), "\n")):
			t.Errorf("%s: %q is not one line starting with %s:", c.name, err, c.refused)
		}
	}
}

// The intake builds its Basic authenticator with limits and trusted
// proxies set (NewBasic accepts what configuration passes), and provenance
// logs the trusted proxies as set.
func TestBasicAuthenticatorBuildsWithLimits(t *testing.T) {
	line, err := auth.CredentialLine("alice", []byte("wonderland"))
	if err != nil {
		t.Fatal(err)
	}
	path := filepath.Join(t.TempDir(), "credentials")
	if err := os.WriteFile(path, []byte(line+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	cfg, l, err := LoadIntake(nil, env(map[string]string{"MIGHTYETL_AUTH_MODE": "basic", "MIGHTYETL_BASIC_CREDENTIALS_FILE": path,
		"MIGHTYETL_PRINCIPAL_HASH_KEY": "0123456789abcdef0123456789abcdef", "MIGHTYETL_TRUSTED_PROXIES": "10.0.0.0/8",
		"MIGHTYETL_BASIC_HASH_SLOTS": "3"}))
	if err != nil {
		t.Fatal(err)
	}
	a, err := cfg.Authenticator()
	if err != nil {
		t.Fatal(err)
	}
	if _, ok := a.(*auth.Basic); !ok {
		t.Fatalf("authenticator %T, want *auth.Basic", a)
	}
	for _, s := range l.Provenance() {
		if s.Name == "MIGHTYETL_TRUSTED_PROXIES" && (s.Value != "10.0.0.0/8" || s.Source != SourceEnv) {
			t.Errorf("provenance of MIGHTYETL_TRUSTED_PROXIES: %+v", s)
		}
	}
}

// TestJWKSURLSettings pins MIGHTYETL_JWT_JWKS_URL and
// MIGHTYETL_JWT_JWKS_REFRESH_INTERVAL: jwt mode takes exactly one of the
// file and the URL; the URL is https (http to loopback only) and only for
// jwt mode; the interval is 1m..24h, default 5m.
func TestJWKSURLSettings(t *testing.T) {
	const key = "0123456789abcdef0123456789abcdef"
	jwtMode := map[string]string{"MIGHTYETL_AUTH_MODE": "jwt", "MIGHTYETL_JWT_ISSUER": "https://issuer.test",
		"MIGHTYETL_JWT_AUDIENCE": "mightyetl", "MIGHTYETL_PRINCIPAL_HASH_KEY": key}
	const url = "https://idp.example/.well-known/jwks.json"
	for _, c := range []struct {
		name    string
		env     map[string]string
		refused string
		want    func(Intake) bool
	}{
		{"file", withEnv(jwtMode, "MIGHTYETL_JWT_JWKS_FILE", "jwks.json"), "", func(c Intake) bool { return c.JWTJWKSFile == "jwks.json" && c.JWTJWKSURL == "" }},
		{"url, default interval", withEnv(jwtMode, "MIGHTYETL_JWT_JWKS_URL", url), "", func(c Intake) bool { return c.JWTJWKSURL == url && c.JWTJWKSRefresh == 5*time.Minute }},
		{"loopback http url", withEnv(jwtMode, "MIGHTYETL_JWT_JWKS_URL", "http://127.0.0.1:9000/jwks"), "", func(c Intake) bool { return c.JWTJWKSURL != "" }},
		{"interval 1m", withEnv(jwtMode, "MIGHTYETL_JWT_JWKS_URL", url, "MIGHTYETL_JWT_JWKS_REFRESH_INTERVAL", "1m"), "", func(c Intake) bool { return c.JWTJWKSRefresh == time.Minute }},
		{"interval 24h", withEnv(jwtMode, "MIGHTYETL_JWT_JWKS_URL", url, "MIGHTYETL_JWT_JWKS_REFRESH_INTERVAL", "24h"), "", func(c Intake) bool { return c.JWTJWKSRefresh == 24*time.Hour }},
		{"interval 59s", withEnv(jwtMode, "MIGHTYETL_JWT_JWKS_URL", url, "MIGHTYETL_JWT_JWKS_REFRESH_INTERVAL", "59s"), "MIGHTYETL_JWT_JWKS_REFRESH_INTERVAL", nil},
		{"interval 25h", withEnv(jwtMode, "MIGHTYETL_JWT_JWKS_URL", url, "MIGHTYETL_JWT_JWKS_REFRESH_INTERVAL", "25h"), "MIGHTYETL_JWT_JWKS_REFRESH_INTERVAL", nil},
		{"neither file nor url", jwtMode, "MIGHTYETL_JWT_JWKS_FILE or MIGHTYETL_JWT_JWKS_URL", nil},
		{"both file and url", withEnv(jwtMode, "MIGHTYETL_JWT_JWKS_FILE", "jwks.json", "MIGHTYETL_JWT_JWKS_URL", url), "MIGHTYETL_JWT_JWKS_URL", nil},
		{"plain http to another host", withEnv(jwtMode, "MIGHTYETL_JWT_JWKS_URL", "http://idp.example/jwks"), "MIGHTYETL_JWT_JWKS_URL", nil},
		{"url with credentials", withEnv(jwtMode, "MIGHTYETL_JWT_JWKS_URL", "https://u:p@idp.example/jwks"), "MIGHTYETL_JWT_JWKS_URL", nil},
		{"relative url", withEnv(jwtMode, "MIGHTYETL_JWT_JWKS_URL", "jwks.json"), "MIGHTYETL_JWT_JWKS_URL", nil},
		{"url in basic mode", map[string]string{"MIGHTYETL_AUTH_MODE": "basic", "MIGHTYETL_BASIC_CREDENTIALS_FILE": "c",
			"MIGHTYETL_PRINCIPAL_HASH_KEY": key, "MIGHTYETL_JWT_JWKS_URL": url}, "MIGHTYETL_JWT_JWKS_URL", nil},
	} {
		cfg, _, err := LoadIntake(nil, env(c.env))
		switch {
		case c.refused == "" && err != nil:
			t.Errorf("%s: refused: %v", c.name, err)
		case c.refused == "" && !c.want(cfg):
			t.Errorf("%s: file %q url %q interval %v", c.name, cfg.JWTJWKSFile, cfg.JWTJWKSURL, cfg.JWTJWKSRefresh)
		case c.refused != "" && err == nil:
			t.Errorf("%s: accepted, want refused naming %s", c.name, c.refused)
		case c.refused != "" && (!strings.HasPrefix(err.Error(), c.refused+":") || strings.Contains(err.Error(), "\n")):
			t.Errorf("%s: %q is not one line starting with %s:", c.name, err, c.refused)
		}
	}
}
