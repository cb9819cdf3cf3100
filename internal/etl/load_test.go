package etl

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"strconv"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"

	"github.com/mightyetl/mightyetl/internal/pgtest"
)

const processedDataDDL = `CREATE TABLE processed_data (
	processed_data_id bigserial PRIMARY KEY,
	job_record_id uuid NULL,
	data text NOT NULL,
	normalized_record jsonb NOT NULL,
	created_at timestamptz NOT NULL DEFAULT clock_timestamp()
)`

// testDB creates an isolated database with the processed_data table and drops it when the
// test ends. The server is pgtest.ServerURL's (TEST_DATABASE_URL, else the local one); with
// none the test fails.
func testDB(t testing.TB) *pgx.Conn {
	t.Helper()
	url := pgtest.ServerURL(t)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	admin, err := pgx.Connect(ctx, url)
	if err != nil {
		t.Fatalf("connect: %v", err)
	}
	t.Cleanup(func() { _ = admin.Close(context.Background()) })

	suffix := make([]byte, 8)
	_, _ = rand.Read(suffix)
	name := "etl_pkg_test_" + hex.EncodeToString(suffix)
	if _, err := admin.Exec(ctx, "CREATE DATABASE "+name); err != nil {
		t.Fatalf("create database: %v", err)
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		if _, err := admin.Exec(ctx, "DROP DATABASE IF EXISTS "+name+" WITH (FORCE)"); err != nil {
			t.Errorf("drop database: %v", err)
		}
	})

	cfg, err := pgx.ParseConfig(url)
	if err != nil {
		t.Fatalf("parse url: %v", err)
	}
	cfg.Database = name
	conn, err := pgx.ConnectConfig(ctx, cfg)
	if err != nil {
		t.Fatalf("connect to %s: %v", name, err)
	}
	t.Cleanup(func() { _ = conn.Close(context.Background()) })
	if _, err := conn.Exec(ctx, processedDataDDL); err != nil {
		t.Fatalf("create table: %v", err)
	}
	return conn
}

func TestLoadRows(t *testing.T) {
	conn := testDB(t)
	ctx := context.Background()

	for _, n := range []int{10, copyThreshold - 1, copyThreshold, 200} {
		t.Run(strconv.Itoa(n), func(t *testing.T) {
			if _, err := conn.Exec(ctx, "TRUNCATE processed_data"); err != nil {
				t.Fatal(err)
			}
			job := uuid.New()
			var body []byte
			body = append(body, '[')
			for i := 0; i < n; i++ {
				if i > 0 {
					body = append(body, ',')
				}
				body = fmt.Appendf(body, `{"id":"r%d","name":"n\u00e9 %d","amount":"%d.005","nested":{"a":[%d, null]},"s":"<&>'\"\\"}`, i, i, i, i)
			}
			body = append(body, ']')
			rows, err := Process(body, n)
			if err != nil {
				t.Fatal(err)
			}
			target := make([]TargetRow, n)
			for i, r := range rows {
				target[i] = TargetRow{JobID: job, Data: r.Data, Normalized: r.Normalized}
				if i%2 == 1 {
					target[i].JobID = uuid.Nil // the sync path stores NULL
				}
			}

			tx, err := conn.Begin(ctx)
			if err != nil {
				t.Fatal(err)
			}
			if err := LoadRows(ctx, tx, target); err != nil {
				_ = tx.Rollback(ctx)
				t.Fatal(err)
			}
			if err := tx.Commit(ctx); err != nil {
				t.Fatal(err)
			}

			got, err := conn.Query(ctx, `SELECT job_record_id, data, normalized_record::text
				FROM processed_data ORDER BY processed_data_id`)
			if err != nil {
				t.Fatal(err)
			}
			type stored struct {
				job  *uuid.UUID
				data string
				norm string
			}
			all, err := pgx.CollectRows(got, func(r pgx.CollectableRow) (stored, error) {
				var s stored
				err := r.Scan(&s.job, &s.data, &s.norm)
				return s, err
			})
			if err != nil {
				t.Fatal(err)
			}
			if len(all) != n {
				t.Fatalf("stored %d rows, want %d", len(all), n)
			}
			for i, s := range all {
				wantData := fmt.Sprintf(`ID:r%d,NAME:NÉ %d,AMOUNT:%d.01,NESTED:{"a":[%d,null]},S:<&>'"\,`, i, i, i, i)
				if s.data != wantData {
					t.Fatalf("row %d data %q, want %q", i, s.data, wantData)
				}
				if i%2 == 1 && s.job != nil || i%2 == 0 && (s.job == nil || *s.job != job) {
					t.Fatalf("row %d job_record_id %v", i, s.job)
				}
				var gotNorm, wantNorm any
				if err := json.Unmarshal([]byte(s.norm), &gotNorm); err != nil {
					t.Fatal(err)
				}
				if err := json.Unmarshal(rows[i].Normalized, &wantNorm); err != nil {
					t.Fatal(err)
				}
				if fmt.Sprint(gotNorm) != fmt.Sprint(wantNorm) {
					t.Fatalf("row %d normalized %s, want %s", i, s.norm, rows[i].Normalized)
				}
			}
			var amount string
			if err := conn.QueryRow(ctx, `SELECT normalized_record->>'AMOUNT' FROM processed_data
				ORDER BY processed_data_id LIMIT 1`).Scan(&amount); err != nil || amount != "0.01" {
				t.Fatalf("AMOUNT = %q, %v", amount, err)
			}
		})
	}
}

func TestLoadRowsRollsBackWithCaller(t *testing.T) {
	conn := testDB(t)
	ctx := context.Background()
	for _, n := range []int{1, 100} {
		rows := make([]TargetRow, n)
		for i := range rows {
			rows[i] = TargetRow{Data: "ID:x,", Normalized: []byte(`{"ID":"x"}`)}
		}
		tx, err := conn.Begin(ctx)
		if err != nil {
			t.Fatal(err)
		}
		if err := LoadRows(ctx, tx, rows); err != nil {
			t.Fatal(err)
		}
		if err := tx.Rollback(ctx); err != nil {
			t.Fatal(err)
		}
	}
	var count int
	if err := conn.QueryRow(ctx, "SELECT count(*) FROM processed_data").Scan(&count); err != nil || count != 0 {
		t.Fatalf("count = %d, %v", count, err)
	}
}

func TestLoadRowsErrors(t *testing.T) {
	conn := testDB(t)
	ctx := context.Background()
	for _, n := range []int{1, 100} {
		rows := make([]TargetRow, n)
		for i := range rows {
			rows[i] = TargetRow{Data: "ID:x,", Normalized: []byte(`{"ID":`)} // not JSON
		}
		tx, err := conn.Begin(ctx)
		if err != nil {
			t.Fatal(err)
		}
		err = LoadRows(ctx, tx, rows)
		_ = tx.Rollback(ctx)
		if err == nil || len(err.Error()) < 20 || err.Error()[:20] != "load processed rows:" {
			t.Fatalf("%d rows: err = %v", n, err)
		}
	}
	// No rows is a no-op and needs no usable transaction.
	if err := LoadRows(ctx, nil, nil); err != nil {
		t.Fatal(err)
	}
}
