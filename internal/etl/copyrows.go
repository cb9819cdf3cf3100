package etl

import (
	"bytes"
	"context"
	"encoding/binary"
	"fmt"
	"io"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
)

// copyRowsSQL loads CopyRows' tuples. Binary format, as pgx's CopyFrom
// sends LoadRows' rows: created_at and processed_data_id take their
// defaults (clock_timestamp(), the sequence).
const copyRowsSQL = `COPY processed_data (job_record_id, data, normalized_record) FROM STDIN (FORMAT binary)`

// copyHeader is the binary COPY header: the signature, no flags, no
// header extension.
var copyHeader = []byte("PGCOPY\n\xff\r\n\x00\x00\x00\x00\x00\x00\x00\x00\x00")

// copyTrailer ends a binary COPY stream (a tuple of -1 fields).
var copyTrailer = []byte{0xff, 0xff}

// CopyRows is a batch of processed_data rows of one job, held as the
// tuples of a binary COPY (three fields: the job's uuid, data as text,
// normalized_record as jsonb version 1), so a chunked load transforms each
// record straight into what it sends: no value per row and no encoding at
// load time. The zero value is not usable; NewCopyRows makes one. Not safe
// for concurrent use.
type CopyRows struct {
	job        uuid.UUID
	buf        []byte // copyHeader, then the tuples
	data, norm []byte // the row being built
	n          int
}

// NewCopyRows returns an empty batch of rows of job (uuid.Nil stores NULL,
// as LoadRows does).
func NewCopyRows(job uuid.UUID) *CopyRows {
	return &CopyRows{job: job, buf: append([]byte(nil), copyHeader...)}
}

// Reset empties the batch, keeping its memory.
func (r *CopyRows) Reset() {
	r.buf = append(r.buf[:0], copyHeader...)
	r.n = 0
}

// Len is the number of rows in the batch.
func (r *CopyRows) Len() int { return r.n }

// Size is the batch's encoded size in bytes.
func (r *CopyRows) Size() int { return len(r.buf) }

// AppendRecord transforms raw as AppendRecord does and adds its row. On a
// rejection it returns AppendRecord's *Error and adds nothing.
func (r *CopyRows) AppendRecord(raw []byte) error {
	var err error
	r.data, r.norm, err = AppendRecord(r.data[:0], r.norm[:0], raw)
	if err != nil {
		return err
	}
	b := binary.BigEndian.AppendUint16(r.buf, 3)
	if r.job == uuid.Nil {
		b = binary.BigEndian.AppendUint32(b, 0xffffffff) // NULL
	} else {
		b = binary.BigEndian.AppendUint32(b, 16)
		b = append(b, r.job[:]...)
	}
	b = binary.BigEndian.AppendUint32(b, uint32(len(r.data)))
	b = append(b, r.data...)
	b = binary.BigEndian.AppendUint32(b, uint32(1+len(r.norm)))
	b = append(b, 1) // jsonb's binary format version
	r.buf = append(b, r.norm...)
	r.n++
	return nil
}

// Load copies the batch into processed_data within the caller's
// transaction tx (one COPY; nothing retried). No rows is a no-op. Errors
// are wrapped as "load processed rows: %w", as LoadRows wraps them.
func (r *CopyRows) Load(ctx context.Context, tx pgx.Tx) error {
	if r.n == 0 {
		return nil
	}
	tag, err := tx.Conn().PgConn().CopyFrom(ctx, io.MultiReader(bytes.NewReader(r.buf), bytes.NewReader(copyTrailer)), copyRowsSQL)
	if err != nil {
		return fmt.Errorf("load processed rows: %w", err)
	}
	if tag.RowsAffected() != int64(r.n) {
		return fmt.Errorf("load processed rows: copied %d of %d rows", tag.RowsAffected(), r.n)
	}
	return nil
}
