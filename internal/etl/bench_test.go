package etl

import (
	"fmt"
	"testing"
)

func BenchmarkProcess(b *testing.B) {
	var body []byte
	body = append(body, '[')
	for i := 0; i < 1000; i++ {
		if i > 0 {
			body = append(body, ',')
		}
		body = fmt.Appendf(body, `{"id":"rec-%06d","name":"Jane Doe %d","email":"Jane.Doe%d@Example.com",`+
			`"amount":"%d.455","active":true,"score":%d.5,"tags":["a", "b"],"note":null}`, i, i, i, i, i)
	}
	body = append(body, ']')
	b.SetBytes(int64(len(body)))
	b.ReportAllocs()
	for b.Loop() {
		rows, err := Process(body, 1000)
		if err != nil || len(rows) != 1000 {
			b.Fatal(err)
		}
	}
}

// BenchmarkProcessSubmitBody is Process on the body of the HTTP intake
// bench (two short records): the per-request share of a submission.
func BenchmarkProcessSubmitBody(b *testing.B) {
	body := []byte(`[{"id":"r1","name":"jane","email":"J@X.ORG","amount":"12.345"},{"id":"r2","name":"joe","amount":7}]`)
	b.ReportAllocs()
	for b.Loop() {
		rows, err := Process(body, 1000)
		if err != nil || len(rows) != 2 {
			b.Fatal(err)
		}
	}
}

// BenchmarkValidateSubmitBody is Validate, the check of a durable
// submission, on the body of BenchmarkProcessSubmitBody.
func BenchmarkValidateSubmitBody(b *testing.B) {
	body := []byte(`[{"id":"r1","name":"jane","email":"J@X.ORG","amount":"12.345"},{"id":"r2","name":"joe","amount":7}]`)
	b.ReportAllocs()
	for b.Loop() {
		if err := Validate(body, 1000); err != nil {
			b.Fatal(err)
		}
	}
}
