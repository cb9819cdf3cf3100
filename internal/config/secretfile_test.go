package config

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// A secret may come from the file its _FILE variable names (the compose
// deployment mounts the principal hash key that way); the flag still wins,
// both variables at once are refused, and no error shows the content.
func TestSecretFromFile(t *testing.T) {
	const key = "0123456789abcdef0123456789abcdef"
	dir := t.TempDir()
	file := filepath.Join(dir, "key")
	if err := os.WriteFile(file, []byte(key+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	empty := filepath.Join(dir, "empty")
	if err := os.WriteFile(empty, []byte("\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name    string
		args    []string
		env     map[string]string
		want    string
		wantErr string
	}{
		{name: "file", env: map[string]string{"K_FILE": file}, want: key},
		{name: "variable", env: map[string]string{"K": "from-env"}, want: "from-env"},
		{name: "flag wins over the file", args: []string{"-k", "from-flag"}, env: map[string]string{"K_FILE": file}, want: "from-flag"},
		{name: "both variables", env: map[string]string{"K": "x", "K_FILE": file}, wantErr: "K: set either it or K_FILE, not both"},
		{name: "missing file", env: map[string]string{"K_FILE": filepath.Join(dir, "absent")}, wantErr: "K_FILE: open "},
		{name: "empty file", env: map[string]string{"K_FILE": empty}, wantErr: "K_FILE: " + empty + " is empty"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var got string
			l := NewLoader("t", tc.args, env(tc.env))
			l.Secret(&got, "K", "k", "key", nil)
			err := l.Parse()
			if tc.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tc.wantErr) || strings.Contains(err.Error(), key) {
					t.Fatalf("error %v, want one containing %q and not the key", err, tc.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if got != tc.want {
				t.Fatalf("value %q, want %q", got, tc.want)
			}
			if p := l.Provenance(); len(p) != 1 || p[0].Value != "(set)" || p[0].Source == SourceDefault {
				t.Fatalf("provenance %+v", p)
			}
		})
	}
}

// A _FILE variable means nothing for a setting that is not a secret.
func TestFileVariableOnlyForSecrets(t *testing.T) {
	var got string
	l := NewLoader("t", nil, env(map[string]string{"S_FILE": "/nonexistent"}))
	l.String(&got, "S", "s", "default", "plain", nil)
	if err := l.Parse(); err != nil {
		t.Fatal(err)
	}
	if got != "default" {
		t.Fatalf("value %q, want the default", got)
	}
}
