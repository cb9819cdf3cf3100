package config_test

import (
	"strings"
	"testing"

	"github.com/mightyetl/mightyetl/internal/config"
)

// MIGHTYETL_NATS_STREAM_REPLICAS defaults to 1 (one copy, as on a single
// server), takes 1..5 (JetStream's limit) and refuses anything else with
// a message naming the setting.
func TestNATSStreamReplicas(t *testing.T) {
	env := func(v string) func(string) string {
		return func(k string) string {
			if k == "MIGHTYETL_NATS_STREAM_REPLICAS" {
				return v
			}
			return ""
		}
	}
	c, _, err := config.LoadIntake(nil, env(""))
	if err != nil {
		t.Fatal(err)
	}
	if c.NATS.StreamReplicas != 1 {
		t.Errorf("default %d, want 1", c.NATS.StreamReplicas)
	}
	for _, v := range []string{"1", "3", "5"} {
		c, _, err := config.LoadIntake(nil, env(v))
		if err != nil {
			t.Errorf("%s: %v", v, err)
		} else if got := c.NATS.StreamReplicas; got != int(v[0]-'0') {
			t.Errorf("%s: got %d", v, got)
		}
	}
	for _, v := range []string{"0", "6", "-1", "three"} {
		if _, _, err := config.LoadIntake(nil, env(v)); err == nil || !strings.Contains(err.Error(), "MIGHTYETL_NATS_STREAM_REPLICAS") {
			t.Errorf("%s: error %v, want one naming MIGHTYETL_NATS_STREAM_REPLICAS", v, err)
		}
	}
}
