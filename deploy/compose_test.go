package deploy_test

import (
	"bytes"
	"encoding/json"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"sort"
	"strings"
	"testing"

	"github.com/santhosh-tekuri/jsonschema/v6"
	"go.yaml.in/yaml/v3"
)

// composeFile is ../docker-compose.yml decoded as generic YAML (anchors and
// merge keys resolved), the form the Compose schema describes.
func composeFile(t *testing.T) map[string]any {
	t.Helper()
	raw, err := os.ReadFile("../docker-compose.yml")
	if err != nil {
		t.Fatal(err)
	}
	var doc map[string]any
	if err := yaml.Unmarshal(raw, &doc); err != nil {
		t.Fatalf("docker-compose.yml: %v", err)
	}
	return doc
}

// TestComposeFileMatchesTheComposeSchema validates docker-compose.yml
// against the Compose Specification's JSON schema (testdata/README.md): the
// check `docker compose config` starts with, without a Docker engine.
func TestComposeFileMatchesTheComposeSchema(t *testing.T) {
	f, err := os.Open("testdata/compose-spec.json")
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	schemaDoc, err := jsonschema.UnmarshalJSON(f)
	if err != nil {
		t.Fatal(err)
	}
	c := jsonschema.NewCompiler()
	if err := c.AddResource("compose-spec.json", schemaDoc); err != nil {
		t.Fatal(err)
	}
	schema, err := c.Compile("compose-spec.json")
	if err != nil {
		t.Fatal(err)
	}
	// Through JSON, so numbers and maps have the types the validator expects.
	b, err := json.Marshal(composeFile(t))
	if err != nil {
		t.Fatal(err)
	}
	inst, err := jsonschema.UnmarshalJSON(bytes.NewReader(b))
	if err != nil {
		t.Fatal(err)
	}
	if err := schema.Validate(inst); err != nil {
		t.Fatalf("docker-compose.yml does not match the Compose schema:\n%v", err)
	}
}

type composeService struct {
	Command     any               `yaml:"command"`
	Environment map[string]string `yaml:"environment"`
	Volumes     []string          `yaml:"volumes"`
}

func composeServices(t *testing.T) (map[string]composeService, map[string]any) {
	t.Helper()
	raw, err := os.ReadFile("../docker-compose.yml")
	if err != nil {
		t.Fatal(err)
	}
	var doc struct {
		Services map[string]composeService `yaml:"services"`
		Volumes  map[string]any            `yaml:"volumes"`
	}
	if err := yaml.Unmarshal(raw, &doc); err != nil {
		t.Fatalf("docker-compose.yml: %v", err)
	}
	return doc.Services, doc.Volumes
}

// sqlRoleGrants returns, from the SQL files given, every role a
// "CREATE ROLE %I" array or statement names, and the roles each role is
// granted ("GRANT a, b TO login;").
func sqlRoleGrants(t *testing.T, files ...string) (roles map[string]bool, grants map[string][]string) {
	t.Helper()
	roles, grants = map[string]bool{}, map[string][]string{}
	roleName := regexp.MustCompile(`'(mightyetl_[a-z_]+)'`)
	grant := regexp.MustCompile(`(?m)^GRANT ((?:mightyetl_[a-z_]+(?:, )?)+) TO (mightyetl_[a-z_]+);`)
	for _, name := range files {
		raw, err := os.ReadFile(name)
		if err != nil {
			t.Fatal(err)
		}
		s := string(raw)
		// The role lists are the ARRAY[...] literals that CREATE ROLE loops over.
		for _, arr := range regexp.MustCompile(`(?s)ARRAY\[([^\]]*)\]`).FindAllStringSubmatch(s, -1) {
			for _, m := range roleName.FindAllStringSubmatch(arr[1], -1) {
				roles[m[1]] = true
			}
		}
		for _, m := range grant.FindAllStringSubmatch(s, -1) {
			grants[m[2]] = append(grants[m[2]], strings.Split(m[1], ", ")...)
		}
	}
	return roles, grants
}

// TestComposeProcessesUseLeastPrivilegeRoles: every mightyETL process in
// docker-compose.yml logs in as the login role of its kind, which
// deploy/postgres/compose-logins.sql creates and makes a member of exactly
// the group roles deploy/postgres/least-privilege.sql creates and grants to
// that kind of process; only the one-shot psql services use the superuser.
func TestComposeProcessesUseLeastPrivilegeRoles(t *testing.T) {
	groups, _ := sqlRoleGrants(t, "postgres/least-privilege.sql")
	logins, grants := sqlRoleGrants(t, "postgres/compose-logins.sql")
	want := map[string]struct {
		login  string
		groups []string
	}{
		"/usr/local/bin/etlctl migrate": {"mightyetl_migrator_login", []string{"mightyetl_migrator_role"}},
		"/usr/local/bin/intake":         {"mightyetl_intake_login", []string{"mightyetl_intake_role", "mightyetl_relay_role"}},
		"/usr/local/bin/worker":         {"mightyetl_worker_login", []string{"mightyetl_maintenance_role", "mightyetl_worker_role"}},
	}
	services, _ := composeServices(t)
	seen := map[string]bool{}
	for name, s := range services {
		cmd := commandLine(s.Command)
		if strings.Contains(cmd, "psql") {
			if s.Environment["PGUSER"] != "postgres" {
				t.Errorf("%s runs psql as %q, want the superuser postgres", name, s.Environment["PGUSER"])
			}
			continue
		}
		url, ok := s.Environment["DATABASE_URL"]
		if !ok {
			continue
		}
		var kind string
		for k := range want {
			if strings.HasPrefix(cmd, k) {
				kind = k
			}
		}
		if kind == "" {
			t.Errorf("%s connects to the database with command %q, which this test does not know", name, cmd)
			continue
		}
		seen[kind] = true
		w := want[kind]
		user, hasPassword := urlUser(url)
		if user != w.login {
			t.Errorf("%s (%s) logs in as %q, want %s", name, kind, user, w.login)
		}
		if hasPassword || s.Environment["PGPASSFILE"] == "" {
			t.Errorf("%s: the password belongs in PGPASSFILE, not in DATABASE_URL", name)
		}
		if !logins[w.login] {
			t.Errorf("compose-logins.sql does not create %s", w.login)
		}
		got := slices.Clone(grants[w.login])
		sort.Strings(got)
		if !slices.Equal(got, w.groups) {
			t.Errorf("compose-logins.sql grants %s %v, want %v", w.login, got, w.groups)
		}
		for _, g := range w.groups {
			if !groups[g] {
				t.Errorf("least-privilege.sql does not create the group role %s (of %s)", g, name)
			}
		}
	}
	for k := range want {
		if !seen[k] {
			t.Errorf("no compose service runs %s", k)
		}
	}
}

// TestComposeMountsExist: every bind mount's source exists in the
// repository, every named volume is declared, and every path under a mount
// that a service's command or settings name exists in what is mounted
// there, or (the secrets volume) is written by the secrets service.
func TestComposeMountsExist(t *testing.T) {
	services, volumes := composeServices(t)
	secretsCmd := commandLine(services["secrets"].Command)
	if secretsCmd == "" {
		t.Fatal("no secrets service")
	}
	for name, s := range services {
		for _, v := range s.Volumes {
			parts := strings.Split(v, ":")
			if len(parts) < 2 {
				t.Errorf("%s: volume %q has no target", name, v)
				continue
			}
			src, dst := parts[0], parts[1]
			refs := pathsUnder(dst, commandLine(s.Command), s.Environment)
			if strings.HasPrefix(src, ".") || strings.HasPrefix(src, "/") {
				host := filepath.Join("..", filepath.FromSlash(src))
				if _, err := os.Stat(host); err != nil {
					t.Errorf("%s: bind mount source %s does not exist in the repository", name, src)
					continue
				}
				for _, r := range refs {
					if _, err := os.Stat(filepath.Join(host, filepath.FromSlash(r))); err != nil {
						t.Errorf("%s names %s/%s, but %s/%s does not exist", name, dst, r, src, r)
					}
				}
				continue
			}
			if _, ok := volumes[src]; !ok {
				t.Errorf("%s: named volume %q is not declared under volumes", name, src)
			}
			if src == "secrets" {
				for _, r := range refs {
					if !strings.Contains(secretsCmd, "put "+r+" ") {
						t.Errorf("%s names %s/%s, which the secrets service does not write", name, dst, r)
					}
				}
			}
		}
	}
}

// pathsUnder returns the paths below dir that cmd or env values name,
// relative to dir.
func pathsUnder(dir, cmd string, env map[string]string) []string {
	var out []string
	texts := []string{cmd}
	for _, v := range env {
		texts = append(texts, v)
	}
	re := regexp.MustCompile(regexp.QuoteMeta(dir) + `/([A-Za-z0-9._/-]+)`)
	for _, s := range texts {
		for _, m := range re.FindAllStringSubmatch(s, -1) {
			if !slices.Contains(out, m[1]) {
				out = append(out, m[1])
			}
		}
	}
	return out
}

// commandLine joins a compose command (a string or a list) with spaces.
func commandLine(c any) string {
	switch v := c.(type) {
	case string:
		return v
	case []any:
		var parts []string
		for _, p := range v {
			if s, ok := p.(string); ok {
				parts = append(parts, s)
			}
		}
		return strings.Join(parts, " ")
	}
	return ""
}

// urlUser is the user of a postgres:// URL ("" when it names none) and
// whether the URL carries a password.
func urlUser(u string) (user string, hasPassword bool) {
	rest, ok := strings.CutPrefix(u, "postgres://")
	if !ok {
		return "", false
	}
	userinfo, _, ok := strings.Cut(rest, "@")
	if !ok {
		return "", false
	}
	user, _, hasPassword = strings.Cut(userinfo, ":")
	return user, hasPassword
}
