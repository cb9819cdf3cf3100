package main

import (
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"

	"github.com/mightyetl/mightyetl/internal/config"
)

// devStateDirEnv names the directory that holds `etlctl dev`'s identity
// file; unset means os.UserConfigDir()/mightyetl.
const devStateDirEnv = "MIGHTYETL_DEV_STATE_DIR"

// devIdentityFile is the identity file's name in that directory.
const devIdentityFile = "dev.json"

// devIdentity is what `etlctl dev` keeps across restarts, so that the jobs
// of earlier runs stay visible to the same credential: every job is owned
// by the principal's keyed hash, so a new key hides them, and users keep
// the printed password in their shells. Both are secrets of a development
// setup only.
type devIdentity struct {
	// PrincipalHashKey is MIGHTYETL_PRINCIPAL_HASH_KEY unless that is set.
	PrincipalHashKey string `json:"principalHashKey"`
	// Password is the dev principal's basic-auth password unless
	// MIGHTYETL_BASIC_CREDENTIALS_FILE is set.
	Password string `json:"password"`
}

// newDevIdentity draws a fresh identity: a 64-character key, a 24-character
// password.
func newDevIdentity() devIdentity {
	return devIdentity{PrincipalHashKey: randomHex(32), Password: randomHex(12)}
}

// devIdentityPath is where the identity lives: $MIGHTYETL_DEV_STATE_DIR/dev.json,
// else dev.json in the user's configuration directory
// (os.UserConfigDir()/mightyetl: ~/.config/mightyetl on Linux,
// ~/Library/Application Support/mightyetl on macOS). The error says that
// neither is known (no $HOME).
func devIdentityPath(getenv func(string) string) (string, error) {
	if dir := getenv(devStateDirEnv); dir != "" {
		return filepath.Join(dir, devIdentityFile), nil
	}
	dir, err := os.UserConfigDir()
	if err != nil {
		return "", fmt.Errorf("no user configuration directory (%v); set %s", err, devStateDirEnv)
	}
	return filepath.Join(dir, "mightyetl", devIdentityFile), nil
}

// loadDevIdentity reads the identity at path. ok is false, with no error,
// when there is no file. A file that does not hold an identity is an
// error saying how to replace it.
func loadDevIdentity(path string) (id devIdentity, ok bool, err error) {
	b, err := os.ReadFile(path)
	if errors.Is(err, fs.ErrNotExist) {
		return devIdentity{}, false, nil
	}
	if err != nil {
		return devIdentity{}, false, fmt.Errorf("read dev identity: %w", err)
	}
	bad := func(why string) error {
		return fmt.Errorf("dev identity %s: %s; run `etlctl dev --reset-identity` or delete the file", path, why)
	}
	if err := json.Unmarshal(b, &id); err != nil {
		return devIdentity{}, false, bad("not JSON")
	}
	if len(id.PrincipalHashKey) < config.MinPrincipalHashKeyBytes || id.Password == "" {
		return devIdentity{}, false, bad(fmt.Sprintf("needs a principalHashKey of at least %d bytes and a password", config.MinPrincipalHashKeyBytes))
	}
	return id, true, nil
}

// saveDevIdentity writes id to path, readable by its owner only (the
// directory is created 0700, the file 0600), replacing any file there at
// once (written beside it, then renamed).
func saveDevIdentity(path string, id devIdentity) error {
	if err := os.MkdirAll(filepath.Dir(path), 0o700); err != nil {
		return fmt.Errorf("save dev identity: %w", err)
	}
	b, err := json.MarshalIndent(id, "", "  ")
	if err != nil {
		return fmt.Errorf("save dev identity: %w", err)
	}
	tmp, err := os.CreateTemp(filepath.Dir(path), ".dev-*.json")
	if err != nil {
		return fmt.Errorf("save dev identity: %w", err)
	}
	defer os.Remove(tmp.Name()) // gone after the rename; clean-up on failure
	if _, err := tmp.Write(append(b, '\n')); err != nil {
		tmp.Close()
		return fmt.Errorf("save dev identity: %w", err)
	}
	if err := tmp.Close(); err != nil {
		return fmt.Errorf("save dev identity: %w", err)
	}
	// CreateTemp makes the file 0600 already; say so for the reader.
	if err := os.Chmod(tmp.Name(), 0o600); err != nil {
		return fmt.Errorf("save dev identity: %w", err)
	}
	if err := os.Rename(tmp.Name(), path); err != nil {
		return fmt.Errorf("save dev identity: %w", err)
	}
	return nil
}
