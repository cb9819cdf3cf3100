package httpapi

import (
	"slices"
	"testing"

	"github.com/getkin/kin-openapi/openapi3"
	"github.com/mightyetl/mightyetl/internal/codes"
)

// The problem table, the code table's HTTP problem codes and the
// Problem.errorCode enum of docs/openapi.yaml are the same set: a code is
// defined once (package codes) and each of them is answered and documented.
func TestProblemTableIsTheCodeTable(t *testing.T) {
	doc, err := openapi3.NewLoader().LoadFromFile("../../docs/openapi.yaml")
	if err != nil {
		t.Fatal(err)
	}
	var spec []string
	for _, c := range doc.Components.Schemas["Problem"].Value.Properties["errorCode"].Value.Enum {
		spec = append(spec, c.(string))
	}
	var table []string
	for code := range problemTable {
		table = append(table, code)
	}
	want := slices.Sorted(slices.Values(codes.Problems))
	if len(slices.Compact(slices.Clone(want))) != len(want) {
		t.Fatalf("codes.Problems lists a code twice: %v", want)
	}
	for name, got := range map[string][]string{"docs/openapi.yaml": spec, "problemTable": table} {
		slices.Sort(got)
		if !slices.Equal(got, want) {
			t.Errorf("%s codes %v, codes.Problems %v", name, got, want)
		}
	}
}
