package console

import "net/http"

// contentSecurityPolicy allows nothing outside the console's own origin.
const contentSecurityPolicy = "default-src 'none'; script-src 'self'; style-src 'self'; img-src 'self'; " +
	"connect-src 'self'; form-action 'self'; frame-ancestors 'none'; base-uri 'none'"

// securityHeaders are the headers of every console response: pages, error
// pages (401, 403, 404, 429, 5xx), assets and redirects alike.
var securityHeaders = [...][2]string{
	{"Content-Security-Policy", contentSecurityPolicy},
	{"X-Frame-Options", "DENY"},
	{"X-Content-Type-Options", "nosniff"},
	{"Referrer-Policy", "same-origin"},
	{"Cache-Control", "no-store"},
}

// SetSecurityHeaders sets the console's security headers on h (replacing
// any value they had): a CSP that allows only the console's own origin and
// no framing, X-Frame-Options DENY, X-Content-Type-Options nosniff,
// Referrer-Policy same-origin and Cache-Control no-store.
func SetSecurityHeaders(h http.Header) {
	for _, kv := range securityHeaders {
		h.Set(kv[0], kv[1])
	}
}

// SecureHeaders wraps next so that every response it writes carries the
// console's security headers (SetSecurityHeaders), set before next runs.
// The caller wraps everything it serves under /console, authentication
// refusals included, so no console response goes out without them. A
// handler of next may still add headers but should not remove these.
func SecureHeaders(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		SetSecurityHeaders(w.Header())
		next.ServeHTTP(w, r)
	})
}
