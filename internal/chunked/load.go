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
	"github.com/mightyetl/mightyetl/internal/codes"
	"github.com/mightyetl/mightyetl/internal/etl"
	"github.com/mightyetl/mightyetl/internal/lease"
	"github.com/mightyetl/mightyetl/internal/pg"
	"github.com/mightyetl/mightyetl/internal/tracing"
)

// Defaults of Config's zero fields; internal/config exposes them as
// MIGHTYETL_CHUNK_RECORDS and MIGHTYETL_CHUNK_BYTES.
const (
	DefaultChunkRecords = 10000
	DefaultChunkBytes   = 8 << 20
	// DefaultConnections is Config.Connections' default.
	DefaultConnections = 2
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
	// Connections is the most chunk transactions of one load open at once,
	// each on a connection of its own (DefaultConnections): chunk i+1 copies
	// its rows while chunk i copies or commits, and commits after it. 1
	// loads chunk after chunk.
	Connections int
}

// Hooks pause a Loader at exact points (tests); nil fields do nothing.
type Hooks struct {
	// BeforeFence runs inside each chunk transaction tx after its rows
	// were written, before its fenced statement: the job row is not locked
	// yet. chunk is as for InChunkTx.
	BeforeFence func(ctx context.Context, tx pgx.Tx, chunk int64)
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
	cfg.Connections = max(cmp.Or(cfg.Connections, DefaultConnections), 1)
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

// readAhead is how many transformed chunks the reader may hold ready beyond
// those whose transactions are open: the chunks are read, cut and
// transformed on a goroutine of their own while earlier ones copy and
// commit, so a load holds at most Connections+readAhead+1 chunks (the open
// transactions', readAhead waiting, one being built).
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
// payload, one transaction per chunk, and returns nil when every
// record is committed (the caller then applies lease.SucceedChunked). It
// stops at the next chunk boundary once ctx is done (returning
// context.Cause(ctx)); a chunk transaction in flight then rolls back. It
// returns an error wrapping lease.ErrLost when a fenced statement matched
// nothing (stop; never retry), a *RecordError, ErrIntegrity or ErrTransient.
//
// The chunks commit one after the other, in payload order, each from the
// checkpoint the previous one committed (commitChunks: up to
// Config.Connections chunk transactions are open at once, the later ones
// copying their rows while the first commits); the next chunks are read and
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
	held := l.cfg.Connections + readAhead + 1
	free := make(chan *chunk, held)
	for range held {
		free <- &chunk{}
	}
	go l.read(rctx, ref, st, out, free)
	defer func() {
		stop(errLoadEnded)
		for range out { // wait for the reader to end
		}
	}()
	return l.commitChunks(ctx, ref, st.cp, out, free)
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

// ErrTarget: the target refused a chunk's rows (a constraint or trigger);
// the job fails etl_target_failure.
var ErrTarget = errors.New("chunked load: target refused the rows")

func (l *Loader) observe(outcome string, loaded int64) {
	if l.OnChunk != nil {
		l.OnChunk(outcome, loaded)
	}
}

func init() {
	tracing.RegisterStatement("chunked.read_load", readLoadSQL)
	tracing.RegisterStatement("chunked.insert_bad_records", insertBadRecordsSQL)
}
