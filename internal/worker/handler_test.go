package worker_test

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"strings"
	"testing"

	"github.com/mightyetl/mightyetl/internal/lease"
	"github.com/mightyetl/mightyetl/internal/worker"
)

// TestHandlersLeaveThePayloadUnchanged: the handlers read the claim's
// payload through a view of the string's own memory (no copy), so neither
// they nor the etl parsers may ever write into it. Each payload is built at
// run time (heap memory, where a write would not fault) and compared with a
// copy after the handler ran, whatever the handler's outcome.
func TestHandlersLeaveThePayloadUnchanged(t *testing.T) {
	payloads := map[string][]string{
		"diagnostic": {
			`{"durationMillis":0,"records":[{"id":"a","name":" Ada ","email":"ADA@EXAMPLE.COM","amount":"1.005"}],"failWith":null}`,
			`{"records":[{"id":"b","amount":"x"}]}`,
			`{"failWith":"permanent"}`,
			`{"durationMillis":"no"}`,
			`not json`,
		},
		"etl_records": {
			`[{"id":"r1","name":"  ada  lovelace ","email":" ADA@Example.COM ","amount":"12.345"},{"id":"r2","tags":["x","y"],"nested":{"k":"V"}}]`,
			`[{"id":"r1"},{"id":"r1"}]`,
			`[{"amount":"1e400"}]`,
			`{"not":"an array"}`,
		},
	}
	handlers := worker.DefaultHandlers(1000)
	for kind, list := range payloads {
		h := handlers[kind]
		if h == nil {
			t.Fatalf("no handler for %s", kind)
		}
		for _, p := range list {
			payload := strings.Clone(" " + p)[1:] // heap memory, not a literal
			sum := sha256.Sum256([]byte(payload))
			c := &lease.Claim{Kind: kind, Payload: payload, RequestDigest: hex.EncodeToString(sum[:]), Attempt: 1, MaxAttempts: 3}
			before := strings.Clone(payload)
			if _, err := h(context.Background(), c); err != nil && kind == "etl_records" && p == list[0] {
				t.Fatalf("valid etl payload refused: %v", err)
			}
			if c.Payload != before {
				t.Fatalf("%s handler changed its payload:\n%s\n%s", kind, before, c.Payload)
			}
		}
	}
}
