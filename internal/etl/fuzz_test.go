package etl

import (
	"encoding/json"
	"math/big"
	"reflect"
	"regexp"
	"strings"
	"testing"
	"unicode/utf8"

	"github.com/mightyetl/mightyetl/internal/codes"
)

// referenceAmount is an independent model of the AMOUNT rule on math/big, used to check
// normalizeAmount: text is a JSON number or the content of a JSON string (an exponent makes
// it a number). Exponents are limited to 6 digits to keep big.Rat cheap.
func referenceAmount(text string) (string, bool) {
	m := amountSyntax.FindStringSubmatch(text)
	if m == nil || len(m[3]) > 6 {
		return "", false
	}
	if sig := strings.TrimLeft(m[1]+m[2], "0"); len(sig) > 38 {
		return "", false
	}
	v, ok := new(big.Rat).SetString(text)
	if !ok {
		return "", false
	}
	q := new(big.Rat).Mul(new(big.Rat).Abs(v), big.NewRat(100, 1))
	q.Add(q, big.NewRat(1, 2))
	r := new(big.Int).Quo(q.Num(), q.Denom()) // floor, q >= 0
	if r.Cmp(new(big.Int).Exp(big.NewInt(10), big.NewInt(20), nil)) >= 0 {
		return "", false
	}
	s := r.String()
	for len(s) < 3 {
		s = "0" + s
	}
	s = s[:len(s)-2] + "." + s[len(s)-2:]
	if v.Sign() < 0 && r.Sign() != 0 {
		s = "-" + s
	}
	return s, true
}

// hugeExponent reports whether text has an exponent of more than 6 digits.
func hugeExponent(text string) bool {
	m := amountSyntax.FindStringSubmatch(strings.Trim(text, `"`))
	return m != nil && len(m[3]) > 6
}

var amountSyntax = regexp.MustCompile(`^-?([0-9]+)(?:\.([0-9]+))?(?:[eE]([+-]?[0-9]+))?$`)

func FuzzAmount(f *testing.F) {
	for _, s := range []string{"999.9", "0.005", "-0.005", "2.675", "1e3", "1e18", "-0", "9.995",
		"999999999999999999.995", "0.123456789012345678901234567890123456789", "1e-5", "12", "1.5E+2", "00.50"} {
		f.Add(s, true)
		f.Add(s, false)
	}
	f.Fuzz(func(t *testing.T, text string, asString bool) {
		var value string
		if asString {
			b, _ := json.Marshal(text)
			value = string(b)
		} else {
			if !json.Valid([]byte(text)) || text == "" || (text[0] != '-' && (text[0] < '0' || text[0] > '9')) {
				return // only JSON numbers; FuzzTransform covers the other kinds
			}
			value = text
		}
		got, ok := "", false
		rows, err := Transform([]Record{{ID: "x", Fields: []Field{{"amount", json.RawMessage(value)}}}})
		if err == nil {
			if !strings.HasPrefix(rows[0].Data, "AMOUNT:") {
				t.Fatalf("Data = %q", rows[0].Data)
			}
			got, ok = strings.TrimSuffix(strings.TrimPrefix(rows[0].Data, "AMOUNT:"), ","), true
		} else if code, _ := codeOf(t, err); code != codes.InvalidRecord {
			t.Fatalf("code %s", code)
		}
		if value == "null" {
			return
		}
		if asString && strings.ContainsAny(text, "eE") {
			if ok {
				t.Fatalf("string amount with exponent %q accepted", text)
			}
			return
		}
		if hugeExponent(text) {
			return // the reference does not model exponents beyond 6 digits
		}
		want, wantOK := referenceAmount(text)
		if !asString && ok != wantOK {
			t.Fatalf("number %q: got %q,%v want %q,%v", text, got, ok, want, wantOK)
		}
		if asString && ok && !wantOK {
			t.Fatalf("string %q: accepted as %q, reference rejects", text, got)
		}
		if ok && got != want {
			t.Fatalf("%q: got %q, want %q", text, got, want)
		}
	})
}

var seedBodies = []string{
	``, `[]`, ` [ ] `, `{}`, `null`, `[null]`, `[1,"a",true,[],{}]`,
	`[{"id":"a1","name":"jane","amount":"999.9"}]`,
	`[{"id":"a","email":"A@B.C","amount":1e3,"n":{"a": [1, 2]},"z":null,"b":false}]`,
	`[{"id":"a","x":1,"x":2}]`, `[{"id":"a","n":{"k":1,"k":2}}]`,
	`[{"id":"a","name":"x","NAME":"y"}]`, `[{"id":" a"}]`, `[{"id":"a\u200b"}]`,
	`[{"id":"a","a:b":1}]`, `[{"id":"a","":1}]`, `[{"id":"a","s":"\u0000"}]`,
	`[{"id":"a","amount":"0.123456789012345678901234567890123456789"}]`,
	`[{"id":"a","amount":"abc"}]`, `[{"id":"a","amount":-0.005}]`,
	`[{"id":"a"}] x`, `[{"id":"a"},{"id":"b"},{"id":"c"},{"id":"d"},{"id":"e"}]`,
	`[{"id":"a","n":[[[[[{"\u0078":1,"x":2}]]]]]}]`,
	"[{\"id\":\"\xff\"}]",
}

func FuzzParseBatch(f *testing.F) {
	for _, s := range seedBodies {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, body []byte) {
		const max = 4
		recs, err := ParseBatch(body, max)
		if err != nil {
			if recs != nil {
				t.Fatal("records with error")
			}
			code, index := codeOf(t, err)
			switch code {
			case codes.InvalidJSON, codes.BatchTooLarge:
				if index != -1 {
					t.Fatalf("%s with index %d", code, index)
				}
			case codes.InvalidRecord:
				if index < 0 || index >= max {
					t.Fatalf("%s with index %d", code, index)
				}
				if !json.Valid(body) {
					t.Fatalf("invalid JSON %q reported as %s", body, code)
				}
			default:
				t.Fatalf("unknown code %q", code)
			}
			return
		}
		if !json.Valid(body) {
			t.Fatalf("accepted invalid JSON %q", body)
		}
		var elems []map[string]json.RawMessage
		if err := json.Unmarshal(body, &elems); err != nil || len(elems) != len(recs) || len(recs) > max {
			t.Fatalf("accepted %q with %d records (%v)", body, len(recs), err)
		}
		for i, r := range recs {
			if !validID(r.ID) || len(r.Fields) != len(elems[i]) {
				t.Fatalf("record %d: %+v", i, r)
			}
			seen := map[string]bool{}
			for _, fl := range r.Fields {
				up := strings.ToUpper(fl.Name)
				if seen[up] || !validFieldName(fl.Name) || !json.Valid(fl.Value) {
					t.Fatalf("record %d field %q", i, fl.Name)
				}
				seen[up] = true
				if want := elems[i][fl.Name]; string(want) != string(fl.Value) {
					t.Fatalf("record %d field %q: raw %s, want %s", i, fl.Name, fl.Value, want)
				}
			}
		}
	})
}

func FuzzTransform(f *testing.F) {
	for _, s := range seedBodies {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, body []byte) {
		recs, err := ParseBatch(body, 8)
		if err != nil {
			return
		}
		rows, err := Transform(recs)
		if err != nil {
			if code, index := codeOf(t, err); code != codes.InvalidRecord || index < 0 || index >= len(recs) {
				t.Fatalf("Transform: %s@%d", code, index)
			}
			return
		}
		if len(rows) != len(recs) {
			t.Fatalf("%d rows for %d records", len(rows), len(recs))
		}
		for i, row := range rows {
			if row.RecordID != recs[i].ID {
				t.Fatalf("row %d id %q", i, row.RecordID)
			}
			if !strings.HasSuffix(row.Data, ",") || strings.IndexByte(row.Data, 0) >= 0 {
				t.Fatalf("row %d data %q", i, row.Data)
			}
			var norm map[string]json.RawMessage
			if err := json.Unmarshal(row.Normalized, &norm); err != nil || len(norm) != len(recs[i].Fields) {
				t.Fatalf("row %d normalized %s: %v", i, row.Normalized, err)
			}
			if !strings.HasPrefix(row.Data, strings.ToUpper(recs[i].Fields[0].Name)+":") {
				t.Fatalf("row %d data %q", i, row.Data)
			}
		}
		if got := ResponseText(rows); strings.Count(got, "Processed: ") != len(rows) {
			t.Fatalf("ResponseText %q", got)
		}
	})
}

// FuzzParseBatchPaths pins that ParseBatch's walk of valid JSON
// (parseValid) returns exactly what the token-stream parser returns: the
// same records, fields and raw values, or the same error and index.
func FuzzParseBatchPaths(f *testing.F) {
	for _, s := range seedBodies {
		f.Add([]byte(s), uint8(4))
	}
	for _, s := range []string{
		`[ {"id" : "a" , "x" : [ 1 , { "y" : "z" } ] } , 3 , {"id":"b"} ]`,
		`[{"id":"a","\u0069d":"b"}]`, `[{"id":"a\"b","n":"\\"}]`, `[{"id":1}]`,
		`[{"id":"a","n":[{"k":1},{"k":2}]}]`, `[{"id":"a","n":{"k":{"k":{"k":[]}}}}]`,
		`[{"id":"a","amount":1.5e3,"neg":-0.0e-1,"t":true,"f":false,"z":null}]`,
		`[{"id":"a"},{"id":"b","x":1,"x":2}]`, `[{"id":"a"},[{"x":1,"x":2}]]`,
		"[\n\t{\"id\":\"a\"}\r\n]\n", `[{"id":"a","s":"\ud800"}]`, `[{"id":"a","n":1e999999}]`,
		`[` + strings.Repeat(`[`, 130) + strings.Repeat(`]`, 130) + `]`,
		`[{"id":"a","n":` + strings.Repeat(`[`, 126) + strings.Repeat(`]`, 126) + `}]`,
		`[{"id":"a","n":` + strings.Repeat(`[`, 127) + strings.Repeat(`]`, 127) + `}]`,
	} {
		f.Add([]byte(s), uint8(4))
		f.Add([]byte(s), uint8(1))
	}
	f.Fuzz(func(t *testing.T, body []byte, max uint8) {
		if len(strings.TrimSpace(string(body))) == 0 || !utf8.Valid(body) || !json.Valid(body) {
			return
		}
		maxRecords := int(max%8) + 1
		want, wantErr := parseTokens(body, maxRecords)
		got, gotErr := parseValid(body, maxRecords)
		if !reflect.DeepEqual(gotErr, wantErr) {
			t.Fatalf("%q: error %v, want %v", body, gotErr, wantErr)
		}
		if !reflect.DeepEqual(got, want) {
			t.Fatalf("%q: records %+v, want %+v", body, got, want)
		}
	})
}

// FuzzValidate pins that Validate returns exactly Process's error.
func FuzzValidate(f *testing.F) {
	for _, s := range seedBodies {
		f.Add([]byte(s))
	}
	for _, s := range []string{
		`[{"id":"a","AMOUNT":"1.005","Name":"x","eMail":"Y"}]`, `[{"id":"a","amount":true}]`,
		`[{"id":"a","amount":{}}]`, `[{"id":"a","amount":"1e3"}]`, `[{"id":"a","amount":null}]`,
		`[{"id":"a","amount":1e3}]`, `[{"id":"a","amount":1e30}]`, `[{"id":"a","s":"a\"b"}]`,
		`[{"id":"a","s":"\u0000"}]`, `[{"id":"a","n":{"s":"\u0000"}}]`, `[{"id":"a","n":["\\u0000"]}]`,
		`[{"id":"a","ａｍｏｕｎｔ":"x"}]`, `[{"id":"a","amounｔ":"x"}]`,
	} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, body []byte) {
		_, want := Process(body, 8)
		if got := Validate(body, 8); !reflect.DeepEqual(got, want) {
			t.Fatalf("%q: Validate %v, Process %v", body, got, want)
		}
	})
}
