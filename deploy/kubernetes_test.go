package deploy_test

import (
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"math"
	"net"
	"net/url"
	"os"
	"path"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/mightyetl/mightyetl/internal/app"
	"github.com/mightyetl/mightyetl/internal/config"
	"github.com/yannh/kubeconform/pkg/resource"
	"github.com/yannh/kubeconform/pkg/validator"
	"go.yaml.in/yaml/v3"
	"sigs.k8s.io/kustomize/api/krusty"
	"sigs.k8s.io/kustomize/kyaml/filesys"
)

// kubernetesVersion is the Kubernetes release whose JSON schemas
// kubernetes/testdata/schemas holds (see its README.md).
const kubernetesVersion = "1.31.0"

// shutdownMargin is the least time a pod's terminationGracePeriodSeconds
// leaves after its preStop pause and MIGHTYETL_SHUTDOWN_GRACE_PERIOD: for
// releasing the cancelled claims, closing pools and flushing traces before
// the kubelet's SIGKILL.
const shutdownMargin = 10 * time.Second

// k8sObject is one rendered Kubernetes object as generic YAML.
type k8sObject map[string]any

func (o k8sObject) kind() string { return str(o["kind"]) }
func (o k8sObject) name() string { return str(dig(o, "metadata", "name")) }
func (o k8sObject) id() string   { return o.kind() + "/" + o.name() }

// dig follows keys (string for maps, int for lists) and returns nil when a
// step is missing.
func dig(v any, keys ...any) any {
	if o, ok := v.(k8sObject); ok {
		v = map[string]any(o)
	}
	for _, k := range keys {
		switch k := k.(type) {
		case string:
			m, ok := v.(map[string]any)
			if !ok {
				return nil
			}
			v = m[k]
		case int:
			l, ok := v.([]any)
			if !ok || k >= len(l) {
				return nil
			}
			v = l[k]
		}
	}
	return v
}

func str(v any) string {
	s, _ := v.(string)
	return s
}

func list(v any) []any {
	l, _ := v.([]any)
	return l
}

func num(v any) int {
	switch n := v.(type) {
	case int:
		return n
	case int64:
		return int(n)
	case float64:
		return int(n)
	}
	return -1
}

// kustomizations lists every kustomization under kubernetes/ (overlays and
// the base; components are built through the overlays that use them).
func kustomizations(t *testing.T) []string {
	t.Helper()
	var dirs []string
	err := filepath.WalkDir("kubernetes", func(p string, d fs.DirEntry, err error) error {
		if err != nil || d.IsDir() || d.Name() != "kustomization.yaml" {
			return err
		}
		var k struct {
			Kind string `yaml:"kind"`
		}
		raw, err := os.ReadFile(p)
		if err != nil {
			return err
		}
		if err := yaml.Unmarshal(raw, &k); err != nil {
			return fmt.Errorf("%s: %w", p, err)
		}
		if k.Kind == "Kustomization" {
			dirs = append(dirs, filepath.Dir(p))
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{"kubernetes/base", "kubernetes/overlays/example"} {
		if !slices.Contains(dirs, want) {
			t.Fatalf("no kustomization in %s (found %q)", want, dirs)
		}
	}
	return dirs
}

// components lists the kustomize components under kubernetes/components.
func components(t *testing.T) []string {
	t.Helper()
	entries, err := os.ReadDir("kubernetes/components")
	if err != nil {
		t.Fatal(err)
	}
	var out []string
	for _, e := range entries {
		if e.IsDir() {
			out = append(out, filepath.Join("kubernetes/components", e.Name()))
		}
	}
	return out
}

// render runs `kustomize build dir` through kustomize's Go API (no binary,
// no network) and returns the objects and each one's YAML.
func render(t *testing.T, dir string) ([]k8sObject, [][]byte) {
	t.Helper()
	m, err := krusty.MakeKustomizer(krusty.MakeDefaultOptions()).Run(filesys.MakeFsOnDisk(), dir)
	if err != nil {
		t.Fatalf("kustomize build %s: %v", dir, err)
	}
	var objs []k8sObject
	var docs [][]byte
	for _, r := range m.Resources() {
		obj, err := r.Map()
		if err != nil {
			t.Fatalf("%s: %v", dir, err)
		}
		y, err := r.AsYAML()
		if err != nil {
			t.Fatalf("%s: %v", dir, err)
		}
		objs = append(objs, obj)
		docs = append(docs, y)
	}
	return objs, docs
}

// renderAll renders every kustomization, by directory.
func renderAll(t *testing.T) map[string][]k8sObject {
	t.Helper()
	out := map[string][]k8sObject{}
	for _, d := range kustomizations(t) {
		out[d], _ = render(t, d)
	}
	return out
}

func byKind(objs []k8sObject, kind string) []k8sObject {
	var out []k8sObject
	for _, o := range objs {
		if o.kind() == kind {
			out = append(out, o)
		}
	}
	return out
}

func find(objs []k8sObject, kind, name string) k8sObject {
	for _, o := range objs {
		if o.kind() == kind && o.name() == name {
			return o
		}
	}
	return nil
}

// schemaValidator is kubeconform's validator over the vendored schemas
// only: a kind without a schema there is an error, not a skip.
func schemaValidator(t *testing.T) validator.Validator {
	t.Helper()
	root, err := filepath.Abs("kubernetes/testdata/schemas")
	if err != nil {
		t.Fatal(err)
	}
	v, err := validator.New([]string{
		root + "/{{ .NormalizedKubernetesVersion }}-standalone{{ .StrictSuffix }}/{{ .ResourceKind }}{{ .KindSuffix }}.json",
		root + "/crds/{{ .Group }}/{{ .ResourceKind }}_{{ .ResourceAPIVersion }}.json",
	}, validator.Opts{KubernetesVersion: kubernetesVersion, Strict: true})
	if err != nil {
		t.Fatal(err)
	}
	return v
}

// TestKubernetesManifestsMatchTheSchemas builds the base and every overlay
// with kustomize and validates every rendered object with kubeconform
// against the Kubernetes 1.31 JSON schemas (strict: unknown fields are
// errors) and the KEDA and Prometheus Operator CRD schemas vendored in
// kubernetes/testdata/schemas; so is secrets.example.yaml. Every component
// is used by some overlay, so every file is rendered.
func TestKubernetesManifestsMatchTheSchemas(t *testing.T) {
	v := schemaValidator(t)
	used := map[string]bool{}
	check := func(where string, doc []byte) {
		r := v.ValidateResource(resource.Resource{Path: where, Bytes: doc})
		if r.Status != validator.Valid {
			sig, _ := r.Resource.Signature()
			msg := fmt.Sprint(r.Err)
			for _, e := range r.ValidationErrors {
				msg += "\n\t" + e.Path + ": " + e.Msg
			}
			t.Errorf("%s: %v %s: status %d: %s", where, sig.Kind, sig.Name, r.Status, msg)
		}
	}
	for _, dir := range kustomizations(t) {
		objs, docs := render(t, dir)
		if len(objs) == 0 {
			t.Errorf("%s renders nothing", dir)
		}
		for _, doc := range docs {
			check(dir, doc)
		}
		raw, err := os.ReadFile(filepath.Join(dir, "kustomization.yaml"))
		if err != nil {
			t.Fatal(err)
		}
		var k struct {
			Components []string `yaml:"components"`
		}
		if err := yaml.Unmarshal(raw, &k); err != nil {
			t.Fatal(err)
		}
		for _, c := range k.Components {
			used[filepath.Clean(filepath.Join(dir, c))] = true
		}
	}
	for _, c := range components(t) {
		if !used[c] {
			t.Errorf("component %s is used by no overlay, so no test renders it", c)
		}
	}
	raw, err := os.ReadFile("kubernetes/secrets.example.yaml")
	if err != nil {
		t.Fatal(err)
	}
	for _, doc := range strings.Split(string(raw), "\n---\n") {
		check("kubernetes/secrets.example.yaml", []byte(doc))
	}
}

// TestKubernetesSchemaValidationRejects keeps the schema check honest: a
// Deployment with an unknown field, one with a wrongly typed field and a
// ScaledObject without its target are each refused.
func TestKubernetesSchemaValidationRejects(t *testing.T) {
	v := schemaValidator(t)
	for name, doc := range map[string]string{
		"unknown field": `apiVersion: apps/v1
kind: Deployment
metadata: {name: x}
spec:
  selector: {matchLabels: {a: b}}
  template:
    metadata: {labels: {a: b}}
    spec:
      containers: [{name: c, image: i, livenessProbes: {}}]
`,
		"wrong type": `apiVersion: apps/v1
kind: Deployment
metadata: {name: x}
spec:
  replicas: "two"
  selector: {matchLabels: {a: b}}
  template:
    metadata: {labels: {a: b}}
    spec:
      containers: [{name: c, image: i}]
`,
		"CRD without its required field": `apiVersion: keda.sh/v1alpha1
kind: ScaledObject
metadata: {name: x}
spec:
  triggers: [{type: prometheus, metadata: {query: up, threshold: "1"}}]
`,
	} {
		if r := v.ValidateResource(resource.Resource{Path: name, Bytes: []byte(doc)}); r.Status != validator.Invalid {
			t.Errorf("%s: status %d (error %v), want Invalid", name, r.Status, r.Err)
		}
	}
}

// exampleSecrets reads kubernetes/secrets.example.yaml: secret name to its
// keys and placeholder values.
func exampleSecrets(t *testing.T) map[string]map[string]string {
	t.Helper()
	raw, err := os.ReadFile("kubernetes/secrets.example.yaml")
	if err != nil {
		t.Fatal(err)
	}
	out := map[string]map[string]string{}
	dec := yaml.NewDecoder(strings.NewReader(string(raw)))
	for {
		var s struct {
			Kind     string                `yaml:"kind"`
			Metadata struct{ Name string } `yaml:"metadata"`
			Data     map[string]string     `yaml:"data"`
			String   map[string]string     `yaml:"stringData"`
		}
		if err := dec.Decode(&s); errors.Is(err, io.EOF) {
			break
		} else if err != nil {
			t.Fatalf("secrets.example.yaml: %v", err)
		}
		if s.Kind != "Secret" || len(s.Data) > 0 {
			t.Fatalf("secrets.example.yaml: %s %s: want Secrets with stringData placeholders only", s.Kind, s.Metadata.Name)
		}
		out[s.Metadata.Name] = s.String
	}
	if len(out) == 0 {
		t.Fatal("secrets.example.yaml holds no Secret")
	}
	return out
}

// workload is one container of a rendered Deployment or Job with what it
// sees: its binary, its environment (ConfigMaps resolved, secret
// references kept apart) and its secret volumes by mount path.
type workload struct {
	dir, owner string // kustomization, Kind/name
	pod        map[string]any
	container  map[string]any
	binary     string            // base name of command[0]
	env        map[string]string // literal values and ConfigMap values
	secretEnv  map[string][2]string
	mounts     map[string]string // mount path -> secret name
	configKeys map[string]string // ConfigMap-provided key -> ConfigMap name
}

func workloads(t *testing.T, dir string, objs []k8sObject) []workload {
	t.Helper()
	var out []workload
	for _, o := range objs {
		if o.kind() != "Deployment" && o.kind() != "Job" {
			continue
		}
		pod, _ := dig(o, "spec", "template", "spec").(map[string]any)
		vols := map[string]string{}
		for _, v := range list(pod["volumes"]) {
			if s := str(dig(v, "secret", "secretName")); s != "" {
				vols[str(dig(v, "name"))] = s
			}
		}
		for _, c := range list(pod["containers"]) {
			cm, _ := c.(map[string]any)
			w := workload{dir: dir, owner: o.id(), pod: pod, container: cm, binary: path.Base(str(dig(cm, "command", 0))),
				env: map[string]string{}, secretEnv: map[string][2]string{}, mounts: map[string]string{}, configKeys: map[string]string{}}
			for _, ef := range list(cm["envFrom"]) {
				name := str(dig(ef, "configMapRef", "name"))
				if name == "" {
					t.Errorf("%s %s: envFrom other than a ConfigMap: %v", dir, o.id(), ef)
					continue
				}
				cfg := find(objs, "ConfigMap", name)
				if cfg == nil {
					t.Errorf("%s %s: envFrom ConfigMap %s is not rendered", dir, o.id(), name)
					continue
				}
				data, _ := cfg["data"].(map[string]any)
				for k, v := range data {
					w.env[k] = str(v)
					w.configKeys[k] = name
				}
			}
			for _, e := range list(cm["env"]) {
				name := str(dig(e, "name"))
				if ref := dig(e, "valueFrom", "secretKeyRef"); ref != nil {
					w.secretEnv[name] = [2]string{str(dig(ref, "name")), str(dig(ref, "key"))}
					continue
				}
				if dig(e, "valueFrom") != nil {
					t.Errorf("%s %s: env %s from something other than a Secret key", dir, o.id(), name)
				}
				w.env[name] = str(dig(e, "value"))
			}
			for _, m := range list(cm["volumeMounts"]) {
				if s, ok := vols[str(dig(m, "name"))]; ok {
					w.mounts[str(dig(m, "mountPath"))] = s
				}
			}
			out = append(out, w)
		}
	}
	return out
}

// loadConfig loads the binary's configuration (internal/config, exactly as
// the binary does) from the environment the container would see: its
// ConfigMap values, the secret environment variables with a test value of
// the right shape, and the files under its secret mounts written to a
// temporary directory (the paths rewritten to it). It returns the parsed
// settings' provenance and the error, if any.
func loadConfig(t *testing.T, w workload) (any, []config.Setting, error) {
	t.Helper()
	tmp := t.TempDir()
	env := map[string]string{}
	for k, v := range w.env {
		env[k] = v
		for mount, secret := range w.mounts {
			if rel, ok := strings.CutPrefix(v, mount+"/"); ok {
				p := filepath.Join(tmp, secret, rel)
				if err := os.MkdirAll(filepath.Dir(p), 0o700); err != nil {
					t.Fatal(err)
				}
				key := make([]byte, 32)
				_, _ = rand.Read(key)
				if err := os.WriteFile(p, []byte(hex.EncodeToString(key)), 0o600); err != nil {
					t.Fatal(err)
				}
				env[k] = p
			}
		}
	}
	for k := range w.secretEnv {
		if strings.HasSuffix(k, "_URL") {
			env[k] = "postgres://mightyetl_test@db.invalid:5432/mightyetl"
			continue
		}
		env[k] = "test-value"
	}
	getenv := func(k string) string { return env[k] }
	switch w.binary {
	case "intake":
		c, l, err := config.LoadIntake(nil, getenv)
		return c, l.Provenance(), err
	case "worker":
		c, l, err := config.LoadWorker(nil, getenv)
		return c, l.Provenance(), err
	}
	return nil, nil, nil
}

// TestKubernetesSettingsLoad loads each intake and worker container's
// configuration from its rendered environment through internal/config:
// every value validates, every ConfigMap key is a setting of that binary
// (a misspelt one would be ignored silently), the listen address is not
// loopback and its port is the container port the probes use, /healthz and
// /readyz are the liveness and readiness paths, an intake behind a
// transaction pooler has its direct URL for LISTEN, and the pod's
// terminationGracePeriodSeconds covers the preStop pause plus the loaded
// MIGHTYETL_SHUTDOWN_GRACE_PERIOD plus shutdownMargin.
func TestKubernetesSettingsLoad(t *testing.T) {
	seen := map[string]bool{}
	for dir, objs := range renderAll(t) {
		for _, w := range workloads(t, dir, objs) {
			if w.binary != "intake" && w.binary != "worker" {
				continue
			}
			seen[w.binary] = true
			where := dir + " " + w.owner
			cfg, prov, err := loadConfig(t, w)
			if err != nil {
				t.Errorf("%s: the %s rejects its configuration: %v", where, w.binary, err)
				continue
			}
			known := map[string]bool{}
			for _, s := range prov {
				known[s.Name] = true
				if s.Value == "(set)" || s.Value == "(unset)" { // a secret setting: also NAME_FILE
					known[s.Name+"_FILE"] = true
				}
			}
			for k := range w.env {
				if !known[k] {
					t.Errorf("%s: %s (ConfigMap %s) is not a setting of the %s", where, k, w.configKeys[k], w.binary)
				}
			}

			var addr string
			var grace time.Duration
			switch c := cfg.(type) {
			case config.Intake:
				addr, grace = c.HTTPAddr, c.ShutdownGrace
			case config.Worker:
				addr, grace = c.MetricsAddr, c.ShutdownGrace
			}
			if w.binary == "intake" && w.env["MIGHTYETL_DATABASE_POOLER"] == "transaction" {
				if _, ok := w.secretEnv["MIGHTYETL_DATABASE_DIRECT_URL"]; !ok {
					t.Errorf("%s: through a transaction pooler without MIGHTYETL_DATABASE_DIRECT_URL from a Secret (the outbox relay could not LISTEN)", where)
				}
			}
			if _, ok := w.env["MIGHTYETL_SHUTDOWN_GRACE_PERIOD"]; !ok {
				t.Errorf("%s: MIGHTYETL_SHUTDOWN_GRACE_PERIOD is not set explicitly (the pod's grace period is derived from it)", where)
			}
			host, port, err := net.SplitHostPort(addr)
			if err != nil {
				t.Errorf("%s: listen address %q: %v", where, addr, err)
				continue
			}
			if host != "0.0.0.0" && host != "" && host != "::" {
				t.Errorf("%s: listens on %s, unreachable for the kubelet's probes", where, addr)
			}
			portName := ""
			for _, p := range list(w.container["ports"]) {
				if strconv.Itoa(num(dig(p, "containerPort"))) == port {
					portName = str(dig(p, "name"))
				}
			}
			if portName == "" {
				t.Errorf("%s: no container port %s (the listen address %s)", where, port, addr)
			}
			for probe, want := range map[string]string{"startupProbe": "/healthz", "livenessProbe": "/healthz", "readinessProbe": "/readyz"} {
				get := dig(w.container, probe, "httpGet")
				if get == nil {
					t.Errorf("%s: no %s httpGet", where, probe)
					continue
				}
				if p := str(dig(get, "path")); p != want {
					t.Errorf("%s: %s path %q, want %s", where, probe, p, want)
				}
				if p := dig(get, "port"); p != portName && strconv.Itoa(num(p)) != port {
					t.Errorf("%s: %s port %v, want %s (%s, where %s listens)", where, probe, p, portName, port, w.binary)
				}
			}

			preStop := time.Duration(max(0, num(dig(w.container, "lifecycle", "preStop", "sleep", "seconds")))) * time.Second
			tgps := num(w.pod["terminationGracePeriodSeconds"])
			if tgps < 0 {
				t.Errorf("%s: terminationGracePeriodSeconds is not set explicitly", where)
			} else if need := preStop + grace + shutdownMargin; time.Duration(tgps)*time.Second < need {
				t.Errorf("%s: terminationGracePeriodSeconds %d < preStop %s + MIGHTYETL_SHUTDOWN_GRACE_PERIOD %s + margin %s",
					where, tgps, preStop, grace, shutdownMargin)
			}
		}
	}
	if !seen["intake"] || !seen["worker"] {
		t.Errorf("rendered containers of intake %v, worker %v; want both", seen["intake"], seen["worker"])
	}
}

// TestKubernetesSecretsComeFromSecrets: no rendered manifest carries a
// Secret or a credential. Every Secret a container refers to (a key in an
// env var, a mounted volume) is one of kubernetes/secrets.example.yaml with
// that key, every file setting under a secret mount names a key of that
// Secret, no ConfigMap holds a secret setting of either binary, a
// DATABASE_URL or a URL with a password, and each process kind logs in as
// its own least-privilege role, as docker-compose.yml does.
func TestKubernetesSecretsComeFromSecrets(t *testing.T) {
	secrets := exampleSecrets(t)
	// The database URLs may hold a password: Secrets only.
	secretSettings := map[string]bool{"DATABASE_URL": true, "MIGHTYETL_DATABASE_DIRECT_URL": true}
	for _, load := range []func() []config.Setting{
		func() []config.Setting {
			_, l, _ := config.LoadIntake(nil, func(string) string { return "" })
			return l.Provenance()
		},
		func() []config.Setting {
			_, l, _ := config.LoadWorker(nil, func(string) string { return "" })
			return l.Provenance()
		},
	} {
		for _, s := range load() {
			if s.Value == "(unset)" {
				secretSettings[s.Name] = true
			}
		}
	}
	if !secretSettings["MIGHTYETL_PRINCIPAL_HASH_KEY"] {
		t.Fatal("MIGHTYETL_PRINCIPAL_HASH_KEY is not reported as a secret setting; the check below would be empty")
	}
	logins := map[string]string{"intake": "mightyetl_intake_login", "worker": "mightyetl_worker_login", "etlctl": "mightyetl_migrator_login"}
	loginRoles, _ := sqlRoleGrants(t, "postgres/compose-logins.sql")
	for dir, objs := range renderAll(t) {
		for _, o := range objs {
			switch o.kind() {
			case "Secret":
				t.Errorf("%s renders %s: Secrets come from outside the manifests (secrets.example.yaml)", dir, o.id())
			case "ConfigMap":
				data, _ := o["data"].(map[string]any)
				for k, v := range data {
					if secretSettings[k] {
						t.Errorf("%s %s holds the secret setting %s", dir, o.id(), k)
					}
					if u, err := url.Parse(str(v)); err == nil && u.User != nil {
						if _, hasPassword := u.User.Password(); hasPassword {
							t.Errorf("%s %s: %s is a URL with a password", dir, o.id(), k)
						}
					}
				}
			}
		}
		for _, w := range workloads(t, dir, objs) {
			where := dir + " " + w.owner
			for env, ref := range w.secretEnv {
				keys, ok := secrets[ref[0]]
				if _, hasKey := keys[ref[1]]; !ok || !hasKey {
					t.Errorf("%s: %s from Secret %s key %s, which secrets.example.yaml does not list", where, env, ref[0], ref[1])
				}
			}
			for mount, secret := range w.mounts {
				if _, ok := secrets[secret]; !ok {
					t.Errorf("%s: mounts Secret %s at %s, which secrets.example.yaml does not list", where, secret, mount)
				}
			}
			for k, v := range w.env {
				for mount, secret := range w.mounts {
					if rel, ok := strings.CutPrefix(v, mount+"/"); ok {
						if _, ok := secrets[secret][rel]; !ok {
							t.Errorf("%s: %s=%s names no key of Secret %s", where, k, v, secret)
						}
					}
				}
			}
			ref, ok := w.secretEnv["DATABASE_URL"]
			if !ok {
				t.Errorf("%s: DATABASE_URL does not come from a Secret", where)
				continue
			}
			u, err := url.Parse(secrets[ref[0]][ref[1]])
			if err != nil || u.User == nil {
				t.Errorf("%s: the example DATABASE_URL of Secret %s names no user", where, ref[0])
				continue
			}
			if want := logins[w.binary]; u.User.Username() != want || !loginRoles[want] {
				t.Errorf("%s: the %s logs in as %q (Secret %s), want %s of deploy/postgres/compose-logins.sql", where, w.binary, u.User.Username(), ref[0], want)
			}
		}
	}
}

// TestKubernetesWorkloadShape checks each rendered pod: requests (CPU and
// memory) and a memory limit on every container, the restricted security
// context (non-root, read-only root file system, no privilege escalation,
// every capability dropped, RuntimeDefault seccomp), no service account
// token and no service-link variables; the image is the Dockerfile's
// (`make image` tags mightyetl:VERSION), tagged by every overlay and never
// :latest; every Deployment has a PodDisruptionBudget that selects its pods
// and no other and a RollingUpdate strategy, and every Service selects the pods of one Deployment and
// targets a named port they have.
func TestKubernetesWorkloadShape(t *testing.T) {
	mk, err := os.ReadFile("../Makefile")
	if err != nil {
		t.Fatal(err)
	}
	m := regexp.MustCompile(`docker build .* -t ([a-z0-9./-]+):\$\(VERSION\)`).FindSubmatch(mk)
	if m == nil {
		t.Fatal("Makefile: no `docker build ... -t NAME:$(VERSION)` line")
	}
	imageName := string(m[1])
	for dir, objs := range renderAll(t) {
		base := dir == "kubernetes/base"
		for _, w := range workloads(t, dir, objs) {
			where := dir + " " + w.owner + " " + str(w.container["name"])
			for _, r := range []string{"requests.cpu", "requests.memory", "limits.memory"} {
				a, b, _ := strings.Cut(r, ".")
				if str(dig(w.container, "resources", a, b)) == "" {
					t.Errorf("%s: no resources.%s", where, r)
				}
			}
			sc := w.container["securityContext"]
			if dig(sc, "runAsNonRoot") != true && dig(w.pod, "securityContext", "runAsNonRoot") != true {
				t.Errorf("%s: runAsNonRoot not set", where)
			}
			if dig(sc, "readOnlyRootFilesystem") != true || dig(sc, "allowPrivilegeEscalation") != false {
				t.Errorf("%s: want readOnlyRootFilesystem true and allowPrivilegeEscalation false", where)
			}
			if caps := list(dig(sc, "capabilities", "drop")); len(caps) != 1 || caps[0] != "ALL" {
				t.Errorf("%s: capabilities drop %v, want [ALL]", where, caps)
			}
			if str(dig(w.pod, "securityContext", "seccompProfile", "type")) != "RuntimeDefault" {
				t.Errorf("%s: no RuntimeDefault seccomp profile", where)
			}
			if w.pod["automountServiceAccountToken"] != false || w.pod["enableServiceLinks"] != false {
				t.Errorf("%s: want automountServiceAccountToken and enableServiceLinks false", where)
			}
			img := str(w.container["image"])
			name, tag, tagged := strings.Cut(img, ":")
			switch {
			case base && img != imageName:
				t.Errorf("%s: image %q, want the Dockerfile's %q for overlays to set", where, img, imageName)
			case !base && (!tagged || tag == "latest" || tag == ""):
				t.Errorf("%s: image %q: an overlay pins a tag", where, img)
			case !base && path.Base(name) != imageName:
				t.Errorf("%s: image %q is not %s", where, img, imageName)
			}
			if !strings.HasPrefix(str(dig(w.container, "command", 0)), "/usr/local/bin/") {
				t.Errorf("%s: command %v does not run a binary of the image (/usr/local/bin)", where, dig(w.container, "command"))
			}
		}

		pdbs := byKind(objs, "PodDisruptionBudget")
		for _, d := range byKind(objs, "Deployment") {
			labels, _ := dig(d, "spec", "template", "metadata", "labels").(map[string]any)
			if str(dig(d, "spec", "strategy", "type")) != "RollingUpdate" {
				t.Errorf("%s %s: strategy %v, want RollingUpdate", dir, d.id(), dig(d, "spec", "strategy", "type"))
			}
			var covering []string
			for _, p := range pdbs {
				if selects(dig(p, "spec", "selector", "matchLabels"), labels) {
					covering = append(covering, p.name())
				}
			}
			if len(covering) != 1 {
				t.Errorf("%s %s: its pods are selected by PodDisruptionBudgets %q, want exactly one", dir, d.id(), covering)
			}
		}
		for _, p := range append(pdbs, byKind(objs, "Service")...) {
			sel := dig(p, "spec", "selector", "matchLabels")
			if p.kind() == "Service" {
				sel = dig(p, "spec", "selector")
			}
			var matched []k8sObject
			for _, d := range byKind(objs, "Deployment") {
				if selects(sel, dig(d, "spec", "template", "metadata", "labels")) {
					matched = append(matched, d)
				}
			}
			if len(matched) != 1 {
				t.Errorf("%s %s selects %d Deployments' pods, want 1", dir, p.id(), len(matched))
				continue
			}
			if p.kind() != "Service" {
				continue
			}
			for _, sp := range list(dig(p, "spec", "ports")) {
				target := str(dig(sp, "targetPort"))
				found := false
				for _, cp := range list(dig(matched[0], "spec", "template", "spec", "containers", 0, "ports")) {
					found = found || str(dig(cp, "name")) == target
				}
				if !found {
					t.Errorf("%s %s: targetPort %q is no named port of %s", dir, p.id(), target, matched[0].id())
				}
			}
		}
	}
}

// selects reports whether the label selector sel (a non-empty map) matches
// labels.
func selects(sel, labels any) bool {
	s, _ := sel.(map[string]any)
	l, _ := labels.(map[string]any)
	if len(s) == 0 {
		return false
	}
	for k, v := range s {
		if l[k] != v {
			return false
		}
	}
	return true
}

// TestKubernetesMigrationJob: the Job runs `etlctl migrate up` once to
// completion (restartPolicy Never, a bounded backoff and deadline) in every
// rendered kustomization that has Deployments.
func TestKubernetesMigrationJob(t *testing.T) {
	for dir, objs := range renderAll(t) {
		jobs := byKind(objs, "Job")
		if len(jobs) != 1 {
			t.Errorf("%s: %d Jobs, want the migration Job", dir, len(jobs))
			continue
		}
		j := jobs[0]
		cmd := fmt.Sprint(dig(j, "spec", "template", "spec", "containers", 0, "command"))
		if cmd != "[/usr/local/bin/etlctl migrate up]" {
			t.Errorf("%s %s: command %s, want etlctl migrate up", dir, j.id(), cmd)
		}
		if str(dig(j, "spec", "template", "spec", "restartPolicy")) != "Never" || num(dig(j, "spec", "backoffLimit")) < 0 || num(dig(j, "spec", "activeDeadlineSeconds")) <= 0 {
			t.Errorf("%s %s: want restartPolicy Never, a backoffLimit and an activeDeadlineSeconds", dir, j.id())
		}
	}
}

// autoscalingQueries returns the PromQL of every KEDA prometheus trigger
// and the external metric name of every HorizontalPodAutoscaler rendered
// by any kustomization, for TestQueriedMetricsAreExported.
func autoscalingQueries(t *testing.T) []query {
	t.Helper()
	var qs []query
	for dir, objs := range renderAll(t) {
		for _, o := range byKind(objs, "ScaledObject") {
			for _, tr := range list(dig(o, "spec", "triggers")) {
				if str(dig(tr, "type")) == "prometheus" {
					qs = append(qs, query{where: dir + " " + o.id(), expr: str(dig(tr, "metadata", "query"))})
				}
			}
		}
		for _, o := range byKind(objs, "HorizontalPodAutoscaler") {
			for _, m := range list(dig(o, "spec", "metrics")) {
				if n := str(dig(m, "external", "metric", "name")); n != "" {
					qs = append(qs, query{where: dir + " " + o.id(), expr: n})
				}
			}
		}
	}
	return qs
}

// TestKubernetesAutoscaling: the base autoscales nothing (it needs no CRD);
// each ScaledObject or HorizontalPodAutoscaler scales the worker
// Deployment, whose replicas field the component removed so that an apply
// does not fight the autoscaler, and queries one metric name
// (TestQueriedMetricsAreExported proves the workers or the intakes export
// it); the scale limit stays within the replicas the connection budget was
// sized for.
func TestKubernetesAutoscaling(t *testing.T) {
	seen := 0
	for dir, objs := range renderAll(t) {
		scalers := append(byKind(objs, "ScaledObject"), byKind(objs, "HorizontalPodAutoscaler")...)
		if dir == "kubernetes/base" && len(scalers) > 0 {
			t.Errorf("the base renders %s: autoscaling belongs in a component", scalers[0].id())
		}
		for _, s := range scalers {
			seen++
			target := str(dig(s, "spec", "scaleTargetRef", "name"))
			d := find(objs, "Deployment", target)
			if target != "mightyetl-worker" || d == nil {
				t.Errorf("%s %s scales %q, want the rendered mightyetl-worker Deployment", dir, s.id(), target)
				continue
			}
			if r, ok := dig(d, "spec").(map[string]any)["replicas"]; ok {
				t.Errorf("%s %s: the autoscaled Deployment still sets replicas %v", dir, d.id(), r)
			}
			hi := num(dig(s, "spec", "maxReplicaCount"))
			if s.kind() == "HorizontalPodAutoscaler" {
				hi = num(dig(s, "spec", "maxReplicas"))
			}
			if hi < 1 || hi > 8 {
				t.Errorf("%s %s: at most %d replicas; the connection budget's defaults hold 8 workers", dir, s.id(), hi)
			}
		}
	}
	if seen == 0 {
		t.Fatal("no overlay renders an autoscaler")
	}
	for _, q := range autoscalingQueries(t) {
		if names := metricNames(q.expr); len(names) != 1 || !strings.HasPrefix(names[0], "mightyetl_") {
			t.Errorf("%s: %q queries %q, want one mightyETL metric", q.where, q.expr, names)
		}
	}
}

// serverConnectionBudget is what a fleet may open of PostgreSQL's default
// max_connections (100) after the reserve of
// docs/operations/connections.md (superuser slots, a migration, etlctl,
// monitoring): 90.
const serverConnectionBudget = 90

// rollingSurge resolves a Deployment's maxSurge for replicas pods as the
// Deployment controller does (a percentage rounds up).
func rollingSurge(d k8sObject, replicas int) int {
	v := dig(d, "spec", "strategy", "rollingUpdate", "maxSurge")
	if p, ok := strings.CutSuffix(str(v), "%"); ok {
		n, _ := strconv.Atoi(p)
		return int(math.Ceil(float64(n*replicas) / 100))
	}
	if v == nil {
		return int(math.Ceil(float64(25*replicas) / 100)) // the default 25%
	}
	return num(v)
}

// TestKubernetesConnectionBudget: every overlay's fleet stays within the
// server connection budget of docs/operations/connections.md at its
// largest, during a rollout of the workers and the intakes at once: the
// intakes' replicas and the workers' replicas (or their autoscaler's
// maximum), each plus its surge pods, times each process's maximum as
// internal/app computes it from the settings the overlay gives the
// binaries.
func TestKubernetesConnectionBudget(t *testing.T) {
	for dir, objs := range renderAll(t) {
		if dir == "kubernetes/base" {
			continue
		}
		total := 0
		var terms []string
		for _, w := range workloads(t, dir, objs) {
			if w.binary != "intake" && w.binary != "worker" {
				continue
			}
			cfg, _, err := loadConfig(t, w)
			if err != nil {
				t.Fatalf("%s %s: %v", dir, w.owner, err)
			}
			var per int
			switch c := cfg.(type) {
			case config.Intake:
				per = app.IntakeConnBudget(c).Total()
			case config.Worker:
				per = app.WorkerConnBudget(c).Total()
			}
			name := strings.TrimPrefix(w.owner, "Deployment/")
			d := find(objs, "Deployment", name)
			replicas := num(dig(d, "spec", "replicas"))
			for _, s := range byKind(objs, "ScaledObject") {
				if str(dig(s, "spec", "scaleTargetRef", "name")) == name {
					replicas = num(dig(s, "spec", "maxReplicaCount"))
				}
			}
			for _, s := range byKind(objs, "HorizontalPodAutoscaler") {
				if str(dig(s, "spec", "scaleTargetRef", "name")) == name {
					replicas = num(dig(s, "spec", "maxReplicas"))
				}
			}
			if replicas < 1 {
				t.Errorf("%s %s: no replica count or autoscaler maximum", dir, d.id())
				continue
			}
			pods := replicas + rollingSurge(d, replicas)
			total += pods * per
			terms = append(terms, fmt.Sprintf("%d %s pods × %d", pods, w.binary, per))
		}
		if total > serverConnectionBudget {
			t.Errorf("%s: %s = %d server connections at most, over the budget of %d (docs/operations/connections.md)",
				dir, strings.Join(terms, " + "), total, serverConnectionBudget)
		}
	}
}
