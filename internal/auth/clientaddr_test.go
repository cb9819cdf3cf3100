package auth

import (
	"errors"
	"fmt"
	"net/http"
	"net/http/httptest"
	"net/netip"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

func TestParseTrustedProxies(t *testing.T) {
	for _, tc := range []struct {
		in, want string // want: prefixes joined by " ", or "error"
	}{
		{"", ""},
		{" , ", ""},
		{"10.0.0.0/8", "10.0.0.0/8"},
		{"10.1.2.3/8", "10.0.0.0/8"},
		{"10.1.2.3", "10.1.2.3/32"},
		{" 10.0.0.0/8 , ,2001:db8::/32,2001:db8::1", "10.0.0.0/8 2001:db8::/32 2001:db8::1/128"},
		{"::ffff:10.0.0.0/104", "10.0.0.0/8"},
		{"::ffff:10.0.0.1", "10.0.0.1/32"},
		{"10.0.0.0/33", "error"},
		{"proxy.internal", "error"},
		{"fe80::1%eth0", "error"},
		{"10.0.0.0/8,x", "error"},
		{"10.0.0.0/8;192.0.2.0/24", "error"},
	} {
		got, err := ParseTrustedProxies(tc.in)
		if tc.want == "error" {
			if err == nil {
				t.Errorf("ParseTrustedProxies(%q) = %v, want an error", tc.in, got)
			}
			continue
		}
		var s []string
		for _, p := range got {
			s = append(s, p.String())
		}
		if err != nil || strings.Join(s, " ") != tc.want {
			t.Errorf("ParseTrustedProxies(%q) = %v, %v; want %q", tc.in, s, err, tc.want)
		}
	}
}

func TestParseForwardedHeader(t *testing.T) {
	for in, want := range map[string]string{
		"X-Forwarded-For": HeaderXForwardedFor, "x-forwarded-for": HeaderXForwardedFor,
		"Forwarded": HeaderForwarded, "FORWARDED": HeaderForwarded,
		"X-Real-IP": "", "": "", "X-Forwarded-For,Forwarded": "",
	} {
		got, err := ParseForwardedHeader(in)
		if got != want || (err == nil) != (want != "") {
			t.Errorf("ParseForwardedHeader(%q) = %q, %v; want %q", in, got, err, want)
		}
	}
}

// trustTest trusts 10.0.0.0/8 and 2001:db8:ffff::/48 and reads header.
func trustTest(t *testing.T, header string) *proxyTrust {
	t.Helper()
	pre, err := ParseTrustedProxies("10.0.0.0/8, 2001:db8:ffff::/48")
	if err != nil {
		t.Fatal(err)
	}
	p, err := newProxyTrust(pre, header)
	if err != nil {
		t.Fatal(err)
	}
	return p
}

// A forwarding header is honoured only from a trusted peer, and then only
// up to the right-most address that is not a trusted proxy: what a client
// writes into the header itself (left of its proxy's entry) never counts,
// and a spoofed header from an untrusted peer is ignored.
func TestClientAddrTrustedProxies(t *testing.T) {
	xff, fwd := trustTest(t, HeaderXForwardedFor), trustTest(t, HeaderForwarded)
	var chain []string
	for i := range 40 {
		chain = append(chain, fmt.Sprintf("10.0.1.%d", i))
	}
	for _, tc := range []struct {
		name   string
		trust  *proxyTrust
		remote string
		header string   // header name
		values []string // header lines
		want   string
	}{
		{"untrusted peer, spoofed XFF ignored", xff, "198.51.100.1:1234", "X-Forwarded-For", []string{"203.0.113.9"}, "198.51.100.1"},
		{"untrusted peer, spoofed Forwarded ignored", fwd, "198.51.100.1:1234", "Forwarded", []string{"for=203.0.113.9"}, "198.51.100.1"},
		{"no trust configured", nil, "10.0.0.1:1234", "X-Forwarded-For", []string{"203.0.113.9"}, "10.0.0.1"},
		{"trusted peer, client behind it", xff, "10.0.0.1:1234", "X-Forwarded-For", []string{"203.0.113.9"}, "203.0.113.9"},
		{"client-written entries left of the proxy's are ignored", xff, "10.0.0.1:1234", "X-Forwarded-For", []string{"198.51.100.66, 203.0.113.9"}, "203.0.113.9"},
		{"trusted hops skipped", xff, "10.0.0.1:1234", "X-Forwarded-For", []string{"198.51.100.66,203.0.113.9, 10.0.0.7 ,10.0.0.2"}, "203.0.113.9"},
		{"every hop trusted: the left-most", xff, "10.0.0.1:1234", "X-Forwarded-For", []string{"10.0.0.3, 10.0.0.2"}, "10.0.0.3"},
		{"garbage stops at the proxy that reported it", xff, "10.0.0.1:1234", "X-Forwarded-For", []string{"203.0.113.9, unknown"}, "10.0.0.1"},
		{"garbage left of a trusted hop", xff, "10.0.0.1:1234", "X-Forwarded-For", []string{"unknown, 10.0.0.2"}, "10.0.0.2"},
		{"empty entry stops", xff, "10.0.0.1:1234", "X-Forwarded-For", []string{"203.0.113.9,"}, "10.0.0.1"},
		{"trusted peer without the header", xff, "10.0.0.1:1234", "", nil, "10.0.0.1"},
		{"several lines read as one list", xff, "10.0.0.1:1234", "X-Forwarded-For", []string{"198.51.100.66", "203.0.113.9"}, "203.0.113.9"},
		{"XFF entry with a port", xff, "10.0.0.1:1234", "X-Forwarded-For", []string{"203.0.113.9:5555"}, "203.0.113.9"},
		{"XFF IPv6 with a port, keyed by /64", xff, "10.0.0.1:1234", "X-Forwarded-For", []string{"[2001:db8:1:2::1]:80"}, "2001:db8:1:2::/64"},
		{"XFF IPv4-mapped", xff, "10.0.0.1:1234", "X-Forwarded-For", []string{"::ffff:203.0.113.9"}, "203.0.113.9"},
		{"XFF with a zone is not an address", xff, "10.0.0.1:1234", "X-Forwarded-For", []string{"fe80::1%eth0"}, "10.0.0.1"},
		{"XFF mode ignores Forwarded", xff, "10.0.0.1:1234", "Forwarded", []string{"for=203.0.113.9"}, "10.0.0.1"},
		{"Forwarded mode ignores XFF", fwd, "10.0.0.1:1234", "X-Forwarded-For", []string{"203.0.113.9"}, "10.0.0.1"},
		{"trusted IPv6 peer", xff, "[2001:db8:ffff::5]:443", "X-Forwarded-For", []string{"203.0.113.9"}, "203.0.113.9"},
		{"trusted IPv4-mapped peer", xff, "[::ffff:10.0.0.1]:443", "X-Forwarded-For", []string{"203.0.113.9"}, "203.0.113.9"},
		{"at most 32 hops looked at", xff, "10.0.0.1:1234", "X-Forwarded-For", []string{"203.0.113.9, " + strings.Join(chain, ", ")}, "10.0.1.8"},
		{"Forwarded RFC 7239 example", fwd, "10.0.0.1:1234", "Forwarded", []string{`for=192.0.2.60;proto=http;by=203.0.113.43, for="[2001:db8:cafe::17]:4711"`}, "2001:db8:cafe::/64"},
		{"Forwarded quoted IPv4 with port, parameter case", fwd, "10.0.0.1:1234", "Forwarded", []string{`For="198.51.100.7:4711"`}, "198.51.100.7"},
		{"Forwarded client-written element ignored", fwd, "10.0.0.1:1234", "Forwarded", []string{"for=198.51.100.66", "for=203.0.113.9;proto=https"}, "203.0.113.9"},
		{"Forwarded trusted hop skipped", fwd, "10.0.0.1:1234", "Forwarded", []string{"for=203.0.113.9, for=10.0.0.2"}, "203.0.113.9"},
		{"Forwarded unknown node", fwd, "10.0.0.1:1234", "Forwarded", []string{"for=unknown"}, "10.0.0.1"},
		{"Forwarded obfuscated node left of a trusted hop", fwd, "10.0.0.1:1234", "Forwarded", []string{"for=_hidden, for=10.0.0.9"}, "10.0.0.9"},
		{"Forwarded element without for", fwd, "10.0.0.1:1234", "Forwarded", []string{"for=203.0.113.9, proto=https"}, "10.0.0.1"},
		{"Forwarded comma inside a quoted value", fwd, "10.0.0.1:1234", "Forwarded", []string{`for=203.0.113.9;x="a, for=198.51.100.66"`}, "203.0.113.9"},
	} {
		r := httptest.NewRequest(http.MethodGet, "/", nil)
		r.RemoteAddr = tc.remote
		for _, v := range tc.values {
			r.Header.Add(tc.header, v)
		}
		if got := clientAddr(r, tc.trust); got != tc.want {
			t.Errorf("%s: clientAddr = %q, want %q", tc.name, got, tc.want)
		}
	}
}

// FuzzClientAddrForwarded: any forwarding header from an untrusted peer
// gives the peer; from a trusted peer it gives the peer, an IPv4 address
// or an IPv6 /64, never a panic or another string.
func FuzzClientAddrForwarded(f *testing.F) {
	for _, s := range []string{"203.0.113.9", "a, b, 10.0.0.2", `for="[2001:db8::1]:80";by=x, for=unknown`,
		`for="\"`, ",,,", "for=1.2.3.4;for=5.6.7.8", "[::1]", "\x00"} {
		f.Add(s)
	}
	xff, fwd := trustTest(&testing.T{}, HeaderXForwardedFor), trustTest(&testing.T{}, HeaderForwarded)
	f.Fuzz(func(t *testing.T, v string) {
		for _, trust := range []*proxyTrust{xff, fwd} {
			r := httptest.NewRequest(http.MethodGet, "/", nil)
			r.Header.Set(HeaderXForwardedFor, v)
			r.Header.Set(HeaderForwarded, v)
			r.RemoteAddr = "198.51.100.1:1"
			if got := clientAddr(r, trust); got != "198.51.100.1" {
				t.Fatalf("untrusted peer keyed as %q", got)
			}
			r.RemoteAddr = "10.0.0.1:1"
			got := clientAddr(r, trust)
			if a, err := netip.ParseAddr(got); err == nil && a.Is4() {
				continue
			}
			if p, err := netip.ParsePrefix(got); err == nil && p.Addr().Is6() && p.Bits() == 64 {
				continue
			}
			t.Fatalf("clientAddr(%q) = %q: neither IPv4 nor an IPv6 /64", v, got)
		}
	})
}

// Behind trusted proxies the failure limit is per client, not per proxy;
// a spoofed header from an untrusted peer does not buy a fresh budget.
func TestBasicFailureLimitBehindTrustedProxy(t *testing.T) {
	pre, err := ParseTrustedProxies("10.0.0.0/8")
	if err != nil {
		t.Fatal(err)
	}
	b, _, _ := newTestBasic(t, BasicOptions{FailureBurst: 2, TrustedProxies: pre}, credLine(t, "alice", "wonderland"))
	try := func(peer, xff, pass string) error {
		r := requestFrom(peer, "alice", pass)
		r.Header.Set("X-Forwarded-For", xff)
		_, err := b.Authenticate(r)
		return err
	}
	for i := range 2 {
		if err := try("10.0.0.1:1000", "203.0.113.1", fmt.Sprint("guess-a", i)); !errors.Is(err, ErrUnauthenticated) {
			t.Fatalf("failure %d behind the proxy: %v", i, err)
		}
	}
	checkThrottled(t, try("10.0.0.1:1000", "203.0.113.1", "guess-a2"), ErrRateLimited)
	// Another client behind the same proxy has its own budget.
	if err := try("10.0.0.2:1000", "203.0.113.2", "guess-b0"); !errors.Is(err, ErrUnauthenticated) {
		t.Fatalf("other client behind the proxy: %v, want ErrUnauthenticated", err)
	}
	if p, err := b.Authenticate(func() *http.Request {
		r := requestFrom("10.0.0.1:1000", "alice", "wonderland")
		r.Header.Set("X-Forwarded-For", "203.0.113.2")
		return r
	}()); err != nil || p != "alice" {
		t.Fatalf("real user behind the proxy: %q, %v", p, err)
	}
	// An untrusted peer rotating a spoofed header shares one budget.
	for i := range 2 {
		if err := try("198.51.100.1:1000", fmt.Sprint("203.0.113.", 100+i), fmt.Sprint("guess-c", i)); !errors.Is(err, ErrUnauthenticated) {
			t.Fatalf("spoofing failure %d: %v", i, err)
		}
	}
	checkThrottled(t, try("198.51.100.1:1000", "203.0.113.200", "guess-c2"), ErrRateLimited)
}

// NewBasic applies and checks the rationing options: zero means the
// documented default; a negative bound or an unknown forwarding header is
// an error.
func TestNewBasicRationingOptions(t *testing.T) {
	b, _, _ := newTestBasic(t, BasicOptions{HashSlots: 3, MaxHashWaitersPerAddress: 2, MaxHashWaiters: 5, MaxHashWait: 7 * time.Second},
		credLine(t, "alice", "wonderland"))
	if g := b.gate; g.slots != 3 || g.perAddr != 2 || g.maxWaiters != 5 || g.maxWait != 7*time.Second {
		t.Errorf("gate slots %d perAddr %d maxWaiters %d maxWait %v", g.slots, g.perAddr, g.maxWaiters, g.maxWait)
	}
	d := BasicOptions{}.WithDefaults()
	if d.HashSlots < 2 || d.MaxHashWaiters != DefaultHashWaitersPerSlot*d.HashSlots || d.MaxHashWaitersPerAddress != DefaultHashWaitersPerAddress ||
		d.FailureBurst != DefaultFailureBurst || d.FailureRefill != DefaultFailureRefill || d.MaxHashWait != DefaultMaxHashWait ||
		d.ForwardedHeader != HeaderXForwardedFor || d.CacheTTL != DefaultCacheTTL || d.CacheSize != DefaultCacheSize {
		t.Errorf("BasicOptions{}.WithDefaults() = %+v", d)
	}
	path := writeCredentials(t, credLine(t, "alice", "wonderland"))
	for name, o := range map[string]BasicOptions{
		"negative slots":            {HashSlots: -1},
		"negative waiters":          {MaxHashWaiters: -1},
		"negative per-address":      {MaxHashWaitersPerAddress: -1},
		"negative wait":             {MaxHashWait: -1},
		"negative refill":           {FailureRefill: -time.Second},
		"unknown forwarding header": {ForwardedHeader: "X-Real-IP"},
	} {
		o.CredentialsFile = path
		if _, err := NewBasic(o); err == nil {
			t.Errorf("%s: accepted", name)
		}
	}
}

// writeCredentials writes lines to a fresh credentials file.
func writeCredentials(t *testing.T, lines ...string) string {
	t.Helper()
	path := filepath.Join(t.TempDir(), "credentials")
	writeFile(t, path, strings.Join(lines, "\n")+"\n")
	return path
}
