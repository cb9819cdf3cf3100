package config

import (
	"strings"
	"testing"
)

// TestIntakeKeyAndDenyRules pins the intake's cross-setting rules: deny
// mode takes no jobs on any path (the NATS request consumer is refused
// with it), and every open intake path needs a principal hash key of at
// least 32 bytes. Each refusal is one line naming the setting.
func TestIntakeKeyAndDenyRules(t *testing.T) {
	const key = "0123456789abcdef0123456789abcdef"
	nats := map[string]string{"NATS_URL": "nats://127.0.0.1:4222", "MIGHTYETL_NATS_REQUESTS_ENABLED": "true"}
	with := func(m map[string]string, kv ...string) map[string]string {
		out := map[string]string{}
		for k, v := range m {
			out[k] = v
		}
		for i := 0; i < len(kv); i += 2 {
			out[kv[i]] = kv[i+1]
		}
		return out
	}
	cases := []struct {
		name    string
		env     map[string]string
		refused string // "" = accepted; else the setting the line starts with
	}{
		{"deny alone", map[string]string{}, ""},
		{"deny with NATS relay only", map[string]string{"NATS_URL": "nats://127.0.0.1:4222"}, ""},
		{"deny with NATS requests", nats, "MIGHTYETL_NATS_REQUESTS_ENABLED"},
		{"deny with NATS requests and a key", with(nats, "MIGHTYETL_PRINCIPAL_HASH_KEY", key), "MIGHTYETL_NATS_REQUESTS_ENABLED"},
		{"basic without key", map[string]string{"MIGHTYETL_AUTH_MODE": "basic", "MIGHTYETL_BASIC_CREDENTIALS_FILE": "c"}, "MIGHTYETL_PRINCIPAL_HASH_KEY"},
		{"basic with NATS requests without key", with(nats, "MIGHTYETL_AUTH_MODE", "basic", "MIGHTYETL_BASIC_CREDENTIALS_FILE", "c"), "MIGHTYETL_PRINCIPAL_HASH_KEY"},
		{"basic with NATS requests and a key", with(nats, "MIGHTYETL_AUTH_MODE", "basic", "MIGHTYETL_BASIC_CREDENTIALS_FILE", "c", "MIGHTYETL_PRINCIPAL_HASH_KEY", key), ""},
		{"basic with a short key", map[string]string{"MIGHTYETL_AUTH_MODE": "basic", "MIGHTYETL_BASIC_CREDENTIALS_FILE": "c", "MIGHTYETL_PRINCIPAL_HASH_KEY": "short"}, "MIGHTYETL_PRINCIPAL_HASH_KEY"},
	}
	for _, c := range cases {
		cfg, _, err := LoadIntake(nil, env(c.env))
		switch {
		case c.refused == "" && err != nil:
			t.Errorf("%s: refused: %v", c.name, err)
		case c.refused != "" && err == nil:
			t.Errorf("%s: accepted (auth %s, requests %v, key set %v), want refused naming %s",
				c.name, cfg.AuthMode, cfg.NATS.RequestsEnabled, cfg.PrincipalHashKey != "", c.refused)
		case c.refused != "" && (!strings.HasPrefix(err.Error(), c.refused) || strings.Contains(err.Error(), "\n")):
			t.Errorf("%s: %q is not one line starting with %s", c.name, err, c.refused)
		}
	}
}
