package natsbridge_test

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"io"
	"strings"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/mightyetl/mightyetl/internal/events"
	"github.com/mightyetl/mightyetl/internal/intake"
	"github.com/mightyetl/mightyetl/internal/natsbridge"
	"github.com/mightyetl/mightyetl/internal/outbox"
	"github.com/mightyetl/mightyetl/internal/pg"
	"github.com/mightyetl/mightyetl/internal/testwait"
)

// objectStore creates principal's Object Store bucket under prefix
// (deleted when the test ends) and returns it with its name.
func objectStore(t *testing.T, js jetstream.JetStream, prefix, principal string) (jetstream.ObjectStore, string) {
	t.Helper()
	s, err := events.NewSubjects(prefix)
	if err != nil {
		t.Fatal(err)
	}
	bucket := s.ObjectBucket(principal)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	obs, err := js.CreateObjectStore(ctx, jetstream.ObjectStoreConfig{Bucket: bucket, Storage: jetstream.FileStorage})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		_ = js.DeleteObjectStore(ctx, bucket)
	})
	return obs, bucket
}

// jsonLines is n records of JSON Lines, about 40 bytes each.
func jsonLines(n int) []byte {
	var b bytes.Buffer
	for i := range n {
		fmt.Fprintf(&b, "{\"id\":\"r%07d\",\"name\":\"name %d\"}\n", i, i)
	}
	return b.Bytes()
}

func putObject(t *testing.T, obs jetstream.ObjectStore, name string, data []byte) string {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if _, err := obs.Put(ctx, jetstream.ObjectMeta{Name: name}, bytes.NewReader(data)); err != nil {
		t.Fatal(err)
	}
	sum := sha256.Sum256(data)
	return hex.EncodeToString(sum[:])
}

func objectRequest(bucket, name, digest string) string {
	b, _ := json.Marshal(events.ObjectRequest{
		ObjectStore: events.ObjectReference{Bucket: bucket, Name: name, SHA256: digest}, Format: events.ObjectFormatJSONLines,
	})
	return string(b)
}

// uploads counts the database's uploads in state.
func uploads(t *testing.T, pool *pgxpool.Pool, state string) int {
	t.Helper()
	var n int
	if err := pool.QueryRow(context.Background(), `SELECT count(*) FROM etl_uploads WHERE upload_state = $1`, state).Scan(&n); err != nil {
		t.Fatal(err)
	}
	return n
}

// chunkedJob returns the one job's id, kind and status, and the bytes of its
// upload's payload stream.
func chunkedJob(t *testing.T, pool *pgxpool.Pool) (id uuid.UUID, kind, status string, payload []byte) {
	t.Helper()
	ctx := context.Background()
	var uploadID uuid.UUID
	if err := pool.QueryRow(ctx, `SELECT j.job_record_id, j.job_kind, j.job_status, u.upload_id
		FROM etl_job_records j JOIN etl_uploads u ON u.job_record_id = j.job_record_id AND u.upload_state = 'SUBMITTED'`).
		Scan(&id, &kind, &status, &uploadID); err != nil {
		t.Fatal(err)
	}
	payload, err := io.ReadAll(pg.StreamPayload(ctx, pool, uploadID, 1, 0))
	if err != nil {
		t.Fatal(err)
	}
	return id, kind, status, payload
}

// rejectionsOf subscribes to prefix's rejection subject.
func rejectionsOf(t *testing.T, nc *nats.Conn, prefix string) <-chan events.Rejection {
	t.Helper()
	ch := make(chan events.Rejection, 16)
	sub, err := nc.Subscribe(prefix+".rejections", func(m *nats.Msg) {
		var r events.Rejection
		if json.Unmarshal(m.Data, &r) == nil {
			ch <- r
		}
	})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = sub.Unsubscribe() })
	if err := nc.Flush(); err != nil {
		t.Fatal(err)
	}
	return ch
}

// TestObjectRequestBecomesAChunkedJob: a request that references an object
// in the principal's Object Store bucket becomes one PENDING etl_chunked
// job whose payload stream in PostgreSQL is exactly the object; the reply
// is the job, and the request stream is drained (acked). Publishing the
// request again answers the same job, replayed, without a second upload.
func TestObjectRequestBecomesAChunkedJob(t *testing.T) {
	t.Parallel()
	b := setup(t)
	obs, bucket := objectStore(t, b.js, b.prefix, "alice")
	data := jsonLines(20000) // ~0.8 MB: several Object Store chunks
	digest := putObject(t, obs, "nightly/2026-12-01.jsonl", data)
	startRequestBridge(t, b.pool, b.js, b.url, b.prefix, "object-test")

	inbox := events.NewReplyInbox("alice")
	replies, err := b.nc.SubscribeSync(inbox)
	if err != nil {
		t.Fatal(err)
	}
	body := objectRequest(bucket, "nightly/2026-12-01.jsonl", digest)
	publish(t, b.js, b.prefix+".requests.alice", "object-key-0000000001", body, events.ReplyToHeader, inbox)
	reply, err := replies.NextMsg(60 * time.Second)
	if err != nil {
		t.Fatal(err)
	}
	var rep intake.RequestReply
	if err := json.Unmarshal(reply.Data, &rep); err != nil || rep.JobRecordID == "" || rep.Replayed || rep.JobStatus != pg.StatusPending {
		t.Fatalf("reply %s: %v", reply.Data, err)
	}
	id, kind, status, payload := chunkedJob(t, b.pool)
	if id.String() != rep.JobRecordID || kind != pg.KindETLChunked || status != pg.StatusPending {
		t.Fatalf("job %s %s %s, reply %+v", id, kind, status, rep)
	}
	if !bytes.Equal(payload, data) {
		t.Fatalf("payload stream: %d bytes, object %d bytes (or other bytes)", len(payload), len(data))
	}
	var raw string
	if err := b.pool.QueryRow(context.Background(), `SELECT request_payload FROM etl_job_records WHERE job_record_id = $1`, id).Scan(&raw); err != nil {
		t.Fatal(err)
	}
	var manifest pg.UploadManifest
	if err := json.Unmarshal([]byte(raw), &manifest); err != nil {
		t.Fatal(err)
	}
	if manifest.Bytes != int64(len(data)) || manifest.Format != events.ObjectFormatJSONLines {
		t.Fatalf("manifest %+v", manifest)
	}

	// The same request again: the same job, replayed; the object is not
	// staged a second time.
	publish(t, b.js, b.prefix+".requests.alice", "object-key-0000000001", body, events.ReplyToHeader, inbox)
	reply, err = replies.NextMsg(60 * time.Second)
	if err != nil {
		t.Fatal(err)
	}
	var again intake.RequestReply
	if err := json.Unmarshal(reply.Data, &again); err != nil || again.JobRecordID != rep.JobRecordID || !again.Replayed {
		t.Fatalf("second reply %s: %v", reply.Data, err)
	}
	if n := jobs(t, b.pool); n != 1 {
		t.Fatalf("%d jobs, want 1", n)
	}
	if o, s := uploads(t, b.pool, pg.UploadOpen), uploads(t, b.pool, pg.UploadSubmitted); o != 0 || s != 1 {
		t.Fatalf("uploads: %d OPEN, %d SUBMITTED; want 0 and 1", o, s)
	}
	drained(t, b.js, b.prefix)
}

// drained waits until prefix's request stream holds no message (each was
// acked or terminated).
func drained(t *testing.T, js jetstream.JetStream, prefix string) {
	t.Helper()
	testwait.For(t, 30*time.Second, "request stream drained", func() bool {
		s, err := js.Stream(context.Background(), strings.ToUpper(prefix)+"_REQUESTS")
		if err != nil {
			return false
		}
		info, err := s.Info(context.Background())
		return err == nil && info.State.Msgs == 0
	})
}

// TestObjectRequestRejections: a reference whose digest is not the
// object's, an object beyond the upload limit, a missing object, a missing bucket, another principal's bucket
// and a malformed reference are each terminated with their payload-free
// rejection (and the same code in the reply), with no job and no upload
// left behind.
func TestObjectRequestRejections(t *testing.T) {
	t.Parallel()
	b := setup(t)
	obs, bucket := objectStore(t, b.js, b.prefix, "alice")
	_, bobs := objectStore(t, b.js, b.prefix, "bob")
	data := jsonLines(100)
	digest := putObject(t, obs, "a.jsonl", data)
	bobObs, err := b.js.ObjectStore(context.Background(), bobs)
	if err != nil {
		t.Fatal(err)
	}
	bobDigest := putObject(t, bobObs, "b.jsonl", data)
	big := jsonLines(300) // ~11 KB: beyond the upload limit below
	bigDigest := putObject(t, obs, "big.jsonl", big)
	rejections := rejectionsOf(t, b.nc, b.prefix)
	svc, err := intake.New(intake.Options{DB: b.pool, PrincipalHashKey: []byte(hashKey),
		Uploads: intake.UploadOptions{MaxBytes: 8 << 10, MaxPartBytes: 1 << 10, OwnerMaxStagedBytes: 16 << 10}})
	if err != nil {
		t.Fatal(err)
	}
	if err := svc.Start(context.Background()); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = svc.Stop(context.Background()) })
	bridge := natsbridge.New(natsbridge.Options{
		Conn: events.Options{URL: b.url, Name: "object-reject-test"}, SubjectPrefix: b.prefix, ConsumeRequests: true,
		Relay: outbox.Options{PollInterval: time.Second, BatchSize: 100}, Pool: b.pool, Service: svc,
		Registry: prometheus.NewRegistry(),
	})
	if err := bridge.Start(context.Background()); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = bridge.Stop(context.Background()) })
	testwait.For(t, 30*time.Second, "request stream", func() bool {
		_, err := b.js.Stream(context.Background(), strings.ToUpper(b.prefix)+"_REQUESTS")
		return err == nil
	})
	inbox := events.NewReplyInbox("alice")
	replies, err := b.nc.SubscribeSync(inbox)
	if err != nil {
		t.Fatal(err)
	}
	other := strings.Repeat("0", 64)
	s, _ := events.NewSubjects(b.prefix)
	cases := []struct{ name, body, code string }{
		{"wrong digest", objectRequest(bucket, "a.jsonl", other), "etl_upload_digest_mismatch"},
		{"beyond the upload limit", objectRequest(bucket, "big.jsonl", bigDigest), "etl_upload_too_large"},
		{"missing object", objectRequest(bucket, "nope.jsonl", digest), "etl_upload_object_not_found"},
		{"missing bucket", objectRequest(s.ObjectBucket("carol"), "a.jsonl", digest), "etl_upload_object_not_found"},
		{"another principal's bucket", objectRequest(bobs, "b.jsonl", bobDigest), "etl_upload_object_not_found"},
		{"malformed reference", `{"objectStore":{"bucket":"` + bucket + `","name":"a.jsonl"}}`, "etl_invalid_json"},
		{"unknown format", `{"objectStore":{"bucket":"` + bucket + `","name":"a.jsonl","sha256":"` + digest + `"},"format":"csv"}`, "etl_invalid_json"},
	}
	for i, c := range cases {
		publish(t, b.js, b.prefix+".requests.alice", fmt.Sprintf("object-reject-%010d", i), c.body, events.ReplyToHeader, inbox)
		select {
		case r := <-rejections:
			if r.ErrorCode != c.code {
				t.Fatalf("%s: rejection %q, want %q", c.name, r.ErrorCode, c.code)
			}
		case <-time.After(60 * time.Second):
			t.Fatalf("%s: no rejection", c.name)
		}
		reply, err := replies.NextMsg(30 * time.Second)
		if err != nil {
			t.Fatalf("%s: no reply: %v", c.name, err)
		}
		if got := reply.Header.Get(events.ErrorCodeHeader); got != c.code {
			t.Fatalf("%s: reply code %q, want %q", c.name, got, c.code)
		}
	}
	if n := jobs(t, b.pool); n != 0 {
		t.Fatalf("rejected object requests made %d jobs", n)
	}
	var left int
	if err := b.pool.QueryRow(context.Background(), `SELECT (SELECT count(*) FROM etl_uploads) + (SELECT count(*) FROM etl_upload_chunks)`).Scan(&left); err != nil {
		t.Fatal(err)
	}
	if left != 0 {
		t.Fatalf("rejected object requests left %d upload or chunk rows", left)
	}
	drained(t, b.js, b.prefix)
}

// crashingHandler commits through the real handler, then fails the first
// object request as if the intake died before the ack: the message is
// redelivered. It keeps the handler's long-request behaviour.
type crashingHandler struct {
	inner interface {
		events.RequestHandler
		events.LongRequests
	}
	crashed chan struct{}
}

func (c *crashingHandler) IsLongRequest(body []byte) bool { return c.inner.IsLongRequest(body) }

func (c *crashingHandler) HandleRequest(ctx context.Context, req events.Request) ([]byte, string, error) {
	reply, code, err := c.inner.HandleRequest(ctx, req)
	if err == nil && code == "" {
		select {
		case <-c.crashed:
		default:
			close(c.crashed)
			return nil, "", fmt.Errorf("simulated crash between commit and ack")
		}
	}
	return reply, code, err
}

// TestObjectRequestRedeliveryConverges: an object request whose job
// committed but whose ack never happened comes back and converges on the
// same job: one job, one SUBMITTED upload, nothing OPEN, the stream
// drained.
func TestObjectRequestRedeliveryConverges(t *testing.T) {
	t.Parallel()
	b := setup(t)
	obs, bucket := objectStore(t, b.js, b.prefix, "bob")
	data := jsonLines(3000)
	digest := putObject(t, obs, "x.jsonl", data)
	h, err := natsbridge.NewRequestHandler(b.nc, service(t, b.pool), b.prefix, 0)
	if err != nil {
		t.Fatal(err)
	}
	ch := &crashingHandler{inner: h.(interface {
		events.RequestHandler
		events.LongRequests
	}), crashed: make(chan struct{})}
	c, err := events.NewRequestConsumer(b.nc, b.prefix, ch, nil, nil, events.RequestConsumerOptions{RetryDelay: 50 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	if err := c.Start(context.Background()); err != nil {
		t.Fatal(err)
	}
	defer c.Stop(context.Background())
	testwait.For(t, 30*time.Second, "request stream", func() bool {
		_, err := b.js.Stream(context.Background(), strings.ToUpper(b.prefix)+"_REQUESTS")
		return err == nil
	})
	publish(t, b.js, b.prefix+".requests.bob", "object-redelivery-1", objectRequest(bucket, "x.jsonl", digest))
	select {
	case <-ch.crashed:
	case <-time.After(60 * time.Second):
		t.Fatal("the first delivery never committed")
	}
	drained(t, b.js, b.prefix)
	if n := jobs(t, b.pool); n != 1 {
		t.Fatalf("redelivery made %d jobs, want 1", n)
	}
	if o, s := uploads(t, b.pool, pg.UploadOpen), uploads(t, b.pool, pg.UploadSubmitted); o != 0 || s != 1 {
		t.Fatalf("uploads: %d OPEN, %d SUBMITTED; want 0 and 1", o, s)
	}
	_, kind, _, payload := chunkedJob(t, b.pool)
	if kind != pg.KindETLChunked || !bytes.Equal(payload, data) {
		t.Fatalf("job kind %s, payload %d bytes of %d", kind, len(payload), len(data))
	}
}
