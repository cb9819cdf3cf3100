package client

import (
	"bytes"
	"context"
	"errors"
	"io"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// TestSourceSize: an explicit size wins; a regular file's size counts from
// its offset; a Len method is asked; anything else is unknown (-1).
func TestSourceSize(t *testing.T) {
	path := filepath.Join(t.TempDir(), "src")
	if err := os.WriteFile(path, make([]byte, 1000), 0o600); err != nil {
		t.Fatal(err)
	}
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	if _, err := f.Seek(100, io.SeekStart); err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		name string
		src  io.Reader
		size int64
		want int64
	}{
		{"explicit", strings.NewReader("abc"), 42, 42},
		{"file from its offset", f, 0, 900},
		{"Len", bytes.NewReader(make([]byte, 7)), 0, 7},
		{"unknown", io.MultiReader(strings.NewReader("abc")), 0, -1},
	}
	for _, tt := range tests {
		if got := sourceSize(tt.src, tt.size); got != tt.want {
			t.Errorf("%s: %d, want %d", tt.name, got, tt.want)
		}
	}
}

// TestPartSize: the default, an earlier upload's first part size when
// resuming, both lowered to maxPartBytes; an explicit size above it is an
// error.
func TestPartSize(t *testing.T) {
	tests := []struct {
		name     string
		explicit int
		held     map[int]UploadPart
		max      int64
		want     int
		wantErr  bool
	}{
		{"default", 0, nil, 0, DefaultPartSize, false},
		{"default capped", 0, nil, 1 << 20, 1 << 20, false},
		{"earlier part 1", 0, map[int]UploadPart{1: {Number: 1, Bytes: 4096}}, 64 << 20, 4096, false},
		{"explicit", 1000, map[int]UploadPart{1: {Number: 1, Bytes: 4096}}, 64 << 20, 1000, false},
		{"explicit above max", 2 << 20, nil, 1 << 20, 0, true},
	}
	for _, tt := range tests {
		u := &uploader{o: UploadOptions{PartSize: tt.explicit}, info: &UploadInfo{MaxPartBytes: tt.max}, held: tt.held}
		got, err := u.partSize()
		if (err != nil) != tt.wantErr || got != tt.want {
			t.Errorf("%s: %d, %v; want %d (error %v)", tt.name, got, err, tt.want, tt.wantErr)
		}
	}
}

// TestUploadErrorWraps: an *UploadError matches its cause with errors.Is and
// errors.As, and its text is the cause's, once prefixed.
func TestUploadErrorWraps(t *testing.T) {
	cause := &Error{Code: CodeUploadDigestMismatch, Status: 400, Detail: "digest"}
	err := error(&UploadError{UploadID: "0b9d5a7e-8c1f-4e53-9a51-2f7c6a1d3e40", Key: "k", Err: cause})
	var p *Error
	if !errors.As(err, &p) || p.Code != CodeUploadDigestMismatch || !errors.Is(err, &Error{Code: CodeUploadDigestMismatch}) {
		t.Fatalf("errors.As/Is on %v", err)
	}
	if err.Error() != "mightyetl: upload interrupted: 400 etl_upload_digest_mismatch: digest" {
		t.Fatalf("text %q", err.Error())
	}
	ctxErr := &UploadError{UploadID: "x", Err: context.Canceled}
	if !errors.Is(ctxErr, context.Canceled) {
		t.Fatal("a cancelled upload does not match context.Canceled")
	}
}
