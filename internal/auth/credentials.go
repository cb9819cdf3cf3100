package auth

import (
	"bytes"
	"fmt"
	"io"
	"os"
	"time"
)

// maxCredentialsFileBytes bounds how much of a credentials file is read.
const maxCredentialsFileBytes = 16 << 20

// fileStamp identifies one version of a file well enough to notice a
// rewrite: modification time and size.
type fileStamp struct {
	modTime time.Time
	size    int64
}

func stampOf(fi os.FileInfo) fileStamp { return fileStamp{modTime: fi.ModTime(), size: fi.Size()} }

func (s fileStamp) equal(o fileStamp) bool { return s.size == o.size && s.modTime.Equal(o.modTime) }

// credentialSet is one immutable load of the credentials file.
type credentialSet struct {
	hashes map[string]passwordHash // principal -> hash
	// dummy is verified for unknown principals: it has the most common cost
	// parameters of the file, so an unknown principal costs what a wrong
	// password of a typical principal costs.
	dummy passwordHash
	stamp fileStamp
	// loaded is false when the file could not be read or parsed; the set is
	// then empty (fail closed) and the file is re-read on the next check.
	loaded bool
	// gen numbers the sets a Basic has installed; cache entries are valid
	// only for the generation they were verified against.
	gen uint64
}

// loadCredentials reads and parses the credentials file at path. The stamp
// comes from the open file, so it describes (at most) the content read.
func loadCredentials(path string) (*credentialSet, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, fmt.Errorf("open credentials file: %w", err)
	}
	defer f.Close()
	fi, err := f.Stat()
	if err != nil {
		return nil, fmt.Errorf("stat credentials file: %w", err)
	}
	data, err := io.ReadAll(io.LimitReader(f, maxCredentialsFileBytes+1))
	if err != nil {
		return nil, fmt.Errorf("read credentials file: %w", err)
	}
	if len(data) > maxCredentialsFileBytes {
		return nil, fmt.Errorf("read credentials file %s: larger than %d bytes", path, maxCredentialsFileBytes)
	}
	hashes, dummy, err := parseCredentials(data)
	if err != nil {
		return nil, fmt.Errorf("parse credentials file %s: %w", path, err)
	}
	return &credentialSet{hashes: hashes, dummy: dummy, stamp: stampOf(fi), loaded: true}, nil
}

// parseCredentials parses "principal:hash" lines; blank lines and lines
// whose first non-blank character is '#' are skipped, and a trailing CR is
// ignored. The principal is everything before the first ':' (hashes contain
// '$', never ':'). Errors name the 1-based line number and the rule broken,
// never the line's content.
func parseCredentials(data []byte) (map[string]passwordHash, passwordHash, error) {
	hashes := make(map[string]passwordHash)
	firstLine := make(map[string]int)
	costCount := make(map[string]int)
	var dummyOf passwordHash
	best := 0
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
		costCount[k]++
		if costCount[k] > best {
			best, dummyOf = costCount[k], h
		}
	}
	if dummyOf == nil {
		dummyOf = &argon2Hash{p: productionArgon2, salt: make([]byte, productionArgon2.saltLen), key: make([]byte, productionArgon2.keyLen)}
	}
	return hashes, dummyLike(dummyOf), nil
}
