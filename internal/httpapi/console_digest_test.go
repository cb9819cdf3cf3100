package httpapi

import (
	"crypto/hmac"
	"crypto/sha256"
	"encoding/hex"
	"strings"
	"testing"

	"github.com/mightyetl/mightyetl/internal/console"
)

// TestConsolePayloadDigestIsKeyed: the console and /api/ops show a keyed
// tag of the stored payload digest (HMAC-SHA-256 under a key derived from
// the principal hash key), never a prefix of the payload's SHA-256; the
// tag is the same on every request and for jobs with the same payload.
func TestConsolePayloadDigestIsKeyed(t *testing.T) {
	e := newEnv(t)
	job, _ := e.submit("alice", "console-digest-0001", sampleBody)
	twin, _ := e.submit("bob", "console-digest-0002", sampleBody)
	other, _ := e.submit("alice", "console-digest-0003", `[{"id":"b1"}]`)

	sum := sha256.Sum256([]byte(sampleBody))
	plain := hex.EncodeToString(sum[:])
	km := hmac.New(sha256.New, testHashKey)
	km.Write([]byte("console-payload-digest"))
	tm := hmac.New(sha256.New, km.Sum(nil))
	tm.Write(sum[:])
	want := hex.EncodeToString(tm.Sum(nil))[:12]
	if got := console.PayloadDigestTag(console.PayloadDigestKey(testHashKey), sum[:]); got != want {
		t.Fatalf("PayloadDigestTag = %q, want %q", got, want)
	}

	tagOf := func(id string) string {
		t.Helper()
		var d struct {
			Tag    *string `json:"payloadDigestTag"`
			Prefix *string `json:"payloadDigestPrefix"`
		}
		e.do(req{Method: "GET", Path: "/api/ops/jobs/" + id, Principal: "operator"}).json(t, &d)
		if d.Prefix != nil || d.Tag == nil {
			t.Fatalf("/api/ops/jobs/%s: payloadDigestTag %v, payloadDigestPrefix %v", id, d.Tag, d.Prefix)
		}
		return *d.Tag
	}
	for i := range 3 {
		got := tagOf(job.JobRecordID)
		if got != want || strings.HasPrefix(plain, got) {
			t.Fatalf("request %d: /api/ops shows %q, want the keyed tag %q (SHA-256 of the payload %s)", i, got, want, plain)
		}
		page := string(e.do(req{Method: "GET", Path: "/console/jobs/" + job.JobRecordID, Principal: "operator"}).Body)
		if !strings.Contains(page, `<code id="payload-tag">`+want+`</code>`) {
			t.Fatalf("request %d: the job page does not show the tag %q", i, want)
		}
		if strings.Contains(page, plain[:8]) {
			t.Fatalf("request %d: the job page shows the start of the payload's SHA-256 %s", i, plain)
		}
	}
	if got := tagOf(twin.JobRecordID); got != want {
		t.Errorf("another owner's job with the same payload shows %q, want %q", got, want)
	}
	if got := tagOf(other.JobRecordID); got == want {
		t.Errorf("a job with another payload shows the same tag %q", got)
	}
}
