package httpapi

import (
	"bytes"
	"compress/gzip"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"net/http"
	"testing"

	"github.com/google/uuid"
)

// sha256Hex is the lowercase hex SHA-256 of s.
func sha256Hex(s string) string {
	sum := sha256.Sum256([]byte(s))
	return hex.EncodeToString(sum[:])
}

// gzipped is s gzip-compressed.
func gzipped(t testing.TB, s string) string {
	t.Helper()
	var b bytes.Buffer
	zw := gzip.NewWriter(&b)
	if _, err := zw.Write([]byte(s)); err != nil {
		t.Fatal(err)
	}
	if err := zw.Close(); err != nil {
		t.Fatal(err)
	}
	return b.String()
}

// uploadView is the body of an upload representation.
type uploadView struct {
	UploadID     string `json:"uploadId"`
	Format       string `json:"format"`
	State        string `json:"state"`
	StagedBytes  int64  `json:"stagedBytes"`
	ExpiresAt    string `json:"expiresAt"`
	MaxPartBytes int64  `json:"maxPartBytes"`
	Parts        []struct {
		PartNumber int64  `json:"partNumber"`
		Bytes      int64  `json:"bytes"`
		SHA256     string `json:"sha256"`
	} `json:"parts"`
	JobID string `json:"jobId"`
}

// createUpload opens an upload of format for principal and requires a 201.
func (e *env) createUpload(principal, format string) uploadView {
	e.t.Helper()
	body := ""
	if format != "" {
		body = `{"format":"` + format + `"}`
	}
	res := e.do(req{Method: "POST", Path: "/api/etl/uploads", Principal: principal, Body: body})
	if res.Status != http.StatusCreated {
		e.t.Fatalf("create upload: %d %s", res.Status, res.Body)
	}
	var u uploadView
	res.json(e.t, &u)
	if res.Header.Get("Location") != "/api/etl/uploads/"+u.UploadID {
		e.t.Fatalf("create upload: Location %q for %s", res.Header.Get("Location"), u.UploadID)
	}
	return u
}

// partReq is the PUT of part n of upload id with body, its digest and extra
// headers.
func partReq(principal, id, n, body, digest string, header map[string]string) req {
	h := map[string]string{"Content-Type": "application/octet-stream", "X-Part-SHA256": digest}
	for k, v := range header {
		h[k] = v
	}
	return req{Method: "PUT", Path: "/api/etl/uploads/" + id + "/parts/" + n, Principal: principal, Body: body, Header: h}
}

// putPart sends part n and requires a 200.
func (e *env) putPart(principal, id, n, body string) {
	e.t.Helper()
	if res := e.do(partReq(principal, id, n, body, sha256Hex(body), nil)); res.Status != http.StatusOK {
		e.t.Fatalf("put part %s: %d %s", n, res.Status, res.Body)
	}
}

// expireUpload moves the upload's expiry into the past (database clock).
func (e *env) expireUpload(id string) {
	e.t.Helper()
	if _, err := e.pool.Exec(context.Background(),
		`UPDATE etl_uploads SET expires_at = clock_timestamp() - interval '1 second' WHERE upload_id = $1`, id); err != nil {
		e.t.Fatal(err)
	}
}

// openAPIUploadCases prepares uploads on e and returns requests that
// exercise every upload operation of the spec and its problems, in an
// order that makes each answer what its comment says.
func openAPIUploadCases(t *testing.T, e *env) []req {
	t.Helper()
	const part1, part2 = "{\"id\":\"a\"}\n{\"id\"", ":\"b\"}\n"
	whole := sha256Hex(part1 + part2)
	u1 := e.createUpload("alice", "jsonl")
	e.putPart("alice", u1.UploadID, "1", part1)
	gap := e.createUpload("alice", "json_array")
	e.putPart("alice", gap.UploadID, "2", "[]")
	expired := e.createUpload("alice", "")
	e.expireUpload(expired.UploadID)
	doomed := e.createUpload("alice", "")
	submit := func(id, key, body string) req {
		return req{Method: "POST", Path: "/api/etl/uploads/" + id + "/jobs", Principal: "alice", Key: key, Body: body}
	}
	body := `{"sha256":"` + whole + `","maxBadRecords":1}`
	return []req{
		{Method: "POST", Path: "/api/etl/uploads", Principal: "alice", Body: `{"format":"json_array"}`}, // 201
		{Method: "POST", Path: "/api/etl/uploads", Principal: "alice"},                                  // 201 (jsonl)
		{Method: "POST", Path: "/api/etl/uploads", Principal: "alice", Body: `{"format":"xml"}`},        // 400
		{Method: "POST", Path: "/api/etl/uploads", Body: `{}`},                                          // 401
		{Method: "POST", Path: "/api/etl/uploads", Principal: "alice", Body: `{}`,
			Header: map[string]string{"Content-Type": "text/plain"}}, // 415
		{Method: "GET", Path: "/api/etl/uploads/" + u1.UploadID, Principal: "alice"},      // 200
		{Method: "GET", Path: "/api/etl/uploads/" + u1.UploadID, Principal: "bob"},        // 404
		{Method: "GET", Path: "/api/etl/uploads/not-a-uuid", Principal: "alice"},          // 404
		{Method: "GET", Path: "/api/etl/uploads/" + expired.UploadID, Principal: "alice"}, // 410
		partReq("alice", u1.UploadID, "2", part2, sha256Hex(part2), nil),                  // 200
		partReq("alice", u1.UploadID, "2", gzipped(t, part2), sha256Hex(part2),
			map[string]string{"Content-Encoding": "gzip"}), // 200, replaced
		partReq("alice", u1.UploadID, "0", part2, sha256Hex(part2), nil),                                              // 400 part number
		partReq("alice", u1.UploadID, "3", part2, "ABC", nil),                                                         // 400 header
		partReq("alice", u1.UploadID, "3", part2, sha256Hex("other"), nil),                                            // 400 mismatch
		partReq("alice", u1.UploadID, "3", "not gzip", sha256Hex("x"), map[string]string{"Content-Encoding": "gzip"}), // 400 gzip
		partReq("alice", u1.UploadID, "3", part2, sha256Hex(part2), map[string]string{"Content-Encoding": "br"}),      // 415
		partReq("bob", u1.UploadID, "3", part2, sha256Hex(part2), nil),                                                // 404
		partReq("alice", expired.UploadID, "1", part2, sha256Hex(part2), nil),                                         // 410
		submit(gap.UploadID, "upload-openapi-0001", `{"sha256":"`+sha256Hex("[]")+`"}`),                               // 409 incomplete
		submit(u1.UploadID, "upload-openapi-0002", `{"maxBadRecords":1}`),                                             // 400 no digest
		submit(u1.UploadID, "bad", body),                                                                              // 400 key
		submit(u1.UploadID, "upload-openapi-0002", `{"sha256":"`+sha256Hex("x")+`"}`),                                 // 400 mismatch
		submit(expired.UploadID, "upload-openapi-0003", body),                                                         // 410
		submit(uuid.NewString(), "upload-openapi-0003", body),                                                         // 404
		submit(u1.UploadID, "upload-openapi-0002", body),                                                              // 202
		submit(u1.UploadID, "upload-openapi-0002", body),                                                              // 202 replayed
		submit(u1.UploadID, "upload-openapi-0002", `{"sha256":"`+sha256Hex("y")+`"}`),                                 // 422
		submit(u1.UploadID, "upload-openapi-0004", body),                                                              // 409 submitted
		partReq("alice", u1.UploadID, "3", part2, sha256Hex(part2), nil),                                              // 409 submitted
		{Method: "DELETE", Path: "/api/etl/uploads/" + u1.UploadID, Principal: "alice"},                               // 409
		{Method: "DELETE", Path: "/api/etl/uploads/" + doomed.UploadID, Principal: "bob"},                             // 404
		{Method: "DELETE", Path: "/api/etl/uploads/" + doomed.UploadID, Principal: "alice"},                           // 204
	}
}
