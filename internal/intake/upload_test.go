package intake

import (
	"strings"
	"testing"

	"github.com/jackc/pgx/v5/pgxpool"
)

// TestUploadOptions: zero options take the documented defaults; New refuses
// a part limit above the upload limit and an owner bound below one part.
func TestUploadOptions(t *testing.T) {
	d := UploadOptions{}.WithDefaults()
	if d != (UploadOptions{MaxBytes: 10 << 30, MaxRecords: 100_000_000, MaxPartBytes: 64 << 20,
		OwnerMaxStagedBytes: 20 << 30, Expiry: DefaultUploadExpiry}) {
		t.Fatalf("defaults: %+v", d)
	}
	var db *pgxpool.Pool // New connects to nothing
	for _, c := range []struct {
		opts UploadOptions
		want string // "" = accepted
	}{
		{UploadOptions{}, ""},
		{UploadOptions{MaxBytes: 1 << 20, MaxPartBytes: 1 << 20, OwnerMaxStagedBytes: 1 << 20}, ""},
		{UploadOptions{MaxBytes: 1 << 20, MaxPartBytes: 2 << 20}, "max part bytes"},
		{UploadOptions{MaxPartBytes: 2 << 20, OwnerMaxStagedBytes: 1 << 20}, "owner max staged bytes"},
	} {
		s, err := New(Options{DB: db, PrincipalHashKey: []byte("k"), Uploads: c.opts})
		switch {
		case c.want == "" && err != nil:
			t.Errorf("%+v refused: %v", c.opts, err)
		case c.want == "" && s.UploadLimits() != c.opts.WithDefaults():
			t.Errorf("%+v: limits %+v", c.opts, s.UploadLimits())
		case c.want != "" && (err == nil || !strings.Contains(err.Error(), c.want)):
			t.Errorf("%+v: %v, want a refusal naming %s", c.opts, err, c.want)
		}
	}
}

// TestValidDigest: only 64 lowercase hex characters are a digest.
func TestValidDigest(t *testing.T) {
	good := strings.Repeat("0123456789abcdef", 4)
	for s, want := range map[string]bool{
		good:                    true,
		strings.ToUpper(good):   false,
		good[:63]:               false,
		good + "0":              false,
		strings.Repeat("g", 64): false,
		"":                      false,
	} {
		if validDigest(s) != want {
			t.Errorf("validDigest(%q) = %v", s, !want)
		}
	}
}
