package httpapi

import (
	"net/http"
	"strings"

	"github.com/mightyetl/mightyetl/internal/intake"
)

// parseIdempotencyKey reads the Idempotency-Key header: absent reports
// present false; a single field whose value, after optional white space, is
// either the raw key or an RFC 9651 sf-string ("key") holding it. Both forms
// normalise to the same key. The key must satisfy intake.ValidKey (16..128
// characters of [A-Za-z0-9._:-], so an sf-string escape can never be part of
// a valid key). Several fields, parameters or anything else are invalid.
func parseIdempotencyKey(h http.Header) (key string, present, valid bool) {
	vals := h.Values("Idempotency-Key")
	switch len(vals) {
	case 0:
		return "", false, false
	case 1:
	default:
		return "", true, false
	}
	key, ok := normaliseKey(vals[0])
	return key, true, ok
}

// normaliseKey returns the key of one Idempotency-Key field value.
func normaliseKey(v string) (string, bool) {
	v = strings.Trim(v, " \t")
	if len(v) >= 2 && v[0] == '"' && v[len(v)-1] == '"' {
		v = v[1 : len(v)-1]
	}
	if !intake.ValidKey(v) {
		return "", false
	}
	return v, true
}
