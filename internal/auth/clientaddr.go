package auth

import (
	"errors"
	"fmt"
	"net"
	"net/http"
	"net/netip"
	"strings"
)

// Forwarding headers a trusted proxy may write (BasicOptions.ForwardedHeader,
// MIGHTYETL_TRUSTED_PROXY_HEADER).
const (
	// HeaderXForwardedFor is the de-facto X-Forwarded-For: comma-separated
	// addresses, each proxy appending the address it received the request
	// from.
	HeaderXForwardedFor = "X-Forwarded-For"
	// HeaderForwarded is RFC 7239's Forwarded header; the for= parameter of
	// each element names the address its proxy received the request from.
	HeaderForwarded = "Forwarded"
)

// maxForwardedHops bounds the hops of a forwarding header that are looked
// at, counted from the right (the nearest proxy).
const maxForwardedHops = 32

// ParseTrustedProxies parses MIGHTYETL_TRUSTED_PROXIES: comma-separated
// CIDR prefixes ("10.0.0.0/8", "2001:db8::/32") or single addresses (a /32
// or /128). Blank entries are ignored, so "" means no trusted proxy. The
// prefixes are returned masked, IPv4-mapped IPv6 prefixes as IPv4. The
// error names the first entry that does not parse.
func ParseTrustedProxies(s string) ([]netip.Prefix, error) {
	var out []netip.Prefix
	for _, f := range strings.Split(s, ",") {
		f = strings.TrimSpace(f)
		if f == "" {
			continue
		}
		p, err := netip.ParsePrefix(f)
		if err != nil {
			a, aerr := netip.ParseAddr(f)
			if aerr != nil || a.Zone() != "" {
				return nil, fmt.Errorf("%q is neither a CIDR prefix nor an IP address", f)
			}
			p = netip.PrefixFrom(a, a.BitLen())
		}
		if p.Addr().Is4In6() && p.Bits() >= 96 {
			p = netip.PrefixFrom(p.Addr().Unmap(), p.Bits()-96)
		}
		out = append(out, p.Masked())
	}
	return out, nil
}

// ParseForwardedHeader returns HeaderXForwardedFor or HeaderForwarded for
// s, matched without regard to case (MIGHTYETL_TRUSTED_PROXY_HEADER);
// anything else is an error.
func ParseForwardedHeader(s string) (string, error) {
	switch {
	case strings.EqualFold(s, HeaderXForwardedFor):
		return HeaderXForwardedFor, nil
	case strings.EqualFold(s, HeaderForwarded):
		return HeaderForwarded, nil
	}
	return "", errors.New("must be X-Forwarded-For or Forwarded")
}

// proxyTrust says which peers are trusted proxies and which header they
// write. A nil *proxyTrust trusts no peer.
type proxyTrust struct {
	prefixes  []netip.Prefix
	forwarded bool // HeaderForwarded; false: HeaderXForwardedFor
}

// newProxyTrust returns the trust of prefixes with header (empty means
// HeaderXForwardedFor), or nil when prefixes is empty.
func newProxyTrust(prefixes []netip.Prefix, header string) (*proxyTrust, error) {
	if header == "" {
		header = HeaderXForwardedFor
	}
	h, err := ParseForwardedHeader(header)
	if err != nil {
		return nil, fmt.Errorf("forwarded header: %w", err)
	}
	if len(prefixes) == 0 {
		return nil, nil
	}
	return &proxyTrust{prefixes: prefixes, forwarded: h == HeaderForwarded}, nil
}

func (p *proxyTrust) trusts(a netip.Addr) bool {
	for _, pre := range p.prefixes {
		if pre.Contains(a) {
			return true
		}
	}
	return false
}

// clientAddr returns the key that login limits and fair scheduling use for
// r: the client's address as an IPv4 address or, for IPv6, its /64 prefix
// (one host usually owns a whole /64).
//
// The client is the TCP peer (the host of r.RemoteAddr) unless p trusts the
// peer. Then it is the right-most address of p's forwarding header that p
// does not trust, walking from the right (the address the peer itself
// received the request from) past trusted proxies; when every address is
// trusted, the left-most one; at most maxForwardedHops addresses are looked
// at. The walk stops at an entry that is not an IP address ("unknown", an
// obfuscated node, garbage), and the client is then the trusted hop that
// reported it: what a client wrote left of its own proxy's entry never
// counts, so a client cannot choose its key. Without the header the peer is
// the client. A RemoteAddr that does not parse is used as it is.
func clientAddr(r *http.Request, p *proxyTrust) string {
	host, _, err := net.SplitHostPort(r.RemoteAddr)
	if err != nil {
		host = r.RemoteAddr
	}
	a, err := netip.ParseAddr(host)
	if err != nil {
		return host
	}
	a = a.Unmap().WithZone("")
	if p != nil && p.trusts(a) {
		a = p.origin(r.Header, a)
	}
	if a.Is4() {
		return a.String()
	}
	pre, _ := a.Prefix(64)
	return pre.String()
}

// origin walks the forwarding hops of h from the right, starting at the
// trusted peer, and returns the client address (see clientAddr).
func (p *proxyTrust) origin(h http.Header, peer netip.Addr) netip.Addr {
	var hops []netip.Addr // right-most first; an invalid Addr stops the walk
	if p.forwarded {
		hops = forwardedHops(h.Values(HeaderForwarded))
	} else {
		hops = xffHops(h.Values(HeaderXForwardedFor))
	}
	client := peer
	for _, hop := range hops {
		if !hop.IsValid() {
			break
		}
		client = hop
		if !p.trusts(hop) {
			break
		}
	}
	return client
}

// xffHops returns the addresses of X-Forwarded-For lines vals, right-most
// first, at most maxForwardedHops (an entry that is not an address as an
// invalid Addr).
func xffHops(vals []string) []netip.Addr {
	var hops []netip.Addr
	for i := len(vals) - 1; i >= 0; i-- {
		v := vals[i]
		for {
			if len(hops) == maxForwardedHops {
				return hops
			}
			cut := strings.LastIndexByte(v, ',')
			hops = append(hops, parseHop(v[cut+1:]))
			if cut < 0 {
				break
			}
			v = v[:cut]
		}
	}
	return hops
}

// forwardedHops returns the for= addresses of Forwarded lines vals (RFC
// 7239), right-most element first, at most maxForwardedHops (an element
// without a for= address as an invalid Addr).
func forwardedHops(vals []string) []netip.Addr {
	var all []netip.Addr // left to right, the last maxForwardedHops
	for _, v := range vals {
		for _, elem := range splitUnquoted(v, ',') {
			var hop netip.Addr
			for _, pair := range splitUnquoted(elem, ';') {
				name, value, ok := strings.Cut(pair, "=")
				if ok && strings.EqualFold(strings.TrimSpace(name), "for") {
					hop = parseHop(unquote(strings.TrimSpace(value)))
					break
				}
			}
			if len(all) == maxForwardedHops {
				all = append(all[:0], all[1:]...)
			}
			all = append(all, hop)
		}
	}
	hops := make([]netip.Addr, len(all))
	for i, a := range all {
		hops[len(all)-1-i] = a
	}
	return hops
}

// splitUnquoted splits s at every sep outside an RFC 9110 quoted-string.
func splitUnquoted(s string, sep byte) []string {
	var parts []string
	quoted, escaped, start := false, false, 0
	for i := 0; i < len(s); i++ {
		c := s[i]
		switch {
		case escaped:
			escaped = false
		case quoted && c == '\\':
			escaped = true
		case c == '"':
			quoted = !quoted
		case !quoted && c == sep:
			parts = append(parts, s[start:i])
			start = i + 1
		}
	}
	return append(parts, s[start:])
}

// unquote returns the content of an RFC 9110 quoted-string, or s when it is
// not one.
func unquote(s string) string {
	if len(s) < 2 || s[0] != '"' || s[len(s)-1] != '"' {
		return s
	}
	var b strings.Builder
	s = s[1 : len(s)-1]
	for i := 0; i < len(s); i++ {
		if s[i] == '\\' && i+1 < len(s) {
			i++
		}
		b.WriteByte(s[i])
	}
	return b.String()
}

// parseHop parses one forwarding hop: an IP address, optionally with a
// port ("192.0.2.1:4711", "[2001:db8::1]:4711") or in brackets. Anything
// else ("unknown", "_hidden", garbage, a zone) is the invalid Addr.
func parseHop(s string) netip.Addr {
	s = strings.Trim(s, " \t")
	if a, err := netip.ParseAddr(s); err == nil && a.Zone() == "" {
		return a.Unmap()
	}
	if ap, err := netip.ParseAddrPort(s); err == nil && ap.Addr().Zone() == "" {
		return ap.Addr().Unmap()
	}
	if len(s) > 2 && s[0] == '[' && s[len(s)-1] == ']' {
		if a, err := netip.ParseAddr(s[1 : len(s)-1]); err == nil && a.Is6() && a.Zone() == "" {
			return a.Unmap()
		}
	}
	return netip.Addr{}
}
