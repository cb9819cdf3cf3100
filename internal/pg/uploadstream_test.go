package pg_test

import (
	"bytes"
	"context"
	"errors"
	"io"
	"testing"
	"testing/iotest"

	"github.com/google/uuid"
	"github.com/mightyetl/mightyetl/internal/pg"
	"github.com/mightyetl/mightyetl/internal/pgtest"
)

// storeParts writes an OPEN upload whose part i (1-based) holds the chunks
// parts[i-1] under a fresh attempt, plus a garbage attempt of part 1 that
// no part row points at, straight through SQL: the reader must follow the
// part rows, never the chunk table alone.
func storeParts(t *testing.T, db pg.DBTX, parts [][][]byte) uuid.UUID {
	t.Helper()
	ctx := context.Background()
	id := uuid.Must(uuid.NewV7())
	if _, err := db.Exec(ctx, `INSERT INTO etl_uploads (upload_id, principal_scope_hash, upload_format, expires_at)
		VALUES ($1, decode($2, 'hex'), 'jsonl', clock_timestamp() + interval '1 hour')`, id, pgtest.SHA("owner")); err != nil {
		t.Fatal(err)
	}
	garbage := uuid.Must(uuid.NewV7())
	if _, err := db.Exec(ctx, `INSERT INTO etl_upload_chunks VALUES ($1, $2, 0, 'garbage'::bytea)`, id, garbage); err != nil {
		t.Fatal(err)
	}
	for i, chunks := range parts {
		attempt := uuid.Must(uuid.NewV7())
		var n int
		for j, c := range chunks {
			n += len(c)
			if _, err := db.Exec(ctx, `INSERT INTO etl_upload_chunks VALUES ($1, $2, $3, $4)`, id, attempt, j, c); err != nil {
				t.Fatal(err)
			}
		}
		if _, err := db.Exec(ctx, `INSERT INTO etl_upload_parts (upload_id, part_number, part_attempt_id, part_bytes, part_sha256, chunk_count)
			VALUES ($1, $2, $3, $4, sha256(''::bytea), $5)`, id, i+1, attempt, n, len(chunks)); err != nil {
			t.Fatal(err)
		}
	}
	return id
}

// TestStreamPayloadReadsPartsInOrderAndResumesAnywhere: the stream is the
// concatenation of the committed parts in part order (chunks of other
// attempts ignored, empty parts and empty chunks contribute nothing), across
// more chunks per part than one query reads and more parts than one query
// lists; Position names every byte's place, and a stream started at any
// Position (including a part's end) yields exactly the rest.
func TestStreamPayloadReadsPartsInOrderAndResumesAnywhere(t *testing.T) {
	t.Parallel()
	pool, _ := pgtest.NewDatabase(t)
	ctx := context.Background()
	var parts [][][]byte
	var want []byte
	for i := range 70 { // > streamPartsPerQuery
		var chunks [][]byte
		switch {
		case i == 0: // > streamChunksPerQuery chunks, of several sizes
			for j := range 9 {
				chunks = append(chunks, bytes.Repeat([]byte{byte('a' + j)}, 1+j%3))
			}
			chunks = append(chunks, []byte{}) // an empty chunk
		case i == 1: // an empty part
		default:
			chunks = [][]byte{{byte('A' + i%26)}, {byte('0' + i%10), '\n'}}
		}
		parts = append(parts, chunks)
		for _, c := range chunks {
			want = append(want, c...)
		}
	}
	id := storeParts(t, pool, parts)

	r := pg.StreamPayload(ctx, pool, id, 1, 0)
	if err := iotest.TestReader(r, want); err != nil {
		t.Fatalf("whole stream: %v", err)
	}

	// Read one byte at a time, noting the position of each; then resume
	// from a sample of them (the first few, part ends, the last ones).
	type at struct{ part, offset int64 }
	r = pg.StreamPayload(ctx, pool, id, 1, 0)
	var positions []at
	var got []byte
	b := make([]byte, 1)
	for {
		p, o := r.Position()
		n, err := r.Read(b)
		if n == 1 {
			positions = append(positions, at{p, o})
			got = append(got, b[0])
		}
		if err == io.EOF {
			break
		}
		if err != nil {
			t.Fatal(err)
		}
	}
	if !bytes.Equal(got, want) || len(positions) != len(want) {
		t.Fatalf("byte-wise read: %d bytes, want %d", len(got), len(want))
	}
	if positions[0] != (at{1, 0}) || positions[len(positions)-1].part != 70 {
		t.Fatalf("positions: first %v, last %v", positions[0], positions[len(positions)-1])
	}
	for i, p := range positions {
		if i > 20 && i < len(positions)-5 && i%17 != 0 {
			continue
		}
		rest, err := io.ReadAll(pg.StreamPayload(ctx, pool, id, p.part, p.offset))
		if err != nil || !bytes.Equal(rest, want[i:]) {
			t.Fatalf("resume at byte %d (part %d offset %d): %d bytes, want %d (%v)", i, p.part, p.offset, len(rest), len(want)-i, err)
		}
	}
	// A part's end is the next part's start: part 1 holds 18 bytes, part 2
	// none, part 3 begins at byte 18.
	for _, p := range []at{{1, 18}, {2, 0}, {3, 0}} {
		rest, err := io.ReadAll(pg.StreamPayload(ctx, pool, id, p.part, p.offset))
		if err != nil || !bytes.Equal(rest, want[18:]) {
			t.Fatalf("resume at %v: %d bytes, want %d (%v)", p, len(rest), len(want)-18, err)
		}
	}
	// Past the end: nothing; beyond a part's length: corrupt.
	if rest, err := io.ReadAll(pg.StreamPayload(ctx, pool, id, 71, 0)); err != nil || len(rest) != 0 {
		t.Fatalf("after the last part: %d bytes (%v)", len(rest), err)
	}
	for _, p := range []at{{1, 19}, {2, 1}, {71, 1}} {
		if _, err := io.ReadAll(pg.StreamPayload(ctx, pool, id, p.part, p.offset)); !errors.Is(err, pg.ErrPayloadCorrupt) {
			t.Errorf("resume at %v: %v, want ErrPayloadCorrupt", p, err)
		}
	}
}

// TestStreamPayloadRefusesAMissingChunk: a part whose chunk rows do not
// match its chunk_count is ErrPayloadCorrupt, never a short stream.
func TestStreamPayloadRefusesAMissingChunk(t *testing.T) {
	t.Parallel()
	pool, _ := pgtest.NewDatabase(t)
	ctx := context.Background()
	id := storeParts(t, pool, [][][]byte{{[]byte("ab"), []byte("cd"), []byte("ef")}})
	if _, err := pool.Exec(ctx, `DELETE FROM etl_upload_chunks WHERE upload_id = $1 AND chunk_index = 1 AND chunk_data = 'cd'`, id); err != nil {
		t.Fatal(err)
	}
	got, err := io.ReadAll(pg.StreamPayload(ctx, pool, id, 1, 0))
	if !errors.Is(err, pg.ErrPayloadCorrupt) {
		t.Fatalf("missing chunk: %q, %v", got, err)
	}
	if _, err := io.ReadAll(pg.StreamPayload(ctx, pool, id, 1, 3)); !errors.Is(err, pg.ErrPayloadCorrupt) {
		t.Fatalf("resume past a missing chunk: %v", err)
	}
}
