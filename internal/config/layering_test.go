package config

import (
	"bytes"
	"encoding/json"
	"errors"
	"go/ast"
	"go/parser"
	"go/token"
	"io"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
)

// module is this module's path; the import path of this package is
// module + "/internal/config".
const module = "github.com/mightyetl/mightyetl"

// configImporters says which packages may import internal/config: the
// binaries (cmd/...) and internal/app (with its subpackages), which
// translate a configuration into the options of the parts, config itself
// (its external tests), and deploy, whose tests load each rendered
// manifest's environment exactly as the binaries do (they are the edge's
// own artefacts, not a part). Every other package takes its own options
// struct with its own Default* constants.
func configImporters(pkg string) bool {
	return pkg == module+"/internal/config" || pkg == module+"/deploy" ||
		pkg == module+"/internal/app" || strings.HasPrefix(pkg, module+"/internal/app/") ||
		strings.HasPrefix(pkg, module+"/cmd/")
}

// moduleRoot is the directory of this module's go.mod.
func moduleRoot(t *testing.T) string {
	t.Helper()
	out, err := exec.Command("go", "env", "GOMOD").Output()
	if err != nil {
		t.Fatalf("go env GOMOD: %v (the test needs the go command on PATH)", err)
	}
	gomod := strings.TrimSpace(string(out))
	if gomod == "" || gomod == os.DevNull {
		t.Fatal("go env GOMOD: not inside a module")
	}
	return filepath.Dir(gomod)
}

// listedPackage is what TestOnlyTheEdgeImportsConfig reads of `go list -json`.
type listedPackage struct {
	ImportPath                         string
	Imports, TestImports, XTestImports []string
}

// TestOnlyTheEdgeImportsConfig is issue 27 item 3: configuration is read at
// the edge. Of every package of this module (and of the client module when
// client/ is one), counting the imports of its tests, only internal/config,
// internal/app and its subpackages and the binaries under cmd/ import
// internal/config; the test fails naming each other importer.
func TestOnlyTheEdgeImportsConfig(t *testing.T) {
	root := moduleRoot(t)
	dirs := []string{root}
	if _, err := os.Stat(filepath.Join(root, "client", "go.mod")); err == nil {
		dirs = append(dirs, filepath.Join(root, "client"))
	}
	seen := 0
	for _, dir := range dirs {
		cmd := exec.Command("go", "list", "-e", "-json=ImportPath,Imports,TestImports,XTestImports", "./...")
		cmd.Dir = dir
		var stderr bytes.Buffer
		cmd.Stderr = &stderr
		out, err := cmd.Output()
		if err != nil {
			t.Fatalf("go list in %s: %v\n%s", dir, err, stderr.Bytes())
		}
		dec := json.NewDecoder(bytes.NewReader(out))
		for {
			var p listedPackage
			if err := dec.Decode(&p); errors.Is(err, io.EOF) {
				break
			} else if err != nil {
				t.Fatalf("go list in %s: %v", dir, err)
			}
			seen++
			if configImporters(p.ImportPath) {
				continue
			}
			for _, imports := range []struct {
				kind string
				list []string
			}{{"imports", p.Imports}, {"test imports", p.TestImports}, {"external test imports", p.XTestImports}} {
				for _, imp := range imports.list {
					if imp != module+"/internal/config" {
						continue
					}
					t.Errorf("%s %s internal/config: only internal/app and cmd/* may; give the package an options struct and let internal/app translate the configuration into it", p.ImportPath, imports.kind)
				}
			}
		}
	}
	if seen < 20 {
		t.Fatalf("go list found %d packages; expected this whole module", seen)
	}
}

// TestEveryDefaultHasOneName: a default is declared once, by the part that
// applies it, and named by that declaration everywhere else. A constant or
// variable declared as nothing but another Default* (`DefaultX = pkg.DefaultY`)
// is a second name for one value and fails the test, in any package of this
// module (nested modules, like bench/peers/, are not read).
func TestEveryDefaultHasOneName(t *testing.T) {
	root := moduleRoot(t)
	fset := token.NewFileSet()
	files := 0
	err := filepath.WalkDir(root, func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.IsDir() {
			name := d.Name()
			if path != root && (strings.HasPrefix(name, ".") || strings.HasPrefix(name, "_") || name == "testdata" || name == "vendor") {
				return filepath.SkipDir
			}
			if _, err := os.Stat(filepath.Join(path, "go.mod")); path != root && err == nil {
				return filepath.SkipDir // another module
			}
			return nil
		}
		if !strings.HasSuffix(path, ".go") {
			return nil
		}
		f, err := parser.ParseFile(fset, path, nil, parser.SkipObjectResolution)
		if err != nil {
			return err
		}
		files++
		for _, decl := range f.Decls {
			gen, ok := decl.(*ast.GenDecl)
			if !ok || (gen.Tok != token.CONST && gen.Tok != token.VAR) {
				continue
			}
			for _, spec := range gen.Specs {
				vs := spec.(*ast.ValueSpec)
				for i, v := range vs.Values {
					target := aliasedDefault(v)
					if target == "" || i >= len(vs.Names) {
						continue
					}
					t.Errorf("%s: %s = %s: a second name for a default; name %s where it is used", fset.Position(vs.Names[i].Pos()), vs.Names[i].Name, target, target)
				}
			}
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if files < 100 {
		t.Fatalf("read %d Go files; expected this whole module", files)
	}
}

// aliasedDefault returns "DefaultY" or "pkg.DefaultY" when e is nothing but
// a reference to a Default* identifier, else "".
func aliasedDefault(e ast.Expr) string {
	switch e := ast.Unparen(e).(type) {
	case *ast.Ident:
		if strings.HasPrefix(e.Name, "Default") {
			return e.Name
		}
	case *ast.SelectorExpr:
		if x, ok := e.X.(*ast.Ident); ok && strings.HasPrefix(e.Sel.Name, "Default") {
			return x.Name + "." + e.Sel.Name
		}
	}
	return ""
}
