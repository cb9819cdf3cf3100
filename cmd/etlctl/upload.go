package main

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"strconv"
	"strings"
	"time"

	"github.com/mightyetl/mightyetl/client"
)

// singleRequestBytes is the contract's default single-request limit
// (MIGHTYETL_MAX_PAYLOAD_BYTES, 1 MiB): a JSON array above it goes through
// an upload; one at most this large is submitted in one request, and
// through an upload only when the service refuses it as too large (a
// service with lower limits, or more than its record limit).
const singleRequestBytes = 1 << 20

// payloadOptions are submit's flags for a payload (everything but --jsonl).
type payloadOptions struct {
	file, format, key, resume, progress string
	maxBadRecords, partSize             int
	gzip                                bool
}

// uploadFlagsSet names the upload-only flags that were given, for the
// --jsonl conflict message.
func (o payloadOptions) uploadFlagsSet() []string {
	var set []string
	for _, f := range []struct {
		name string
		set  bool
	}{{"--format", o.format != ""}, {"--resume", o.resume != ""}, {"--max-bad-records", o.maxBadRecords != 0},
		{"--part-size", o.partSize != 0}, {"--gzip", o.gzip}} {
		if f.set {
			set = append(set, f.name)
		}
	}
	return set
}

// payloadFormat is the format of the payload: --format, else by the file's
// extension (.jsonl or .ndjson: JSON Lines), else a JSON array.
func payloadFormat(flagValue, file string) (client.UploadFormat, bool) {
	switch flagValue {
	case "jsonl":
		return client.FormatJSONLines, true
	case "json-array":
		return client.FormatJSONArray, true
	case "":
		lower := strings.ToLower(file)
		if strings.HasSuffix(lower, ".jsonl") || strings.HasSuffix(lower, ".ndjson") {
			return client.FormatJSONLines, true
		}
		return client.FormatJSONArray, true
	}
	return "", false
}

// submitPayload submits one payload: a JSON array of at most
// singleRequestBytes in one request, anything else (JSON Lines, a larger
// array, or with an upload flag) through a resumable upload.
func (c *jobsCmd) submitPayload(cl *client.Client, o payloadOptions) int {
	format, ok := payloadFormat(o.format, o.file)
	if !ok {
		fmt.Fprintf(c.errw, "etlctl jobs submit: --format must be jsonl or json-array\n")
		return exitUsage
	}
	mode, ok := progressMode(o.progress, c.errw)
	if !ok {
		fmt.Fprintf(c.errw, "etlctl jobs submit: --progress must be auto, bar, plain or none\n")
		return exitUsage
	}
	if o.maxBadRecords < 0 || o.partSize < 0 {
		fmt.Fprintf(c.errw, "etlctl jobs submit: --max-bad-records and --part-size must not be negative\n")
		return exitUsage
	}
	var src io.Reader = c.in
	var size int64
	if o.file != "" && o.file != "-" {
		f, err := os.Open(o.file)
		if err != nil {
			fmt.Fprintf(c.errw, "etlctl jobs submit: read input: %v\n", err)
			return exitUsage
		}
		defer f.Close()
		if st, err := f.Stat(); err == nil && st.Mode().IsRegular() {
			size = st.Size()
		}
		src = f
	}
	ctx, stop := signalContext()
	defer stop()
	upload := format == client.FormatJSONLines || o.resume != "" || o.maxBadRecords != 0 || o.partSize != 0 || o.gzip
	if !upload {
		head, err := io.ReadAll(io.LimitReader(src, singleRequestBytes+1))
		if err != nil {
			fmt.Fprintf(c.errw, "etlctl jobs submit: read input: %v\n", err)
			return exitUsage
		}
		if len(head) <= singleRequestBytes {
			sub, err := cl.Submit(ctx, head, o.key)
			if err == nil {
				c.showSubmission(sub)
				return exitOK
			}
			var p *client.Error
			if !errors.As(err, &p) || (p.Code != client.CodePayloadTooLarge && p.Code != client.CodeBatchTooLarge) {
				return c.fail(err)
			}
			src, size = bytes.NewReader(head), int64(len(head))
		} else {
			src = io.MultiReader(bytes.NewReader(head), src)
		}
	}
	return c.upload(ctx, cl, src, size, format, mode, o)
}

// upload sends src through a resumable upload and prints the job. An
// interruption prints the command that resumes it.
func (c *jobsCmd) upload(ctx context.Context, cl *client.Client, src io.Reader, size int64, format client.UploadFormat, mode string, o payloadOptions) int {
	m := newMeter(c.errw, mode)
	opts := client.UploadOptions{Format: format, PartSize: o.partSize, Gzip: o.gzip, Size: size, UploadID: o.resume,
		Key: o.key, MaxBadRecords: o.maxBadRecords,
		Progress: func(p client.UploadProgress) {
			m.show(uploadLine(p, time.Since(m.start)), p.Total >= 0 && p.Bytes == p.Total)
		}}
	if mode == progressNone {
		opts.Progress = nil
	}
	sub, err := cl.Upload(ctx, src, opts)
	m.end()
	if err != nil {
		status := c.fail(err)
		var ue *client.UploadError
		if errors.As(err, &ue) {
			fmt.Fprintf(c.errw, "etlctl jobs submit: the upload is kept until it expires; resume it with: %s\n", resumeLine(o, ue))
		}
		return status
	}
	c.showSubmission(sub)
	return exitOK
}

// resumeLine is the command that resumes the interrupted upload of ue.
func resumeLine(o payloadOptions, ue *client.UploadError) string {
	args := []string{"etlctl jobs submit"}
	if o.file != "" && o.file != "-" {
		args = append(args, "--file "+shellQuote(o.file))
	}
	args = append(args, "--resume "+ue.UploadID, "--key "+shellQuote(ue.Key))
	if o.format != "" {
		args = append(args, "--format "+o.format)
	}
	if o.maxBadRecords != 0 {
		args = append(args, "--max-bad-records "+strconv.Itoa(o.maxBadRecords))
	}
	if o.partSize != 0 {
		args = append(args, "--part-size "+strconv.Itoa(o.partSize))
	}
	if o.gzip {
		args = append(args, "--gzip")
	}
	line := strings.Join(args, " ")
	if o.file == "" || o.file == "-" {
		line += " < (the same input)"
	}
	return line
}

// shellQuote quotes s for a POSIX shell when it holds anything but plain
// path characters.
func shellQuote(s string) string {
	if s != "" && strings.Trim(s, "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789-_./:=+,@") == "" {
		return s
	}
	return "'" + strings.ReplaceAll(s, "'", `'\''`) + "'"
}

func (c *jobsCmd) showSubmission(sub *client.Submission) {
	c.show(sub, submissionHeader, submissionRow(sub.JobID, sub.Status, sub.Replayed, sub.Key))
}
