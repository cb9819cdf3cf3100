package etl

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/mightyetl/mightyetl/internal/codes"
)

// The values PostgreSQL refuses are refused as invalid records, at any depth,
// and their near neighbours that it stores are accepted.
func TestParseBatchRefusesValuesPostgreSQLCannotStore(t *testing.T) {
	for _, c := range []struct {
		name, record string
		ok           bool
	}{
		{"huge exponent", `{"id":"a1","qty":1e999999}`, false},
		{"huge exponent nested", `{"id":"a1","x":{"y":[1,2,{"z":-1e999999}]}}`, false},
		{"131,072 integer digits", `{"id":"a1","x":1e131071}`, true},
		{"131,073 integer digits", `{"id":"a1","x":1e131072}`, false},
		{"16,383 fraction digits", `{"id":"a1","x":1e-16383}`, true},
		{"16,384 fraction digits", `{"id":"a1","x":1e-16384}`, false},
		{"tiny", `{"id":"a1","x":1e-999999}`, false},
		{"zero with a huge exponent", `{"id":"a1","x":0e999999}`, true},
		{"scale from the mantissa", `{"id":"a1","x":1.5e-16382}`, true},
		{"scale from the mantissa, one more", `{"id":"a1","x":1.50e-16382}`, false},
		{"leading zeros do not count", `{"id":"a1","x":0.0001e131074}`, true},
		{"lone high surrogate", `{"id":"a1","x":"\ud800"}`, false},
		{"lone low surrogate nested", `{"id":"a1","x":[["\udc00"]]}`, false},
		{"high surrogate then letter", `{"id":"a1","x":"\ud800a"}`, false},
		{"pair", `{"id":"a1","x":"\ud83d\ude00"}`, true},
		{"NUL", `{"id":"a1","x":"a\u0000b"}`, false},
		{"NUL in a nested key", `{"id":"a1","x":{"\u0000":1}}`, false},
		{"escaped backslash then u", `{"id":"a1","x":"\\u0000"}`, true},
		{"plain", `{"id":"a1","name":"jane","x":[1,2.5,-3e5,true,null,"s"]}`, true},
		// AMOUNT is stored as its rounded decimal, not as given.
		{"tiny amount rounds to 0.00", `{"id":"a1","amount":1e-1000000000000}`, true},
		{"NUL in NAME", `{"id":"a1","name":"a\u0000"}`, false},
	} {
		rows, err := ParseBatch([]byte("["+c.record+"]"), 10)
		var ee *Error
		switch {
		case c.ok && (err != nil || len(rows) != 1):
			t.Errorf("%s: %v, want accepted", c.name, err)
		case !c.ok && (!errors.As(err, &ee) || ee.Code != codes.InvalidRecord):
			t.Errorf("%s: %v, want %s", c.name, err, codes.InvalidRecord)
		}
	}
}

// Every accepted batch loads: the loader's own statement stores what the
// validator accepted (and the validator refuses what PostgreSQL refuses), on
// a real server, for the seeds above and whatever the fuzzer finds.
func FuzzAcceptedBatchesLoadIntoJSONB(f *testing.F) {
	for _, s := range []string{
		`[{"id":"a1","qty":1e999999}]`, `[{"id":"a1","x":1e131071}]`, `[{"id":"a1","x":1e-16383}]`,
		`[{"id":"a1","x":"\ud800"}]`, `[{"id":"a1","x":"\ud83d\ude00"}]`, `[{"id":"a1","x":{"\u0000":1}}]`,
		`[{"id":"a1","x":0e999999,"y":[0.0001e131074]}]`, `[{"id":"a1","name":"jane","amount":"999.9"}]`,
		`[{"id":"a1","amount":1e-1000000000000}]`, `[{"id":"a1","name":"a\u0000"}]`,
	} {
		f.Add([]byte(s))
	}
	conn := testDB(f)
	f.Fuzz(func(t *testing.T, body []byte) {
		rows, err := Process(body, 100)
		if err != nil {
			return
		}
		target := make([]TargetRow, len(rows))
		for i, r := range rows {
			target[i] = TargetRow{Data: r.Data, Normalized: r.Normalized}
		}
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		tx, err := conn.Begin(ctx)
		if err != nil {
			t.Fatal(err)
		}
		defer func() { _ = tx.Rollback(ctx) }()
		if err := LoadRows(ctx, tx, target); err != nil {
			t.Fatalf("an accepted batch does not load: %v", err)
		}
		if err := tx.Rollback(ctx); err != nil && !errors.Is(err, pgx.ErrTxClosed) {
			t.Fatal(err)
		}
	})
}
