package auth

import (
	"bytes"
	"crypto/hmac"
	"crypto/sha256"
	"encoding/binary"
	"fmt"
	"io"
	"maps"
	"os"
	"slices"
)

// maxCredentialsFileBytes bounds how much of a credentials file is read.
const maxCredentialsFileBytes = 16 << 20

// credentialSet is one immutable load of the credentials file.
type credentialSet struct {
	hashes map[string]passwordHash // principal -> hash
	// dummies holds one hash per cost class of the file (algorithm and
	// cost parameters) with random content, each with the number of
	// principals of that class; see dummyFor.
	dummies []costClass
	// digest is the SHA-256 of the file's bytes: a reload happens when it
	// changes, whatever the modification time and size say.
	digest [sha256.Size]byte
	// loaded is false when the file could not be read or parsed; the set is
	// then empty (fail closed) and the file is re-read on the next check.
	loaded bool
	// gen numbers the sets a Basic has installed; cache entries are valid
	// only for the generation they were verified against.
	gen uint64
}

// costClass is the dummy hash of one cost class and how many principals
// of the file are in the class.
type costClass struct {
	dummy passwordHash
	count int
}

// dummyFor returns the hash an unknown principal is verified against: the
// dummy of a cost class chosen by a keyed hash of the principal, each class
// as often as the file's principals are in it. A principal keeps its class
// while the file is unchanged (the key is the file's digest), so the time
// an unknown principal takes matches a known principal of some class of the
// file and does not tell the two apart.
func (s *credentialSet) dummyFor(principal string) passwordHash {
	if len(s.dummies) == 1 {
		return s.dummies[0].dummy
	}
	total := 0
	for _, c := range s.dummies {
		total += c.count
	}
	m := hmac.New(sha256.New, s.digest[:])
	m.Write([]byte(principal))
	n := int(binary.BigEndian.Uint64(m.Sum(nil)) % uint64(total))
	for _, c := range s.dummies {
		if n < c.count {
			return c.dummy
		}
		n -= c.count
	}
	return s.dummies[len(s.dummies)-1].dummy
}

// readCredentialsFile reads the credentials file at path, at most
// maxCredentialsFileBytes of it.
func readCredentialsFile(path string) ([]byte, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, fmt.Errorf("open credentials file: %w", err)
	}
	defer f.Close()
	data, err := io.ReadAll(io.LimitReader(f, maxCredentialsFileBytes+1))
	if err != nil {
		return nil, fmt.Errorf("read credentials file: %w", err)
	}
	if len(data) > maxCredentialsFileBytes {
		return nil, fmt.Errorf("read credentials file %s: larger than %d bytes", path, maxCredentialsFileBytes)
	}
	return data, nil
}

// loadCredentials reads and parses the credentials file at path.
func loadCredentials(path string) (*credentialSet, error) {
	data, err := readCredentialsFile(path)
	if err != nil {
		return nil, err
	}
	return parseCredentialSet(path, data)
}

// parseCredentialSet parses data, the content of the file at path.
func parseCredentialSet(path string, data []byte) (*credentialSet, error) {
	hashes, dummies, err := parseCredentials(data)
	if err != nil {
		return nil, fmt.Errorf("parse credentials file %s: %w", path, err)
	}
	return &credentialSet{hashes: hashes, dummies: dummies, digest: sha256.Sum256(data), loaded: true}, nil
}

// parseCredentials parses "principal:hash" lines; blank lines and lines
// whose first non-blank character is '#' are skipped, and a trailing CR is
// ignored. The principal is everything before the first ':' (hashes contain
// '$', never ':'). It returns one dummy per cost class, ordered by class;
// a file without principals gets one production argon2id dummy. Errors name
// the 1-based line number and the rule broken, never the line's content.
func parseCredentials(data []byte) (map[string]passwordHash, []costClass, error) {
	hashes := make(map[string]passwordHash)
	firstLine := make(map[string]int)
	classes := make(map[string]*costClass)
	for i, line := range bytes.Split(data, []byte("\n")) {
		n := i + 1
		line = bytes.TrimRight(line, " \t\r")
		trimmed := bytes.TrimLeft(line, " \t")
		if len(trimmed) == 0 || trimmed[0] == '#' {
			continue
		}
		principal, hash, ok := bytes.Cut(line, []byte(":"))
		if !ok {
			return nil, nil, fmt.Errorf("line %d: want principal:hash", n)
		}
		p := string(principal)
		if err := checkFilePrincipal(p); err != nil {
			return nil, nil, fmt.Errorf("line %d: %w", n, err)
		}
		if prev, dup := firstLine[p]; dup {
			return nil, nil, fmt.Errorf("line %d: principal already defined on line %d", n, prev)
		}
		h, err := parsePasswordHash(string(hash))
		if err != nil {
			return nil, nil, fmt.Errorf("line %d: %w", n, err)
		}
		hashes[p] = h
		firstLine[p] = n
		k := h.costKey()
		if classes[k] == nil {
			classes[k] = &costClass{dummy: dummyLike(h)}
		}
		classes[k].count++
	}
	if len(classes) == 0 {
		empty := &argon2Hash{p: productionArgon2, salt: make([]byte, productionArgon2.saltLen), key: make([]byte, productionArgon2.keyLen)}
		return hashes, []costClass{{dummy: dummyLike(empty), count: 1}}, nil
	}
	keys := slices.Sorted(maps.Keys(classes))
	dummies := make([]costClass, 0, len(keys))
	for _, k := range keys {
		dummies = append(dummies, *classes[k])
	}
	return hashes, dummies, nil
}
