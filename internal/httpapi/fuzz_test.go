package httpapi

import (
	"bytes"
	"errors"
	"net/http"
	"testing"

	"github.com/mightyetl/mightyetl/internal/codes"
	"github.com/mightyetl/mightyetl/internal/etl"
	"github.com/mightyetl/mightyetl/internal/intake"
)

func TestParseIdempotencyKey(t *testing.T) {
	for _, tc := range []struct {
		in      []string
		key     string
		present bool
		valid   bool
	}{
		{nil, "", false, false},
		{[]string{"abcdefghijklmnop"}, "abcdefghijklmnop", true, true},
		{[]string{`"abcdefghijklmnop"`}, "abcdefghijklmnop", true, true},
		{[]string{` "A.b_c:d-0123456789" `}, "A.b_c:d-0123456789", true, true},
		{[]string{"abcdefghijklmno"}, "", true, false},
		{[]string{`"abcdefghijklmnop`}, "", true, false},
		{[]string{`"abcdefghij\"klmnop"`}, "", true, false},
		{[]string{`"abcdefghijklmnop";a=1`}, "", true, false},
		{[]string{"abcdefghijklmnop", "abcdefghijklmnop"}, "", true, false},
		{[]string{string(bytes.Repeat([]byte("a"), 129))}, "", true, false},
		{[]string{"abcdefghijklmnop/"}, "", true, false},
	} {
		h := http.Header{}
		for _, v := range tc.in {
			h.Add("Idempotency-Key", v)
		}
		key, present, valid := parseIdempotencyKey(h)
		if key != tc.key || present != tc.present || valid != tc.valid {
			t.Errorf("%q: got %q %v %v", tc.in, key, present, valid)
		}
	}
}

func FuzzParseIdempotencyKey(f *testing.F) {
	for _, s := range []string{"abcdefghijklmnop", `"abcdefghijklmnop"`, `"x"`, " \t\"", ""} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, v string) {
		h := http.Header{}
		h.Set("Idempotency-Key", v)
		key, _, valid := parseIdempotencyKey(h)
		if valid != intake.ValidKey(key) {
			t.Fatalf("valid %v for key %q", valid, key)
		}
		if valid {
			// Both forms normalise to the same key.
			h.Set("Idempotency-Key", `"`+key+`"`)
			if k2, _, ok := parseIdempotencyKey(h); !ok || k2 != key {
				t.Fatalf("sf-string form of %q gave %q %v", key, k2, ok)
			}
		}
	})
}

// FuzzRequestBody drives the HTTP body path (limit, then the batch and
// diagnostic parsers) with arbitrary bytes: no panic, every rejection a
// known problem code, nothing accepted past the limit.
func FuzzRequestBody(f *testing.F) {
	for _, s := range []string{sampleBody, "[]", `[{"id":"a","id":"b"}]`, `{"durationMillis":1,"records":[]}`, "\xff", `[{"id":"a","amount":1e999}]`} {
		f.Add([]byte(s))
	}
	const limit = 4096
	f.Fuzz(func(t *testing.T, body []byte) {
		got, err := readLimited(bytes.NewReader(body), limit, -1)
		if len(body) > limit {
			if !errors.Is(err, errTooLarge) {
				t.Fatalf("body of %d bytes accepted", len(body))
			}
			return
		}
		if err != nil || !bytes.Equal(got, body) {
			t.Fatalf("read %d of %d bytes: %v", len(got), len(body), err)
		}
		if _, err := etl.Process(got, 50); err != nil {
			if _, ok := problemTable[intake.CodeOf(err)]; !ok {
				t.Fatalf("unmapped code %q", intake.CodeOf(err))
			}
		}
		if _, err := intake.ParseDiagnostic(got, 50); err != nil {
			if _, ok := problemTable[intake.CodeOf(err)]; !ok || intake.CodeOf(err) == codes.InternalError {
				t.Fatalf("diagnostic: unexpected code %q", intake.CodeOf(err))
			}
		}
	})
}
