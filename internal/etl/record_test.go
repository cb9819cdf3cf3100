package etl

import (
	"bytes"
	"reflect"
	"strings"
	"testing"
)

// processOne is what AppendRecord must equal: Process of the one-element
// batch.
func processOne(raw []byte) (data, norm []byte, err error) {
	rows, err := Process(append(append([]byte{'['}, raw...), ']'), 1)
	if err != nil {
		return nil, nil, err
	}
	if len(rows) == 0 {
		return nil, nil, invalidRecord(0) // AppendRecord's rule for no record
	}
	return []byte(rows[0].Data), rows[0].Normalized, nil
}

var recordSeeds = []string{
	`{"id":"r000000001","name":"jane doe","email":"Jane.Doe@Example.com","amount":"1.1","city":"springfield"}`,
	`{"id":"a1","name":"jane","amount":"999.9"}`, ` { "id" : "a" , "amount" : 12.345 } `,
	`{"id":"a","amount":"-0.00"}`, `{"id":"a","amount":"-0.5"}`, `{"id":"a","amount":"007.05"}`,
	`{"id":"a","amount":-0}`, `{"id":"a","amount":0.5e1}`, `{"id":"a","amount":"1e3"}`, `{"id":"a","amount":"1."}`,
	`{"id":"a","amount":".5"}`, `{"id":"a","amount":"+1"}`, `{"id":"a","amount":"-"}`, `{"id":"a","amount":""}`,
	`{"id":"a","amount":"999999999999999999.99"}`, `{"id":"a","amount":"1000000000000000000"}`,
	`{"id":"a","amount":"0000000000000000000000001.5"}`, `{"id":"a","amount":true}`, `{"id":"a","amount":null}`,
	`{"id":"a","name":"Zoë Ölsen","email":"ÄB@X.DE","city":"Köln"}`, `{"id":"a","name":"ſ","email":"K"}`,
	`{"id":"a","x":1,"x":2}`, `{"id":"a","x":1,"X":2}`, `{"id":"a","a:b":1}`, `{"id":"a","":1}`, `{"id":"a","\u0078":1}`,
	`{"id":" a"}`, `{"id":"a "}`, `{"id":""}`, `{"id":"a\u200b"}`, "{\"id\":\"a\x7f\"}", "{\"id\":\"a\u200b\"}",
	`{"id":1}`, `{"name":"x"}`, `{}`, `[]`, `1`, `"s"`, `null`, ``, ` `, `{"id":"a"},{"id":"b"}`, `{"id":"a"}]`,
	`{"id":"a"} x`, `{"id":"a",}`, `{"id":"a" "b":1}`, `{"id":"a","n":01}`, `{"id":"a","n":1.}`, `{"id":"a","n":-}`,
	`{"id":"a","n":1e}`, `{"id":"a","n":1e+5}`, `{"id":"a","n":1e999999}`, `{"id":"a","n":tru}`, `{"id":"a","n":nul}`,
	`{"id":"a","n":{"k":1}}`, `{"id":"a","n":[1,2]}`, `{"id":"a","s":"\u0000"}`, `{"id":"a","s":"a\"b"}`,
	"{\"id\":\"a\",\"s\":\"tab\there\"}", "{\"id\":\"\xff\"}", "\r\n{\"id\":\"a\"}\r",
	`{"id":"a","f1":1,"f2":2,"f3":3,"f4":4,"f5":5,"f6":6,"f7":7,"f8":8,"f9":9,"f10":10,"f11":11,"f12":12,"f13":13,"f14":14,"f15":15}`,
	`{"id":"a","f1":1,"f2":2,"f3":3,"f4":4,"f5":5,"f6":6,"f7":7,"f8":8,"f9":9,"f10":10,"f11":11,"f12":12,"f13":13,"f14":14,"f15":15,"f16":16}`,
	`{"id":"` + strings.Repeat("x", 256) + `"}`, `{"id":"` + strings.Repeat("x", 257) + `"}`,
}

func TestAppendRecordEqualsProcess(t *testing.T) {
	for _, s := range recordSeeds {
		checkAppendRecord(t, []byte(s))
	}
}

// TestAppendRecordTakesCommonRecords pins that the common records take the
// one-pass path (the fallback would give the same bytes, slower).
func TestAppendRecordTakesCommonRecords(t *testing.T) {
	for _, s := range []string{
		`{"id":"r000000001","name":"jane doe","email":"Jane.Doe@Example.com","amount":"1.1","city":"springfield"}`,
		`{"id":"a1","name":"Zoë","amount":12.5,"active":true,"score":-3.25e2,"note":null}`,
	} {
		if _, _, ok := appendFlatRecord(nil, nil, []byte(s)); !ok {
			t.Errorf("%s: not taken by the one-pass path", s)
		}
	}
}

// TestAppendRecordKeepsBuffersOnRejection pins that a rejected record
// appends nothing.
func TestAppendRecordKeepsBuffersOnRejection(t *testing.T) {
	for _, s := range []string{`{"id":"a","amount":"x"}`, `{"id":"a","amount":true}`, `{"id":" a"}`, `{`} {
		data, norm, err := AppendRecord([]byte("DATA"), []byte("NORM"), []byte(s))
		if err == nil || string(data) != "DATA" || string(norm) != "NORM" {
			t.Errorf("%s: %q %q %v", s, data, norm, err)
		}
	}
}

func checkAppendRecord(t *testing.T, raw []byte) {
	t.Helper()
	wantData, wantNorm, wantErr := processOne(raw)
	data, norm, err := AppendRecord([]byte("prefix:"), []byte("prefix:"), raw)
	if !reflect.DeepEqual(err, wantErr) {
		t.Fatalf("%q: error %v, want %v", raw, err, wantErr)
	}
	if err != nil {
		if string(data) != "prefix:" || string(norm) != "prefix:" {
			t.Fatalf("%q: rejected but appended %q, %q", raw, data, norm)
		}
		return
	}
	if !bytes.Equal(data, append([]byte("prefix:"), wantData...)) || !bytes.Equal(norm, append([]byte("prefix:"), wantNorm...)) {
		t.Fatalf("%q:\n data %q\n want %q\n norm %q\n want %q", raw, data[7:], wantData, norm[7:], wantNorm)
	}
}

// FuzzAppendRecord pins that AppendRecord (its one-pass path included) gives
// exactly Process's row or error for any record.
func FuzzAppendRecord(f *testing.F) {
	for _, s := range recordSeeds {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, raw []byte) {
		checkAppendRecord(t, raw)
	})
}

// BenchmarkAppendRecord is the per-record transform of a chunked load on
// the large benchmark's record (bench/large.go).
func BenchmarkAppendRecord(b *testing.B) {
	raw := []byte(`{"id":"r000000001","name":"jane doe","email":"Jane.Doe@Example.com","amount":"1.1","city":"springfield"}`)
	var data, norm []byte
	b.ReportAllocs()
	for b.Loop() {
		var err error
		if data, norm, err = AppendRecord(data[:0], norm[:0], raw); err != nil {
			b.Fatal(err)
		}
	}
}

// BenchmarkProcessOneRecord is what a chunked load did per record before
// AppendRecord: Process of the one-element batch.
func BenchmarkProcessOneRecord(b *testing.B) {
	raw := []byte(`{"id":"r000000001","name":"jane doe","email":"Jane.Doe@Example.com","amount":"1.1","city":"springfield"}`)
	buf := make([]byte, 0, 256)
	b.ReportAllocs()
	for b.Loop() {
		buf = append(append(append(buf[:0], '['), raw...), ']')
		if _, err := Process(buf, 1); err != nil {
			b.Fatal(err)
		}
	}
}
