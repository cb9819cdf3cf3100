package pg

import (
	"context"
	"errors"
	"fmt"
	"io"

	"github.com/google/uuid"
	"github.com/mightyetl/mightyetl/internal/tracing"
)

// ErrPayloadCorrupt reports that an upload's stored bytes are not what its
// part rows describe (a chunk missing or out of order, a part shorter than
// a resume offset): the payload cannot be read as stored. Permanent.
var ErrPayloadCorrupt = errors.New("upload payload does not match its parts")

// Stream read sizes: parts per keyset query and chunks (of at most
// MaxUploadChunkBytes each) per keyset query, so a PayloadReader holds at
// most streamChunksPerQuery chunks in memory.
const (
	streamPartsPerQuery  = 64
	streamChunksPerQuery = 4
)

// streamPartsSQL lists an upload's committed parts from a part number on,
// in order (keyset on the primary key (upload_id, part_number)). No lock:
// the parts of a SUBMITTED upload never change (PutPart refuses it), and a
// reader of an OPEN upload (SubmitUpload's verification) re-checks the
// attempts it read under the upload's lock before it trusts them.
const streamPartsSQL = `
SELECT part_number, part_attempt_id, part_bytes, chunk_count
FROM etl_upload_parts
WHERE upload_id = $1 AND part_number >= $2
ORDER BY part_number
LIMIT $3`

// streamChunksSQL reads a few chunks of one part attempt from a chunk index
// on, in order (keyset on the primary key (upload_id, part_attempt_id,
// chunk_index)). Each query is its own short implicit transaction.
const streamChunksSQL = `
SELECT chunk_index, chunk_data
FROM etl_upload_chunks
WHERE upload_id = $1 AND part_attempt_id = $2 AND chunk_index >= $3
ORDER BY chunk_index
LIMIT $4`

// streamPart is one committed part as the reader walks it.
type streamPart struct {
	number    int64
	attemptID uuid.UUID
	bytes     int64
	chunks    int64
}

// PayloadReader reads the logical byte stream of an upload (the
// concatenation of its committed parts 1..N, in part order, each part's
// chunks in chunk order) in short keyset queries, holding at most a few
// chunks in memory. It is not safe for concurrent use. Errors (database
// errors, ErrPayloadCorrupt) come back from Read; io.EOF after the last
// part.
type PayloadReader struct {
	ctx      context.Context
	db       DBTX
	uploadID uuid.UUID

	parts    []streamPart // fetched, not yet finished; parts[0] is current
	nextPart int64        // the next part number to fetch
	partsEOF bool         // no part beyond those fetched

	chunks    [][]byte // fetched chunks of parts[0], not yet returned
	nextChunk int64    // the next chunk index of parts[0] to fetch
	skip      int64    // bytes of parts[0] still to skip (resume offset)

	pos     int64 // offset in parts[0] of the next byte Read returns
	part    int64 // part number of the next byte (parts[0].number once known)
	started bool  // the first part was started

	err    error
	closed bool
}

// StreamPayload returns a reader of upload uploadID's logical byte stream
// from byte fromOffset of part fromPart (1-based; offset 0 is the part's
// first byte; an offset equal to the part's length starts at the next
// part). It reads only committed parts (etl_upload_parts) and their
// attempts' chunks, in short keyset queries on db (a pool: each query is
// its own short transaction; never hold a transaction across reads of a
// slow consumer). Nothing is read until the first Read. A part missing
// from the numbering is not detected here (SubmitUpload admits only
// contiguous parts); an offset beyond its part's length, or a chunk missing,
// is ErrPayloadCorrupt. Close releases the held chunks; it never fails.
func StreamPayload(ctx context.Context, db DBTX, uploadID uuid.UUID, fromPart, fromOffset int64) *PayloadReader {
	r := &PayloadReader{ctx: ctx, db: db, uploadID: uploadID, nextPart: max(fromPart, 1), part: max(fromPart, 1)}
	if fromOffset < 0 {
		r.err = fmt.Errorf("stream payload: negative offset: %w", ErrPayloadCorrupt)
	}
	r.skip = max(fromOffset, 0)
	return r
}

// Position returns where the next byte Read returns lies: its part number
// and its offset in that part. At the end of a part it is (that part, its
// length) until the next Read moves on; StreamPayload accepts either form.
func (r *PayloadReader) Position() (part, offset int64) { return r.part, r.pos }

// Read implements io.Reader.
func (r *PayloadReader) Read(p []byte) (int, error) {
	if r.closed {
		return 0, errors.New("stream payload: read after close")
	}
	if len(p) == 0 {
		return 0, r.err
	}
	for r.err == nil {
		if len(r.chunks) > 0 {
			c := r.chunks[0]
			if r.skip > 0 {
				s := min(r.skip, int64(len(c)))
				c = c[s:]
				r.skip -= s
				r.pos += s
			}
			n := copy(p, c)
			r.pos += int64(n)
			if n == len(c) {
				r.chunks[0] = nil
				r.chunks = r.chunks[1:]
			} else {
				r.chunks[0] = c[n:]
			}
			if n > 0 {
				return n, nil
			}
			continue
		}
		r.err = r.advance()
	}
	return 0, r.err
}

// advance fetches the next chunks of the current part, or finishes it and
// moves to the next part; io.EOF after the last part.
func (r *PayloadReader) advance() error {
	if err := r.ctx.Err(); err != nil {
		return fmt.Errorf("stream payload: %w", err)
	}
	if len(r.parts) == 0 {
		if r.partsEOF {
			if r.skip > 0 {
				return fmt.Errorf("stream payload: resume offset beyond the payload: %w", ErrPayloadCorrupt)
			}
			return io.EOF
		}
		if err := r.fetchParts(); err != nil {
			return err
		}
		if len(r.parts) > 0 {
			return r.startPart()
		}
		return nil // partsEOF is set: the next advance ends the stream
	}
	cur := r.parts[0]
	if r.nextChunk < cur.chunks {
		if r.skip > 0 && r.nextChunk == 0 {
			return r.seek(cur)
		}
		return r.fetchChunks(cur)
	}
	// Every chunk of the part was read and returned.
	if r.skip > 0 || r.pos != cur.bytes {
		return fmt.Errorf("stream payload: part %d holds %d bytes, not %d: %w", cur.number, r.pos+r.skip, cur.bytes, ErrPayloadCorrupt)
	}
	r.parts = r.parts[1:]
	if len(r.parts) > 0 {
		return r.startPart()
	}
	return nil
}

// startPart makes parts[0] the current part. Only the first part of the
// stream starts at the resume offset; it must be the part asked for when
// that offset is not 0.
func (r *PayloadReader) startPart() error {
	cur := r.parts[0]
	if r.started && r.skip > 0 {
		return fmt.Errorf("stream payload: resume offset beyond its part: %w", ErrPayloadCorrupt)
	}
	if !r.started && r.skip > 0 && cur.number != r.part {
		return fmt.Errorf("stream payload: resume part %d absent: %w", r.part, ErrPayloadCorrupt)
	}
	r.started = true
	r.part, r.pos, r.nextChunk = cur.number, 0, 0
	switch {
	case r.skip > cur.bytes:
		return fmt.Errorf("stream payload: resume offset beyond its part: %w", ErrPayloadCorrupt)
	case r.skip == cur.bytes:
		// Offset = length (or an empty part): nothing of this part is read.
		r.pos, r.skip, r.nextChunk = cur.bytes, 0, cur.chunks
	}
	return nil
}

// streamChunkSizesSQL lists the byte lengths of one part attempt's chunks,
// in order, to find the chunk a resume offset falls in without reading the
// chunks before it (octet_length of a stored bytea reads its header, not
// its bytes).
const streamChunkSizesSQL = `
SELECT chunk_index, octet_length(chunk_data)
FROM etl_upload_chunks
WHERE upload_id = $1 AND part_attempt_id = $2
ORDER BY chunk_index`

// seek moves to the chunk holding the resume offset of the current part.
func (r *PayloadReader) seek(cur streamPart) error {
	rows, err := r.db.Query(r.ctx, streamChunkSizesSQL, r.uploadID, cur.attemptID)
	if err != nil {
		return fmt.Errorf("stream payload: seek: %w", err)
	}
	defer rows.Close()
	var want int64
	for rows.Next() {
		var index, size int64
		if err := rows.Scan(&index, &size); err != nil {
			return fmt.Errorf("stream payload: seek: %w", err)
		}
		if index != want {
			return fmt.Errorf("stream payload: chunk %d missing: %w", want, ErrPayloadCorrupt)
		}
		want++
		if r.skip < size {
			break
		}
		r.skip -= size
		r.pos += size
		r.nextChunk = index + 1
	}
	if err := rows.Err(); err != nil {
		return fmt.Errorf("stream payload: seek: %w", err)
	}
	if r.skip > 0 && r.nextChunk >= cur.chunks {
		return fmt.Errorf("stream payload: resume offset beyond its part: %w", ErrPayloadCorrupt)
	}
	if r.skip > 0 {
		// The rest of the offset lies inside chunk nextChunk: Read skips it.
		return r.fetchChunks(cur)
	}
	return nil
}

func (r *PayloadReader) fetchParts() error {
	rows, err := r.db.Query(r.ctx, streamPartsSQL, r.uploadID, r.nextPart, streamPartsPerQuery)
	if err != nil {
		return fmt.Errorf("stream payload: read parts: %w", err)
	}
	defer rows.Close()
	for rows.Next() {
		var p streamPart
		if err := rows.Scan(&p.number, &p.attemptID, &p.bytes, &p.chunks); err != nil {
			return fmt.Errorf("stream payload: read parts: %w", err)
		}
		r.parts = append(r.parts, p)
		r.nextPart = p.number + 1
	}
	if err := rows.Err(); err != nil {
		return fmt.Errorf("stream payload: read parts: %w", err)
	}
	if len(r.parts) < streamPartsPerQuery {
		r.partsEOF = true
	}
	return nil
}

func (r *PayloadReader) fetchChunks(cur streamPart) error {
	limit := min(int64(streamChunksPerQuery), cur.chunks-r.nextChunk)
	before := r.nextChunk
	rows, err := r.db.Query(r.ctx, streamChunksSQL, r.uploadID, cur.attemptID, r.nextChunk, limit)
	if err != nil {
		return fmt.Errorf("stream payload: read chunks: %w", err)
	}
	defer rows.Close()
	for rows.Next() {
		var index int64
		var data []byte
		if err := rows.Scan(&index, &data); err != nil {
			return fmt.Errorf("stream payload: read chunks: %w", err)
		}
		if index != r.nextChunk {
			return fmt.Errorf("stream payload: chunk %d missing: %w", r.nextChunk, ErrPayloadCorrupt)
		}
		r.nextChunk++
		if len(data) > 0 {
			r.chunks = append(r.chunks, data)
		}
	}
	if err := rows.Err(); err != nil {
		return fmt.Errorf("stream payload: read chunks: %w", err)
	}
	if r.nextChunk == before {
		return fmt.Errorf("stream payload: chunk %d missing: %w", r.nextChunk, ErrPayloadCorrupt)
	}
	return nil
}

// Close releases the chunks the reader holds. It never fails and is safe to
// call twice.
func (r *PayloadReader) Close() error {
	r.closed = true
	r.chunks, r.parts = nil, nil
	return nil
}

func init() {
	tracing.RegisterStatement("uploads.stream_parts", streamPartsSQL)
	tracing.RegisterStatement("uploads.stream_chunks", streamChunksSQL)
	tracing.RegisterStatement("uploads.stream_chunk_sizes", streamChunkSizesSQL)
}
