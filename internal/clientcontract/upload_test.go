package clientcontract_test

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/mightyetl/mightyetl/client"
)

// uploadPartSize is the part size of these tests: small, so a payload of a
// few hundred KiB has several parts.
const uploadPartSize = 64 << 10

// jsonLines returns n records as JSON Lines (about 70 bytes a line).
func jsonLines(n int) []byte {
	var b bytes.Buffer
	for i := 1; i <= n; i++ {
		fmt.Fprintf(&b, `{"id":"r%06d","name":"name %d","email":"User%d@Example.COM","amount":"%d.5"}`+"\n", i, i, i, i)
	}
	return b.Bytes()
}

func hexSHA256(b []byte) string {
	s := sha256.Sum256(b)
	return hex.EncodeToString(s[:])
}

// partRequests counts the part PUTs by part number, and sees every
// Content-Encoding they carried.
type partRequests struct {
	mu        sync.Mutex
	byNumber  map[string]int
	encodings map[string]bool
	next      http.RoundTripper
}

func newPartRequests() *partRequests {
	return &partRequests{byNumber: map[string]int{}, encodings: map[string]bool{}, next: &http.Transport{}}
}

func (p *partRequests) RoundTrip(r *http.Request) (*http.Response, error) {
	if r.Method == http.MethodPut {
		_, n, _ := strings.Cut(r.URL.Path, "/parts/")
		p.mu.Lock()
		p.byNumber[n]++
		p.encodings[r.Header.Get("Content-Encoding")] = true
		p.mu.Unlock()
	}
	return p.next.RoundTrip(r)
}

func (p *partRequests) CloseIdleConnections() { p.next.(*http.Transport).CloseIdleConnections() }

func (p *partRequests) sent() map[string]int {
	p.mu.Lock()
	defer p.mu.Unlock()
	out := map[string]int{}
	for k, v := range p.byNumber {
		out[k] = v
	}
	return out
}

// httpClient is a client with transport rt, closed at cleanup.
func (s *stack) httpClient(rt http.RoundTripper) *http.Client {
	hc := &http.Client{Timeout: 30 * time.Second, Transport: rt}
	s.t.Cleanup(hc.CloseIdleConnections)
	return hc
}

// jobKind reads a job's kind and manifest from the database.
func (s *stack) chunkedManifest(id string) (kind string, manifest map[string]any) {
	s.t.Helper()
	var payload *string
	if err := s.pool.QueryRow(context.Background(),
		`SELECT job_kind, request_payload FROM etl_job_records WHERE job_record_id = $1`, id).Scan(&kind, &payload); err != nil {
		s.t.Fatal(err)
	}
	if payload != nil {
		if err := json.Unmarshal([]byte(*payload), &manifest); err != nil {
			s.t.Fatalf("manifest %q: %v", *payload, err)
		}
	}
	return kind, manifest
}

// TestUploadSubmitsAChunkedJob: Upload sends a JSON Lines payload of five
// parts with progress, and submits it: the job is a PENDING etl_chunked job
// whose manifest names the upload, its bytes and parts; the upload is
// SUBMITTED with that job and holds the parts with their digests. Uploading
// again with the upload id and key sends no part and answers the same job,
// replayed.
func TestUploadSubmitsAChunkedJob(t *testing.T) {
	s := newStack(t, false)
	pr := newPartRequests()
	c := s.client(client.WithHTTPClient(s.httpClient(pr)))
	ctx := ctxT(t, 2*time.Minute)
	payload := jsonLines(4500) // ~ 4.6 parts of 64 KiB
	wantParts := (len(payload) + uploadPartSize - 1) / uploadPartSize
	if wantParts < 4 {
		t.Fatalf("payload of %d bytes has only %d parts", len(payload), wantParts)
	}
	var seen []client.UploadProgress
	sub, err := c.Upload(ctx, bytes.NewReader(payload), client.UploadOptions{PartSize: uploadPartSize, MaxBadRecords: 3,
		Progress: func(p client.UploadProgress) { seen = append(seen, p) }})
	if err != nil {
		t.Fatal(err)
	}
	if sub.Replayed || sub.Status != client.StatusPending || sub.UploadID == "" || !strings.HasPrefix(sub.Key, "mightyetl-") ||
		sub.StatusURL != "/api/etl/jobs/"+sub.JobID {
		t.Fatalf("submission %+v", sub)
	}
	if len(seen) != wantParts+1 || seen[0].Bytes != 0 || seen[len(seen)-1].Bytes != int64(len(payload)) ||
		seen[len(seen)-1].Sent != int64(len(payload)) || seen[len(seen)-1].Parts != wantParts {
		t.Fatalf("progress %+v", seen)
	}
	for i, p := range seen {
		if p.Total != int64(len(payload)) || p.UploadID != sub.UploadID || i > 0 && p.Bytes <= seen[i-1].Bytes {
			t.Fatalf("progress %d: %+v", i, p)
		}
	}
	kind, manifest := s.chunkedManifest(sub.JobID)
	if kind != "etl_chunked" || manifest["uploadId"] != sub.UploadID || manifest["format"] != "jsonl" ||
		manifest["bytes"] != float64(len(payload)) || manifest["parts"] != float64(wantParts) || manifest["maxBadRecords"] != float64(3) {
		t.Fatalf("job kind %q, manifest %v", kind, manifest)
	}
	j, err := c.Get(ctx, sub.JobID)
	if err != nil || j.Status != client.StatusPending {
		t.Fatalf("get %+v, %v", j, err)
	}
	u, err := c.GetUpload(ctx, sub.UploadID)
	if err != nil || u.State != client.UploadSubmitted || u.JobID != sub.JobID || u.Format != client.FormatJSONLines ||
		len(u.Parts) != wantParts || u.StagedBytes != int64(len(payload)) {
		t.Fatalf("upload %+v, %v", u, err)
	}
	for i, p := range u.Parts {
		end := min((i+1)*uploadPartSize, len(payload))
		if p.Number != i+1 || p.SHA256 != hexSHA256(payload[i*uploadPartSize:end]) || p.Bytes != int64(end-i*uploadPartSize) {
			t.Fatalf("part %d: %+v", i+1, p)
		}
	}
	before := pr.sent()
	again, err := c.Upload(ctx, bytes.NewReader(payload), client.UploadOptions{UploadID: sub.UploadID, Key: sub.Key})
	if err != nil || again.JobID != sub.JobID || !again.Replayed {
		t.Fatalf("upload again %+v, %v", again, err)
	}
	if after := pr.sent(); fmt.Sprint(after) != fmt.Sprint(before) {
		t.Fatalf("resuming a submitted upload sent parts: %v, before %v", after, before)
	}
	// The same upload id with other bytes is not this upload's source.
	other := bytes.Clone(payload)
	other[10] = 'X'
	_, err = c.Upload(ctx, bytes.NewReader(other), client.UploadOptions{UploadID: sub.UploadID, Key: sub.Key})
	if !errors.Is(err, client.ErrUploadSourceMismatch) {
		t.Fatalf("other source: %v", err)
	}
}

// failingReader yields the first n bytes of b, then fails.
type failingReader struct {
	b []byte
	n int
}

var errSourceBroke = errors.New("source broke")

func (r *failingReader) Read(p []byte) (int, error) {
	if r.n <= 0 {
		return 0, errSourceBroke
	}
	k := copy(p, r.b[:min(len(r.b), r.n)])
	r.b, r.n = r.b[k:], r.n-k
	return k, nil
}

// TestUploadResumesAfterInterruptions: a source that fails in part 3 stops
// the upload after two parts (an *UploadError with the id); resuming it
// with a server that cuts the connection in the middle of part 4 (no
// retries) stops after three; resuming again sends only parts 4..N, never
// 1..3 again, and the job's manifest covers the whole payload.
func TestUploadResumesAfterInterruptions(t *testing.T) {
	s := newStack(t, false)
	pr := newPartRequests()
	c := s.client(client.WithHTTPClient(s.httpClient(pr)), client.WithRetry(client.RetryPolicy{MaxAttempts: 1}))
	ctx := ctxT(t, 2*time.Minute)
	payload := jsonLines(4500)
	wantParts := (len(payload) + uploadPartSize - 1) / uploadPartSize
	key := client.NewKey()

	_, err := c.Upload(ctx, &failingReader{b: payload, n: 2*uploadPartSize + 100}, client.UploadOptions{PartSize: uploadPartSize, Key: key})
	var ue *client.UploadError
	if !errors.As(err, &ue) || !errors.Is(err, errSourceBroke) || ue.UploadID == "" || ue.Key != key || ue.Parts != 2 {
		t.Fatalf("broken source: %v (%+v)", err, ue)
	}
	id := ue.UploadID
	if got := pr.sent(); fmt.Sprint(got) != "map[1:1 2:1]" {
		t.Fatalf("parts sent before the source broke: %v", got)
	}

	// The intake reads half of part 4's body, then the connection drops.
	var cut sync.Once
	s.setWrap(func(w http.ResponseWriter, r *http.Request, h http.Handler) {
		if r.Method == http.MethodPut && strings.HasSuffix(r.URL.Path, "/parts/4") {
			done := false
			cut.Do(func() {
				_, _ = io.CopyN(io.Discard, r.Body, uploadPartSize/2)
				conn, _, err := http.NewResponseController(w).Hijack()
				if err == nil {
					_ = conn.Close()
				}
				done = true
			})
			if done {
				return
			}
		}
		h.ServeHTTP(w, r)
	})
	_, err = c.Upload(ctx, bytes.NewReader(payload), client.UploadOptions{UploadID: id, Key: key})
	if !errors.As(err, &ue) || ue.UploadID != id || ue.Parts != 3 {
		t.Fatalf("cut part: %v (%+v)", err, ue)
	}
	u, err := c.GetUpload(ctx, id)
	if err != nil || u.State != client.UploadOpen || len(u.Parts) != 3 || u.StagedBytes != 3*uploadPartSize {
		t.Fatalf("upload after the cut: %+v, %v", u, err)
	}

	sub, err := c.Upload(ctx, bytes.NewReader(payload), client.UploadOptions{UploadID: id, Key: key})
	if err != nil || sub.UploadID != id || sub.Key != key || sub.Status != client.StatusPending || sub.Replayed {
		t.Fatalf("resumed upload: %+v, %v", sub, err)
	}
	sent := pr.sent()
	for n := 1; n <= wantParts; n++ {
		want := 1
		if n == 4 {
			want = 2 // cut, then sent again
		}
		if got := sent[fmt.Sprint(n)]; got != want {
			t.Fatalf("part %d sent %d times, want %d (%v)", n, got, want, sent)
		}
	}
	kind, manifest := s.chunkedManifest(sub.JobID)
	if kind != "etl_chunked" || manifest["bytes"] != float64(len(payload)) || manifest["parts"] != float64(wantParts) {
		t.Fatalf("job kind %q, manifest %v", kind, manifest)
	}
}

// corruptFirstPart flips one byte of the first part body it forwards,
// keeping its X-Part-SHA256.
type corruptFirstPart struct {
	once sync.Once
	next http.RoundTripper
}

func (c *corruptFirstPart) CloseIdleConnections() { c.next.(*http.Transport).CloseIdleConnections() }

func (c *corruptFirstPart) RoundTrip(r *http.Request) (*http.Response, error) {
	if r.Method == http.MethodPut {
		c.once.Do(func() {
			b, _ := io.ReadAll(r.Body)
			_ = r.Body.Close()
			b[len(b)/2] ^= 0x20
			r = r.Clone(r.Context())
			r.Body, r.ContentLength = io.NopCloser(bytes.NewReader(b)), int64(len(b))
			r.GetBody = nil
		})
	}
	return c.next.RoundTrip(r)
}

// TestUploadDigestMismatchIsTyped: a part whose bytes are not the digest
// sent with it is refused as a typed etl_upload_digest_mismatch inside the
// *UploadError, and so is a submission whose whole digest is not the
// parts'; the upload stays OPEN and resumable, and a resume completes it.
func TestUploadDigestMismatchIsTyped(t *testing.T) {
	s := newStack(t, false)
	c := s.client(client.WithHTTPClient(s.httpClient(&corruptFirstPart{next: &http.Transport{}})))
	ctx := ctxT(t, 2*time.Minute)
	payload := jsonLines(2000)

	_, err := c.Upload(ctx, bytes.NewReader(payload), client.UploadOptions{PartSize: uploadPartSize})
	var p *client.Error
	var ue *client.UploadError
	if !errors.As(err, &p) || p.Code != client.CodeUploadDigestMismatch || p.Status != http.StatusBadRequest ||
		!errors.As(err, &ue) || ue.Parts != 0 {
		t.Fatalf("corrupted part: %v", err)
	}
	if !errors.Is(err, &client.Error{Code: client.CodeUploadDigestMismatch}) {
		t.Fatalf("errors.Is does not match the code: %v", err)
	}

	// Parts intact, whole digest wrong.
	plain := s.client()
	part, err := plain.PutUploadPart(ctx, ue.UploadID, 1, payload, false)
	if err != nil || part.Number != 1 || part.SHA256 != hexSHA256(payload) || part.Bytes != int64(len(payload)) {
		t.Fatalf("put part: %+v, %v", part, err)
	}
	_, err = plain.SubmitUpload(ctx, ue.UploadID, client.UploadSubmission{SHA256: hexSHA256([]byte("other"))}, "")
	if !errors.As(err, &p) || p.Code != client.CodeUploadDigestMismatch {
		t.Fatalf("wrong whole digest: %v", err)
	}
	sub, err := plain.Upload(ctx, bytes.NewReader(payload), client.UploadOptions{UploadID: ue.UploadID, PartSize: len(payload)})
	if err != nil || sub.Status != client.StatusPending {
		t.Fatalf("resume: %+v, %v", sub, err)
	}
	// Absent and malformed upload ids are not found.
	for _, id := range []string{"00000000-0000-0000-0000-000000000000", "not-a-uuid"} {
		if _, err := plain.GetUpload(ctx, id); !errors.As(err, &p) || p.Code != client.CodeUploadNotFound || p.Status != http.StatusNotFound {
			t.Fatalf("get upload %s: %v", id, err)
		}
	}
}

// TestUploadGzipParts: with Gzip every part goes gzipped; the service
// stores the uncompressed bytes (sizes and digests of the source), and the
// job covers the whole payload. DeleteUpload removes an OPEN upload.
func TestUploadGzipParts(t *testing.T) {
	s := newStack(t, false)
	pr := newPartRequests()
	c := s.client(client.WithHTTPClient(s.httpClient(pr)))
	ctx := ctxT(t, 2*time.Minute)
	payload := jsonLines(3000)
	sub, err := c.Upload(ctx, bytes.NewReader(payload), client.UploadOptions{PartSize: uploadPartSize, Gzip: true})
	if err != nil || sub.Status != client.StatusPending {
		t.Fatalf("gzip upload: %+v, %v", sub, err)
	}
	if fmt.Sprint(pr.encodings) != "map[gzip:true]" {
		t.Fatalf("encodings sent %v", pr.encodings)
	}
	u, err := c.GetUpload(ctx, sub.UploadID)
	if err != nil || u.StagedBytes != int64(len(payload)) || u.Parts[0].SHA256 != hexSHA256(payload[:uploadPartSize]) {
		t.Fatalf("upload %+v, %v", u, err)
	}
	_, manifest := s.chunkedManifest(sub.JobID)
	if manifest["bytes"] != float64(len(payload)) {
		t.Fatalf("manifest %v", manifest)
	}

	open, err := c.CreateUpload(ctx, client.FormatJSONArray)
	if err != nil || open.State != client.UploadOpen || open.Format != client.FormatJSONArray || len(open.Parts) != 0 || open.MaxPartBytes <= 0 {
		t.Fatalf("create %+v, %v", open, err)
	}
	if err := c.DeleteUpload(ctx, open.ID); err != nil {
		t.Fatal(err)
	}
	var p *client.Error
	if _, err := c.GetUpload(ctx, open.ID); !errors.As(err, &p) || p.Code != client.CodeUploadNotFound {
		t.Fatalf("get after delete: %v", err)
	}
}

// TestUploadReplaysACancelledChunkedJob: a cancelled chunked job is
// replayed by uploading its payload again with ReplayOf: the new job is
// PENDING with the lineage; other bytes are etl_job_replay_payload_mismatch.
func TestUploadReplaysACancelledChunkedJob(t *testing.T) {
	s := newStack(t, false)
	c := s.client()
	ctx := ctxT(t, 2*time.Minute)
	payload := jsonLines(1500)
	sub, err := c.Upload(ctx, bytes.NewReader(payload), client.UploadOptions{PartSize: uploadPartSize})
	if err != nil {
		t.Fatal(err)
	}
	if cn, err := c.Cancel(ctx, sub.JobID, ""); err != nil || cn.Job.Status != client.StatusCancelled {
		t.Fatalf("cancel %+v, %v", cn, err)
	}
	other := bytes.Clone(payload)
	other[5] = 'Z'
	_, err = c.Upload(ctx, bytes.NewReader(other), client.UploadOptions{PartSize: uploadPartSize, ReplayOf: sub.JobID})
	var p *client.Error
	if !errors.As(err, &p) || p.Code != client.CodeReplayPayloadMismatch {
		t.Fatalf("replay with other bytes: %v", err)
	}
	rp, err := c.Upload(ctx, bytes.NewReader(payload), client.UploadOptions{PartSize: uploadPartSize, ReplayOf: sub.JobID})
	if err != nil || rp.JobID == sub.JobID || rp.Status != client.StatusPending {
		t.Fatalf("replay %+v, %v", rp, err)
	}
	j, err := c.Get(ctx, rp.JobID)
	if err != nil || j.ReplaySourceID != sub.JobID || j.ReplayGeneration != 1 || j.Progress == nil || j.Progress.PayloadBytes != int64(len(payload)) {
		t.Fatalf("replay job %+v, %v", j, err)
	}
	if kind, _ := s.chunkedManifest(rp.JobID); kind != "etl_chunked" {
		t.Fatalf("replay job kind %q", kind)
	}
}

// TestUploadedJobLoads: with a worker, a JSON Lines upload with two bad
// lines under MaxBadRecords 2 succeeds: Watch sees the progress, the job
// reports every good record loaded and the two bad ones, BadRecords lists
// their line numbers (never their content), and the target holds each
// good record once, visible.
func TestUploadedJobLoads(t *testing.T) {
	s := newStack(t, true)
	c := s.client()
	ctx := ctxT(t, 3*time.Minute)
	payload := jsonLines(3000)
	lines := bytes.SplitAfter(payload, []byte("\n"))
	lines[99] = []byte("{\"id\":\"bad-100\",\"amount\":\"1e3\"}\n") // line 100: an invalid amount
	lines[1999] = []byte("not json\n")                              // line 2000: malformed
	payload = bytes.Join(lines, nil)
	sub, err := c.Upload(ctx, bytes.NewReader(payload), client.UploadOptions{PartSize: uploadPartSize, MaxBadRecords: 2})
	if err != nil {
		t.Fatal(err)
	}
	var states int
	j, err := c.Watch(ctx, sub.JobID, func(j *client.Job) {
		if j.Progress == nil {
			t.Errorf("a chunked job's state without progress: %+v", j)
		}
		states++
	})
	if err != nil || j.Status != client.StatusSucceeded || states == 0 {
		t.Fatalf("job %+v (%d states), %v", j, states, err)
	}
	if p := j.Progress; p.RecordsLoaded != 2998 || p.BadRecords != 2 || p.ChunksDone < 1 || p.LastCheckpointAt == nil ||
		p.PayloadBytes != int64(len(payload)) || p.FailedRecordNumber != nil {
		t.Fatalf("progress %+v", *p)
	}
	page, err := c.BadRecords(ctx, sub.JobID, 1, "")
	if err != nil || len(page.Records) != 1 || page.Records[0].RecordNumber != 100 || page.NextCursor == "" {
		t.Fatalf("bad records page 1: %+v, %v", page, err)
	}
	page, err = c.BadRecords(ctx, sub.JobID, 1, page.NextCursor)
	if err != nil || len(page.Records) != 1 || page.Records[0].RecordNumber != 2000 || page.Records[0].Code == "" {
		t.Fatalf("bad records page 2: %+v, %v", page, err)
	}
	var rows, distinct int
	if err := s.pool.QueryRow(ctx, `SELECT count(*), count(DISTINCT data) FROM processed_data_visible WHERE job_record_id = $1`,
		sub.JobID).Scan(&rows, &distinct); err != nil {
		t.Fatal(err)
	}
	if rows != 2998 || distinct != 2998 {
		t.Fatalf("visible rows %d (%d distinct), want 2998", rows, distinct)
	}
}
