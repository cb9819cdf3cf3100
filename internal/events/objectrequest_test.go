package events

import (
	"context"
	"encoding/json"
	"errors"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/mightyetl/mightyetl/internal/codes"
	"github.com/mightyetl/mightyetl/internal/testwait"
)

func TestParseObjectRequest(t *testing.T) {
	digest := strings.Repeat("ab", 32)
	ref := `"objectStore":{"bucket":"MIGHTYETL_OBJECTS_alice","name":"day/1.jsonl","sha256":"` + digest + `"}`
	cases := []struct {
		body   string
		ok     bool
		format string
		bad    int64
	}{
		{`{` + ref + `}`, true, ObjectFormatJSONLines, 0},
		{` {` + ref + `,"format":"json_array","maxBadRecords":7}` + "\n", true, ObjectFormatJSONArray, 7},
		{`{` + ref + `,"format":"jsonl"}`, true, ObjectFormatJSONLines, 0},
		{`{` + ref + `,"format":"csv"}`, false, "", 0},
		{`{` + ref + `,"maxBadRecords":-1}`, false, "", 0},
		{`{` + ref + `,"records":[]}`, false, "", 0},                                            // unknown member
		{`{` + ref + `} {}`, false, "", 0},                                                      // trailing data
		{`{` + ref + `}]`, false, "", 0},                                                        // trailing token
		{`{"objectStore":{"bucket":"a.b","name":"x","sha256":"` + digest + `"}}`, false, "", 0}, // bucket alphabet
		{`{"objectStore":{"bucket":"b","name":"","sha256":"` + digest + `"}}`, false, "", 0},
		{`{"objectStore":{"bucket":"b","name":"` + strings.Repeat("n", MaxObjectNameBytes+1) + `","sha256":"` + digest + `"}}`, false, "", 0},
		{`{"objectStore":{"bucket":"b","name":"x","sha256":"` + strings.ToUpper(digest) + `"}}`, false, "", 0},
		{`{"objectStore":{"bucket":"b","name":"x","sha256":"` + digest[:62] + `"}}`, false, "", 0},
		{`{"objectStore":{"bucket":"b","name":"x"}}`, false, "", 0},
		{`{}`, false, "", 0},
		{`{`, false, "", 0},
	}
	for _, c := range cases {
		if !IsObjectRequest([]byte(c.body)) {
			t.Errorf("IsObjectRequest(%.40q) = false", c.body)
		}
		r, code := ParseObjectRequest([]byte(c.body))
		if c.ok != (code == "") {
			t.Errorf("ParseObjectRequest(%.60q): code %q", c.body, code)
			continue
		}
		if !c.ok {
			if code != codes.InvalidJSON {
				t.Errorf("code %q, want %q", code, codes.InvalidJSON)
			}
			continue
		}
		if r.Format != c.format || r.MaxBadRecords != c.bad || r.ObjectStore.SHA256 != digest || r.ObjectStore.Name != "day/1.jsonl" {
			t.Errorf("ParseObjectRequest(%.60q) = %+v", c.body, r)
		}
	}
	for _, body := range []string{`[{"id":"a"}]`, "\n [", ``, `  `, `"x"`} {
		if IsObjectRequest([]byte(body)) {
			t.Errorf("IsObjectRequest(%q) = true", body)
		}
	}
}

// FuzzParseObjectRequest: no input panics; an accepted request is an
// object request and survives a round trip unchanged.
func FuzzParseObjectRequest(f *testing.F) {
	f.Add(`{"objectStore":{"bucket":"B","name":"n","sha256":"` + strings.Repeat("0", 64) + `"},"format":"json_array","maxBadRecords":3}`)
	f.Add(`{"objectStore":null}`)
	f.Add(`[{"id":"a"}]`)
	f.Fuzz(func(t *testing.T, body string) {
		r, code := ParseObjectRequest([]byte(body))
		if code != "" {
			return
		}
		if !IsObjectRequest([]byte(body)) {
			t.Fatalf("accepted %q, which is no object request", body)
		}
		b, err := json.Marshal(r)
		if err != nil {
			t.Fatal(err)
		}
		again, code := ParseObjectRequest(b)
		if code != "" || again != r {
			t.Fatalf("round trip of %q: %+v %q, was %+v", body, again, code, r)
		}
	})
}

func TestObjectBucket(t *testing.T) {
	for prefix, want := range map[string]string{
		"mightyetl":    "MIGHTYETL_OBJECTS_producer-alice",
		"tenant-a.etl": "TENANT-A_ETL_OBJECTS_producer-alice",
	} {
		s, err := NewSubjects(prefix)
		if err != nil {
			t.Fatal(err)
		}
		if got := s.ObjectBucket("producer-alice"); got != want || !bucketPattern.MatchString(got) {
			t.Errorf("ObjectBucket under %q = %q, want %q", prefix, got, want)
		}
	}
}

// beats counts a long request's in-progress reports.
type beats struct{ n atomic.Int32 }

func (b *beats) InProgress() error { b.n.Add(1); return nil }

// TestLongContextBeatsWhileAliveAndCancelsWhenStalled: while the handler
// keeps reporting progress, the message is reported in progress beat after
// beat and the context stays alive; once the reports stop for the stall
// bound, the context ends with ErrStalled; stop ends it as well.
func TestLongContextBeatsWhileAliveAndCancelsWhenStalled(t *testing.T) {
	t.Parallel()
	b := &beats{}
	ctx, stop := longContext(context.Background(), b, time.Millisecond, time.Hour)
	for b.n.Load() < 5 {
		KeepAlive(ctx)
		select {
		case <-ctx.Done():
			t.Fatalf("a live long request ended: %v", context.Cause(ctx))
		default:
		}
	}
	stop()
	if !errors.Is(context.Cause(ctx), context.Canceled) {
		t.Fatalf("after stop: cause %v", context.Cause(ctx))
	}

	stalled := &beats{}
	ctx, stop = longContext(context.Background(), stalled, time.Millisecond, 20*time.Millisecond)
	defer stop()
	select {
	case <-ctx.Done():
	case <-time.After(time.Minute):
		t.Fatal("a stalled long request was never cancelled")
	}
	if !errors.Is(context.Cause(ctx), ErrStalled) {
		t.Fatalf("stalled: cause %v", context.Cause(ctx))
	}

	// The consumer's end ends it too.
	parent, cancel := context.WithCancel(context.Background())
	ctx, stop = longContext(parent, &beats{}, time.Hour, time.Hour)
	defer stop()
	cancel()
	<-ctx.Done()
	KeepAlive(context.Background()) // not a long request: a no-op
}

// longHandler is a LongRequests handler: object requests are long.
type longHandler struct {
	mu      sync.Mutex
	calls   int
	release chan struct{}
	causes  []error
	ran     func(ctx context.Context, call int) // runs the call's body
}

func (h *longHandler) IsLongRequest(body []byte) bool { return IsObjectRequest(body) }

func (h *longHandler) HandleRequest(ctx context.Context, _ Request) ([]byte, string, error) {
	h.mu.Lock()
	h.calls++
	n := h.calls
	h.mu.Unlock()
	h.ran(ctx, n)
	if err := context.Cause(ctx); ctx.Err() != nil {
		h.mu.Lock()
		h.causes = append(h.causes, err)
		h.mu.Unlock()
		return nil, "", err
	}
	return []byte(`{"jobId":"long"}`), "", nil
}

const longBody = `{"objectStore":{"bucket":"b","name":"n","sha256":"` + "0000000000000000000000000000000000000000000000000000000000000000" + `"}}`

// TestLongRequestOutlivesHandlerTimeoutAndAckWait: a long request that
// keeps reporting progress runs past HandlerTimeout and AckWait several
// times over, is neither cancelled nor redelivered meanwhile (the consumer
// reports it in progress), and is acked and answered once it returns.
func TestLongRequestOutlivesHandlerTimeoutAndAckWait(t *testing.T) {
	t.Parallel()
	h := &longHandler{release: make(chan struct{})}
	var started atomic.Int64
	h.ran = func(ctx context.Context, _ int) {
		started.Store(time.Now().UnixNano())
		for {
			KeepAlive(ctx)
			select {
			case <-h.release:
				return
			case <-ctx.Done():
				return
			case <-time.After(20 * time.Millisecond):
			}
		}
	}
	f := newRequestFixture(t, h, func(o *RequestConsumerOptions) {
		o.AckWait, o.HandlerTimeout = 1500*time.Millisecond, time.Second
	})
	reply := f.submit(t, f.requestsSubject(t, "producer-1"), "producer-1", "key-long-000000000001", longBody)
	// Let three ack waits pass while the handler runs.
	testwait.For(t, time.Minute, "three ack waits into the handler", func() bool {
		s := started.Load()
		return s != 0 && time.Since(time.Unix(0, s)) > 4500*time.Millisecond
	})
	close(h.release)
	msg, err := reply.NextMsg(10 * time.Second)
	if err != nil || string(msg.Data) != `{"jobId":"long"}` {
		t.Fatalf("reply %v: %v", msg, err)
	}
	f.settled(t)
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.calls != 1 || len(h.causes) != 0 {
		t.Fatalf("%d calls, causes %v; want one uncancelled call", h.calls, h.causes)
	}
}

// TestStalledLongRequestIsCancelledAndRedelivered: a long request that
// reports no progress for HandlerTimeout is cancelled with ErrStalled and
// redelivered; the redelivery that completes is acked.
func TestStalledLongRequestIsCancelledAndRedelivered(t *testing.T) {
	t.Parallel()
	h := &longHandler{}
	h.ran = func(ctx context.Context, call int) {
		if call == 1 {
			<-ctx.Done() // no progress: the watchdog cancels it
		}
	}
	f := newRequestFixture(t, h, func(o *RequestConsumerOptions) {
		o.AckWait, o.HandlerTimeout = 3*time.Second, 300*time.Millisecond
	})
	reply := f.submit(t, f.requestsSubject(t, "producer-1"), "producer-1", "key-long-000000000002", longBody)
	msg, err := reply.NextMsg(30 * time.Second)
	if err != nil || string(msg.Data) != `{"jobId":"long"}` {
		t.Fatalf("reply %v: %v", msg, err)
	}
	f.settled(t)
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.calls != 2 || len(h.causes) != 1 || !errors.Is(h.causes[0], ErrStalled) {
		t.Fatalf("%d calls, causes %v; want a stalled first call and a second", h.calls, h.causes)
	}
}
