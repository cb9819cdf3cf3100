package client

import (
	"context"
	"errors"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
)

// TestProblemRecordIndex: the problem's recordIndex member becomes
// Error.RecordIndex and appears in Error(); it is nil when absent,
// negative or malformed, and a malformed one does not cost the problem its
// code.
func TestProblemRecordIndex(t *testing.T) {
	at := func(i int) *int { return &i }
	cases := []struct {
		name  string
		body  string
		code  ErrorCode
		index *int
		text  string
	}{
		{"index 2", `{"type":"urn:mightyetl:problem:etl-invalid-record","title":"Invalid record","status":422,"detail":"A record is invalid.","instance":"/api/etl/jobs","errorCode":"etl_invalid_record","recordIndex":2}`,
			CodeInvalidRecord, at(2), "mightyetl: 422 etl_invalid_record: record 2: A record is invalid."},
		{"index 0", `{"status":422,"errorCode":"etl_invalid_record","recordIndex":0}`, CodeInvalidRecord, at(0), "mightyetl: 422 etl_invalid_record: record 0"},
		{"absent", `{"status":422,"errorCode":"etl_job_submission_key_reused","detail":"Reused."}`, CodeSubmissionKeyReused, nil, "mightyetl: 422 etl_job_submission_key_reused: Reused."},
		{"negative", `{"status":422,"errorCode":"etl_invalid_record","recordIndex":-1}`, CodeInvalidRecord, nil, "mightyetl: 422 etl_invalid_record"},
		{"malformed", `{"status":422,"errorCode":"etl_invalid_record","recordIndex":"two"}`, CodeInvalidRecord, nil, "mightyetl: 422 etl_invalid_record"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
				w.Header().Set("Content-Type", "application/problem+json")
				w.WriteHeader(422)
				_, _ = w.Write([]byte(tc.body))
			}))
			defer srv.Close()
			c, err := New(srv.URL)
			if err != nil {
				t.Fatal(err)
			}
			_, err = c.Submit(context.Background(), []byte(`[{"id":"a"}]`), "")
			var p *Error
			if !errors.As(err, &p) {
				t.Fatalf("Submit: %v, want an *Error", err)
			}
			if p.Code != tc.code || p.Status != 422 {
				t.Errorf("code %s status %d", p.Code, p.Status)
			}
			switch {
			case tc.index == nil && p.RecordIndex != nil:
				t.Errorf("RecordIndex %d, want nil", *p.RecordIndex)
			case tc.index != nil && (p.RecordIndex == nil || *p.RecordIndex != *tc.index):
				t.Errorf("RecordIndex %v, want %d", p.RecordIndex, *tc.index)
			}
			if p.Error() != tc.text {
				t.Errorf("Error() %q, want %q", p.Error(), tc.text)
			}
		})
	}
}

// TestNewRefusesURLCredentials: a base URL with a user (and password) is
// ErrURLCredentials, whose text holds neither.
func TestNewRefusesURLCredentials(t *testing.T) {
	for _, u := range []string{"http://u:secret-pw-1@127.0.0.1:1", "https://u@example.com/prefix"} {
		_, err := New(u)
		if !errors.Is(err, ErrURLCredentials) {
			t.Fatalf("New(%q): %v, want ErrURLCredentials", u, err)
		}
		if strings.Contains(err.Error(), "secret-pw-1") || strings.Contains(err.Error(), "u@") {
			t.Errorf("error text holds the credentials: %v", err)
		}
	}
	if _, err := New("http://127.0.0.1:1"); err != nil {
		t.Errorf("plain URL: %v", err)
	}
}
