package main

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"net/http"
	"os"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgtype"
)

// The large scenario (issue 32, docs/performance.md "Large jobs"): N records
// of JSON Lines, generated on the fly, are uploaded through the real
// cmd/intake's upload routes and loaded by a real cmd/worker as one chunked
// job; measured from the first upload request until the job is SUCCEEDED
// (its rows become visible in the same commit), against one COPY of the
// same transformed rows into processed_data on the same server. The crash
// variant SIGKILLs the worker once the job's checkpoint passed half the
// records and starts another; it must resume from the checkpoint and load
// no record twice.

// largeOptions are the large scenario's settings.
type largeOptions struct {
	// N is the number of records (default 10,000,000; -quick 100,000).
	N int `json:"n"`
	// PartBytes is the size of each uploaded part (default 16 MiB); records
	// span part boundaries.
	PartBytes int `json:"part_bytes"`
	// Crash runs the SIGKILL variant too.
	Crash bool `json:"crash"`
	// Lease is the worker's lease duration (0: the product default, 30s),
	// which bounds how soon the second worker takes over in the crash run.
	Lease time.Duration `json:"lease_ns,omitempty"`
	// ChunkRecords is MIGHTYETL_CHUNK_RECORDS (0: the worker's default).
	ChunkRecords int `json:"chunk_records,omitempty"`
	// ChunkConns is MIGHTYETL_CHUNK_CONNECTIONS (0: the worker's default).
	ChunkConns int `json:"chunk_connections,omitempty"`
	// Timeout bounds each run's wait for the job (0: 10 minutes plus 1 ms
	// per record).
	Timeout time.Duration `json:"timeout_ns,omitempty"`
}

func addLargeFlags(fs *flag.FlagSet, o *largeOptions) {
	fs.IntVar(&o.N, "large-n", 0, "large: records in the job (default 10000000, -quick 100000; about 112 bytes of JSON Lines each)")
	fs.IntVar(&o.PartBytes, "large-part-bytes", 16<<20, "large: bytes per uploaded part")
	fs.BoolVar(&o.Crash, "large-crash", true, "large: also run the variant that SIGKILLs the worker near 50%")
	fs.DurationVar(&o.Lease, "large-lease", 0, "large: the workers' MIGHTYETL_LEASE_DURATION (0: the product default)")
	fs.IntVar(&o.ChunkRecords, "large-chunk-records", 0, "large: the workers' MIGHTYETL_CHUNK_RECORDS (0: the product default)")
	fs.IntVar(&o.ChunkConns, "large-chunk-connections", 0, "large: the workers' MIGHTYETL_CHUNK_CONNECTIONS (0: the product default)")
	fs.DurationVar(&o.Timeout, "large-timeout", 0, "large: how long a run may wait for its job (0: 10m plus 1ms per record)")
}

// largeCopyJobID is the job_record_id the COPY baseline's rows carry, as a
// pgtype.UUID: pgx encodes it directly, where a uuid.UUID goes through its
// text form and a failed binary plan (an error value built per row, about
// half the baseline client's CPU; its effect on the COPY's time was within
// the noise in internal/chunked's BenchmarkCopyBaseline).
var largeCopyJobID = pgtype.UUID{Bytes: uuid.MustParse("3a7c0000-0000-4000-8000-000000000032"), Valid: true}

// appendLargeRecord appends record i (1-based) as one line of JSON Lines:
// {"id":"r<i, 9 digits>","name":"jane doe","email":"Jane.Doe@Example.com",
// "amount":"<i mod 100000>.<i mod 10>","city":"springfield"} and a newline
// (about 112 bytes). bench/largevisibility/gen.sh writes the same records,
// transformed.
func appendLargeRecord(b []byte, i int) []byte {
	b = append(b, `{"id":"r`...)
	b = appendPadded(b, i, 9)
	b = append(b, `","name":"jane doe","email":"Jane.Doe@Example.com","amount":"`...)
	b = appendAmount(b, i)
	return append(b, "\",\"city\":\"springfield\"}\n"...)
}

// appendLargeRow appends record i transformed as internal/etl does: the
// data text and the normalized JSON (TestLargeRowsMatchTransform pins them).
func appendLargeRow(data, norm []byte, i int) ([]byte, []byte) {
	data = append(data, "ID:r"...)
	data = appendPadded(data, i, 9)
	data = append(data, ",NAME:JANE DOE,EMAIL:jane.doe@example.com,AMOUNT:"...)
	data = appendAmount(data, i)
	data = append(data, "0,CITY:springfield,"...)
	norm = append(norm, `{"ID":"r`...)
	norm = appendPadded(norm, i, 9)
	norm = append(norm, `","NAME":"JANE DOE","EMAIL":"jane.doe@example.com","AMOUNT":"`...)
	norm = appendAmount(norm, i)
	norm = append(norm, `0","CITY":"springfield"}`...)
	return data, norm
}

func appendAmount(b []byte, i int) []byte {
	b = strconv.AppendInt(b, int64(i%100000), 10)
	b = append(b, '.')
	return strconv.AppendInt(b, int64(i%10), 10)
}

func appendPadded(b []byte, v, width int) []byte {
	var digits [20]byte
	s := strconv.AppendInt(digits[:0], int64(v), 10)
	for range width - len(s) {
		b = append(b, '0')
	}
	return append(b, s...)
}

// largeStream is the JSON Lines payload of records 1..n, generated as it
// is read (never held whole).
type largeStream struct {
	n, next int
	buf     []byte // the record being sent (its memory reused)
	pending []byte // what of it is not read yet
}

func newLargeStream(n int) *largeStream { return &largeStream{n: n, next: 1} }

func (s *largeStream) Read(p []byte) (int, error) {
	w := 0
	for w < len(p) {
		if len(s.pending) == 0 {
			if s.next > s.n {
				break
			}
			s.buf = appendLargeRecord(s.buf[:0], s.next)
			s.pending = s.buf
			s.next++
		}
		c := copy(p[w:], s.pending)
		w += c
		s.pending = s.pending[c:]
	}
	if w == 0 {
		return 0, io.EOF
	}
	return w, nil
}

// largeCopySource feeds records 1..n, transformed, to one COPY.
type largeCopySource struct {
	n, i       int
	data, norm []byte
}

func (s *largeCopySource) Next() bool {
	if s.i >= s.n {
		return false
	}
	s.i++
	s.data, s.norm = appendLargeRow(s.data[:0], s.norm[:0], s.i)
	return true
}

func (s *largeCopySource) Values() ([]any, error) {
	return []any{largeCopyJobID, string(s.data), s.norm}, nil
}

func (s *largeCopySource) Err() error { return nil }

// large runs COPY, the uncrashed run, the crash run (with -large-crash) and
// COPY again, each on a fresh database, and the ratios against the mean of
// the two COPY runs (made before and after, on the same server).
func (h *harness) large(ctx context.Context) ([]Result, error) {
	o := h.o.Large
	if o.N <= 0 {
		o.N = 10_000_000
		if h.o.Quick {
			o.N = 100_000
		}
	}
	if o.PartBytes <= 0 {
		o.PartBytes = 16 << 20
	}
	if o.Timeout <= 0 {
		o.Timeout = 10*time.Minute + time.Duration(o.N)*time.Millisecond
	}
	var out []Result
	copy1, err := h.largeCopy(ctx, o, 1)
	out = append(out, copy1)
	if err != nil {
		return out, err
	}
	plain, err := h.largeRun(ctx, o, false)
	out = append(out, plain)
	if err != nil {
		return out, err
	}
	var crashed Result
	if o.Crash {
		crashed, err = h.largeRun(ctx, o, true)
		out = append(out, crashed)
		if err != nil {
			return out, err
		}
	}
	copy2, err := h.largeCopy(ctx, o, 2)
	out = append(out, copy2)
	if err != nil {
		return out, err
	}
	sum := Result{System: "mightyetl", Scenario: "large", Variant: "summary", Metrics: map[string]float64{},
		Settings: map[string]string{"records": itoa(o.N), "copy": "the mean of the COPY runs before and after"}}
	copyRate := (copy1.Metrics["records_per_s"] + copy2.Metrics["records_per_s"]) / 2
	copyWAL := (copy1.Metrics["wal_bytes_per_record"] + copy2.Metrics["wal_bytes_per_record"]) / 2
	sum.Metrics["copy_records_per_s"] = copyRate
	sum.Metrics["end_to_end_records_per_s"] = plain.Metrics["records_per_s"]
	sum.Metrics["ratio_end_to_end_vs_copy"] = plain.Metrics["records_per_s"] / copyRate
	sum.Metrics["ratio_load_vs_copy"] = plain.Metrics["load_records_per_s"] / copyRate
	sum.Metrics["load_wal_bytes_per_record_ratio_vs_copy"] = plain.Metrics["load_wal_bytes_per_record"] / copyWAL
	sum.Metrics["total_wal_bytes_per_record_ratio_vs_copy"] = plain.Metrics["total_wal_bytes_per_record"] / copyWAL
	if o.Crash {
		sum.Metrics["ratio_crash_vs_uncrashed_total_time"] = crashed.Metrics["total_s"] / plain.Metrics["total_s"]
	}
	return append(out, sum), nil
}

// largeCopy measures one COPY of the n transformed rows into processed_data
// (one statement, one transaction) on a fresh database: the physical limit.
func (h *harness) largeCopy(ctx context.Context, o largeOptions, round int) (Result, error) {
	res := Result{System: "mightyetl", Scenario: "large", Variant: "copy/round=" + itoa(round), Metrics: map[string]float64{},
		Settings: map[string]string{"records": itoa(o.N), "how": "pgx CopyFrom of the transformed rows into processed_data, one COPY, rows generated as sent"}}
	if err := h.fresh(ctx); err != nil {
		return res, err
	}
	res.Metrics["load_avg_1m_start"] = loadAvg()
	w0, err := h.walMark(ctx, true)
	if err != nil {
		return res, err
	}
	start := time.Now()
	conn, err := h.pool.Acquire(ctx)
	if err != nil {
		return res, err
	}
	n, err := conn.Conn().CopyFrom(ctx, pgx.Identifier{"processed_data"}, []string{"job_record_id", "data", "normalized_record"},
		&largeCopySource{n: o.N})
	conn.Release()
	if err != nil {
		return res, fmt.Errorf("copy baseline: %w", err)
	}
	dur := time.Since(start)
	w1, err := h.walMark(ctx, false)
	if err != nil {
		return res, err
	}
	if n != int64(o.N) {
		return res, fmt.Errorf("copy baseline: copied %d of %d rows", n, o.N)
	}
	res.Metrics["records"] = float64(n)
	res.Metrics["copy_s"] = dur.Seconds()
	res.Metrics["records_per_s"] = float64(n) / dur.Seconds()
	res.Metrics["wal_bytes"] = float64(w1.lsn - w0.lsn)
	res.Metrics["wal_bytes_per_record"] = float64(w1.lsn-w0.lsn) / float64(n)
	res.Metrics["checkpoints"] = float64(w1.checkpoints - w0.checkpoints)
	res.Metrics["load_avg_1m_end"] = loadAvg()
	return res, nil
}

// walPoint is the WAL position (bytes) and the checkpoint count at one moment.
type walPoint struct{ lsn, checkpoints int64 }

// walMark reads the WAL position, after a CHECKPOINT when checkpoint is set
// (so the measured span starts without pending full-page images).
func (h *harness) walMark(ctx context.Context, checkpoint bool) (walPoint, error) {
	if checkpoint {
		if _, err := h.pool.Exec(ctx, "CHECKPOINT"); err != nil {
			return walPoint{}, fmt.Errorf("checkpoint: %w", err)
		}
	}
	var p walPoint
	err := h.pool.QueryRow(ctx, `SELECT pg_wal_lsn_diff(pg_current_wal_lsn(), '0/0')::bigint,
		(SELECT checkpoints_timed + checkpoints_req FROM pg_stat_bgwriter)`).Scan(&p.lsn, &p.checkpoints)
	if err != nil {
		return p, fmt.Errorf("read WAL position: %w", err)
	}
	return p, nil
}

// rssPeak samples the resident set of processes every 250 ms until closed,
// keeping the largest sample of each.
type rssPeak struct {
	mu   sync.Mutex
	pids []int
	max  map[int]int64
	stop chan struct{}
	done chan struct{}
}

func sampleRSS(pids ...int) *rssPeak {
	r := &rssPeak{pids: pids, max: map[int]int64{}, stop: make(chan struct{}), done: make(chan struct{})}
	go func() {
		defer close(r.done)
		t := time.NewTicker(250 * time.Millisecond)
		defer t.Stop()
		for {
			r.mu.Lock()
			for _, pid := range r.pids {
				if rss, _, err := procStatus(pid); err == nil && rss > r.max[pid] {
					r.max[pid] = rss
				}
			}
			r.mu.Unlock()
			select {
			case <-r.stop:
				return
			case <-t.C:
			}
		}
	}()
	return r
}

// add samples pid too.
func (r *rssPeak) add(pid int) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.pids = append(r.pids, pid)
}

// peak is the largest sample of pid, or its VmHWM (the kernel's peak) when
// larger; VmHWM only while the process runs.
func (r *rssPeak) peak(pid int) int64 {
	r.mu.Lock()
	m := r.max[pid]
	r.mu.Unlock()
	if _, hwm, err := procStatus(pid); err == nil && hwm > m {
		m = hwm
	}
	return m
}

// close stops the sampling; safe to call twice.
func (r *rssPeak) close() {
	r.mu.Lock()
	select {
	case <-r.stop:
	default:
		close(r.stop)
	}
	r.mu.Unlock()
	<-r.done
}

// largeRun is one end-to-end run on a fresh database: intake and worker
// binaries, the upload, the submit, and the wait for SUCCEEDED; with crash,
// the worker is SIGKILLed once the checkpoint passed n/2 records and a
// second worker finishes the job.
func (h *harness) largeRun(ctx context.Context, o largeOptions, crash bool) (res Result, err error) {
	variant := "end-to-end"
	if crash {
		variant = "crash"
	}
	res = Result{System: "mightyetl", Scenario: "large", Variant: variant, Metrics: map[string]float64{},
		Settings: map[string]string{"records": itoa(o.N), "part_bytes": itoa(o.PartBytes), "format": "jsonl",
			"process": "go build ./cmd/intake and ./cmd/worker (product defaults but the settings listed)", "nats": "off (the worker polls)"}}
	if err := h.fresh(ctx); err != nil {
		return res, err
	}
	res.Metrics["load_avg_1m_start"] = loadAvg()
	dir, err := os.MkdirTemp("", "mightyetl-bench-large-")
	if err != nil {
		return res, err
	}
	defer os.RemoveAll(dir)
	creds, err := writeBenchCredentials(dir, 1)
	if err != nil {
		return res, err
	}
	saved := h.o.NATSURL
	h.o.NATSURL = "" // the chunked worker polls; no relay, no request consumer
	intake, base, err := h.startIntake(ctx, creds.path, "bench.large."+randomHex(4), randomHex(32))
	h.o.NATSURL = saved
	if err != nil {
		return res, err
	}
	defer intake.Kill()
	var env []string
	if o.Lease > 0 {
		interval, margin := leaseSchedule(o.Lease)
		env = append(env, "MIGHTYETL_LEASE_DURATION="+o.Lease.String(), "MIGHTYETL_LEASE_RENEW_INTERVAL="+interval.String(),
			"MIGHTYETL_LEASE_SAFETY_MARGIN="+margin.String())
		res.Settings["lease"] = o.Lease.String()
	} else {
		res.Settings["lease"] = "product default"
	}
	if o.ChunkRecords > 0 {
		env = append(env, "MIGHTYETL_CHUNK_RECORDS="+itoa(o.ChunkRecords))
		res.Settings["chunk_records"] = itoa(o.ChunkRecords)
	} else {
		res.Settings["chunk_records"] = "product default"
	}
	if o.ChunkConns > 0 {
		env = append(env, "MIGHTYETL_CHUNK_CONNECTIONS="+itoa(o.ChunkConns))
		res.Settings["chunk_connections"] = itoa(o.ChunkConns)
	} else {
		res.Settings["chunk_connections"] = "product default"
	}
	suffix := randomHex(4)
	worker, err := h.startBinary(ctx, "bench-large-a-"+suffix, env...)
	if err != nil {
		return res, err
	}
	defer func() { worker.Kill() }()
	rss := sampleRSS(intake.Pid(), worker.Pid())
	defer rss.close()

	w0, err := h.walMark(ctx, true)
	if err != nil {
		return res, err
	}
	start := time.Now()
	client := &http.Client{Timeout: 5 * time.Minute}
	defer client.CloseIdleConnections()
	up, err := largeUpload(ctx, client, base, creds.headers[0], o.N, o.PartBytes)
	if err != nil {
		return res, fmt.Errorf("%w (intake: %s)", err, intake.Tail(5))
	}
	uploaded := time.Since(start)
	w1, err := h.walMark(ctx, false)
	if err != nil {
		return res, err
	}
	res.Metrics["payload_bytes"] = float64(up.bytes)
	res.Metrics["parts"] = float64(up.parts)
	res.Metrics["upload_s"] = uploaded.Seconds()
	res.Metrics["upload_put_s"] = up.put.Seconds()
	res.Metrics["upload_submit_s"] = up.submit.Seconds()
	res.Metrics["upload_mib_per_s"] = float64(up.bytes) / (1 << 20) / uploaded.Seconds()

	deadline := time.Now().Add(o.Timeout)
	if crash {
		if err := h.largeCrash(ctx, up.job, o, &res, &worker, env, rss, deadline, suffix); err != nil {
			return res, err
		}
	}
	var status, code string
	err = waitUntil(ctx, time.Until(deadline), 50*time.Millisecond, "the large job to finish", func() (bool, error) {
		err := h.pool.QueryRow(ctx, `SELECT job_status, coalesce(failure_code::text, '') FROM etl_job_records WHERE job_record_id = $1`, up.job).Scan(&status, &code)
		return status == "SUCCEEDED" || status == "FAILED" || status == "CANCELLED", err
	})
	total := time.Since(start)
	if err != nil {
		return res, fmt.Errorf("%w (worker: %s)", err, worker.Tail(5))
	}
	w2, err := h.walMark(ctx, false)
	if err != nil {
		return res, err
	}
	res.Metrics["intake_rss_peak_mib"] = float64(rss.peak(intake.Pid())) / (1 << 20)
	if c, err := procCPU(intake.Pid()); err == nil {
		res.Metrics["intake_cpu_s"] = c.Seconds()
	}
	if c, err := procCPU(worker.Pid()); err == nil {
		res.Metrics["worker_cpu_s"] += c.Seconds()
	}
	res.Metrics["worker_rss_peak_mib"] = max(res.Metrics["worker_rss_peak_mib"], float64(rss.peak(worker.Pid()))/(1<<20))
	if status != "SUCCEEDED" {
		return res, fmt.Errorf("large job %s with %s (worker: %s)", status, code, worker.Tail(5))
	}
	var rows, distinct int64
	if err := h.pool.QueryRow(ctx, `SELECT count(*), count(DISTINCT data) FROM processed_data_visible WHERE job_record_id = $1`, up.job).Scan(&rows, &distinct); err != nil {
		return res, err
	}
	var loaded, chunks int64
	if err := h.pool.QueryRow(ctx, `SELECT records_loaded, chunks_done FROM etl_chunked_loads WHERE job_record_id = $1`, up.job).Scan(&loaded, &chunks); err != nil {
		return res, err
	}
	n := float64(o.N)
	res.Metrics["records"] = n
	res.Metrics["visible_rows"] = float64(rows)
	res.Metrics["duplicate_rows"] = float64(rows - distinct)
	res.Metrics["records_loaded"] = float64(loaded)
	res.Metrics["chunks_done"] = float64(chunks)
	res.Metrics["total_s"] = total.Seconds()
	res.Metrics["load_s"] = (total - uploaded).Seconds()
	res.Metrics["records_per_s"] = n / total.Seconds()
	res.Metrics["load_records_per_s"] = n / (total - uploaded).Seconds()
	res.Metrics["upload_wal_bytes_per_record"] = float64(w1.lsn-w0.lsn) / n
	res.Metrics["load_wal_bytes_per_record"] = float64(w2.lsn-w1.lsn) / n
	res.Metrics["total_wal_bytes_per_record"] = float64(w2.lsn-w0.lsn) / n
	res.Metrics["checkpoints"] = float64(w2.checkpoints - w0.checkpoints)
	res.Metrics["load_avg_1m_end"] = loadAvg()
	if rows != int64(o.N) || distinct != int64(o.N) {
		return res, fmt.Errorf("large job: %d visible rows, %d distinct, want %d of each", rows, distinct, o.N)
	}
	return res, nil
}

// largeCrash waits until the job's checkpoint passed half the records,
// SIGKILLs the worker, starts another (replacing *worker) and records the
// checkpoint the new one resumed from: the last one read before it claimed
// the job (nothing commits in between: the killed worker's open chunk
// transaction dies with its connection, and the new one writes only after
// its claim).
func (h *harness) largeCrash(ctx context.Context, job uuid.UUID, o largeOptions, res *Result, worker **workerProc, env []string,
	rss *rssPeak, deadline time.Time, suffix string) error {
	var loaded int64
	err := waitUntil(ctx, time.Until(deadline), 10*time.Millisecond, "the checkpoint to pass half the records", func() (bool, error) {
		err := h.pool.QueryRow(ctx, `SELECT records_loaded FROM etl_chunked_loads WHERE job_record_id = $1`, job).Scan(&loaded)
		if errors.Is(err, pgx.ErrNoRows) {
			return false, nil
		}
		return loaded >= int64(o.N/2), err
	})
	if err != nil {
		return err
	}
	a := *worker
	res.Metrics["worker_rss_peak_mib"] = float64(rss.peak(a.Pid())) / (1 << 20)
	if c, err := procCPU(a.Pid()); err == nil {
		res.Metrics["worker_cpu_s"] = c.Seconds() // the second worker's is added at the end
	}
	a.Kill()
	killed := time.Now()
	res.Metrics["records_loaded_seen_before_kill"] = float64(loaded)
	var remaining float64
	if err := h.pool.QueryRow(ctx, `SELECT coalesce(extract(epoch FROM lease_expires_at - clock_timestamp())::float8, 0)
		FROM etl_job_records WHERE job_record_id = $1`, job).Scan(&remaining); err != nil {
		return err
	}
	res.Metrics["lease_remaining_at_kill_s"] = remaining
	b, err := h.startBinary(ctx, "bench-large-b-"+suffix, env...)
	if err != nil {
		return err
	}
	*worker = b
	rss.add(b.Pid())
	var attempt int
	var checkpoint, chunks int64
	var status string
	err = waitUntil(ctx, time.Until(deadline), 10*time.Millisecond, "the second worker to claim the job", func() (bool, error) {
		var a int
		var c, k int64
		err := h.pool.QueryRow(ctx, `SELECT j.job_status, j.attempt_count, l.records_loaded, l.chunks_done
			FROM etl_job_records j JOIN etl_chunked_loads l USING (job_record_id) WHERE j.job_record_id = $1`, job).Scan(&status, &a, &c, &k)
		if err != nil {
			return false, err
		}
		if a >= 2 || status != "RUNNING" && status != "PENDING" {
			attempt = a
			return true, nil
		}
		checkpoint, chunks = c, k
		return false, nil
	})
	if err != nil {
		return err
	}
	if attempt < 2 {
		// The first worker committed the last chunk and the success before
		// the kill landed (a small -large-n): nothing to resume.
		res.Metrics["finished_before_kill"] = 1
		res.Notes = append(res.Notes, "the job finished before the kill landed; no resume measured")
		return nil
	}
	res.Metrics["takeover_s"] = time.Since(killed).Seconds()
	res.Metrics["resumed_from_records_loaded"] = float64(checkpoint)
	res.Metrics["resumed_from_chunks_done"] = float64(chunks)
	res.Metrics["attempt_after_resume"] = float64(attempt)
	return nil
}

// largeUploaded is what largeUpload sent.
type largeUploaded struct {
	job          uuid.UUID
	bytes, parts int64
	// put is the time of the parts' PUT requests (not their generation),
	// submit the time of POST …/jobs (the payload's verification).
	put, submit time.Duration
}

// largeUpload creates an upload, PUTs the n records as parts of partBytes
// (one part in memory at a time; its SHA-256 header needs the whole part),
// and submits the job with the whole payload's SHA-256.
func largeUpload(ctx context.Context, client *http.Client, base, authorization string, n, partBytes int) (largeUploaded, error) {
	var up largeUploaded
	var created struct {
		UploadID string `json:"uploadId"`
	}
	if err := largeCall(ctx, client, http.MethodPost, base+"/api/etl/uploads", authorization, nil,
		strings.NewReader(`{"format":"jsonl"}`), http.StatusCreated, &created); err != nil {
		return up, fmt.Errorf("create upload: %w", err)
	}
	whole := sha256.New()
	stream := newLargeStream(n)
	buf := make([]byte, partBytes)
	for {
		k, err := io.ReadFull(stream, buf)
		if k == 0 {
			break
		}
		if err != nil && !errors.Is(err, io.ErrUnexpectedEOF) {
			return up, err
		}
		part := buf[:k]
		whole.Write(part)
		sum := sha256.Sum256(part)
		up.parts++
		up.bytes += int64(k)
		hdr := map[string]string{"X-Part-SHA256": hex.EncodeToString(sum[:]), "Content-Type": "application/octet-stream"}
		url := fmt.Sprintf("%s/api/etl/uploads/%s/parts/%d", base, created.UploadID, up.parts)
		t := time.Now()
		if err := largeCall(ctx, client, http.MethodPut, url, authorization, hdr, bytes.NewReader(part), http.StatusOK, nil); err != nil {
			return up, fmt.Errorf("put part %d: %w", up.parts, err)
		}
		up.put += time.Since(t)
	}
	body, _ := json.Marshal(map[string]any{"sha256": hex.EncodeToString(whole.Sum(nil)), "maxBadRecords": 0})
	var job struct {
		JobRecordID string `json:"jobRecordId"`
	}
	t := time.Now()
	if err := largeCall(ctx, client, http.MethodPost, base+"/api/etl/uploads/"+created.UploadID+"/jobs", authorization,
		map[string]string{"Idempotency-Key": "bench-large-" + randomHex(8)}, bytes.NewReader(body), http.StatusAccepted, &job); err != nil {
		return up, fmt.Errorf("submit upload: %w", err)
	}
	up.submit = time.Since(t)
	id, err := uuid.Parse(job.JobRecordID)
	if err != nil {
		return up, fmt.Errorf("submit upload: job id %q: %w", job.JobRecordID, err)
	}
	up.job = id
	return up, nil
}

// largeCall sends one request and decodes a JSON answer of the wanted status
// into into (when not nil); another status is an error with the problem's code.
func largeCall(ctx context.Context, client *http.Client, method, url, authorization string, hdr map[string]string,
	body io.Reader, want int, into any) error {
	req, err := http.NewRequestWithContext(ctx, method, url, body)
	if err != nil {
		return err
	}
	req.Header.Set("Authorization", authorization)
	if req.Header.Get("Content-Type") == "" {
		req.Header.Set("Content-Type", "application/json")
	}
	for k, v := range hdr {
		req.Header.Set(k, v)
	}
	resp, err := client.Do(req)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(io.LimitReader(resp.Body, 1<<20))
	if err != nil {
		return err
	}
	if resp.StatusCode != want {
		var p struct {
			ErrorCode string `json:"errorCode"`
		}
		_ = json.Unmarshal(b, &p)
		return fmt.Errorf("status %d (%s), want %d", resp.StatusCode, p.ErrorCode, want)
	}
	if into != nil {
		if err := json.Unmarshal(b, into); err != nil {
			return fmt.Errorf("decode answer: %w", err)
		}
	}
	return nil
}
