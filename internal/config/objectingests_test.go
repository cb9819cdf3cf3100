package config_test

import (
	"strings"
	"testing"

	"github.com/mightyetl/mightyetl/internal/config"
	"github.com/mightyetl/mightyetl/internal/natsbridge"
)

// MIGHTYETL_NATS_OBJECT_INGESTS defaults to the bridge's own default (one
// object at a time), takes 1..64 and refuses anything else with a message
// naming the setting.
func TestNATSObjectIngests(t *testing.T) {
	env := func(v string) func(string) string {
		return func(k string) string {
			if k == "MIGHTYETL_NATS_OBJECT_INGESTS" {
				return v
			}
			return ""
		}
	}
	c, _, err := config.LoadIntake(nil, env(""))
	if err != nil {
		t.Fatal(err)
	}
	if c.NATS.ObjectIngests != natsbridge.DefaultObjectIngests || natsbridge.DefaultObjectIngests != 1 {
		t.Errorf("default %d, want natsbridge.DefaultObjectIngests (1)", c.NATS.ObjectIngests)
	}
	for v, want := range map[string]int{"1": 1, "4": 4, "64": 64} {
		c, _, err := config.LoadIntake(nil, env(v))
		if err != nil || c.NATS.ObjectIngests != want {
			t.Errorf("%s: got %d, %v", v, c.NATS.ObjectIngests, err)
		}
	}
	for _, v := range []string{"0", "65", "-1", "one"} {
		if _, _, err := config.LoadIntake(nil, env(v)); err == nil || !strings.Contains(err.Error(), "MIGHTYETL_NATS_OBJECT_INGESTS") {
			t.Errorf("%s: error %v, want one naming MIGHTYETL_NATS_OBJECT_INGESTS", v, err)
		}
	}
}
