package config

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

func TestValidateLease(t *testing.T) {
	cases := []struct {
		lease, interval, margin time.Duration
		ok                      bool
	}{
		{30 * time.Second, 10 * time.Second, 5 * time.Second, true},  // defaults
		{30 * time.Second, 0, 5 * time.Second, false},                // zero
		{30 * time.Second, -time.Second, 5 * time.Second, false},     // negative
		{30 * time.Second, 30 * time.Second, 5 * time.Second, false}, // equal to lease
		{30 * time.Second, 40 * time.Second, 5 * time.Second, false}, // longer than lease
		{30 * time.Second, 11 * time.Second, 0, false},               // less than two intervals left
		{10 * time.Second, 3 * time.Second, 8 * time.Second, false},  // insufficient margin
		{2 * time.Second, 400 * time.Millisecond, 400 * time.Millisecond, true},
	}
	for _, c := range cases {
		err := ValidateLease(c.lease, c.interval, c.margin)
		if (err == nil) != c.ok {
			t.Errorf("ValidateLease(%s, %s, %s) = %v, want ok=%v", c.lease, c.interval, c.margin, err, c.ok)
		}
		if err != nil && (!strings.HasPrefix(err.Error(), "MIGHTYETL_LEASE_RENEW_INTERVAL: ") || strings.Contains(err.Error(), "\n")) {
			t.Errorf("error is not one line naming the setting: %q", err)
		}
	}
}

func env(m map[string]string) func(string) string { return func(k string) string { return m[k] } }

func TestPrecedenceAndProvenance(t *testing.T) {
	w, l, err := LoadWorker([]string{"-concurrency", "12"}, env(map[string]string{
		"MIGHTYETL_WORKER_CONCURRENCY": "5",
		"MIGHTYETL_LEASE_DURATION":     "45s",
		"DATABASE_URL":                 "postgres://app:s3cret@db.internal:5432/mightyetl",
		"MIGHTYETL_WORKER_ID":          "worker-provenance-1",
	}))
	if err != nil {
		t.Fatal(err)
	}
	if w.Concurrency != 12 || w.LeaseDuration != 45*time.Second || w.RenewInterval != 15*time.Second || w.MaxJobDuration != 6*time.Hour {
		t.Fatalf("got %+v", w)
	}
	src := map[string]Setting{}
	for _, s := range l.Provenance() {
		src[s.Name] = s
		if strings.Contains(s.Value, "s3cret") {
			t.Fatalf("provenance leaks a password: %+v", s)
		}
	}
	if src["MIGHTYETL_WORKER_CONCURRENCY"].Source != SourceFlag || src["MIGHTYETL_LEASE_DURATION"].Source != SourceEnv ||
		src["MIGHTYETL_LEASE_RENEW_INTERVAL"].Source != "derived" || src["MIGHTYETL_MAX_ATTEMPTS"].Source != SourceDefault {
		t.Fatalf("sources: %+v", src)
	}
	if !strings.Contains(src["DATABASE_URL"].Value, "db.internal") {
		t.Fatalf("redaction removed too much: %q", src["DATABASE_URL"].Value)
	}
}

func TestSecretSettingsNeverShowTheirValue(t *testing.T) {
	var secret string
	l := NewLoader("t", nil, env(map[string]string{"MIGHTYETL_PRINCIPAL_HASH_KEY": "0123456789abcdef0123456789abcdef"}))
	l.Secret(&secret, "MIGHTYETL_PRINCIPAL_HASH_KEY", "principal-hash-key", "key", nil)
	if err := l.Parse(); err != nil {
		t.Fatal(err)
	}
	p := l.Provenance()
	if len(p) != 1 || p[0].Value != "(set)" || secret == "" {
		t.Fatalf("provenance %+v", p)
	}
}

func TestBadValuesNameTheSettingAndRange(t *testing.T) {
	cases := map[string]map[string]string{
		"MIGHTYETL_LEASE_DURATION":         {"MIGHTYETL_LEASE_DURATION": "500ms"},
		"MIGHTYETL_MAX_ATTEMPTS":           {"MIGHTYETL_MAX_ATTEMPTS": "101"},
		"MIGHTYETL_WORKER_ID":              {"MIGHTYETL_WORKER_ID": "bad id!"},
		"MIGHTYETL_WORKER_CONCURRENCY":     {"MIGHTYETL_WORKER_CONCURRENCY": "0"},
		"MIGHTYETL_MAX_JOB_DURATION":       {"MIGHTYETL_MAX_JOB_DURATION": "500ms"},
		"MIGHTYETL_MAX_JOB_DURATION ":      {"MIGHTYETL_MAX_JOB_DURATION": "169h"},
		"MIGHTYETL_MAX_JOB_DURATION  ":     {"MIGHTYETL_MAX_JOB_DURATION": "six hours"},
		"MIGHTYETL_WORKER_CHUNKED_SLOTS":   {"MIGHTYETL_WORKER_CHUNKED_SLOTS": "65"},
		"MIGHTYETL_CHUNK_RECORDS":          {"MIGHTYETL_CHUNK_RECORDS": "0"},
		"MIGHTYETL_CLAIM_OWNERS":           {"MIGHTYETL_CLAIM_OWNERS": "1001"},
		"MIGHTYETL_CHUNK_BYTES":            {"MIGHTYETL_CHUNK_BYTES": "1024"},
		"MIGHTYETL_CHUNK_CONNECTIONS":      {"MIGHTYETL_CHUNK_CONNECTIONS": "17"},
		"MIGHTYETL_WORKER_WAKEUP_SLOTS":    {"MIGHTYETL_WORKER_WAKEUP_SLOTS": "-1"},
		"MIGHTYETL_WORKER_WAKEUP_SLOTS ":   {"MIGHTYETL_WORKER_WAKEUP_SLOTS": "9"}, // above the concurrency, 8
		"MIGHTYETL_WORKER_WAKEUP_SLOTS  ":  {"MIGHTYETL_WORKER_WAKEUP_SLOTS": "some"},
		"MIGHTYETL_WORKER_WAKEUP_SLOTS   ": {"MIGHTYETL_WORKER_WAKEUP_SLOTS": "1", "MIGHTYETL_CLAIM_OWNERS": "0"},
	}
	for name, e := range cases {
		_, _, err := LoadWorker(nil, env(e))
		name = strings.TrimSpace(name)
		if err == nil || !strings.HasPrefix(err.Error(), name+":") || strings.Contains(err.Error(), "\n") {
			t.Errorf("%s: got %v", name, err)
		}
	}
}

func TestRecordRejectionCountsInATextfile(t *testing.T) {
	dir := t.TempDir()
	for range 2 {
		if err := RecordRejection(dir, "worker"); err != nil {
			t.Fatal(err)
		}
	}
	b, err := os.ReadFile(filepath.Join(dir, "mightyetl_worker_config_rejections.prom"))
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(string(b), `mightyetl_config_rejections_total{binary="worker"} 2`) {
		t.Fatalf("textfile:\n%s", b)
	}
	if err := RecordRejection("", "worker"); err != nil {
		t.Fatal("empty dir must do nothing")
	}
}

// TestLeaseAloneDerivesRenewIntervalAndMargin is issue 13 item 9: setting
// only MIGHTYETL_LEASE_DURATION is accepted; the renewal interval becomes a
// third of the lease and the safety margin a sixth, both truncated to whole
// milliseconds, and provenance says they were derived. The default lease
// gives today's 10s and 5s.
func TestLeaseAloneDerivesRenewIntervalAndMargin(t *testing.T) {
	cases := []struct {
		lease              string
		interval, margin   time.Duration
		intervalV, marginV string
	}{
		{"10s", 3333 * time.Millisecond, 1666 * time.Millisecond, "3.333s", "1.666s"},
		{"", 10 * time.Second, 5 * time.Second, "10s", "5s"}, // the default lease
		{"1s", 333 * time.Millisecond, 166 * time.Millisecond, "333ms", "166ms"},
		{"2m", 40 * time.Second, 20 * time.Second, "40s", "20s"},
	}
	for _, c := range cases {
		w, l, err := LoadWorker(nil, env(map[string]string{"MIGHTYETL_LEASE_DURATION": c.lease}))
		if err != nil {
			t.Errorf("lease %q alone refused: %v", c.lease, err)
			continue
		}
		if w.RenewInterval != c.interval || w.SafetyMargin != c.margin {
			t.Errorf("lease %q: interval %s margin %s, want %s and %s", c.lease, w.RenewInterval, w.SafetyMargin, c.interval, c.margin)
		}
		src := map[string]Setting{}
		for _, s := range l.Provenance() {
			src[s.Name] = s
		}
		if s := src["MIGHTYETL_LEASE_RENEW_INTERVAL"]; s.Source != "derived" || s.Value != c.intervalV {
			t.Errorf("lease %q: interval provenance %+v, want %s derived", c.lease, s, c.intervalV)
		}
		if s := src["MIGHTYETL_LEASE_SAFETY_MARGIN"]; s.Source != "derived" || s.Value != c.marginV {
			t.Errorf("lease %q: margin provenance %+v, want %s derived", c.lease, s, c.marginV)
		}
	}
}

// TestExplicitLeaseScheduleIsStillValidated: derivation fills only unset
// values; an explicit interval or margin that does not fit the lease is
// refused with one line naming it, and an explicit value is reported as
// such while the other one is derived.
func TestExplicitLeaseScheduleIsStillValidated(t *testing.T) {
	refused := []struct {
		env     map[string]string
		setting string
	}{
		{map[string]string{"MIGHTYETL_LEASE_DURATION": "10s", "MIGHTYETL_LEASE_RENEW_INTERVAL": "10s"}, "MIGHTYETL_LEASE_RENEW_INTERVAL"},
		{map[string]string{"MIGHTYETL_LEASE_DURATION": "10s", "MIGHTYETL_LEASE_RENEW_INTERVAL": "4s"}, "MIGHTYETL_LEASE_RENEW_INTERVAL"},
		{map[string]string{"MIGHTYETL_LEASE_RENEW_INTERVAL": "0s"}, "MIGHTYETL_LEASE_RENEW_INTERVAL"},
		{map[string]string{"MIGHTYETL_LEASE_RENEW_INTERVAL": "-1s"}, "MIGHTYETL_LEASE_RENEW_INTERVAL"},
		{map[string]string{"MIGHTYETL_LEASE_RENEW_INTERVAL": "30s"}, "MIGHTYETL_LEASE_RENEW_INTERVAL"},
		{map[string]string{"MIGHTYETL_LEASE_DURATION": "10s", "MIGHTYETL_LEASE_RENEW_INTERVAL": "3s", "MIGHTYETL_LEASE_SAFETY_MARGIN": "8s"}, "MIGHTYETL_LEASE_RENEW_INTERVAL"},
		{map[string]string{"MIGHTYETL_LEASE_DURATION": "10s", "MIGHTYETL_LEASE_SAFETY_MARGIN": "8s"}, "MIGHTYETL_LEASE_SAFETY_MARGIN"},
	}
	for _, c := range refused {
		_, _, err := LoadWorker(nil, env(c.env))
		if err == nil || !strings.HasPrefix(err.Error(), c.setting+": ") || strings.Contains(err.Error(), "\n") {
			t.Errorf("%v: got %v, want one line naming %s", c.env, err, c.setting)
		}
	}
	w, l, err := LoadWorker([]string{"-renew-interval", "2s"}, env(map[string]string{"MIGHTYETL_LEASE_DURATION": "10s"}))
	if err != nil {
		t.Fatal(err)
	}
	src := map[string]Setting{}
	for _, s := range l.Provenance() {
		src[s.Name] = s
	}
	if w.RenewInterval != 2*time.Second || src["MIGHTYETL_LEASE_RENEW_INTERVAL"].Source != SourceFlag ||
		w.SafetyMargin != 1666*time.Millisecond || src["MIGHTYETL_LEASE_SAFETY_MARGIN"].Source != "derived" {
		t.Fatalf("got interval %s margin %s, provenance %+v %+v", w.RenewInterval, w.SafetyMargin,
			src["MIGHTYETL_LEASE_RENEW_INTERVAL"], src["MIGHTYETL_LEASE_SAFETY_MARGIN"])
	}
}

// TestDevDefaultsSitBetweenTheVariableAndTheDefault: a value `etlctl dev`
// chose replaces the documented (or derived) default and is reported as
// SourceDev; the variable (or a secret's _FILE) and the flag still win.
func TestDevDefaultsSitBetweenTheVariableAndTheDefault(t *testing.T) {
	keyFile := filepath.Join(t.TempDir(), "key")
	if err := os.WriteFile(keyFile, []byte("from-file-0123456789abcdef0123456789abcdef\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	dev := map[string]string{
		"MIGHTYETL_AUTH_MODE":               "basic",
		"MIGHTYETL_BASIC_CREDENTIALS_FILE":  "/tmp/dev-credentials",
		"MIGHTYETL_PRINCIPAL_HASH_KEY":      "dev-chosen-0123456789abcdef0123456789abcdef",
		"MIGHTYETL_SHUTDOWN_GRACE_PERIOD":   "10s",
		"MIGHTYETL_HTTP_ADDR":               "127.0.0.1:1",
		"MIGHTYETL_DIAGNOSTIC_JOBS_ENABLED": "true",
		"MIGHTYETL_NOT_A_SETTING":           "ignored",
	}
	cases := []struct {
		name    string
		args    []string
		env     map[string]string
		setting string
		value   string
		source  Source
	}{
		{"dev value", nil, nil, "MIGHTYETL_SHUTDOWN_GRACE_PERIOD", "10s", SourceDev},
		{"variable wins", nil, map[string]string{"MIGHTYETL_SHUTDOWN_GRACE_PERIOD": "3s"}, "MIGHTYETL_SHUTDOWN_GRACE_PERIOD", "3s", SourceEnv},
		{"flag wins", []string{"--http-addr", "127.0.0.1:0"}, map[string]string{"MIGHTYETL_HTTP_ADDR": "127.0.0.1:2"}, "MIGHTYETL_HTTP_ADDR", "127.0.0.1:0", SourceFlag},
		{"secret dev value", nil, nil, "MIGHTYETL_PRINCIPAL_HASH_KEY", "(set)", SourceDev},
		{"secret file wins", nil, map[string]string{"MIGHTYETL_PRINCIPAL_HASH_KEY_FILE": keyFile}, "MIGHTYETL_PRINCIPAL_HASH_KEY", "(set)", SourceEnv},
		{"untouched default", nil, nil, "MIGHTYETL_MAX_ATTEMPTS", "3", SourceDefault},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			cfg, l, err := LoadIntakeDev(c.args, env(c.env), dev)
			if err != nil {
				t.Fatal(err)
			}
			var got Setting
			for _, s := range l.Provenance() {
				if s.Name == c.setting {
					got = s
				}
			}
			if got.Value != c.value || got.Source != c.source {
				t.Fatalf("%s = %+v, want value %q source %q", c.setting, got, c.value, c.source)
			}
			if c.name == "secret file wins" && !strings.HasPrefix(cfg.PrincipalHashKey, "from-file-") {
				t.Fatalf("hash key %q, want the file's", cfg.PrincipalHashKey)
			}
			if c.name == "dev value" && (cfg.ShutdownGrace != 10*time.Second || !cfg.DiagnosticJobsEnabled) {
				t.Fatalf("dev values not applied: %+v", cfg)
			}
		})
	}
	// A dev value is validated like a set one, and the error names the
	// variable.
	_, _, err := LoadWorkerDev(nil, env(nil), map[string]string{"MIGHTYETL_SHUTDOWN_GRACE_PERIOD": "forever"})
	if err == nil || !strings.HasPrefix(err.Error(), "MIGHTYETL_SHUTDOWN_GRACE_PERIOD: ") {
		t.Fatalf("bad dev value: %v", err)
	}
	// A dev lease duration still derives the renewal interval.
	w, l, err := LoadWorkerDev(nil, env(nil), map[string]string{"MIGHTYETL_LEASE_DURATION": "12s"})
	if err != nil || w.RenewInterval != 4*time.Second || l.source("MIGHTYETL_LEASE_RENEW_INTERVAL") != SourceDerived {
		t.Fatalf("derived from a dev lease: %v %s", err, w.RenewInterval)
	}
}

// MIGHTYETL_WORKER_WAKEUP_SLOTS is none unless set (the concurrency stays
// the most jobs a worker runs), and none with the first-come first-served
// claim; 0 (none) and up to the concurrency are accepted when set.
func TestWakeupSlotsDeriveFromTheConcurrency(t *testing.T) {
	cases := []struct {
		env  map[string]string
		want int
		src  Source
	}{
		{map[string]string{}, 0, SourceDerived},
		{map[string]string{"MIGHTYETL_WORKER_CONCURRENCY": "2000"}, 0, SourceDerived},
		{map[string]string{"MIGHTYETL_WORKER_CONCURRENCY": "2000", "MIGHTYETL_WORKER_WAKEUP_SLOTS": "31"}, 31, SourceEnv},
		{map[string]string{"MIGHTYETL_WORKER_CONCURRENCY": "2000", "MIGHTYETL_WORKER_WAKEUP_SLOTS": "0"}, 0, SourceEnv},
		{map[string]string{"MIGHTYETL_WORKER_CONCURRENCY": "4", "MIGHTYETL_WORKER_WAKEUP_SLOTS": "4"}, 4, SourceEnv},
		{map[string]string{"MIGHTYETL_WORKER_CONCURRENCY": "2000", "MIGHTYETL_CLAIM_OWNERS": "0"}, 0, SourceDerived},
	}
	for _, c := range cases {
		w, l, err := LoadWorker(nil, env(c.env))
		if err != nil || w.WakeupSlots != c.want || l.source("MIGHTYETL_WORKER_WAKEUP_SLOTS") != c.src {
			t.Errorf("%v: wake-up slots %d from %q (%v), want %d from %q", c.env, w.WakeupSlots,
				l.source("MIGHTYETL_WORKER_WAKEUP_SLOTS"), err, c.want, c.src)
		}
	}
}
