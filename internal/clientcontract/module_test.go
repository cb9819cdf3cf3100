package clientcontract_test

import (
	"bufio"
	"os"
	"slices"
	"strconv"
	"strings"
	"testing"
)

// clientDeps is every module the client module may require or list in its
// go.sum: nats.go and the modules nats.go itself requires. A new entry is a
// decision for every producer that imports the client, not a side effect of
// a test: the client's tests that need more live in this package.
var clientDeps = []string{
	"github.com/nats-io/nats.go",
	"github.com/nats-io/nkeys",
	"github.com/nats-io/nuid",
	"github.com/klauspost/compress",
	"golang.org/x/crypto",
	"golang.org/x/sys",
}

// clientGoCeiling is the service's go directive when the client became its
// own module; the client's must stay below it, at what its code and nats.go
// need, so producers on older toolchains can import it.
const clientGoCeiling = "1.26"

// goMod is what the tests read of a go.mod.
type goMod struct {
	goVersion string
	// requires maps a required module path to "direct" or "indirect".
	requires map[string]string
	// other holds the other directives' lines (replace, exclude, retract,
	// tool, ...), single-line form; a block form is reported as its
	// opening line.
	other []string
}

// readGoMod reads a go.mod's go directive, its requirements (single-line
// and block form) and its other directives.
func readGoMod(t *testing.T, path string) goMod {
	t.Helper()
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	m := goMod{requires: map[string]string{}}
	inBlock := false
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		line := strings.TrimSpace(sc.Text())
		kind := "direct"
		if strings.HasSuffix(line, "// indirect") {
			kind = "indirect"
		}
		if i := strings.Index(line, "//"); i >= 0 {
			line = strings.TrimSpace(line[:i])
		}
		fields := strings.Fields(line)
		switch {
		case len(fields) == 0:
		case inBlock && fields[0] == ")":
			inBlock = false
		case inBlock:
			m.requires[fields[0]] = kind
		case fields[0] == "go" && len(fields) == 2:
			m.goVersion = fields[1]
		case fields[0] == "require" && len(fields) == 2 && fields[1] == "(":
			inBlock = true
		case fields[0] == "require" && len(fields) == 3:
			m.requires[fields[1]] = kind
		case fields[0] != "module":
			m.other = append(m.other, line)
		}
	}
	if err := sc.Err(); err != nil {
		t.Fatal(err)
	}
	if m.goVersion == "" {
		t.Fatalf("%s: no go directive", path)
	}
	return m
}

// goVersionLess compares dotted Go versions ("1.24.0" < "1.26").
func goVersionLess(t *testing.T, a, b string) bool {
	t.Helper()
	num := func(v string) []int {
		var out []int
		for _, p := range strings.Split(v, ".") {
			n, err := strconv.Atoi(p)
			if err != nil {
				t.Fatalf("go version %q: %v", v, err)
			}
			out = append(out, n)
		}
		return out
	}
	return slices.Compare(num(a), num(b)) < 0
}

// TestClientModuleStaysLean is issue 27 item 7: a producer that imports the
// client gets nats.go and nothing the service or its tests need. The client
// module requires nats.go directly and only nats.go's own requirements
// besides; its go.sum lists no other module; its go directive is below the
// service's. The root module requires the client from this checkout.
func TestClientModuleStaysLean(t *testing.T) {
	cm := readGoMod(t, "../../client/go.mod")
	if !goVersionLess(t, cm.goVersion, clientGoCeiling) {
		t.Errorf("client/go.mod: go %s, want below %s", cm.goVersion, clientGoCeiling)
	}
	// A replace or a toolchain line would bind producers to this checkout
	// or to a newer Go.
	if len(cm.other) > 0 {
		t.Errorf("client/go.mod: %q: the client module keeps no directives besides module, go and require", cm.other)
	}
	reqs := cm.requires
	if reqs["github.com/nats-io/nats.go"] != "direct" {
		t.Errorf("client/go.mod does not require github.com/nats-io/nats.go directly: %v", reqs)
	}
	for mod, kind := range reqs {
		if !slices.Contains(clientDeps, mod) {
			t.Errorf("client/go.mod requires %s: only nats.go and its own requirements are allowed", mod)
		} else if kind == "direct" && mod != "github.com/nats-io/nats.go" {
			t.Errorf("client/go.mod requires %s directly: the client's code may import nats.go only", mod)
		}
	}
	sum, err := os.ReadFile("../../client/go.sum")
	if err != nil {
		t.Fatal(err)
	}
	for line := range strings.Lines(string(sum)) {
		fields := strings.Fields(line)
		if len(fields) == 0 {
			continue
		}
		if !slices.Contains(clientDeps, fields[0]) {
			t.Errorf("client/go.sum lists %s: only nats.go and its own requirements are allowed", fields[0])
		}
	}
	// The service builds the client of this checkout.
	root := readGoMod(t, "../../go.mod")
	if root.requires["github.com/mightyetl/mightyetl/client"] != "direct" {
		t.Error("go.mod does not require github.com/mightyetl/mightyetl/client")
	}
	if !slices.Contains(root.other, "replace github.com/mightyetl/mightyetl/client => ./client") {
		t.Errorf("go.mod does not replace the client with ./client: %q", root.other)
	}
}
