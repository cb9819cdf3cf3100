package main

import (
	"os"
	"regexp"
	"strings"
	"testing"
)

// TestReadmeListsEverySubcommand: the README's sentence on cmd/etlctl names
// every subcommand the usage text offers, so a new one cannot ship
// undocumented.
func TestReadmeListsEverySubcommand(t *testing.T) {
	b, err := os.ReadFile("../../README.md")
	if err != nil {
		t.Fatal(err)
	}
	readme := string(b)
	i := strings.Index(readme, "`cmd/etlctl` (")
	if i < 0 {
		t.Fatal("README.md has no \"`cmd/etlctl` (\" sentence listing the subcommands")
	}
	end := strings.Index(readme[i:], ")")
	if end < 0 {
		t.Fatal("README.md's cmd/etlctl list is not closed")
	}
	list := readme[i : i+end]
	subs := regexp.MustCompile(`(?m)^\s+etlctl (\w+)`).FindAllStringSubmatch(usage, -1)
	if len(subs) < 7 {
		t.Fatalf("read %d subcommands from the usage text: %q", len(subs), usage)
	}
	for _, m := range subs {
		if !strings.Contains(list, "`"+m[1]) {
			t.Errorf("README.md's cmd/etlctl list does not name %q", m[1])
		}
	}
}
