package etl

import (
	"context"
	"fmt"
	"reflect"
	"strings"
	"testing"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
)

// storedRow is a processed_data row as the database holds it.
type storedRow struct {
	Job  *uuid.UUID
	Data string
	Norm string // normalized_record::text, PostgreSQL's own rendering
}

func readStored(t *testing.T, conn *pgx.Conn) []storedRow {
	t.Helper()
	rows, err := conn.Query(context.Background(), `SELECT job_record_id, data, normalized_record::text
		FROM processed_data ORDER BY processed_data_id`)
	if err != nil {
		t.Fatal(err)
	}
	all, err := pgx.CollectRows(rows, func(r pgx.CollectableRow) (storedRow, error) {
		var s storedRow
		err := r.Scan(&s.Job, &s.Data, &s.Norm)
		return s, err
	})
	if err != nil {
		t.Fatal(err)
	}
	return all
}

func inTx(t *testing.T, conn *pgx.Conn, f func(tx pgx.Tx) error) {
	t.Helper()
	ctx := context.Background()
	tx, err := conn.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if err := f(tx); err != nil {
		_ = tx.Rollback(ctx)
		t.Fatal(err)
	}
	if err := tx.Commit(ctx); err != nil {
		t.Fatal(err)
	}
}

// TestCopyRowsStoresWhatLoadRowsStores pins that a chunked load's binary
// COPY stores, row for row, what LoadRows stores for Process's rows of the
// same records (the common one-pass records and those through Process,
// escapes, nesting and non-ASCII included), for a job and for NULL.
func TestCopyRowsStoresWhatLoadRowsStores(t *testing.T) {
	conn := testDB(t)
	ctx := context.Background()
	records := []string{
		`{"id":"r000000001","name":"jane doe","email":"Jane.Doe@Example.com","amount":"1.1","city":"springfield"}`,
		`{"id":"r2","name":"n\u00e9","amount":"7.005","nested":{"a":[1, null]},"s":"<&>'\"\\"}`,
		`{"id":"r3","name":"Zoë","email":"ÄB@X.DE","amount":-12,"t":true,"z":null,"n":-1.5e3}`,
		`{"id":"r4","tab":"a\tb","quote":"\"","u":"\ud83d\ude00"}`,
	}
	for i := range 200 {
		records = append(records, fmt.Sprintf(`{"id":"x%d","amount":"%d.%d","city":"c"}`, i, i, i%10))
	}
	for _, job := range []uuid.UUID{uuid.New(), uuid.Nil} {
		if _, err := conn.Exec(ctx, "TRUNCATE processed_data"); err != nil {
			t.Fatal(err)
		}
		target := make([]TargetRow, len(records))
		for i, rec := range records {
			rows, err := Process([]byte("["+rec+"]"), 1)
			if err != nil {
				t.Fatalf("%s: %v", rec, err)
			}
			target[i] = TargetRow{JobID: job, Data: rows[0].Data, Normalized: rows[0].Normalized}
		}
		inTx(t, conn, func(tx pgx.Tx) error { return LoadRows(ctx, tx, target) })
		want := readStored(t, conn)
		if _, err := conn.Exec(ctx, "TRUNCATE processed_data"); err != nil {
			t.Fatal(err)
		}
		cr := NewCopyRows(job)
		if err := cr.AppendRecord([]byte(`{"id":"gone"}`)); err != nil {
			t.Fatal(err)
		}
		cr.Reset() // forgets it
		for _, rec := range records {
			if err := cr.AppendRecord([]byte(rec)); err != nil {
				t.Fatalf("%s: %v", rec, err)
			}
		}
		if err := cr.AppendRecord([]byte(`{"id":"r9","amount":"x"}`)); err == nil {
			t.Fatal("an invalid AMOUNT was accepted")
		}
		if cr.Len() != len(records) {
			t.Fatalf("Len %d, want %d", cr.Len(), len(records))
		}
		inTx(t, conn, func(tx pgx.Tx) error { return cr.Load(ctx, tx) })
		if got := readStored(t, conn); !reflect.DeepEqual(got, want) {
			t.Fatalf("job %v: COPY stored\n%+v\nLoadRows stored\n%+v", job, got[:4], want[:4])
		}
	}
}

// TestCopyRowsLoadErrors: an empty batch is a no-op; a refused COPY is
// wrapped "load processed rows:" and rolls back with the caller.
func TestCopyRowsLoadErrors(t *testing.T) {
	conn := testDB(t)
	ctx := context.Background()
	if err := NewCopyRows(uuid.New()).Load(ctx, nil); err != nil {
		t.Fatal(err)
	}
	if _, err := conn.Exec(ctx, `ALTER TABLE processed_data ADD CONSTRAINT short_data CHECK (length(data) < 40)`); err != nil {
		t.Fatal(err)
	}
	cr := NewCopyRows(uuid.New())
	for _, rec := range []string{`{"id":"a"}`, `{"id":"b","city":"a long city name that breaks the check"}`} {
		if err := cr.AppendRecord([]byte(rec)); err != nil {
			t.Fatal(err)
		}
	}
	tx, err := conn.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	err = cr.Load(ctx, tx)
	_ = tx.Rollback(ctx)
	if err == nil || !strings.HasPrefix(err.Error(), "load processed rows:") {
		t.Fatalf("err = %v", err)
	}
	if got := readStored(t, conn); len(got) != 0 {
		t.Fatalf("%d rows after rollback", len(got))
	}
}
