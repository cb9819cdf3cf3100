package config

import (
	"strings"
	"testing"
)

// TestRequestStreamLimitsBoundOnePrincipal: with the request consumer on,
// the per-principal limit times the largest request must fit in a tenth of
// the request stream; the defaults do, a limit or payload size that would
// let one principal fill the stream is refused in one line naming the
// settings and what would fit, and without the consumer nothing is checked.
func TestRequestStreamLimitsBoundOnePrincipal(t *testing.T) {
	const key = "0123456789abcdef0123456789abcdef"
	on := map[string]string{"NATS_URL": "nats://127.0.0.1:4222", "MIGHTYETL_NATS_REQUESTS_ENABLED": "true",
		"MIGHTYETL_AUTH_MODE": "basic", "MIGHTYETL_BASIC_CREDENTIALS_FILE": "c", "MIGHTYETL_PRINCIPAL_HASH_KEY": key}
	cases := []struct {
		name    string
		env     map[string]string
		refused bool
		fits    string // with refused: the largest per-principal limit the line names
	}{
		{"defaults", on, false, ""},
		{"the old 10,000 per principal", withEnv(on, "MIGHTYETL_NATS_REQUESTS_MAX_PER_PRINCIPAL", "10000"), true, "at most 101 "},
		{"4 MiB requests with the default limit", withEnv(on, "MIGHTYETL_MAX_PAYLOAD_BYTES", "4194304", "MIGHTYETL_INTAKE_MAX_INFLIGHT_BYTES", "67108864"), true, "at most 25 "},
		{"4 MiB requests, 25 per principal", withEnv(on, "MIGHTYETL_MAX_PAYLOAD_BYTES", "4194304", "MIGHTYETL_NATS_REQUESTS_MAX_PER_PRINCIPAL", "25"), false, ""},
		{"10,000 per principal in a large stream", withEnv(on, "MIGHTYETL_NATS_REQUESTS_MAX_PER_PRINCIPAL", "10000", "MIGHTYETL_NATS_REQUESTS_MAX_BYTES", "110000000000"), false, ""},
		{"consumer off", map[string]string{"NATS_URL": "nats://127.0.0.1:4222", "MIGHTYETL_NATS_REQUESTS_MAX_PER_PRINCIPAL": "10000"}, false, ""},
	}
	for _, c := range cases {
		_, _, err := LoadIntake(nil, env(c.env))
		switch {
		case !c.refused && err != nil:
			t.Errorf("%s: refused: %v", c.name, err)
		case c.refused && err == nil:
			t.Errorf("%s: accepted", c.name)
		case c.refused && (!strings.HasPrefix(err.Error(), "MIGHTYETL_NATS_REQUESTS_MAX_PER_PRINCIPAL:") ||
			strings.Contains(err.Error(), "\n") || !strings.Contains(err.Error(), c.fits)):
			t.Errorf("%s: %q is not one line naming the limit with %q", c.name, err, c.fits)
		}
	}
}
