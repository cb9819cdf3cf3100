package chunked_test

import (
	"context"
	"fmt"
	"os"
	"strconv"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgtype"
	"github.com/mightyetl/mightyetl/internal/chunked"
	"github.com/mightyetl/mightyetl/internal/etl"
	"github.com/mightyetl/mightyetl/internal/lease"
	"github.com/mightyetl/mightyetl/internal/pgtest"
)

// benchRecords is the records per load of the load benchmarks:
// MIGHTYETL_BENCH_CHUNKED_RECORDS, default 100,000.
func benchRecords(b *testing.B) int {
	n := 100_000
	if s := os.Getenv("MIGHTYETL_BENCH_CHUNKED_RECORDS"); s != "" {
		v, err := strconv.Atoi(s)
		if err != nil || v <= 0 {
			b.Fatalf("MIGHTYETL_BENCH_CHUNKED_RECORDS=%q: want a positive count", s)
		}
		n = v
	}
	return n
}

// benchRecord appends record i as bench/large.go's large scenario writes it
// (one line of JSON Lines, about 112 bytes).
func benchRecord(b []byte, i int) []byte {
	return fmt.Appendf(b, `{"id":"r%09d","name":"jane doe","email":"Jane.Doe@Example.com","amount":"%d.%d","city":"springfield"}`+"\n",
		i, i%100000, i%10)
}

// BenchmarkLoad is one chunked job of benchRecords records (the large
// scenario's, in 16 MiB parts of 1 MiB stored chunks) loaded by
// Loader.Load with the product's chunk defaults, then its fenced success:
// the worker's part of bench/large.go's end-to-end run, without the upload
// and the claim poll. records/s is the figure; BenchmarkCopyBaseline is the
// same rows by one COPY on the same server, to run beside it.
//
// Sub-benchmarks by Config.Connections: 1 loads chunk after chunk, 2 (the
// default) copies the next chunk's rows while the previous one commits.
func BenchmarkLoad(b *testing.B) {
	for _, conns := range []int{1, 2} {
		b.Run(fmt.Sprintf("connections=%d", conns), func(b *testing.B) { benchLoad(b, conns) })
	}
}

func benchLoad(b *testing.B, conns int) {
	n := benchRecords(b)
	db, _ := pgtest.NewDatabase(b, pgtest.Options{MaxConns: 16})
	ctx := context.Background()
	var payload []byte
	for i := 1; i <= n; i++ {
		payload = benchRecord(payload, i)
	}
	var ps [][]byte
	for off := 0; off < len(payload); off += 16 << 20 {
		ps = append(ps, payload[off:min(off+16<<20, len(payload))])
	}
	loader := chunked.NewLoader(db, chunked.Config{Connections: conns})
	b.SetBytes(int64(len(payload)))
	var total time.Duration
	for b.Loop() {
		b.StopTimer()
		if _, err := db.Exec(ctx, `TRUNCATE processed_data`); err != nil {
			b.Fatal(err)
		}
		job, _ := pgtest.InsertChunkedUpload(b, db, pgtest.ChunkedUpload{Parts: ps})
		c := claimOne(b, db, "worker-bench-0001", 10*time.Minute)
		b.StartTimer()
		start := time.Now()
		if err := loader.Load(ctx, c.Ref); err != nil {
			b.Fatal(err)
		}
		if err := lease.SucceedChunked(ctx, db, c.Ref); err != nil {
			b.Fatal(err)
		}
		total += time.Since(start)
		b.StopTimer()
		var rows int
		if err := db.QueryRow(ctx, `SELECT count(*) FROM processed_data_visible WHERE job_record_id = $1`, job).Scan(&rows); err != nil || rows != n {
			b.Fatalf("%d visible rows, want %d (%v)", rows, n, err)
		}
		b.StartTimer()
	}
	b.ReportMetric(float64(n)*float64(b.N)/total.Seconds(), "records/s")
}

// benchCopySource feeds rows, transformed beforehand, to one COPY.
type benchCopySource struct {
	job        any // a uuid.UUID as bench/large.go sent it, or a pgtype.UUID
	data, norm [][]byte
	i          int
}

func (s *benchCopySource) Next() bool {
	s.i++
	return s.i <= len(s.data)
}

func (s *benchCopySource) Values() ([]any, error) {
	return []any{s.job, string(s.data[s.i-1]), s.norm[s.i-1]}, nil
}

func (s *benchCopySource) Err() error { return nil }

// BenchmarkCopyBaseline is BenchmarkLoad's rows, transformed beforehand
// (etl.AppendRecord), by one pgx CopyFrom into processed_data: the physical
// limit the load is measured against (bench/large.go's COPY run). The job
// id goes as a uuid.UUID (which pgx encodes through its text form and a
// failed binary plan, an error value per row) and as a pgtype.UUID (encoded
// directly; bench/large.go's since 2026-12-02).
func BenchmarkCopyBaseline(b *testing.B) {
	job := uuid.New()
	b.Run("uuid.UUID", func(b *testing.B) { benchCopy(b, job) })
	b.Run("pgtype.UUID", func(b *testing.B) { benchCopy(b, pgtype.UUID{Bytes: job, Valid: true}) })
}

func benchCopy(b *testing.B, job any) {
	n := benchRecords(b)
	db, _ := pgtest.NewDatabase(b)
	ctx := context.Background()
	data, norm := make([][]byte, n), make([][]byte, n)
	var line []byte
	for i := range n {
		line = benchRecord(line[:0], i+1)
		var err error
		if data[i], norm[i], err = etl.AppendRecord(nil, nil, line[:len(line)-1]); err != nil {
			b.Fatal(err)
		}
	}
	var total time.Duration
	for b.Loop() {
		b.StopTimer()
		if _, err := db.Exec(ctx, `TRUNCATE processed_data`); err != nil {
			b.Fatal(err)
		}
		b.StartTimer()
		start := time.Now()
		conn, err := db.Acquire(ctx)
		if err != nil {
			b.Fatal(err)
		}
		got, err := conn.Conn().CopyFrom(ctx, pgx.Identifier{"processed_data"}, []string{"job_record_id", "data", "normalized_record"},
			&benchCopySource{job: job, data: data, norm: norm})
		conn.Release()
		if err != nil || got != int64(n) {
			b.Fatalf("copied %d of %d: %v", got, n, err)
		}
		total += time.Since(start)
	}
	b.ReportMetric(float64(n)*float64(b.N)/total.Seconds(), "records/s")
}
