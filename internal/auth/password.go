package auth

import (
	"crypto/rand"
	"crypto/subtle"
	"encoding/base64"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"unicode"
	"unicode/utf8"

	"golang.org/x/crypto/argon2"
	"golang.org/x/crypto/bcrypt"
)

// argon2Params are the cost parameters of an argon2id hash.
type argon2Params struct {
	memoryKiB uint32
	time      uint32
	threads   uint8
	saltLen   int
	keyLen    int
}

// productionArgon2 is the OWASP password storage recommendation for
// argon2id: 19 MiB of memory, 2 passes, 1 lane; 16-byte salt, 32-byte key.
var productionArgon2 = argon2Params{memoryKiB: 19456, time: 2, threads: 1, saltLen: 16, keyLen: 32}

// hashArgon2 is what HashPassword uses; tests lower its cost for speed.
var hashArgon2 = productionArgon2

// Bounds on accepted argon2id parameters, so a typo in the credentials file
// cannot make every request allocate gigabytes or loop for minutes.
const (
	maxArgon2MemoryKiB = 1 << 20 // 1 GiB
	maxArgon2Time      = 64
	maxArgon2Threads   = 64
	minArgon2SaltLen   = 8
	minArgon2KeyLen    = 16
	maxArgon2KeyLen    = 128
)

// passwordHash is a parsed hash of the credentials file.
type passwordHash interface {
	// verify reports whether password matches, in time independent of
	// where the first differing byte is.
	verify(password []byte) bool
	// costKey identifies the algorithm and cost parameters; hashes with the
	// same costKey take the same time to verify.
	costKey() string
	// significant returns the prefix of password that verify depends on:
	// two passwords with the same significant bytes verify alike.
	significant(password []byte) []byte
}

type argon2Hash struct {
	p    argon2Params
	salt []byte
	key  []byte
}

func (h *argon2Hash) verify(password []byte) bool {
	got := argon2.IDKey(password, h.salt, h.p.time, h.p.memoryKiB, h.p.threads, uint32(len(h.key)))
	return subtle.ConstantTimeCompare(got, h.key) == 1
}

func (h *argon2Hash) significant(password []byte) []byte { return password }

func (h *argon2Hash) costKey() string {
	return fmt.Sprintf("argon2id:m=%d,t=%d,p=%d,s=%d,k=%d", h.p.memoryKiB, h.p.time, h.p.threads, len(h.salt), len(h.key))
}

type bcryptHash struct {
	cost    int
	encoded []byte
}

// verify uses bcrypt.CompareHashAndPassword, which compares with
// subtle.ConstantTimeCompare.
func (h *bcryptHash) verify(password []byte) bool {
	return bcrypt.CompareHashAndPassword(h.encoded, password) == nil
}

func (h *bcryptHash) costKey() string { return "bcrypt:" + strconv.Itoa(h.cost) }

// bcryptMaxPassword is the number of password bytes bcrypt uses; it
// ignores the rest.
const bcryptMaxPassword = 72

// significant returns the first 72 bytes of password: bcrypt ignores the
// rest, so every password sharing them verifies alike.
func (h *bcryptHash) significant(password []byte) []byte {
	return password[:min(len(password), bcryptMaxPassword)]
}

// bcryptAlphabet is bcrypt's base64 alphabet.
const bcryptAlphabet = "./ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789"

// parsePasswordHash parses an argon2id PHC string or a $2a$/$2b$/$2y$
// bcrypt hash. Its errors never contain s.
func parsePasswordHash(s string) (passwordHash, error) {
	switch {
	case strings.HasPrefix(s, "$argon2id$"):
		return parseArgon2(s)
	case strings.HasPrefix(s, "$2a$"), strings.HasPrefix(s, "$2b$"), strings.HasPrefix(s, "$2y$"):
		return parseBcrypt(s)
	}
	return nil, errors.New("hash is neither argon2id nor bcrypt ($2a$, $2b$, $2y$)")
}

// parseArgon2 parses "$argon2id$v=19$m=M,t=T,p=P$salt$key" with salt and key
// in unpadded standard base64.
func parseArgon2(s string) (*argon2Hash, error) {
	parts := strings.Split(s, "$")
	if len(parts) != 6 || parts[0] != "" || parts[1] != "argon2id" {
		return nil, errors.New("argon2id hash: want $argon2id$v=19$m=M,t=T,p=P$salt$hash")
	}
	if parts[2] != "v=19" {
		return nil, errors.New("argon2id hash: version must be v=19")
	}
	var p argon2Params
	fields := strings.Split(parts[3], ",")
	if len(fields) != 3 {
		return nil, errors.New("argon2id hash: parameters must be m=M,t=T,p=P")
	}
	for i, name := range []string{"m", "t", "p"} {
		v, ok := strings.CutPrefix(fields[i], name+"=")
		if !ok {
			return nil, errors.New("argon2id hash: parameters must be m=M,t=T,p=P")
		}
		n, err := strconv.ParseUint(v, 10, 32)
		if err != nil || n == 0 || (len(v) > 1 && v[0] == '0') {
			return nil, fmt.Errorf("argon2id hash: parameter %s is not a positive decimal", name)
		}
		switch name {
		case "m":
			p.memoryKiB = uint32(n)
		case "t":
			p.time = uint32(n)
		case "p":
			if n > maxArgon2Threads {
				return nil, fmt.Errorf("argon2id hash: p above %d", maxArgon2Threads)
			}
			p.threads = uint8(n)
		}
	}
	if p.memoryKiB > maxArgon2MemoryKiB || p.time > maxArgon2Time {
		return nil, fmt.Errorf("argon2id hash: m above %d or t above %d", maxArgon2MemoryKiB, maxArgon2Time)
	}
	if p.memoryKiB < 8*uint32(p.threads) {
		return nil, errors.New("argon2id hash: m below 8*p")
	}
	enc := base64.RawStdEncoding.Strict()
	salt, err := enc.DecodeString(parts[4])
	if err != nil || len(salt) < minArgon2SaltLen {
		return nil, fmt.Errorf("argon2id hash: salt must be at least %d bytes of unpadded standard base64", minArgon2SaltLen)
	}
	key, err := enc.DecodeString(parts[5])
	if err != nil || len(key) < minArgon2KeyLen || len(key) > maxArgon2KeyLen {
		return nil, fmt.Errorf("argon2id hash: hash must be %d..%d bytes of unpadded standard base64", minArgon2KeyLen, maxArgon2KeyLen)
	}
	p.saltLen, p.keyLen = len(salt), len(key)
	return &argon2Hash{p: p, salt: salt, key: key}, nil
}

// parseBcrypt parses "$2x$CC$" + 22 salt + 31 hash characters. The bcrypt
// package itself checks little beyond the cost, so the shape is checked here.
func parseBcrypt(s string) (*bcryptHash, error) {
	const size = 60
	if len(s) != size || s[6] != '$' {
		return nil, errors.New("bcrypt hash: want $2b$CC$ followed by 53 characters")
	}
	cost, err := strconv.Atoi(s[4:6])
	if err != nil || cost < bcrypt.MinCost || cost > bcrypt.MaxCost {
		return nil, fmt.Errorf("bcrypt hash: cost must be %d..%d", bcrypt.MinCost, bcrypt.MaxCost)
	}
	for i := 7; i < size; i++ {
		if strings.IndexByte(bcryptAlphabet, s[i]) < 0 {
			return nil, errors.New("bcrypt hash: invalid character in salt or hash")
		}
	}
	return &bcryptHash{cost: cost, encoded: []byte(s)}, nil
}

// dummyLike returns a hash with the algorithm and cost parameters of h but
// random content, so verifying a password against it costs what verifying
// against h costs and never succeeds (except with negligible probability,
// and callers ignore its result anyway). It computes no hash.
func dummyLike(h passwordHash) passwordHash {
	switch h := h.(type) {
	case *argon2Hash:
		d := &argon2Hash{p: h.p, salt: make([]byte, len(h.salt)), key: make([]byte, len(h.key))}
		rand.Read(d.salt)
		rand.Read(d.key)
		return d
	case *bcryptHash:
		b := make([]byte, 0, 60)
		b = fmt.Appendf(b, "$2b$%02d$", h.cost)
		for range 53 {
			var r [1]byte
			rand.Read(r[:])
			b = append(b, bcryptAlphabet[int(r[0])%len(bcryptAlphabet)])
		}
		return &bcryptHash{cost: h.cost, encoded: b}
	}
	panic("auth: unknown password hash type")
}

// HashPassword returns an argon2id PHC string for password:
// "$argon2id$v=19$m=19456,t=2,p=1$<salt>$<key>" with a random 16-byte salt
// and a 32-byte key, both unpadded standard base64 (OWASP parameters). An
// empty password is an error. It takes tens of milliseconds and about
// 19 MiB of memory; it is safe for concurrent use.
func HashPassword(password []byte) (string, error) {
	return hashPasswordWith(hashArgon2, password)
}

func hashPasswordWith(p argon2Params, password []byte) (string, error) {
	if len(password) == 0 {
		return "", errors.New("hash password: password is empty")
	}
	salt := make([]byte, p.saltLen)
	rand.Read(salt)
	key := argon2.IDKey(password, salt, p.time, p.memoryKiB, p.threads, uint32(p.keyLen))
	return fmt.Sprintf("$argon2id$v=%d$m=%d,t=%d,p=%d$%s$%s", argon2.Version, p.memoryKiB, p.time, p.threads,
		base64.RawStdEncoding.EncodeToString(salt), base64.RawStdEncoding.EncodeToString(key)), nil
}

// CredentialLine returns a credentials file line "principal:<phc>" whose
// hash is HashPassword(password). The principal must be valid UTF-8,
// non-blank, at most MaxPrincipalRunes code points, and contain neither ':'
// nor control characters; otherwise the error (which never contains the
// principal) says which rule failed.
func CredentialLine(principal string, password []byte) (string, error) {
	if err := checkFilePrincipal(principal); err != nil {
		return "", fmt.Errorf("credential line: %w", err)
	}
	phc, err := HashPassword(password)
	if err != nil {
		return "", fmt.Errorf("credential line: %w", err)
	}
	return principal + ":" + phc, nil
}

// checkFilePrincipal applies the principal rules of the credentials file:
// the Authenticate rules plus valid UTF-8, no ':' and no control characters.
func checkFilePrincipal(p string) error {
	if !utf8.ValidString(p) {
		return errors.New("principal is not valid UTF-8")
	}
	if strings.ContainsRune(p, ':') {
		return errors.New("principal contains ':'")
	}
	if strings.ContainsFunc(p, unicode.IsControl) {
		return errors.New("principal contains a control character")
	}
	if strings.TrimSpace(p) == "" {
		return errors.New("principal is blank")
	}
	if utf8.RuneCountInString(p) > MaxPrincipalRunes {
		return fmt.Errorf("principal is longer than %d code points", MaxPrincipalRunes)
	}
	return nil
}
