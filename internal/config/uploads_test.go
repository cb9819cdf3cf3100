package config

import (
	"strings"
	"testing"
	"time"

	"github.com/mightyetl/mightyetl/internal/intake"
)

// TestUploadSettings pins the large-job upload settings: defaults (the
// intake library's), the validated ranges and the cross rules (a part fits
// the upload; one owner stages at least one part), each refusal one line
// naming the setting.
func TestUploadSettings(t *testing.T) {
	cfg, _, err := LoadIntake(nil, env(map[string]string{}))
	if err != nil {
		t.Fatal(err)
	}
	lib := intake.UploadOptions{}.WithDefaults()
	if got := cfg.Uploads.Options(); got != lib {
		t.Fatalf("defaults %+v, library defaults %+v", got, lib)
	}
	if cfg.Uploads.MaxBytes != 10<<30 || cfg.Uploads.MaxRecords != 100_000_000 || cfg.Uploads.MaxPartBytes != 64<<20 ||
		cfg.Uploads.OwnerMaxStagedBytes != 20<<30 || cfg.Uploads.Expiry != 24*time.Hour {
		t.Fatalf("defaults: %+v", cfg.Uploads)
	}

	set, _, err := LoadIntake([]string{"--upload-max-records=5"}, env(map[string]string{
		"MIGHTYETL_UPLOAD_MAX_BYTES": "2097152", "MIGHTYETL_UPLOAD_MAX_PART_BYTES": "1048576",
		"MIGHTYETL_UPLOAD_OWNER_MAX_STAGED_BYTES": "1048576", "MIGHTYETL_UPLOAD_EXPIRY": "90m"}))
	if err != nil {
		t.Fatal(err)
	}
	want := intake.UploadOptions{MaxBytes: 2 << 20, MaxRecords: 5, MaxPartBytes: 1 << 20, OwnerMaxStagedBytes: 1 << 20, Expiry: 90 * time.Minute}
	if got := set.Uploads.Options(); got != want {
		t.Fatalf("set: %+v, want %+v", got, want)
	}

	for _, c := range []struct {
		env     map[string]string
		refused string
	}{
		{map[string]string{"MIGHTYETL_UPLOAD_MAX_BYTES": "1048575"}, "MIGHTYETL_UPLOAD_MAX_BYTES"},
		{map[string]string{"MIGHTYETL_UPLOAD_MAX_BYTES": "4398046511105"}, "MIGHTYETL_UPLOAD_MAX_BYTES"},
		{map[string]string{"MIGHTYETL_UPLOAD_MAX_RECORDS": "0"}, "MIGHTYETL_UPLOAD_MAX_RECORDS"},
		{map[string]string{"MIGHTYETL_UPLOAD_MAX_PART_BYTES": "1073741825"}, "MIGHTYETL_UPLOAD_MAX_PART_BYTES"},
		{map[string]string{"MIGHTYETL_UPLOAD_MAX_PART_BYTES": "1048575"}, "MIGHTYETL_UPLOAD_MAX_PART_BYTES"},
		{map[string]string{"MIGHTYETL_UPLOAD_EXPIRY": "59s"}, "MIGHTYETL_UPLOAD_EXPIRY"},
		{map[string]string{"MIGHTYETL_UPLOAD_EXPIRY": "721h"}, "MIGHTYETL_UPLOAD_EXPIRY"},
		{map[string]string{"MIGHTYETL_UPLOAD_MAX_BYTES": "2097152", "MIGHTYETL_UPLOAD_MAX_PART_BYTES": "4194304"}, "MIGHTYETL_UPLOAD_MAX_PART_BYTES"},
		{map[string]string{"MIGHTYETL_UPLOAD_OWNER_MAX_STAGED_BYTES": "1048576"}, "MIGHTYETL_UPLOAD_OWNER_MAX_STAGED_BYTES"},
	} {
		_, _, err := LoadIntake(nil, env(c.env))
		if err == nil || !strings.HasPrefix(err.Error(), c.refused) || strings.Contains(err.Error(), "\n") {
			t.Errorf("%v: %v, want one line starting with %s", c.env, err, c.refused)
		}
	}
}
