package pgtest

import (
	"errors"
	"strings"
	"testing"
)

// The README's test command tests (issue 13, item 8): without
// TEST_DATABASE_URL the local server on its default port is used when it
// answers, then a container; with neither, the error names the fix. A
// database test never passes by skipping.
func TestServerChoice(t *testing.T) {
	down := func() error { return errors.New("connection refused") }
	up := func() error { return nil }
	noDocker := func() (string, error) { return "", errors.New("no docker engine") }
	docker := func() (string, error) { return "postgres://c:5/postgres", nil }
	mustNot := func() (string, error) { t.Error("container started although a server answered"); return "", nil }

	if u, err := resolveServer("postgres://h:1/x", down, mustNot); err != nil || u != "postgres://h:1/postgres" {
		t.Errorf("env: %q %v", u, err)
	}
	if u, err := resolveServer("", up, mustNot); err != nil || u != LocalURL {
		t.Errorf("local: %q %v", u, err)
	}
	if u, err := resolveServer("", down, docker); err != nil || u != "postgres://c:5/postgres" {
		t.Errorf("container: %q %v", u, err)
	}
	_, err := resolveServer("", down, noDocker)
	if err == nil || !strings.Contains(err.Error(), "TEST_DATABASE_URL unset") || !strings.Contains(err.Error(), "no docker engine") {
		t.Errorf("none: %v", err)
	}
}

// On this machine and in CI the local server answers: with no
// TEST_DATABASE_URL a fresh clone's database tests run against it.
func TestLocalServerIsChosenWithoutEnvironment(t *testing.T) {
	u, err := resolveServer("", probeLocal, func() (string, error) { return "", errors.New("not reached") })
	if err != nil || u != LocalURL {
		t.Fatalf("resolve without TEST_DATABASE_URL: %q %v (start PostgreSQL on 127.0.0.1:5432)", u, err)
	}
}
