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

// payloadOptions are submit's and replay's flags for a payload
// (everything but --jsonl).
type payloadOptions struct {
	file, format, key, resume, progress string
	maxBadRecords, partSize             int
	gzip                                bool
	// replayOf is the job replay replays; empty for submit.
	replayOf string
	// priority and notBefore are --priority and --not-before (zero, empty:
	// not given); a payload sent through an upload takes neither.
	priority  int
	notBefore string
}

// uploadFlags registers the flags of a payload that may go through an
// upload.
func (c *jobsCmd) uploadFlags(o *payloadOptions) {
	c.fs.StringVar(&o.format, "format", "", "records format: jsonl (one record a line) or json-array (default: jsonl for a .jsonl or .ndjson file, else json-array)")
	c.fs.IntVar(&o.maxBadRecords, "max-bad-records", 0, "skip up to this many malformed or untransformable records (uploads only)")
	c.fs.StringVar(&o.resume, "resume", "", "resume the interrupted upload with this id (give the same input)")
	c.fs.IntVar(&o.partSize, "part-size", 0, "upload part size in bytes (default 16 MiB)")
	c.fs.BoolVar(&o.gzip, "gzip", false, "send upload parts gzipped")
	c.fs.StringVar(&o.progress, "progress", progressAuto, "upload progress on standard error: auto (a bar on a terminal), bar, plain or none")
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

// viaUpload reports whether the flags alone send the payload through an
// upload: JSON Lines, or an upload-only flag.
func (o payloadOptions) viaUpload(format client.UploadFormat) bool {
	return format == client.FormatJSONLines || o.resume != "" || o.maxBadRecords != 0 || o.partSize != 0 || o.gzip
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

// payloadSource is an opened payload: its format, the progress mode, the
// reader and its size (zero when unknown).
type payloadSource struct {
	format client.UploadFormat
	mode   string
	src    io.Reader
	size   int64
	close  func()
}

// openPayload checks o's flags and opens --file (or standard input); ok
// false means exitUsage, the reason printed.
func (c *jobsCmd) openPayload(o payloadOptions) (payloadSource, bool) {
	p := payloadSource{src: c.in, close: func() {}}
	var ok bool
	if p.format, ok = payloadFormat(o.format, o.file); !ok {
		fmt.Fprintf(c.errw, "etlctl jobs %s: --format must be jsonl or json-array\n", c.name)
		return p, false
	}
	if p.mode, ok = progressMode(o.progress, c.errw); !ok {
		fmt.Fprintf(c.errw, "etlctl jobs %s: --progress must be auto, bar, plain or none\n", c.name)
		return p, false
	}
	if o.maxBadRecords < 0 || o.partSize < 0 {
		fmt.Fprintf(c.errw, "etlctl jobs %s: --max-bad-records and --part-size must not be negative\n", c.name)
		return p, false
	}
	if o.file != "" && o.file != "-" {
		f, err := os.Open(o.file)
		if err != nil {
			fmt.Fprintf(c.errw, "etlctl jobs %s: read input: %v\n", c.name, err)
			return p, false
		}
		if st, err := f.Stat(); err == nil && st.Mode().IsRegular() {
			p.size = st.Size()
		}
		p.src, p.close = f, func() { _ = f.Close() }
	}
	return p, true
}

// withPayload opens o's payload and runs f on it under a context that
// SIGINT and SIGTERM cancel.
func (c *jobsCmd) withPayload(o payloadOptions, f func(context.Context, payloadSource) int) int {
	p, ok := c.openPayload(o)
	if !ok {
		return exitUsage
	}
	defer p.close()
	ctx, stop := signalContext()
	defer stop()
	return f(ctx, p)
}

// submitPayload submits one payload: a JSON array of at most
// singleRequestBytes in one request (with opts), anything else (JSON Lines,
// a larger array, or with an upload flag) through a resumable upload, which
// takes no --priority or --not-before (a usage error when given, or, when
// the service refused the single request as too large, that problem).
func (c *jobsCmd) submitPayload(cl *client.Client, o payloadOptions, opts []client.SubmitOption) int {
	return c.withPayload(o, func(ctx context.Context, p payloadSource) int {
		if o.scheduled() && o.viaUpload(p.format) {
			return c.scheduleWithUpload()
		}
		if !o.viaUpload(p.format) {
			head, err := io.ReadAll(io.LimitReader(p.src, singleRequestBytes+1))
			if err != nil {
				fmt.Fprintf(c.errw, "etlctl jobs submit: read input: %v\n", err)
				return exitUsage
			}
			if len(head) <= singleRequestBytes {
				sub, err := cl.Submit(ctx, head, o.key, opts...)
				if err == nil {
					c.showSubmission(sub)
					return exitOK
				}
				var pe *client.Error
				if !errors.As(err, &pe) || (pe.Code != client.CodePayloadTooLarge && pe.Code != client.CodeBatchTooLarge) || o.scheduled() {
					return c.fail(err)
				}
				p.src, p.size = bytes.NewReader(head), int64(len(head))
			} else {
				if o.scheduled() {
					return c.scheduleWithUpload()
				}
				p.src = io.MultiReader(bytes.NewReader(head), p.src)
			}
		}
		return c.upload(ctx, cl, p, o)
	})
}

// replayPayload replays job o.replayOf: a chunked job (one that reports
// progress), or with upload flags or a JSON Lines file, through an upload
// with replayOf (no --priority or --not-before: a usage error); any other
// with the payload in one request, with opts.
func (c *jobsCmd) replayPayload(cl *client.Client, o payloadOptions, opts []client.SubmitOption) int {
	return c.withPayload(o, func(ctx context.Context, p payloadSource) int {
		if o.scheduled() && o.viaUpload(p.format) {
			return c.scheduleWithUpload()
		}
		if !o.viaUpload(p.format) {
			j, err := cl.Get(ctx, o.replayOf)
			if err != nil {
				return c.fail(err)
			}
			if j.Progress == nil {
				body, err := io.ReadAll(p.src)
				if err != nil {
					fmt.Fprintf(c.errw, "etlctl jobs replay: read input: %v\n", err)
					return exitUsage
				}
				sub, err := cl.Replay(ctx, o.replayOf, body, o.key, opts...)
				if err != nil {
					return c.fail(err)
				}
				c.showSubmission(sub)
				return exitOK
			}
			if o.scheduled() {
				return c.scheduleWithUpload()
			}
		}
		return c.upload(ctx, cl, p, o)
	})
}

// upload sends the payload through a resumable upload and prints the job.
// An interruption prints the command that resumes it.
func (c *jobsCmd) upload(ctx context.Context, cl *client.Client, p payloadSource, o payloadOptions) int {
	m := newMeter(c.errw, p.mode)
	opts := client.UploadOptions{Format: p.format, PartSize: o.partSize, Gzip: o.gzip, Size: p.size, UploadID: o.resume,
		Key: o.key, MaxBadRecords: o.maxBadRecords, ReplayOf: o.replayOf}
	if p.mode != progressNone {
		opts.Progress = func(u client.UploadProgress) {
			m.show(uploadLine(u, time.Since(m.start)), u.Total >= 0 && u.Bytes == u.Total)
		}
	}
	sub, err := cl.Upload(ctx, p.src, opts)
	m.end()
	if err != nil {
		status := c.fail(err)
		var ue *client.UploadError
		switch {
		case !errors.As(err, &ue):
		case !resumable(err):
			fmt.Fprintf(c.errw, "etlctl jobs %s: resuming cannot help; run the command without --resume to start a new upload\n", c.name)
		default:
			fmt.Fprintf(c.errw, "etlctl jobs %s: the upload is kept until it expires; resume it with: %s\n", c.name, resumeLine(o, ue))
		}
		return status
	}
	c.showSubmission(sub)
	return exitOK
}

// resumable reports whether resuming the upload that failed with err may
// succeed: not when the upload is gone or expired, too large, or does not
// hold this source.
func resumable(err error) bool {
	if errors.Is(err, client.ErrUploadSourceMismatch) {
		return false
	}
	for _, code := range []client.ErrorCode{client.CodeUploadNotFound, client.CodeUploadExpired, client.CodeUploadTooLarge} {
		if errors.Is(err, &client.Error{Code: code}) {
			return false
		}
	}
	return true
}

// resumeLine is the command that resumes the interrupted upload of ue.
func resumeLine(o payloadOptions, ue *client.UploadError) string {
	args := []string{"etlctl jobs submit"}
	if o.replayOf != "" {
		args = []string{"etlctl jobs replay " + shellQuote(o.replayOf)}
	}
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
	c.show(sub, submissionHeader, submissionRow(sub.JobID, sub.Status, sub.Priority, sub.NotBefore, sub.Replayed, sub.Key))
}

// scheduleWithUpload refuses --priority and --not-before for a payload that
// goes through an upload: a large job takes priority 2, at once.
func (c *jobsCmd) scheduleWithUpload() int {
	fmt.Fprintf(c.errw, "etlctl jobs %s: --priority and --not-before apply to a job sent in one request; "+
		"this payload goes through an upload (a large job), which runs at priority 2, at once\n", c.name)
	return exitUsage
}
