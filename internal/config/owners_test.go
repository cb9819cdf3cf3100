package config

import (
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"

	"github.com/mightyetl/mightyetl/internal/auth"
	"github.com/mightyetl/mightyetl/internal/intake"
	"github.com/mightyetl/mightyetl/internal/pg"
)

const ownersHashKey = "0123456789abcdef0123456789abcdef-owners"

func writeOwners(t *testing.T, body string) string {
	t.Helper()
	p := filepath.Join(t.TempDir(), "owners.json")
	if err := os.WriteFile(p, []byte(body), 0o600); err != nil {
		t.Fatal(err)
	}
	return p
}

// TestOwnerQuotaSettings pins MIGHTYETL_OWNER_*: unlimited by default (no
// quota, no weight written), set values reach the intake's QuotaOptions,
// the validated ranges and the cross rule (a burst needs a rate), each
// refusal one line naming the setting.
func TestOwnerQuotaSettings(t *testing.T) {
	cfg, _, err := LoadIntake(nil, env(map[string]string{}))
	if err != nil {
		t.Fatal(err)
	}
	s, err := cfg.Owners.Load([]byte(ownersHashKey))
	if err != nil || s.Quotas.Enabled() || s.ManagesWeights || len(s.Weights) != 0 {
		t.Fatalf("defaults: %+v, %v; want no quota and no weights", s, err)
	}

	set, _, err := LoadIntake([]string{"--owner-submit-burst=10"}, env(map[string]string{
		"MIGHTYETL_OWNER_MAX_PENDING_JOBS": "500", "MIGHTYETL_OWNER_SUBMIT_RATE": "2.5"}))
	if err != nil {
		t.Fatal(err)
	}
	s, err = set.Owners.Load([]byte(ownersHashKey))
	if err != nil {
		t.Fatal(err)
	}
	if want := (intake.OwnerLimits{MaxPendingJobs: 500, SubmitRate: 2.5, SubmitBurst: 10}); s.Quotas.Default != want {
		t.Fatalf("set: %+v, want %+v", s.Quotas.Default, want)
	}

	for _, c := range []struct {
		env     map[string]string
		refused string
	}{
		{map[string]string{"MIGHTYETL_OWNER_MAX_PENDING_JOBS": "-1"}, "MIGHTYETL_OWNER_MAX_PENDING_JOBS"},
		{map[string]string{"MIGHTYETL_OWNER_MAX_PENDING_JOBS": "1000001"}, "MIGHTYETL_OWNER_MAX_PENDING_JOBS"},
		{map[string]string{"MIGHTYETL_OWNER_SUBMIT_RATE": "fast"}, "MIGHTYETL_OWNER_SUBMIT_RATE"},
		{map[string]string{"MIGHTYETL_OWNER_SUBMIT_RATE": "-0.5"}, "MIGHTYETL_OWNER_SUBMIT_RATE"},
		{map[string]string{"MIGHTYETL_OWNER_SUBMIT_RATE": "NaN"}, "MIGHTYETL_OWNER_SUBMIT_RATE"},
		{map[string]string{"MIGHTYETL_OWNER_SUBMIT_RATE": "1e7"}, "MIGHTYETL_OWNER_SUBMIT_RATE"},
		{map[string]string{"MIGHTYETL_OWNER_SUBMIT_BURST": "5"}, "MIGHTYETL_OWNER_SUBMIT_BURST"},
		{map[string]string{"MIGHTYETL_OWNER_OVERRIDES_FILE": filepath.Join(t.TempDir(), "absent.json")}, "MIGHTYETL_OWNER_OVERRIDES_FILE"},
		{map[string]string{"MIGHTYETL_OWNER_OVERRIDES_FILE": writeOwners(t, `{"owners":[{"principal":"a","weight":0}]}`)}, "MIGHTYETL_OWNER_OVERRIDES_FILE"},
	} {
		_, _, err := LoadIntake(nil, env(c.env))
		if err == nil || !strings.HasPrefix(err.Error(), c.refused) || strings.Contains(err.Error(), "\n") {
			t.Errorf("%v: %v, want one line starting with %s", c.env, err, c.refused)
		}
	}
}

// The overrides file: each principal's limits over the defaults (absent
// members inherit, 0 is unlimited, a rate of its own resets the burst to
// its default), its weight (1 when absent) under its scope hash, and every
// malformed file refused naming the entry by position, never the
// principal.
func TestOwnerOverridesFile(t *testing.T) {
	path := writeOwners(t, `{"owners": [
		{"principal": "tenant-a", "maxPendingJobs": 10, "submitRate": 5, "submitBurst": 20, "weight": 4},
		{"principal": "tenant-b", "submitRate": 0.5},
		{"principal": "unlimited", "maxPendingJobs": 0, "submitRate": 0},
		{"principal": "weighted-only", "weight": 1000}
	]}`)
	o := OwnerQuotas{MaxPendingJobs: 100, SubmitRate: 10, SubmitBurst: 30, OverridesFile: path}
	if err := o.Validate(); err != nil {
		t.Fatal(err)
	}
	s, err := o.Load([]byte(ownersHashKey))
	if err != nil {
		t.Fatal(err)
	}
	def := intake.OwnerLimits{MaxPendingJobs: 100, SubmitRate: 10, SubmitBurst: 30}
	wantLimits := map[string]intake.OwnerLimits{
		"tenant-a":      {MaxPendingJobs: 10, SubmitRate: 5, SubmitBurst: 20},
		"tenant-b":      {MaxPendingJobs: 100, SubmitRate: 0.5},
		"unlimited":     {},
		"weighted-only": def,
	}
	if s.Quotas.Default != def || !reflect.DeepEqual(s.Quotas.Overrides, wantLimits) {
		t.Fatalf("quotas %+v, want default %+v and overrides %+v", s.Quotas, def, wantLimits)
	}
	h := func(p string) string { return auth.ScopeHash([]byte(ownersHashKey), p) }
	wantWeights := []pg.OwnerWeight{{PrincipalScopeHash: h("tenant-a"), Weight: 4}, {PrincipalScopeHash: h("tenant-b"), Weight: 1},
		{PrincipalScopeHash: h("unlimited"), Weight: 1}, {PrincipalScopeHash: h("weighted-only"), Weight: 1000}}
	if !s.ManagesWeights || !reflect.DeepEqual(s.Weights, wantWeights) {
		t.Fatalf("weights %+v (managed %v), want %+v", s.Weights, s.ManagesWeights, wantWeights)
	}

	for _, bad := range []string{
		``,
		`[]`,
		`{"owners": [{"principal": "a"}]} trailing`,
		`{"owners": [{"principal": "a", "colour": "blue"}]}`,
		`{"owners": [{"principal": "secret-tenant", "maxPendingJobs": "ten"}]}`,
		`{"owners": [{"principal": "  "}]}`,
		`{"owners": [{"principal": "` + strings.Repeat("x", 513) + `"}]}`,
		`{"owners": [{"principal": "secret-tenant"}, {"principal": "secret-tenant"}]}`,
		`{"owners": [{"principal": "secret-tenant", "maxPendingJobs": -1}]}`,
		`{"owners": [{"principal": "secret-tenant", "maxPendingJobs": 1000001}]}`,
		`{"owners": [{"principal": "secret-tenant", "submitRate": -1}]}`,
		`{"owners": [{"principal": "secret-tenant", "submitBurst": -1}]}`,
		`{"owners": [{"principal": "secret-tenant", "submitRate": 0, "submitBurst": 3}]}`,
		`{"owners": [{"principal": "secret-tenant", "weight": 1001}]}`,
	} {
		_, err := ParseOwnerOverrides(strings.NewReader(bad))
		if err == nil {
			t.Errorf("%s: accepted", bad)
			continue
		}
		if strings.Contains(err.Error(), "secret-tenant") || strings.Contains(err.Error(), "blue") {
			t.Errorf("%s: the error names the file's content: %v", bad, err)
		}
	}
	if _, err := (OwnerQuotas{OverridesFile: path}).Load(nil); err == nil {
		t.Error("weights hashed without a principal hash key")
	}
}
