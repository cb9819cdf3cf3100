package etl

import (
	"encoding/json"
	"errors"
	"reflect"
	"strconv"
	"strings"
	"testing"

	"github.com/mightyetl/mightyetl/internal/codes"
)

// codeOf returns the Code of an *Error, "" for nil, and fails the test for other errors.
func codeOf(t testing.TB, err error) (string, int) {
	t.Helper()
	if err == nil {
		return "", 0
	}
	var e *Error
	if !errors.As(err, &e) {
		t.Fatalf("error %v (%T) is not an *etl.Error", err, err)
	}
	return e.Code, e.Index
}

func TestParseBatchRejects(t *testing.T) {
	long := strings.Repeat("é", 257)
	tests := []struct {
		name  string
		body  string
		max   int
		code  string
		index int
	}{
		// etl_invalid_json
		{"absent", "", 10, codes.InvalidJSON, -1},
		{"white space only", " \n\t", 10, codes.InvalidJSON, -1},
		{"malformed", `[{"id":"a"`, 10, codes.InvalidJSON, -1},
		{"missing comma", `[{"id":"a"} {"id":"b"}]`, 10, codes.InvalidJSON, -1},
		{"trailing comma", `[{"id":"a"},]`, 10, codes.InvalidJSON, -1},
		{"object top level", `{"id":"a"}`, 10, codes.InvalidJSON, -1},
		{"string top level", `"a"`, 10, codes.InvalidJSON, -1},
		{"number top level", `1`, 10, codes.InvalidJSON, -1},
		{"null top level", `null`, 10, codes.InvalidJSON, -1},
		{"trailing value", `[] []`, 10, codes.InvalidJSON, -1},
		{"trailing garbage", `[{"id":"a"}]x`, 10, codes.InvalidJSON, -1},
		{"trailing bracket", `[]]`, 10, codes.InvalidJSON, -1},
		{"invalid utf-8 in string", "[{\"id\":\"a\xff\"}]", 10, codes.InvalidJSON, -1},
		{"invalid utf-8 outside", "[{\"id\":\"a\"}]\xc3", 10, codes.InvalidJSON, -1},
		{"byte order mark", "\uFEFF[]", 10, codes.InvalidJSON, -1},
		{"duplicate member", `[{"id":"a","x":1,"x":2}]`, 10, codes.InvalidJSON, -1},
		{"duplicate id", `[{"id":"a","id":"b"}]`, 10, codes.InvalidJSON, -1},
		{"duplicate after unescape", `[{"id":"a","x":1,"\u0078":2}]`, 10, codes.InvalidJSON, -1},
		{"duplicate nested", `[{"id":"a","n":{"k":1,"k":2}}]`, 10, codes.InvalidJSON, -1},
		{"duplicate deep in array", `[{"id":"a","n":[1,{"x":[{"k":1,"k":2}]}]}]`, 10, codes.InvalidJSON, -1},
		{"duplicate in non-object element", `[[{"k":1,"k":2}]]`, 10, codes.InvalidJSON, -1},
		{"duplicate wins over earlier bad record", `[{"id":""},{"id":"b","x":1,"x":1}]`, 10, codes.InvalidJSON, -1},
		{"malformed wins over earlier bad record", `[5,{"id":"b"`, 10, codes.InvalidJSON, -1},
		{"too deep", `[{"id":"a","n":` + strings.Repeat("[", 200) + strings.Repeat("]", 200) + `}]`, 10, codes.InvalidJSON, -1},
		{"single quotes", `[{'id':'a'}]`, 10, codes.InvalidJSON, -1},
		{"NaN", `[{"id":"a","amount":NaN}]`, 10, codes.InvalidJSON, -1},

		// etl_batch_too_large
		{"one over", `[{"id":"a"},{"id":"b"},{"id":"c"}]`, 2, codes.BatchTooLarge, -1},
		{"zero allowed", `[{"id":"a"}]`, 0, codes.BatchTooLarge, -1},
		{"detected before later syntax error", `[{"id":"a"},{"id":"b"},{"id":"c"}, garbage`, 2, codes.BatchTooLarge, -1},
		{"wins over bad record", `[5,5,5]`, 2, codes.BatchTooLarge, -1},
		{"garbage after max is not an element", `[{"id":"a"},{"id":"b"} x]`, 2, codes.InvalidJSON, -1},
		{"bad token after max is not an element", `[{"id":"a"},{"id":"b"},]`, 2, codes.InvalidJSON, -1},

		// etl_invalid_record
		{"number element", `[{"id":"a"},1]`, 10, codes.InvalidRecord, 1},
		{"string element", `["a"]`, 10, codes.InvalidRecord, 0},
		{"null element", `[null]`, 10, codes.InvalidRecord, 0},
		{"array element", `[[{"id":"a"}]]`, 10, codes.InvalidRecord, 0},
		{"first bad record is reported", `[{"id":"a"},{},{"id":1}]`, 10, codes.InvalidRecord, 1},
		{"missing id", `[{"name":"x"}]`, 10, codes.InvalidRecord, 0},
		{"upper-case ID is not id", `[{"ID":"a"}]`, 10, codes.InvalidRecord, 0},
		{"empty object", `[{}]`, 10, codes.InvalidRecord, 0},
		{"id number", `[{"id":1}]`, 10, codes.InvalidRecord, 0},
		{"id null", `[{"id":null}]`, 10, codes.InvalidRecord, 0},
		{"id bool", `[{"id":true}]`, 10, codes.InvalidRecord, 0},
		{"id object", `[{"id":{"v":"a"}}]`, 10, codes.InvalidRecord, 0},
		{"id empty", `[{"id":""}]`, 10, codes.InvalidRecord, 0},
		{"id blank", `[{"id":"   "}]`, 10, codes.InvalidRecord, 0},
		{"id leading space", `[{"id":" a"}]`, 10, codes.InvalidRecord, 0},
		{"id trailing tab", `[{"id":"a\t"}]`, 10, codes.InvalidRecord, 0},
		{"id trailing nbsp", `[{"id":"a\u00a0"}]`, 10, codes.InvalidRecord, 0},
		{"id leading ideographic space", `[{"id":"\u3000a"}]`, 10, codes.InvalidRecord, 0},
		{"id newline inside", `[{"id":"a\nb"}]`, 10, codes.InvalidRecord, 0},
		{"id NUL", `[{"id":"a\u0000b"}]`, 10, codes.InvalidRecord, 0},
		{"id DEL", `[{"id":"a\u007fb"}]`, 10, codes.InvalidRecord, 0},
		{"id C1 control", `[{"id":"a\u0085b"}]`, 10, codes.InvalidRecord, 0},
		{"id zero width space (Cf)", `[{"id":"a\u200bb"}]`, 10, codes.InvalidRecord, 0},
		{"id bidi override (Cf)", `[{"id":"a\u202eb"}]`, 10, codes.InvalidRecord, 0},
		{"id BOM (Cf)", `[{"id":"a\ufeffb"}]`, 10, codes.InvalidRecord, 0},
		{"id line separator (Zl)", `[{"id":"a\u2028b"}]`, 10, codes.InvalidRecord, 0},
		{"id paragraph separator (Zp)", `[{"id":"a\u2029b"}]`, 10, codes.InvalidRecord, 0},
		{"id 257 code points", `[{"id":"` + long + `"}]`, 10, codes.InvalidRecord, 0},
		{"case collision", `[{"id":"a","name":"x","NAME":"y"}]`, 10, codes.InvalidRecord, 0},
		{"case collision with id", `[{"id":"a","Id":"b"}]`, 10, codes.InvalidRecord, 0},
		{"case collision unicode", `[{"id":"a","é":1,"É":2}]`, 10, codes.InvalidRecord, 0},
		{"empty field name", `[{"id":"a","":1}]`, 10, codes.InvalidRecord, 0},
		{"colon in field name", `[{"id":"a","b:c":1}]`, 10, codes.InvalidRecord, 0},
		{"comma in field name", `[{"id":"a","b,c":1}]`, 10, codes.InvalidRecord, 0},
		{"control in field name", `[{"id":"a","b\nc":1}]`, 10, codes.InvalidRecord, 0},
		{"NUL in field name", `[{"id":"a","b\u0000":1}]`, 10, codes.InvalidRecord, 0},
		{"DEL in field name", `[{"id":"a","b\u007f":1}]`, 10, codes.InvalidRecord, 0},
		{"bad record then more than max is too large", `[{},{"id":"b"}]`, 1, codes.BatchTooLarge, -1},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			recs, err := ParseBatch([]byte(tt.body), tt.max)
			if err == nil {
				t.Fatalf("ParseBatch accepted %q: %+v", tt.body, recs)
			}
			code, index := codeOf(t, err)
			if code != tt.code || index != tt.index {
				t.Fatalf("got %s@%d, want %s@%d (%v)", code, index, tt.code, tt.index, err)
			}
			if recs != nil {
				t.Fatalf("records returned with error: %+v", recs)
			}
		})
	}
}

func TestParseBatchAccepts(t *testing.T) {
	id256 := strings.Repeat("é", 256)
	tests := []struct {
		name string
		body string
		max  int
		want []Record
	}{
		{"empty array", `[]`, 10, []Record{}},
		{"empty array with space", " \n[ ]\n ", 10, []Record{}},
		{"empty array with max 0", `[]`, 0, []Record{}},
		{"exactly max", `[{"id":"a"},{"id":"b"}]`, 2, []Record{
			{ID: "a", Fields: []Field{{"id", raw(`"a"`)}}},
			{ID: "b", Fields: []Field{{"id", raw(`"b"`)}}},
		}},
		{"order and raw values kept", `[{"z":1, "id" : "a1" ,"name":"jane","n":{"b": [1, 2]},"e":1.50e2,"s":"x\"y","nil":null,"t":true}]`, 10, []Record{
			{ID: "a1", Fields: []Field{
				{"z", raw(`1`)}, {"id", raw(`"a1"`)}, {"name", raw(`"jane"`)},
				{"n", raw(`{"b": [1, 2]}`)}, {"e", raw(`1.50e2`)}, {"s", raw(`"x\"y"`)},
				{"nil", raw(`null`)}, {"t", raw(`true`)},
			}},
		}},
		{"id unescaped", `[{"id":"caf\u00e9 \ud83d\ude00"}]`, 10, []Record{
			{ID: "café 😀", Fields: []Field{{"id", raw(`"caf\u00e9 \ud83d\ude00"`)}}},
		}},
		{"id 256 code points", `[{"id":"` + id256 + `"}]`, 10, []Record{
			{ID: id256, Fields: []Field{{"id", raw(`"` + id256 + `"`)}}},
		}},
		{"id inner space", `[{"id":"a b"}]`, 10, []Record{{ID: "a b", Fields: []Field{{"id", raw(`"a b"`)}}}}},
		{"same key in different records", `[{"id":"a","x":1},{"id":"b","x":2}]`, 10, []Record{
			{ID: "a", Fields: []Field{{"id", raw(`"a"`)}, {"x", raw(`1`)}}},
			{ID: "b", Fields: []Field{{"id", raw(`"b"`)}, {"x", raw(`2`)}}},
		}},
		{"same key at different depths", `[{"id":"a","k":{"k":{"k":1}}}]`, 10, []Record{
			{ID: "a", Fields: []Field{{"id", raw(`"a"`)}, {"k", raw(`{"k":{"k":1}}`)}}},
		}},
		{"nested names are not field names", `[{"id":"a","n":{"a:b,c":1,"":2}}]`, 10, []Record{
			{ID: "a", Fields: []Field{{"id", raw(`"a"`)}, {"n", raw(`{"a:b,c":1,"":2}`)}}},
		}},
		{"big number kept verbatim", `[{"id":"a","x":1e400}]`, 10, []Record{
			{ID: "a", Fields: []Field{{"id", raw(`"a"`)}, {"x", raw(`1e400`)}}},
		}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := ParseBatch([]byte(tt.body), tt.max)
			if err != nil {
				t.Fatalf("ParseBatch(%q): %v", tt.body, err)
			}
			if !reflect.DeepEqual(got, tt.want) {
				t.Fatalf("got  %+v\nwant %+v", got, tt.want)
			}
		})
	}
}

func raw(s string) json.RawMessage { return json.RawMessage(s) }

func TestParseBatchManyMembers(t *testing.T) {
	// Many members switch duplicate detection to a map; a duplicate far apart is still found.
	var b strings.Builder
	b.WriteString(`[{"id":"a"`)
	for i := 0; i < 1000; i++ {
		b.WriteString(`,"f` + itoa(i) + `":1`)
	}
	ok := b.String() + `}]`
	recs, err := ParseBatch([]byte(ok), 1)
	if err != nil || len(recs[0].Fields) != 1001 {
		t.Fatalf("ParseBatch: %v", err)
	}
	dup := b.String() + `,"f3":2}]`
	if code, _ := codeOf(t, mustErr(ParseBatch([]byte(dup), 1))); code != codes.InvalidJSON {
		t.Fatalf("duplicate among many: %s", code)
	}
	coll := b.String() + `,"F999":2}]`
	if code, _ := codeOf(t, mustErr(ParseBatch([]byte(coll), 1))); code != codes.InvalidRecord {
		t.Fatalf("case collision among many: %s", code)
	}
}

func TestParseBatchMaxDepth(t *testing.T) {
	// The array is depth 1 and the record 2, so a field may nest maxDepth-2 more levels.
	nest := func(n int) string {
		return `[{"id":"a","n":` + strings.Repeat(`[`, n) + strings.Repeat(`]`, n) + `}]`
	}
	if _, err := ParseBatch([]byte(nest(maxDepth-2)), 1); err != nil {
		t.Fatalf("depth %d: %v", maxDepth, err)
	}
	if code, _ := codeOf(t, mustErr(ParseBatch([]byte(nest(maxDepth-1)), 1))); code != codes.InvalidJSON {
		t.Fatalf("depth %d: %s", maxDepth+1, code)
	}
}

func TestErrorText(t *testing.T) {
	_, err := ParseBatch([]byte(`[{"id":" secret-payload"}]`), 1)
	if strings.Contains(err.Error(), "secret") {
		t.Fatalf("error text leaks payload: %q", err)
	}
	if got, want := err.Error(), "etl: invalid record at index 0"; got != want {
		t.Fatalf("Error() = %q, want %q", got, want)
	}
	if got := (&Error{Code: codes.InvalidJSON, Index: -1}).Error(); strings.Contains(got, "index") {
		t.Fatalf("Error() = %q mentions an index", got)
	}
}

func mustErr(_ any, err error) error { return err }

func itoa(i int) string { return strconv.Itoa(i) }
