package intake

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/google/uuid"

	"github.com/mightyetl/mightyetl/internal/pg"
)

// bytesSource is an ObjectSource over bytes in memory; size and sha256 are
// what it reports as the store's (-1 and "" for unknown).
type bytesSource struct {
	data   []byte
	size   int64
	sha256 string
	opened int
}

func (b *bytesSource) Open(context.Context) (ObjectStream, error) {
	b.opened++
	return ObjectStream{Body: io.NopCloser(bytes.NewReader(b.data)), Size: b.size, SHA256: b.sha256}, nil
}

func hexSHA(b []byte) string {
	s := sha256.Sum256(b)
	return hex.EncodeToString(s[:])
}

func lines(n int) []byte {
	var b bytes.Buffer
	for i := range n {
		fmt.Fprintf(&b, "{\"id\":\"o%06d\",\"name\":\"n\"}\n", i)
	}
	return b.Bytes()
}

// leftovers counts the upload rows and chunks in the database.
func leftovers(t *testing.T, db DB) (open, submitted, chunks int) {
	t.Helper()
	if err := db.QueryRow(context.Background(), `SELECT
		(SELECT count(*) FROM etl_uploads WHERE upload_state = 'OPEN'),
		(SELECT count(*) FROM etl_uploads WHERE upload_state = 'SUBMITTED'),
		(SELECT count(*) FROM etl_upload_chunks)`).Scan(&open, &submitted, &chunks); err != nil {
		t.Fatal(err)
	}
	return open, submitted, chunks
}

// TestSubmitObjectStreamsPartsAndConverges: an object larger than a part
// is stored as consecutive parts whose concatenation is the object, and
// becomes one PENDING chunked job with its manifest; the same submission
// again answers that job without opening the object, and the same key
// with another digest is refused, also without opening it.
func TestSubmitObjectStreamsPartsAndConverges(t *testing.T) {
	t.Parallel()
	s, db := newService(t, nil)
	ctx := context.Background()
	data := lines(400) // ~10 KB
	src := &bytesSource{data: data, size: int64(len(data)), sha256: hexSHA(data)}
	req := ObjectSubmission{
		Principal: "alice", IdempotencyKey: "object-key-0000000001", Format: pg.UploadFormatJSONL,
		MaxBadRecords: 2, SHA256: hexSHA(data), Source: src, PartBytes: 1000,
	}
	res, err := s.SubmitObject(ctx, req)
	if err != nil || res.Replayed || res.Job.Kind != pg.KindETLChunked || res.Job.Status != pg.StatusPending {
		t.Fatalf("SubmitObject = %+v, %v", res, err)
	}
	var uploadID uuid.UUID
	var manifest string
	if err := db.QueryRow(ctx, `SELECT u.upload_id, j.request_payload FROM etl_uploads u
		JOIN etl_job_records j ON j.job_record_id = u.job_record_id WHERE u.job_record_id = $1`, res.Job.JobID).
		Scan(&uploadID, &manifest); err != nil {
		t.Fatal(err)
	}
	wantParts := (len(data) + 999) / 1000
	if !strings.Contains(manifest, fmt.Sprintf(`"parts":%d`, wantParts)) || !strings.Contains(manifest, `"maxBadRecords":2`) {
		t.Fatalf("manifest %s, want %d parts", manifest, wantParts)
	}
	got, err := io.ReadAll(pg.StreamPayload(ctx, db, uploadID, 1, 0))
	if err != nil || !bytes.Equal(got, data) {
		t.Fatalf("payload stream: %d bytes of %d, %v", len(got), len(data), err)
	}

	again, err := s.SubmitObject(ctx, req)
	if err != nil || !again.Replayed || again.Job.JobID != res.Job.JobID || src.opened != 1 {
		t.Fatalf("again = %+v, %v (opened %d times)", again, err, src.opened)
	}
	other := req
	other.SHA256 = strings.Repeat("0", 64)
	if _, err := s.SubmitObject(ctx, other); !errors.Is(err, ErrSubmissionKeyReused) || src.opened != 1 {
		t.Fatalf("same key, other digest: %v (opened %d times)", err, src.opened)
	}
	if open, submitted, _ := leftovers(t, db); open != 0 || submitted != 1 {
		t.Fatalf("uploads: %d OPEN, %d SUBMITTED", open, submitted)
	}
}

// TestSubmitObjectRefusals: every refusal leaves no job, no upload and no
// chunk behind: a digest that differs from the store's (refused before
// reading), bytes whose digest differs from the declared one when the
// store says none (refused after streaming), an object beyond the upload
// limit by its stored size (before reading) or as read, an empty object,
// and a malformed declaration.
func TestSubmitObjectRefusals(t *testing.T) {
	t.Parallel()
	s, db := newService(t, func(o *Options) {
		o.Uploads = UploadOptions{MaxBytes: 4096, MaxPartBytes: 1024, OwnerMaxStagedBytes: 8192}
	})
	ctx := context.Background()
	small := lines(50) // ~1.3 KB: two parts
	big := lines(200)  // ~5 KB: beyond MaxBytes
	cases := []struct {
		name string
		src  *bytesSource
		sha  string
		want error
		read bool // the object is opened
	}{
		{"store digest differs", &bytesSource{data: small, size: int64(len(small)), sha256: hexSHA(small)}, hexSHA(big), ErrUploadDigestMismatch, true},
		{"bytes differ", &bytesSource{data: small, size: -1}, hexSHA(big), ErrUploadDigestMismatch, true},
		{"stored size too large", &bytesSource{data: big, size: int64(len(big))}, hexSHA(big), ErrUploadTooLarge, true},
		{"read size too large", &bytesSource{data: big, size: -1}, hexSHA(big), ErrUploadTooLarge, true},
		{"empty", &bytesSource{size: 0}, hexSHA(nil), ErrUploadIncomplete, true},
		{"digest not hex", &bytesSource{data: small, size: -1}, "xyz", errInvalidUploadBody, false},
	}
	for i, c := range cases {
		_, err := s.SubmitObject(ctx, ObjectSubmission{
			Principal: "bob", IdempotencyKey: fmt.Sprintf("object-refusal-%06d", i), Format: pg.UploadFormatJSONL,
			SHA256: c.sha, Source: c.src,
		})
		if !errors.Is(err, c.want) {
			t.Errorf("%s: %v, want %v", c.name, err, c.want)
		}
		if (c.src.opened == 1) != c.read {
			t.Errorf("%s: opened %d times", c.name, c.src.opened)
		}
	}
	if open, submitted, chunks := leftovers(t, db); open+submitted+chunks != 0 {
		t.Fatalf("refusals left %d OPEN, %d SUBMITTED uploads and %d chunks", open, submitted, chunks)
	}
	var jobs int
	if err := db.QueryRow(ctx, `SELECT count(*) FROM etl_job_records`).Scan(&jobs); err != nil || jobs != 0 {
		t.Fatalf("refusals made %d jobs (%v)", jobs, err)
	}
}

// TestKeepAliveEvery: the keep-alive runs beat after beat until stopped,
// and not after stop returned; a nil one is a no-op.
func TestKeepAliveEvery(t *testing.T) {
	t.Parallel()
	var mu sync.Mutex
	calls := 0
	beat := make(chan struct{}, 1)
	stop := keepAliveEvery(func() {
		mu.Lock()
		calls++
		mu.Unlock()
		select {
		case beat <- struct{}{}:
		default:
		}
	}, time.Millisecond)
	<-beat
	<-beat
	stop()
	mu.Lock()
	n := calls
	mu.Unlock()
	if n < 2 {
		t.Fatalf("%d beats", n)
	}
	select {
	case <-beat:
		// one beat may have been buffered before stop
	default:
	}
	mu.Lock()
	defer mu.Unlock()
	if calls != n {
		t.Fatalf("a beat after stop returned: %d, then %d", n, calls)
	}
	keepAliveEvery(nil, time.Millisecond)()
}
