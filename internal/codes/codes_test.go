package codes_test

import (
	"fmt"
	"go/ast"
	"go/parser"
	"go/token"
	"io/fs"
	"os"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"testing"

	"github.com/mightyetl/mightyetl/internal/codes"
)

const (
	modulePath = "github.com/mightyetl/mightyetl"
	codesPath  = modulePath + "/internal/codes"
)

// moduleRoot is the directory of the module's go.mod, two levels above this
// package.
func moduleRoot(t *testing.T) string {
	t.Helper()
	root, err := filepath.Abs(filepath.Join("..", ".."))
	if err != nil {
		t.Fatal(err)
	}
	b, err := os.ReadFile(filepath.Join(root, "go.mod"))
	if err != nil {
		t.Fatalf("module root: %v", err)
	}
	if !strings.HasPrefix(string(b), "module "+modulePath+"\n") {
		t.Fatalf("module root %s is not %s", root, modulePath)
	}
	return root
}

// codeValues parses codes.go and returns every code value it declares,
// mapped to its constant's name.
func codeValues(t *testing.T) map[string]string {
	t.Helper()
	f, err := parser.ParseFile(token.NewFileSet(), "codes.go", nil, parser.SkipObjectResolution)
	if err != nil {
		t.Fatal(err)
	}
	values := map[string]string{}
	for _, d := range f.Decls {
		g, ok := d.(*ast.GenDecl)
		if !ok || g.Tok != token.CONST {
			continue
		}
		for _, s := range g.Specs {
			vs := s.(*ast.ValueSpec)
			for i, name := range vs.Names {
				lit, ok := vs.Values[i].(*ast.BasicLit)
				if !ok || lit.Kind != token.STRING {
					t.Fatalf("codes.%s is not a string literal", name.Name)
				}
				v, err := strconv.Unquote(lit.Value)
				if err != nil {
					t.Fatal(err)
				}
				if other, dup := values[v]; dup {
					t.Errorf("codes.%s and codes.%s share the value %q", other, name.Name, v)
				}
				values[v] = name.Name
			}
		}
	}
	if len(values) == 0 {
		t.Fatal("codes.go declares no code")
	}
	return values
}

// TestCodeValues pins the package's consistency: the values are parsed from
// the source the alias test below relies on, so they must be exactly the
// constants the compiler sees, and every listed problem or rejection code
// is one of them.
func TestCodeValues(t *testing.T) {
	values := codeValues(t)
	for _, list := range [][]string{codes.Problems, codes.Rejections} {
		seen := map[string]bool{}
		for _, c := range list {
			if _, ok := values[c]; !ok {
				t.Errorf("listed code %q is not a constant of codes.go", c)
			}
			if seen[c] {
				t.Errorf("code %q is listed twice", c)
			}
			seen[c] = true
		}
	}
	for v, name := range values {
		if !strings.HasPrefix(v, "etl_") {
			t.Errorf("codes.%s = %q does not start with etl_", name, v)
		}
	}
}

// goFile is one parsed non-test Go file of the module.
type goFile struct {
	rel  string // slash path from the module root
	pkg  string // import path of its directory
	file *ast.File
	fset *token.FileSet
}

// moduleFiles parses every non-test .go file of the module except those
// of internal/codes and of client/ (the public client, its own module: it
// mirrors the codes as typed client.ErrorCode constants for library users
// and cannot import internal/codes; a contract test keeps the two in
// agreement). Other nested modules, testdata and hidden directories are
// skipped.
func moduleFiles(t *testing.T, root string) []goFile {
	t.Helper()
	var files []goFile
	fset := token.NewFileSet()
	err := filepath.WalkDir(root, func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		rel, err := filepath.Rel(root, path)
		if err != nil {
			return err
		}
		rel = filepath.ToSlash(rel)
		if d.IsDir() {
			if rel == "." {
				return nil
			}
			base := d.Name()
			if rel == "internal/codes" || rel == "client" || base == "testdata" || base == "vendor" ||
				strings.HasPrefix(base, ".") || strings.HasPrefix(base, "_") {
				return filepath.SkipDir
			}
			if _, err := os.Stat(filepath.Join(path, "go.mod")); err == nil {
				return filepath.SkipDir // another module
			}
			return nil
		}
		if !strings.HasSuffix(rel, ".go") || strings.HasSuffix(rel, "_test.go") {
			return nil
		}
		f, err := parser.ParseFile(fset, path, nil, parser.SkipObjectResolution)
		if err != nil {
			return err
		}
		pkg := modulePath
		if dir := filepath.ToSlash(filepath.Dir(rel)); dir != "." {
			pkg += "/" + dir
		}
		files = append(files, goFile{rel: rel, pkg: pkg, file: f, fset: fset})
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if len(files) < 50 {
		t.Fatalf("found only %d Go files under %s; the walk is broken", len(files), root)
	}
	return files
}

// imports maps a file's import names to their paths (the last path element
// when unnamed; the module's packages are named after their directory).
func imports(f *ast.File) map[string]string {
	m := map[string]string{}
	for _, im := range f.Imports {
		p, err := strconv.Unquote(im.Path.Value)
		if err != nil {
			continue
		}
		name := p[strings.LastIndex(p, "/")+1:]
		if im.Name != nil {
			name = im.Name.Name
		}
		m[name] = p
	}
	return m
}

// aliasSpec is a const or var declaration with a single name-like value.
type aliasSpec struct {
	f     *goFile
	name  *ast.Ident
	value ast.Expr // an *ast.Ident or a package-qualified *ast.SelectorExpr
	local bool     // declared inside a function
}

// key names a declared identifier: "importpath.Name", or for a
// function-local constant "importpath.Name@position".
func (a aliasSpec) key() string {
	k := a.f.pkg + "." + a.name.Name
	if a.local {
		k += "@" + a.f.fset.Position(a.name.Pos()).String()
	}
	return k
}

// ref returns the key of the declaration a's value names, or "" when it is
// not an identifier of the module or of internal/codes.
func (a aliasSpec) ref(imp map[string]string) string {
	switch v := a.value.(type) {
	case *ast.Ident:
		return a.f.pkg + "." + v.Name
	case *ast.SelectorExpr:
		x, ok := v.X.(*ast.Ident)
		if !ok {
			return ""
		}
		if p, ok := imp[x.Name]; ok && strings.HasPrefix(p, modulePath) {
			return p + "." + v.Sel.Name
		}
	}
	return ""
}

// unwrap strips parentheses and, in a constant, type conversions (a
// constant's initializer calls no function, so a one-argument call is a
// conversion such as ErrorCode(codes.X)).
func unwrap(e ast.Expr, isConst bool) ast.Expr {
	for {
		switch v := e.(type) {
		case *ast.ParenExpr:
			e = v.X
		case *ast.CallExpr:
			if !isConst || len(v.Args) != 1 {
				return e
			}
			e = v.Args[0]
		default:
			return e
		}
	}
}

// TestNoAliases enforces that internal/codes is the only place a code has
// a name or is written: no const (anywhere) or package-level var outside it
// is initialized with codes.X or with an identifier that resolves, through
// any chain of such declarations, to codes.X; no string literal of a
// non-test file equals a code value or quotes one as an SQL string
// ('etl_...'; statements splice the constant in instead). Everyone refers
// to codes.X directly. Prose that names a code (a comment, a metric's help
// text) is not a second name and is not checked.
//
// Exception: client/ (see moduleFiles). Test files are not checked: some
// deliberately pin the wire string (this package's table, the OpenAPI and
// client agreement tests, black-box HTTP tests).
func TestNoAliases(t *testing.T) {
	values := codeValues(t)
	names := map[string]bool{}
	for _, name := range values {
		names[name] = true
	}
	files := moduleFiles(t, moduleRoot(t))

	var specs []aliasSpec
	for i := range files {
		gf := &files[i]
		ast.Inspect(gf.file, func(n ast.Node) bool {
			if lit, ok := n.(*ast.BasicLit); ok && lit.Kind == token.STRING {
				if v, err := strconv.Unquote(lit.Value); err == nil {
					if name, ok := values[v]; ok {
						t.Errorf("%s: string literal %q; use codes.%s", gf.fset.Position(lit.Pos()), v, name)
					} else if strings.Contains(v, "'etl_") {
						for code, name := range values {
							if strings.Contains(v, "'"+code+"'") {
								t.Errorf("%s: SQL literal '%s'; splice in codes.%s", gf.fset.Position(lit.Pos()), code, name)
							}
						}
					}
				}
			}
			return true
		})
		collect := func(g *ast.GenDecl, local bool) {
			if g.Tok != token.CONST && (g.Tok != token.VAR || local) {
				return
			}
			for _, s := range g.Specs {
				vs := s.(*ast.ValueSpec)
				for j, name := range vs.Names {
					if j >= len(vs.Values) || name.Name == "_" {
						continue
					}
					v := unwrap(vs.Values[j], g.Tok == token.CONST)
					switch v.(type) {
					case *ast.Ident, *ast.SelectorExpr:
						specs = append(specs, aliasSpec{f: gf, name: name, value: v, local: local})
					}
				}
			}
		}
		for _, d := range gf.file.Decls {
			switch d := d.(type) {
			case *ast.GenDecl:
				collect(d, false)
			case *ast.FuncDecl:
				if d.Body == nil {
					continue
				}
				ast.Inspect(d.Body, func(n ast.Node) bool {
					if ds, ok := n.(*ast.DeclStmt); ok {
						collect(ds.Decl.(*ast.GenDecl), true)
					}
					return true
				})
			}
		}
	}

	// resolved maps a declaration's key to the codes constant it stands for.
	// A declaration's value is resolved as codes.X directly, or by a chain
	// through other declarations, iterated to a fixed point.
	resolved := map[string]string{}
	refs := make([]string, len(specs))
	for i, s := range specs {
		refs[i] = s.ref(imports(s.f.file))
	}
	for changed := true; changed; {
		changed = false
		for i, s := range specs {
			k := s.key()
			if _, done := resolved[k]; done || refs[i] == "" {
				continue
			}
			target := refs[i]
			if name, ok := strings.CutPrefix(target, codesPath+"."); ok {
				if names[name] {
					resolved[k] = name
					changed = true
				}
				continue
			}
			if name, ok := resolved[target]; ok {
				resolved[k] = name
				changed = true
			}
		}
	}
	var found []string
	for _, s := range specs {
		if name, ok := resolved[s.key()]; ok {
			found = append(found, fmt.Sprintf("%s: %s is an alias of codes.%s; refer to codes.%[3]s directly",
				s.f.fset.Position(s.name.Pos()), s.name.Name, name))
		}
	}
	sort.Strings(found)
	for _, f := range found {
		t.Error(f)
	}
}
