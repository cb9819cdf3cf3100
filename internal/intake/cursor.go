package intake

import (
	"crypto/hmac"
	"crypto/sha256"
	"encoding/base64"
	"encoding/hex"
	"strings"
	"time"

	"github.com/google/uuid"
	"github.com/mightyetl/mightyetl/internal/pg"
)

// MaxCursorLength bounds an accepted page cursor, in characters.
const MaxCursorLength = 192

// cursorMACHexLength is how much of the owner binding a cursor carries.
const cursorMACHexLength = 16

// cursorMAC binds a cursor position to its owner: the first 16 hex digits of
// HMAC-SHA256 under the principal hash key over a domain, the owner's scope
// and the position. A cursor of one owner never verifies for another.
func cursorMAC(key []byte, scope, position string) string {
	m := hmac.New(sha256.New, key)
	m.Write([]byte("mightyetl:job-page-cursor:v1:"))
	m.Write([]byte(scope))
	m.Write([]byte{':'})
	m.Write([]byte(position))
	return hex.EncodeToString(m.Sum(nil))[:cursorMACHexLength]
}

// encodeCursor renders a page position for scope: unpadded base64url of
// "<createdAt in TimeLayout>|<uuid>|<owner MAC>".
func encodeCursor(key []byte, scope string, k pg.PageKey) string {
	position := FormatTime(k.CreatedAt) + "|" + k.JobID.String()
	return base64.RawURLEncoding.EncodeToString([]byte(position + "|" + cursorMAC(key, scope, position)))
}

// decodeCursor parses a cursor of scope. It fails with ErrInvalidPageCursor
// when s is longer than MaxCursorLength, is not canonical unpadded base64url,
// does not hold "<time>|<uuid>|<mac>" each in canonical form (so it re-encodes
// to the identical string), or was issued to another owner.
func decodeCursor(key []byte, scope, s string) (pg.PageKey, error) {
	if s == "" || len(s) > MaxCursorLength {
		return pg.PageKey{}, ErrInvalidPageCursor
	}
	raw, err := base64.RawURLEncoding.Strict().DecodeString(s)
	if err != nil || base64.RawURLEncoding.EncodeToString(raw) != s {
		return pg.PageKey{}, ErrInvalidPageCursor
	}
	parts := strings.Split(string(raw), "|")
	if len(parts) != 3 {
		return pg.PageKey{}, ErrInvalidPageCursor
	}
	at, err := time.Parse(TimeLayout, parts[0])
	if err != nil || FormatTime(at) != parts[0] {
		return pg.PageKey{}, ErrInvalidPageCursor
	}
	id, err := uuid.Parse(parts[1])
	if err != nil || id.String() != parts[1] {
		return pg.PageKey{}, ErrInvalidPageCursor
	}
	want := cursorMAC(key, scope, parts[0]+"|"+parts[1])
	if !hmac.Equal([]byte(want), []byte(parts[2])) {
		return pg.PageKey{}, ErrInvalidPageCursor
	}
	return pg.PageKey{CreatedAt: at, JobID: id}, nil
}
