package config

import (
	"strings"
	"testing"
)

// withEnv is a copy of m with the key-value pairs kv set.
func withEnv(m map[string]string, kv ...string) map[string]string {
	out := map[string]string{}
	for k, v := range m {
		out[k] = v
	}
	for i := 0; i < len(kv); i += 2 {
		out[kv[i]] = kv[i+1]
	}
	return out
}

// TestIntakeKeyAndDenyRules pins the intake's cross-setting rules: deny
// mode takes no jobs on any path (the NATS request consumer is refused
// with it), and every open intake path needs a principal hash key of at
// least 32 bytes. Each refusal is one line naming the setting.
func TestIntakeKeyAndDenyRules(t *testing.T) {
	const key = "0123456789abcdef0123456789abcdef"
	nats := map[string]string{"NATS_URL": "nats://127.0.0.1:4222", "MIGHTYETL_NATS_REQUESTS_ENABLED": "true"}
	cases := []struct {
		name    string
		env     map[string]string
		refused string // "" = accepted; else the setting the line starts with
	}{
		{"deny alone", map[string]string{}, ""},
		{"deny with NATS relay only", map[string]string{"NATS_URL": "nats://127.0.0.1:4222"}, ""},
		{"deny with NATS requests", nats, "MIGHTYETL_NATS_REQUESTS_ENABLED"},
		{"deny with NATS requests and a key", withEnv(nats, "MIGHTYETL_PRINCIPAL_HASH_KEY", key), "MIGHTYETL_NATS_REQUESTS_ENABLED"},
		{"basic without key", map[string]string{"MIGHTYETL_AUTH_MODE": "basic", "MIGHTYETL_BASIC_CREDENTIALS_FILE": "c"}, "MIGHTYETL_PRINCIPAL_HASH_KEY"},
		{"basic with NATS requests without key", withEnv(nats, "MIGHTYETL_AUTH_MODE", "basic", "MIGHTYETL_BASIC_CREDENTIALS_FILE", "c"), "MIGHTYETL_PRINCIPAL_HASH_KEY"},
		{"basic with NATS requests and a key", withEnv(nats, "MIGHTYETL_AUTH_MODE", "basic", "MIGHTYETL_BASIC_CREDENTIALS_FILE", "c", "MIGHTYETL_PRINCIPAL_HASH_KEY", key), ""},
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

// TestIntakeConsoleAndOperatorSettings pins the console's settings:
// MIGHTYETL_CONSOLE_ENABLED (default true), MIGHTYETL_CONSOLE_BULK_CANCEL_CAP
// (default 100, 1..1000), MIGHTYETL_OPERATOR_PRINCIPALS (comma-separated,
// trimmed, blanks dropped) and the JWT operator claim and value (both or
// neither, jwt mode only). Each refusal is one line naming the setting.
func TestIntakeConsoleAndOperatorSettings(t *testing.T) {
	const key = "0123456789abcdef0123456789abcdef"
	basic := map[string]string{"MIGHTYETL_AUTH_MODE": "basic", "MIGHTYETL_BASIC_CREDENTIALS_FILE": "c", "MIGHTYETL_PRINCIPAL_HASH_KEY": key}
	jwtMode := map[string]string{"MIGHTYETL_AUTH_MODE": "jwt", "MIGHTYETL_JWT_ISSUER": "https://issuer.test",
		"MIGHTYETL_JWT_AUDIENCE": "mightyetl", "MIGHTYETL_JWT_JWKS_FILE": "jwks.json", "MIGHTYETL_PRINCIPAL_HASH_KEY": key}

	t.Run("defaults", func(t *testing.T) {
		cfg, _, err := LoadIntake(nil, env(basic))
		if err != nil {
			t.Fatal(err)
		}
		if !cfg.ConsoleEnabled || cfg.ConsoleBulkCancelCap != 100 || cfg.OperatorPrincipals != nil ||
			cfg.JWTOperatorClaim != "" || cfg.JWTOperatorValue != "" {
			t.Fatalf("defaults: enabled %v, cap %d, operators %q, claim %q=%q", cfg.ConsoleEnabled, cfg.ConsoleBulkCancelCap,
				cfg.OperatorPrincipals, cfg.JWTOperatorClaim, cfg.JWTOperatorValue)
		}
	})

	t.Run("parsed", func(t *testing.T) {
		for _, c := range []struct {
			name string
			env  map[string]string
			args []string
			want func(Intake) bool
		}{
			{"console off", withEnv(basic, "MIGHTYETL_CONSOLE_ENABLED", "false"), nil, func(c Intake) bool { return !c.ConsoleEnabled }},
			{"console off by flag", basic, []string{"-console=false"}, func(c Intake) bool { return !c.ConsoleEnabled }},
			{"bulk cap 1", withEnv(basic, "MIGHTYETL_CONSOLE_BULK_CANCEL_CAP", "1"), nil, func(c Intake) bool { return c.ConsoleBulkCancelCap == 1 }},
			{"bulk cap 1000", withEnv(basic, "MIGHTYETL_CONSOLE_BULK_CANCEL_CAP", "1000"), nil, func(c Intake) bool { return c.ConsoleBulkCancelCap == 1000 }},
			{"one operator", withEnv(basic, "MIGHTYETL_OPERATOR_PRINCIPALS", "ops"), nil, func(c Intake) bool {
				return len(c.OperatorPrincipals) == 1 && c.OperatorPrincipals[0] == "ops"
			}},
			{"operators trimmed, blanks dropped", withEnv(basic, "MIGHTYETL_OPERATOR_PRINCIPALS", " ops-1 ,, ops two ,"), nil, func(c Intake) bool {
				return len(c.OperatorPrincipals) == 2 && c.OperatorPrincipals[0] == "ops-1" && c.OperatorPrincipals[1] == "ops two"
			}},
			{"only commas", withEnv(basic, "MIGHTYETL_OPERATOR_PRINCIPALS", " , ,"), nil, func(c Intake) bool { return len(c.OperatorPrincipals) == 0 }},
			{"jwt claim and value", withEnv(jwtMode, "MIGHTYETL_JWT_OPERATOR_CLAIM", "roles", "MIGHTYETL_JWT_OPERATOR_VALUE", "mightyetl-operator"), nil,
				func(c Intake) bool {
					return c.JWTOperatorClaim == "roles" && c.JWTOperatorValue == "mightyetl-operator"
				}},
		} {
			cfg, _, err := LoadIntake(c.args, env(c.env))
			if err != nil || !c.want(cfg) {
				t.Errorf("%s: %+v, %v", c.name, cfg, err)
			}
		}
	})

	t.Run("refused", func(t *testing.T) {
		for _, c := range []struct {
			name    string
			env     map[string]string
			refused string
		}{
			{"console not a bool", withEnv(basic, "MIGHTYETL_CONSOLE_ENABLED", "maybe"), "MIGHTYETL_CONSOLE_ENABLED"},
			{"bulk cap 0", withEnv(basic, "MIGHTYETL_CONSOLE_BULK_CANCEL_CAP", "0"), "MIGHTYETL_CONSOLE_BULK_CANCEL_CAP"},
			{"bulk cap 1001", withEnv(basic, "MIGHTYETL_CONSOLE_BULK_CANCEL_CAP", "1001"), "MIGHTYETL_CONSOLE_BULK_CANCEL_CAP"},
			{"claim without value", withEnv(jwtMode, "MIGHTYETL_JWT_OPERATOR_CLAIM", "roles"), "MIGHTYETL_JWT_OPERATOR_CLAIM"},
			{"value without claim", withEnv(jwtMode, "MIGHTYETL_JWT_OPERATOR_VALUE", "mightyetl-operator"), "MIGHTYETL_JWT_OPERATOR_CLAIM"},
			{"claim in basic mode", withEnv(basic, "MIGHTYETL_JWT_OPERATOR_CLAIM", "roles", "MIGHTYETL_JWT_OPERATOR_VALUE", "x"), "MIGHTYETL_JWT_OPERATOR_CLAIM"},
			{"claim in deny mode", map[string]string{"MIGHTYETL_JWT_OPERATOR_CLAIM": "roles", "MIGHTYETL_JWT_OPERATOR_VALUE": "x"}, "MIGHTYETL_JWT_OPERATOR_CLAIM"},
		} {
			_, _, err := LoadIntake(nil, env(c.env))
			if err == nil || !strings.HasPrefix(err.Error(), c.refused) || strings.Contains(err.Error(), "\n") {
				t.Errorf("%s: %v, want one line starting with %s", c.name, err, c.refused)
			}
		}
	})

	// The start-up log prints the provenance: the operator principals show
	// only as (set) or (unset), never a name; the claim and value are not
	// secret and show as they are.
	t.Run("operators logged as (set)", func(t *testing.T) {
		const names = "ops-secret-name-1,ops-secret-name-2"
		for _, c := range []struct {
			env  map[string]string
			want string
		}{
			{basic, "(unset)"},
			{withEnv(basic, "MIGHTYETL_OPERATOR_PRINCIPALS", names), "(set)"},
		} {
			_, l, err := LoadIntake(nil, env(c.env))
			if err != nil {
				t.Fatal(err)
			}
			found := false
			for _, s := range l.Provenance() {
				if strings.Contains(s.Value, "ops-secret-name") {
					t.Fatalf("provenance shows an operator principal: %+v", s)
				}
				if s.Name == "MIGHTYETL_OPERATOR_PRINCIPALS" {
					found = true
					if s.Value != c.want {
						t.Errorf("MIGHTYETL_OPERATOR_PRINCIPALS logged as %q, want %q", s.Value, c.want)
					}
				}
			}
			if !found {
				t.Error("MIGHTYETL_OPERATOR_PRINCIPALS missing from the provenance")
			}
		}
		_, l, err := LoadIntake([]string{"-operator-principals", names}, env(basic))
		if err != nil {
			t.Fatal(err)
		}
		for _, s := range l.Provenance() {
			if strings.Contains(s.Value, "ops-secret-name") {
				t.Fatalf("provenance shows an operator principal given by flag: %+v", s)
			}
		}
	})
}
