package natstest

import (
	"errors"
	"strings"
	"testing"
)

// Without TEST_NATS_URL the local server on its default port is used when it
// answers, then a container; with neither, the error names the fix (issue
// 13, item 8).
func TestServerChoice(t *testing.T) {
	down := func() error { return errors.New("connection refused") }
	up := func() error { return nil }
	noDocker := func() (string, error) { return "", errors.New("no docker engine") }
	mustNot := func() (string, error) { t.Error("container started although a server answered"); return "", nil }

	if u, err := resolveServer("nats://h:1", down, mustNot); err != nil || u != "nats://h:1" {
		t.Errorf("env: %q %v", u, err)
	}
	if u, err := resolveServer("", up, mustNot); err != nil || u != LocalURL {
		t.Errorf("local: %q %v", u, err)
	}
	_, err := resolveServer("", down, noDocker)
	if err == nil || !strings.Contains(err.Error(), "TEST_NATS_URL unset") {
		t.Errorf("none: %v", err)
	}
}

// On this machine and in CI the local server answers with JetStream.
func TestLocalServerIsChosenWithoutEnvironment(t *testing.T) {
	u, err := resolveServer("", probeLocal, func() (string, error) { return "", errors.New("not reached") })
	if err != nil || u != LocalURL {
		t.Fatalf("resolve without TEST_NATS_URL: %q %v (start nats-server -js on 127.0.0.1:4222)", u, err)
	}
}
