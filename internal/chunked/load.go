package chunked

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"io"
	"strconv"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/mightyetl/mightyetl/client/backoff"
	"github.com/mightyetl/mightyetl/internal/codes"
	"github.com/mightyetl/mightyetl/internal/etl"
	"github.com/mightyetl/mightyetl/internal/lease"
	"github.com/mightyetl/mightyetl/internal/metrics"
	"github.com/mightyetl/mightyetl/internal/pg"
	"github.com/mightyetl/mightyetl/internal/tracing"
)

// Defaults of Config's zero fields; internal/config exposes them as
// MIGHTYETL_CHUNK_RECORDS and MIGHTYETL_CHUNK_BYTES.
const (
	DefaultChunkRecords = 10000
	DefaultChunkBytes   = 8 << 20
)

// chunkCommitTries bounds how often one chunk's transaction is tried when
// the database fails it transiently (a failover, a dropped connection):
// nothing of a failed try committed, and the fence decides every try.
const chunkCommitTries = 4

// Config tunes a Loader. Zero fields take the defaults noted.
type Config struct {
	// ChunkRecords is the most records one chunk commits (DefaultChunkRecords).
	ChunkRecords int
	// ChunkBytes is the most payload bytes one chunk covers, and the
	// longest record (DefaultChunkBytes): a longer record is a bad record.
	ChunkBytes int
	// StatementTimeout bounds each chunk transaction (default 30s).
	StatementTimeout time.Duration
}

// Hooks pause a Loader at exact points (tests); nil fields do nothing.
type Hooks struct {
	// BeforeFence runs inside each chunk transaction after its rows were
	// written, before its fenced statement: the job row is not locked yet.
	// chunk is as for InChunkTx.
	BeforeFence func(ctx context.Context, chunk int64)
	// InChunkTx runs inside each chunk transaction after its rows were
	// written and its fenced statement locked the job row, before the
	// checkpoint statement and the commit. chunk is the 1-based number of
	// the chunk this attempt commits (chunks_done + 1).
	InChunkTx func(ctx context.Context, chunk int64)
	// AfterChunkCommit runs after each chunk committed.
	AfterChunkCommit func(chunk int64)
}

// Loader loads chunked jobs: Load runs one claim's load to its end. It is
// safe for concurrent use by several claims.
type Loader struct {
	db    *pgxpool.Pool
	cfg   Config
	Hooks Hooks
	// OnChunk, when set, is called after each chunk transaction with its
	// outcome (metrics.ChunkCommitted, metrics.ChunkStale, metrics.ChunkFailed) and, when
	// committed, the records it loaded.
	OnChunk func(outcome string, loaded int64)
}

// NewLoader returns a Loader writing through db.
func NewLoader(db *pgxpool.Pool, cfg Config) *Loader {
	cfg.ChunkRecords = cmp.Or(cfg.ChunkRecords, DefaultChunkRecords)
	cfg.ChunkBytes = cmp.Or(cfg.ChunkBytes, DefaultChunkBytes)
	cfg.StatementTimeout = cmp.Or(cfg.StatementTimeout, 30*time.Second)
	return &Loader{db: db, cfg: cfg}
}

// RecordError fails a chunked job with Code (codes.InvalidRecord) at record
// Number: the record was malformed, untransformable or too long and no bad
// record was left to skip, or the JSON array broke there. It never holds
// the record.
type RecordError struct {
	Number int64
	Code   string
}

func (e *RecordError) Error() string {
	return "chunked load: invalid record " + strconv.FormatInt(e.Number, 10)
}

// ErrIntegrity: the load or its upload is not what the job says (no
// LOADING load row, an unknown format, stored bytes that do not match the
// parts). Permanent.
var ErrIntegrity = errors.New("chunked load integrity failure")

// ErrTransient wraps a database failure that outlasted the chunk's tries;
// the job may be retried from its checkpoint.
var ErrTransient = errors.New("chunked load: database unavailable")

// loadState is a load row as the Loader starts from it.
type loadState struct {
	upload  uuid.UUID
	format  string
	state   string
	maxBad  int64
	payload int64
	cp      lease.Checkpoint
}

const readLoadSQL = `
SELECT upload_id, load_format, load_state, max_bad_records, payload_bytes,
       chunks_done, records_loaded, bad_records, next_part_number, next_part_offset, next_record_number
FROM etl_chunked_loads WHERE job_record_id = $1`

func (l *Loader) readLoad(ctx context.Context, jobID uuid.UUID) (loadState, error) {
	var s loadState
	err := l.db.QueryRow(ctx, readLoadSQL, jobID).Scan(&s.upload, &s.format, &s.state, &s.maxBad, &s.payload,
		&s.cp.ChunksDone, &s.cp.RecordsLoaded, &s.cp.BadRecords, &s.cp.NextPart, &s.cp.NextOffset, &s.cp.NextRecord)
	if pg.IsNoRows(err) {
		return s, fmt.Errorf("%w: no load row", ErrIntegrity)
	}
	if err != nil {
		return s, fmt.Errorf("read load: %w", err)
	}
	if s.state != "LOADING" || (s.format != FormatJSONL && s.format != FormatJSONArray) {
		return s, fmt.Errorf("%w: load not loading", ErrIntegrity)
	}
	return s, nil
}

// readAhead is how many chunks the reader may have read and transformed
// ahead of the one committing: the next chunk is read, cut and transformed
// on a goroutine of its own while the previous one's transaction runs, so a
// load holds at most readAhead+2 chunks (one committing, readAhead waiting,
// one being built).
const readAhead = 1

// chunk is one chunk being built, then committed.
type chunk struct {
	rows      *etl.CopyRows
	badNums   []int64
	badCodes  []string
	records   int
	bytes     int64
	nextStart Position
	// eof: the payload ends with this chunk.
	eof bool
	// err ends the load once the chunks before this one committed (this
	// chunk's records are not committed): a *RecordError, ErrIntegrity,
	// ErrTransient or the context's cause.
	err error
}

func (c *chunk) reset(job uuid.UUID) {
	if c.rows == nil {
		c.rows = etl.NewCopyRows(job)
	}
	c.rows.Reset()
	c.badNums, c.badCodes = c.badNums[:0], c.badCodes[:0]
	c.records, c.bytes, c.eof, c.err = 0, 0, false, nil
}

// Load loads ref's job from its committed checkpoint to the end of its
// payload, one chunk transaction at a time, and returns nil when every
// record is committed (the caller then applies lease.SucceedChunked). It
// stops at the next chunk boundary once ctx is done (returning
// context.Cause(ctx)); a chunk transaction in flight then rolls back. It
// returns an error wrapping lease.ErrLost when a fenced statement matched
// nothing (stop; never retry), a *RecordError, ErrIntegrity or ErrTransient.
//
// The chunks commit one after the other, in payload order, each from the
// checkpoint the previous one committed; the next chunk is read and
// transformed meanwhile (readAhead), and an error found while reading ends
// the load only after the chunks before it committed, as if read in turn.
func (l *Loader) Load(ctx context.Context, ref lease.Ref) error {
	st, err := l.readLoad(ctx, ref.JobID)
	if err != nil {
		if ctx.Err() != nil {
			return context.Cause(ctx)
		}
		if errors.Is(err, ErrIntegrity) {
			return err
		}
		return fmt.Errorf("%w: %w", ErrTransient, err)
	}
	rctx, stop := context.WithCancelCause(ctx)
	out := make(chan *chunk, readAhead)
	free := make(chan *chunk, readAhead+2)
	for range readAhead + 2 {
		free <- &chunk{}
	}
	go l.read(rctx, ref, st, out, free)
	defer func() {
		stop(errLoadEnded)
		for range out { // wait for the reader to end
		}
	}()
	cp := st.cp
	for c := range out {
		switch {
		case c.err != nil:
			return c.err
		case ctx.Err() != nil:
			return context.Cause(ctx)
		}
		if c.records > 0 {
			next, err := l.commit(ctx, ref, cp, c)
			if err != nil {
				return err
			}
			cp = next
		}
		if c.eof {
			return nil
		}
		free <- c
	}
	// The reader ended without a last chunk: only when rctx was done.
	return context.Cause(ctx)
}

// errLoadEnded stops a load's reader once the load returned.
var errLoadEnded = errors.New("chunked load ended")

// read cuts st's payload from its checkpoint into chunks of at most
// ChunkRecords records and ChunkBytes bytes, transforms their records and
// sends them on out in payload order, taking each chunk's memory from free.
// It ends, closing out, after the chunk that holds the payload's end or an
// error, or once ctx is done.
func (l *Loader) read(ctx context.Context, ref lease.Ref, st loadState, out chan<- *chunk, free <-chan *chunk) {
	defer close(out)
	from := Position{Part: st.cp.NextPart, Offset: st.cp.NextOffset, Record: st.cp.NextRecord}
	src := pg.StreamPayload(ctx, l.db, st.upload, from.Part, from.Offset)
	defer src.Close()
	rd := NewReader(src, st.format, from, l.cfg.ChunkBytes)
	bad := st.cp.BadRecords // bad records up to the chunk being built
	for {
		var c *chunk
		select {
		case c = <-free:
		case <-ctx.Done():
			return
		}
		c.reset(ref.JobID)
		c.err = l.fill(ctx, rd, c, &bad, st.maxBad)
		c.nextStart = rd.Checkpoint()
		select {
		case out <- c:
		case <-ctx.Done():
			return
		}
		if c.err != nil || c.eof {
			return
		}
	}
}

// fill reads the records of chunk c from rd and transforms them; bad counts
// the skipped records so far, which may not pass maxBad.
func (l *Loader) fill(ctx context.Context, rd *Reader, c *chunk, bad *int64, maxBad int64) error {
	for c.records < l.cfg.ChunkRecords && c.bytes < int64(l.cfg.ChunkBytes) {
		rec, err := rd.Next()
		if errors.Is(err, io.EOF) {
			c.eof = true
			return nil
		}
		if err != nil {
			var se *StructureError
			switch {
			case errors.As(err, &se):
				return &RecordError{Number: se.Record, Code: codes.InvalidRecord}
			case ctx.Err() != nil:
				return context.Cause(ctx)
			case errors.Is(err, pg.ErrPayloadCorrupt):
				return fmt.Errorf("%w: %w", ErrIntegrity, err)
			}
			return fmt.Errorf("%w: read payload: %w", ErrTransient, err)
		}
		c.records++
		c.bytes += rec.Bytes
		code := ""
		if rec.TooLarge {
			code = codes.InvalidRecord
		} else if err := c.rows.AppendRecord(rec.Raw); err != nil {
			code = codes.InvalidRecord
			var ee *etl.Error
			if errors.As(err, &ee) && ee.Code == codes.InvalidJSON {
				code = codes.InvalidJSON
			}
		}
		if code != "" {
			if *bad >= maxBad {
				return &RecordError{Number: rec.Number, Code: codes.InvalidRecord}
			}
			*bad++
			c.badNums = append(c.badNums, rec.Number)
			c.badCodes = append(c.badCodes, code)
		}
	}
	return nil
}

// commit commits chunk c from checkpoint cp, trying a transient database
// failure again a few times (nothing of a failed try committed).
func (l *Loader) commit(ctx context.Context, ref lease.Ref, cp lease.Checkpoint, c *chunk) (lease.Checkpoint, error) {
	to := lease.Checkpoint{ChunksDone: cp.ChunksDone + 1, RecordsLoaded: cp.RecordsLoaded + int64(c.rows.Len()),
		BadRecords: cp.BadRecords + int64(len(c.badNums)),
		NextPart:   c.nextStart.Part, NextOffset: c.nextStart.Offset, NextRecord: c.nextStart.Record}
	for try := 1; ; try++ {
		err := l.commitOnce(ctx, ref, cp, to, c)
		switch {
		case err == nil:
			l.observe(metrics.ChunkCommitted, int64(c.rows.Len()))
			if l.Hooks.AfterChunkCommit != nil {
				l.Hooks.AfterChunkCommit(to.ChunksDone)
			}
			return to, nil
		case errors.Is(err, lease.ErrLost):
			l.observe(metrics.ChunkStale, 0)
			return cp, fmt.Errorf("commit chunk: %w", err)
		}
		l.observe(metrics.ChunkFailed, 0)
		if ctx.Err() != nil {
			return cp, context.Cause(ctx)
		}
		if !pg.IsTransient(err) {
			// A row the target refused, a constraint: trying again cannot help.
			return cp, fmt.Errorf("%w: %w", ErrTarget, err)
		}
		if try >= chunkCommitTries {
			return cp, fmt.Errorf("%w: %w", ErrTransient, err)
		}
		t := time.NewTimer(backoff.Capped(100*time.Millisecond, 2*time.Second, try))
		select {
		case <-t.C:
		case <-ctx.Done():
			t.Stop()
			return cp, context.Cause(ctx)
		}
	}
}

// ErrTarget: the target refused a chunk's rows (a constraint or trigger);
// the job fails etl_target_failure.
var ErrTarget = errors.New("chunked load: target refused the rows")

func (l *Loader) observe(outcome string, loaded int64) {
	if l.OnChunk != nil {
		l.OnChunk(outcome, loaded)
	}
}

const insertBadRecordsSQL = `
INSERT INTO etl_chunked_load_bad_records (job_record_id, record_number, error_code)
SELECT $1, b.record_number, b.error_code FROM unnest($2::bigint[], $3::text[]) AS b(record_number, error_code)`

// commitOnce is one chunk transaction: the rows by COPY and the skipped
// records, then the fenced lock of the exact lease (zero rows: lost, the
// transaction rolls back and nothing is written), then the checkpoint under
// the exact lease again, then commit. The fence comes last so that the job
// row is locked only for the checkpoint and the commit, not through the
// COPY: renewal, which skips a locked row (busy) rather than wait, finds it
// free almost always even when the chunks follow each other without a gap,
// and what the fence protects (no claim, cancellation or renewal of the row
// between the lease's check and the commit) is the same.
func (l *Loader) commitOnce(ctx context.Context, ref lease.Ref, from, to lease.Checkpoint, c *chunk) error {
	ctx, cancel := context.WithTimeout(ctx, l.cfg.StatementTimeout)
	defer cancel()
	return pg.WithTx(ctx, l.db, func(tx pgx.Tx) error {
		if err := c.rows.Load(ctx, tx); err != nil {
			return err
		}
		if len(c.badNums) > 0 {
			if _, err := tx.Exec(ctx, insertBadRecordsSQL, ref.JobID, c.badNums, c.badCodes); err != nil {
				return fmt.Errorf("insert bad records: %w", err)
			}
		}
		if l.Hooks.BeforeFence != nil {
			l.Hooks.BeforeFence(ctx, to.ChunksDone)
		}
		if err := lease.FenceChunk(ctx, tx, ref); err != nil {
			return err
		}
		if l.Hooks.InChunkTx != nil {
			l.Hooks.InChunkTx(ctx, to.ChunksDone)
		}
		return lease.CheckpointChunk(ctx, tx, ref, from, to, int64(c.rows.Len()), int64(len(c.badNums)))
	})
}

func init() {
	tracing.RegisterStatement("chunked.read_load", readLoadSQL)
	tracing.RegisterStatement("chunked.insert_bad_records", insertBadRecordsSQL)
}
