package client_test

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/mightyetl/mightyetl/client"
)

// TestProducerRefusesBadKeysWithoutNamingThem: a key the intake would
// refuse (length outside 16..128, a character outside A-Z a-z 0-9 . _ : -,
// a CR or LF that would break the header block) is CodeInvalidIdempotencyKey
// before anything is published, and the error says which rule failed but
// never contains the key; valid keys, bare or in double quotes, are
// published.
func TestProducerRefusesBadKeysWithoutNamingThem(t *testing.T) {
	nc := natsConn(t, "dave")
	prefix := testPrefix()
	stream := requestStream(t, nc, prefix)
	ctx := testCtx(t)
	p, err := client.NewProducer(nc, "dave", client.ProducerOptions{Prefix: prefix})
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		key, rule string
	}{
		{"s3cret-too-short", ""}, // 16: the shortest valid key
		{"s3cret-too-shor", "15 bytes long; a key has 16 to 128 characters"},
		{strings.Repeat("s3cret", 21) + "xx", ""}, // 128
		{strings.Repeat("s3cret", 21) + "xxx", "129 bytes long; a key has 16 to 128 characters"},
		{"s3cret key with spaces", "byte 7 of the key is not one of A-Z a-z 0-9 . _ : -"},
		{"s3cret-key-0001\r\nNats-Msg-Id: x", "byte 16 of the key"},
		{"s3cret/key/00000001", "byte 7 of the key"},
		{"s3cret-kéy-000000001", "byte 9 of the key"},
		{`"s3cret-quoted-0001"`, ""},
		{`"s3cret-quoted"`, "13 bytes long"},
		{`"s3cret-quoted-0001`, "byte 1 of the key"},
		{"A.b_c:d-0123456789", ""},
	} {
		before := streamMsgs(t, stream)
		for name, publish := range map[string]func() error{
			"Publish":        func() error { _, err := p.Publish(ctx, []byte(`[{"id":"k1"}]`), tc.key); return err },
			"PublishAndWait": func() error { _, err := p.PublishAndWait(ctx, []byte(`[{"id":"k1"}]`), tc.key); return err },
		} {
			if tc.rule == "" {
				if name == "PublishAndWait" {
					continue // no intake answers here
				}
				if err := publish(); err != nil {
					t.Errorf("%s(%q): %v, want it published", name, tc.key, err)
				}
				continue
			}
			err := publish()
			var pe *client.Error
			if !errors.As(err, &pe) || pe.Code != client.CodeInvalidIdempotencyKey || pe.Status != 0 {
				t.Fatalf("%s(%q): %v, want %s", name, tc.key, err, client.CodeInvalidIdempotencyKey)
			}
			if !strings.Contains(err.Error(), tc.rule) {
				t.Errorf("%s(%q): %q does not say %q", name, tc.key, err, tc.rule)
			}
			if strings.Contains(err.Error(), "s3cret") || strings.Contains(err.Error(), strings.Trim(tc.key, `"`)) {
				t.Errorf("%s: the error names the key: %q", name, err)
			}
		}
		want := before
		if tc.rule == "" {
			want++
		}
		if got := streamMsgs(t, stream); got != want {
			t.Errorf("key %q: the stream holds %d messages, want %d", tc.key, got, want)
		}
	}
}

// streamMsgs is the stream's message count.
func streamMsgs(t *testing.T, s jetstream.Stream) uint64 {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	info, err := s.Info(ctx)
	if err != nil {
		t.Fatal(err)
	}
	return info.State.Msgs
}
