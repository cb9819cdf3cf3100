package main

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/signal"
	"slices"
	"strings"
	"syscall"
	"text/tabwriter"
	"time"

	"github.com/mightyetl/mightyetl/client"
)

// Exit statuses of `etlctl jobs`. wait adds exitFailed, exitCancelled and
// exitTimeout for the job's outcome.
const (
	exitOK        = 0
	exitFailed    = 1 // wait: the job FAILED
	exitUsage     = 2 // bad flags, arguments or connection settings
	exitCancelled = 3 // wait: the job was CANCELLED
	exitTimeout   = 4 // wait: --timeout passed first
	exitAPI       = 5 // the service answered a problem, or could not be reached
)

const jobsUsage = `usage: etlctl jobs <command> [flags]

Commands:
  submit   [--file F | stdin] [--key K]            submit a JSON array of records, or JSON Lines of records
           [--priority 1..4] [--not-before T]      its priority (1 highest, default 2) and earliest start
                                                   (RFC 3339, e.g. 2026-03-01T06:00:00Z, or +duration from now, e.g. +90m)
           [--format jsonl|json-array] [--max-bad-records N] [--resume UPLOAD] [--gzip] [--part-size BYTES]
                                                   (a .jsonl file, or one above 1 MiB, goes through a resumable upload,
                                                   which takes no --priority or --not-before: priority 2, at once)
           [--jsonl]                               JSON Lines of jobs instead: one job (a JSON array) per line
  get      ID                                      show a job (its priority, and its not-before while it waits for it)
  list     [--status S] [--priority P] [--limit N] [--cursor C] [--all]   list your jobs, newest first
  cancel   ID [--key K]                            cancel a PENDING (also a scheduled) or RUNNING job (again: replays, exit 0)
  replay   ID [--file F | stdin] [--key K]         run a FAILED or CANCELLED job again (body: the original payload, byte for byte;
           [--priority 1..4] [--not-before T]      default: the source's priority, at once;
                                                   a large job's through an upload, with submit's upload flags)
  wait     ID [--timeout D] [--progress P]         wait until the job ends; prints its final state (a large job's progress: --progress)
  process  [--file F | stdin] [--key K]            validate, transform and load records synchronously

Connection (flag, else environment variable):
  --url            MIGHTYETL_API_URL        service address (default http://127.0.0.1:8080)
  --user           MIGHTYETL_API_USER       Basic user, with the password from
  --password-file  (file)                   a file holding the password, or
                   MIGHTYETL_API_PASSWORD   the password itself
  --token-file     (file)                   a file holding the bearer token (JWT), or
                   MIGHTYETL_API_TOKEN      the token itself, instead of Basic credentials
  --password and --token take the secret itself, but a flag shows in the process
  list (and shell history), so etlctl warns when they are given: prefer the above.
Every command takes -o table|json (default: table on a terminal, json otherwise).
Without --key a random idempotency key is generated and printed; repeat a request with it.
cancel's default key is etlctl-cancel-<job id>: cancelling a job again replays the first cancel.
Transient failures (connection errors, 429, 503) are retried with the same key and body.
--progress auto|bar|plain|none (submit's upload, wait's large job): auto draws a bar on
standard error when it is a terminal and prints nothing otherwise; plain prints a line per change.

Exit status: 0 done; 2 bad usage; 5 the service answered a problem (printed as
"<errorCode> (<status>): <detail>", after "record <n>: ", the 0-based position in
the batch, for an invalid record) or could not be reached. wait: 0 SUCCEEDED,
1 FAILED, 3 CANCELLED, 4 timeout.

Examples:
  export MIGHTYETL_API_URL=http://127.0.0.1:8080 MIGHTYETL_API_USER=dev MIGHTYETL_API_PASSWORD=...
  echo '[{"id":"a1","name":"jane"}]' | etlctl jobs submit
  etlctl jobs submit --file batch.json --key batch-2026-03-01-0001
  etlctl jobs submit --file nightly.json --priority 4 --not-before +8h
  etlctl jobs submit --jsonl --file jobs.jsonl -o json
  etlctl jobs submit --file big.jsonl --max-bad-records 10    (interrupted: it prints the --resume line to run)
  etlctl jobs wait 0b9d5a7e-8c1f-4e53-9a51-2f7c6a1d3e40 --timeout 5m
  etlctl jobs list --status FAILED --all
  etlctl jobs cancel 0b9d5a7e-8c1f-4e53-9a51-2f7c6a1d3e40
  etlctl jobs replay 0b9d5a7e-8c1f-4e53-9a51-2f7c6a1d3e40 --file batch.json
  etlctl jobs process --file batch.json`

// jobsCmd is one `etlctl jobs` invocation.
type jobsCmd struct {
	name string
	fs   *flag.FlagSet
	out  io.Writer
	errw io.Writer
	in   io.Reader

	url, user, passwordFile, password, token, tokenFile, output string
	// secretFlags are the secret-valued flags given on the command line
	// (--password, --token), warned about once.
	secretFlags []string
}

func runJobs(args []string) int {
	return runJobsIO(args, os.Stdin, os.Stdout, os.Stderr, os.Getenv)
}

func runJobsIO(args []string, in io.Reader, out, errw io.Writer, getenv func(string) string) int {
	if len(args) == 0 {
		fmt.Fprintln(errw, jobsUsage)
		return exitUsage
	}
	switch args[0] {
	case "-h", "--help", "-help", "help":
		fmt.Fprintln(out, jobsUsage)
		return exitOK
	}
	cmds := map[string]func(*jobsCmd, []string) int{
		"submit": (*jobsCmd).submit, "get": (*jobsCmd).get, "list": (*jobsCmd).list, "cancel": (*jobsCmd).cancel,
		"replay": (*jobsCmd).replay, "wait": (*jobsCmd).wait, "process": (*jobsCmd).process,
	}
	f, ok := cmds[args[0]]
	if !ok {
		fmt.Fprintf(errw, "etlctl jobs: unknown command %q\n%s\n", args[0], jobsUsage)
		return exitUsage
	}
	c := &jobsCmd{name: args[0], out: out, errw: errw, in: in}
	c.fs = flag.NewFlagSet("etlctl jobs "+args[0], flag.ContinueOnError)
	c.fs.SetOutput(errw)
	c.fs.StringVar(&c.url, "url", cmpOr(getenv("MIGHTYETL_API_URL"), client.DefaultBaseURL), "service address (MIGHTYETL_API_URL)")
	c.fs.StringVar(&c.user, "user", getenv("MIGHTYETL_API_USER"), "Basic user (MIGHTYETL_API_USER)")
	c.fs.StringVar(&c.passwordFile, "password-file", "", "file holding the Basic password")
	c.password = getenv("MIGHTYETL_API_PASSWORD")
	c.fs.Func("password", "Basic password (prefer MIGHTYETL_API_PASSWORD or --password-file: a flag shows in the process list)",
		func(s string) error { c.password = s; c.secretFlag("--password"); return nil })
	c.token = getenv("MIGHTYETL_API_TOKEN")
	c.fs.Func("token", "bearer token (prefer MIGHTYETL_API_TOKEN or --token-file: a flag shows in the process list)",
		func(s string) error { c.token = s; c.secretFlag("--token"); return nil })
	c.fs.StringVar(&c.tokenFile, "token-file", "", "file holding the bearer token")
	c.fs.StringVar(&c.output, "o", "", "output: table or json (default: table on a terminal, json otherwise)")
	return f(c, args[1:])
}

// secretFlag records that a secret-valued flag was given on the command line.
func (c *jobsCmd) secretFlag(name string) {
	if !slices.Contains(c.secretFlags, name) {
		c.secretFlags = append(c.secretFlags, name)
	}
}

// warnSecretFlags prints one line on standard error per secret-valued flag
// given on the command line: its value shows in the process list (ps,
// /proc/<pid>/cmdline) and the shell history. It never prints the value.
func (c *jobsCmd) warnSecretFlags() {
	for _, f := range c.secretFlags {
		alt := "MIGHTYETL_API_PASSWORD or --password-file"
		if f == "--token" {
			alt = "MIGHTYETL_API_TOKEN or --token-file"
		}
		fmt.Fprintf(c.errw, "etlctl jobs %s: warning: %s shows its value in the process list; use %s\n", c.name, f, alt)
	}
}

// readSecretFile reads a --password-file or --token-file: the file's
// content without its trailing line breaks. Errors never hold the content.
func readSecretFile(path string) (string, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return "", err
	}
	return strings.TrimRight(string(b), "\r\n"), nil
}

func cmpOr(a, b string) string {
	if a != "" {
		return a
	}
	return b
}

// parse parses flags and positionals in any order and checks the number of
// positionals.
func (c *jobsCmd) parse(args []string, positionals int) ([]string, bool) {
	var pos []string
	for {
		if err := c.fs.Parse(args); err != nil {
			return nil, false
		}
		args = c.fs.Args()
		if len(args) == 0 {
			break
		}
		pos = append(pos, args[0])
		args = args[1:]
	}
	if len(pos) != positionals {
		if positionals == 1 {
			fmt.Fprintf(c.errw, "etlctl jobs %s: needs one job id\n", c.name)
		} else {
			fmt.Fprintf(c.errw, "etlctl jobs %s: takes no arguments, got %q\n", c.name, pos)
		}
		return nil, false
	}
	switch c.output {
	case "":
		c.output = "json"
		if f, ok := c.out.(*os.File); ok {
			if st, err := f.Stat(); err == nil && st.Mode()&os.ModeCharDevice != 0 {
				c.output = "table"
			}
		}
	case "table", "json":
	default:
		fmt.Fprintf(c.errw, "etlctl jobs %s: -o must be table or json\n", c.name)
		return nil, false
	}
	return pos, true
}

// client builds the API client from the connection settings. The address
// is checked first: credentials in it are the mistake to name, not the
// variables that are then missing. Messages name this tool's flags and
// variables, never the Go client's options, and never print a credential.
func (c *jobsCmd) client() (*client.Client, bool) {
	if _, err := client.New(c.url); err != nil {
		c.badURL(err)
		return nil, false
	}
	c.warnSecretFlags()
	if c.tokenFile != "" {
		if slices.Contains(c.secretFlags, "--token") {
			fmt.Fprintf(c.errw, "etlctl jobs %s: give either --token or --token-file, not both\n", c.name)
			return nil, false
		}
		tok, err := readSecretFile(c.tokenFile)
		if err != nil {
			fmt.Fprintf(c.errw, "etlctl jobs %s: --token-file: cannot read it\n", c.name)
			return nil, false
		}
		if tok == "" {
			fmt.Fprintf(c.errw, "etlctl jobs %s: --token-file: the file is empty\n", c.name)
			return nil, false
		}
		c.token = tok
	}
	var opts []client.Option
	switch {
	case c.token != "" && (c.user != "" || c.passwordFile != ""):
		fmt.Fprintf(c.errw, "etlctl jobs %s: give either a token or a user and password, not both\n", c.name)
		return nil, false
	case c.token != "":
		opts = append(opts, client.WithBearerToken(client.StaticToken(c.token)))
	case c.user != "":
		pw := c.password
		if c.passwordFile != "" {
			var err error
			if pw, err = readSecretFile(c.passwordFile); err != nil {
				fmt.Fprintf(c.errw, "etlctl jobs %s: --password-file: cannot read it\n", c.name)
				return nil, false
			}
		}
		if pw == "" {
			fmt.Fprintf(c.errw, "etlctl jobs %s: MIGHTYETL_API_USER is set but no password (MIGHTYETL_API_PASSWORD or --password-file)\n", c.name)
			return nil, false
		}
		opts = append(opts, client.WithBasicAuth(c.user, pw))
	default:
		fmt.Fprintf(c.errw, "etlctl jobs %s: no credentials: set MIGHTYETL_API_USER and MIGHTYETL_API_PASSWORD (or --password-file), or MIGHTYETL_API_TOKEN (or --token-file)\n", c.name)
		return nil, false
	}
	opts = append(opts, client.WithUserAgent("etlctl"))
	cl, err := client.New(c.url, opts...)
	if err != nil {
		c.badURL(err)
		return nil, false
	}
	return cl, true
}

// badURL prints why client.New refused the address.
func (c *jobsCmd) badURL(err error) {
	if errors.Is(err, client.ErrURLCredentials) {
		// The client's text names its Go options; name this tool's settings.
		fmt.Fprintf(c.errw, "etlctl jobs %s: --url / MIGHTYETL_API_URL must not hold credentials: "+
			"give them as MIGHTYETL_API_USER with MIGHTYETL_API_PASSWORD (or --password-file), or as MIGHTYETL_API_TOKEN (or --token-file)\n", c.name)
		return
	}
	fmt.Fprintf(c.errw, "etlctl jobs %s: --url / MIGHTYETL_API_URL: %s\n", c.name, strings.TrimPrefix(err.Error(), "mightyetl: "))
}

// fail prints err on one line and returns exitAPI: a problem as
// "<errorCode> (<status>): <detail>", preceded by "record <n>: " when it
// names the invalid record's position in the batch.
func (c *jobsCmd) fail(err error) int {
	var p *client.Error
	if errors.As(err, &p) {
		record := ""
		if p.RecordIndex != nil {
			record = fmt.Sprintf("record %d: ", *p.RecordIndex)
		}
		fmt.Fprintf(c.errw, "etlctl jobs %s: %s%s (%d): %s\n", c.name, record, p.Code, p.Status, p.Detail)
	} else {
		fmt.Fprintf(c.errw, "etlctl jobs %s: %s\n", c.name, strings.ReplaceAll(err.Error(), "\n", " "))
	}
	return exitAPI
}

func signalContext() (context.Context, context.CancelFunc) {
	return signal.NotifyContext(context.Background(), syscall.SIGINT, syscall.SIGTERM)
}

// readBody reads --file or standard input, byte for byte.
func (c *jobsCmd) readBody(file string) ([]byte, bool) {
	var b []byte
	var err error
	if file == "" || file == "-" {
		b, err = io.ReadAll(c.in)
	} else {
		b, err = os.ReadFile(file)
	}
	if err != nil {
		fmt.Fprintf(c.errw, "etlctl jobs %s: read input: %v\n", c.name, err)
		return nil, false
	}
	return b, true
}

func (c *jobsCmd) json(v any) {
	b, _ := json.Marshal(v)
	fmt.Fprintln(c.out, string(b))
}

func (c *jobsCmd) table(header string, rows [][]string) {
	tw := tabwriter.NewWriter(c.out, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, header)
	for _, r := range rows {
		fmt.Fprintln(tw, strings.Join(r, "\t"))
	}
	_ = tw.Flush()
}

// setup parses args (see parse), builds the client and, when file is not nil,
// reads the body from *file or standard input. ok false means exitUsage; the
// reason is printed.
func (c *jobsCmd) setup(args []string, positionals int, file *string) (pos []string, cl *client.Client, body []byte, ok bool) {
	if pos, ok = c.parse(args, positionals); !ok {
		return nil, nil, nil, false
	}
	if cl, ok = c.client(); !ok {
		return nil, nil, nil, false
	}
	if file != nil {
		if body, ok = c.readBody(*file); !ok {
			return nil, nil, nil, false
		}
	}
	return pos, cl, body, true
}

// show prints v as JSON, or as a table of header and rows.
func (c *jobsCmd) show(v any, header string, rows ...[]string) {
	if c.output == "json" {
		c.json(v)
		return
	}
	c.table(header, rows)
}

const submissionHeader = "JOB ID\tSTATUS\tPRIORITY\tNOT BEFORE\tREPLAYED\tKEY"

func submissionRow(id string, status client.Status, priority int, notBefore *time.Time, replayed bool, key string) []string {
	return []string{id, string(status), priorityCell(priority), notBeforeCell(notBefore), fmt.Sprint(replayed), key}
}

// priorityCell is a table's priority: "-" when the answer had none.
func priorityCell(p int) string {
	if p == 0 {
		return "-"
	}
	return fmt.Sprint(p)
}

// notBeforeCell is a table's not-before time, "-" when the job has none.
func notBeforeCell(t *time.Time) string {
	if t == nil {
		return "-"
	}
	return t.UTC().Format(time.RFC3339)
}

// scheduleFlags registers --priority and --not-before into o.
func (c *jobsCmd) scheduleFlags(o *payloadOptions) {
	c.fs.IntVar(&o.priority, "priority", 0, "the job's priority, 1 (highest) to 4 (lowest); default 2 (replay: the source's)")
	c.fs.StringVar(&o.notBefore, "not-before", "", "the job's earliest start: RFC 3339 (2026-03-01T06:00:00Z) or +duration from now (+90m)")
}

// submitOptions are o's --priority and --not-before as client options; ok
// false means exitUsage, the reason printed.
func (c *jobsCmd) submitOptions(o payloadOptions, now time.Time) ([]client.SubmitOption, bool) {
	var opts []client.SubmitOption
	if o.priority != 0 {
		if o.priority < client.HighestPriority || o.priority > client.LowestPriority {
			fmt.Fprintf(c.errw, "etlctl jobs %s: --priority must be %d to %d\n", c.name, client.HighestPriority, client.LowestPriority)
			return nil, false
		}
		opts = append(opts, client.WithPriority(o.priority))
	}
	if o.notBefore != "" {
		t, ok := parseNotBefore(o.notBefore, now)
		if !ok {
			fmt.Fprintf(c.errw, "etlctl jobs %s: --not-before must be an RFC 3339 time with an offset (2026-03-01T06:00:00Z) or +duration (+90m)\n", c.name)
			return nil, false
		}
		opts = append(opts, client.WithNotBefore(t))
	}
	return opts, true
}

// parseNotBefore reads --not-before: "+" and a positive Go duration from
// now, or an RFC 3339 time with an offset.
func parseNotBefore(s string, now time.Time) (time.Time, bool) {
	if d, ok := strings.CutPrefix(s, "+"); ok {
		dur, err := time.ParseDuration(d)
		if err != nil || dur <= 0 {
			return time.Time{}, false
		}
		return now.Add(dur), true
	}
	t, err := time.Parse(time.RFC3339Nano, s)
	return t, err == nil
}

// scheduled reports whether o sets a priority or a not-before time.
func (o payloadOptions) scheduled() bool { return o.priority != 0 || o.notBefore != "" }

func (c *jobsCmd) submit(args []string) int {
	var o payloadOptions
	c.fs.StringVar(&o.file, "file", "", "read records from this file instead of standard input")
	jsonl := c.fs.Bool("jsonl", false, "JSON Lines of jobs: one job (a JSON array of records) per line")
	c.fs.StringVar(&o.key, "key", "", "idempotency key (with --jsonl, line n uses <key>-<n>); generated when empty")
	c.uploadFlags(&o)
	c.scheduleFlags(&o)
	_, cl, _, ok := c.setup(args, 0, nil)
	if !ok {
		return exitUsage
	}
	opts, ok := c.submitOptions(o, time.Now())
	if !ok {
		return exitUsage
	}
	if !*jsonl {
		return c.submitPayload(cl, o, opts)
	}
	if set := o.uploadFlagsSet(); len(set) > 0 {
		fmt.Fprintf(c.errw, "etlctl jobs submit: --jsonl (one job per line) takes no %s\n", strings.Join(set, ", "))
		return exitUsage
	}
	body, ok := c.readBody(o.file)
	if !ok {
		return exitUsage
	}
	var bodies [][]byte
	var keys []string
	sc := bufio.NewScanner(bytes.NewReader(body))
	sc.Buffer(make([]byte, 64<<10), 64<<20)
	for n := 1; sc.Scan(); n++ {
		line := bytes.TrimSpace(sc.Bytes())
		if len(line) == 0 {
			continue
		}
		bodies = append(bodies, bytes.Clone(line))
		k := ""
		if o.key != "" {
			k = fmt.Sprintf("%s-%d", o.key, n)
		}
		keys = append(keys, k)
	}
	if err := sc.Err(); err != nil {
		fmt.Fprintf(c.errw, "etlctl jobs submit: read input: %v\n", err)
		return exitUsage
	}
	ctx, stop := signalContext()
	defer stop()
	var rows [][]string
	status := exitOK
	for i, b := range bodies {
		sub, err := cl.Submit(ctx, b, keys[i], opts...)
		if err != nil {
			status = c.fail(err)
			if ctx.Err() != nil {
				break
			}
			continue
		}
		if c.output == "json" {
			c.json(sub)
		} else {
			rows = append(rows, submissionRow(sub.JobID, sub.Status, sub.Priority, sub.NotBefore, sub.Replayed, sub.Key))
		}
	}
	if c.output == "table" && len(rows) > 0 {
		c.table(submissionHeader, rows)
	}
	return status
}

func jobRow(j client.Job) []string {
	return []string{j.ID, string(j.Status), priorityCell(j.Priority), notBeforeCell(j.NotBefore), fmt.Sprint(j.AttemptCount),
		cmpOr(j.FailureCode, "-"), j.CreatedAt.UTC().Format(time.RFC3339), j.UpdatedAt.UTC().Format(time.RFC3339), cmpOr(j.ReplaySourceID, "-")}
}

const jobHeader = "JOB ID\tSTATUS\tPRIORITY\tNOT BEFORE\tATTEMPTS\tFAILURE\tCREATED\tUPDATED\tREPLAY OF"

func (c *jobsCmd) printJob(j *client.Job) {
	c.show(j, jobHeader, jobRow(*j))
	if c.output != "json" && j.Progress != nil {
		fmt.Fprintln(c.out, progressSummary(j.Progress))
	}
}

func (c *jobsCmd) get(args []string) int {
	pos, cl, _, ok := c.setup(args, 1, nil)
	if !ok {
		return exitUsage
	}
	ctx, stop := signalContext()
	defer stop()
	j, err := cl.Get(ctx, pos[0])
	if err != nil {
		return c.fail(err)
	}
	c.printJob(j)
	return exitOK
}

func (c *jobsCmd) list(args []string) int {
	status := c.fs.String("status", "", "only jobs in this state (PENDING, RUNNING, SUCCEEDED, FAILED, CANCELLED)")
	priority := c.fs.Int("priority", 0, "only jobs of this priority (1..4)")
	limit := c.fs.Int("limit", 0, "page size 1..100 (default: the service's, 50)")
	cursor := c.fs.String("cursor", "", "continue after a page (its nextCursor)")
	all := c.fs.Bool("all", false, "follow the cursors through every page")
	_, cl, _, ok := c.setup(args, 0, nil)
	if !ok {
		return exitUsage
	}
	ctx, stop := signalContext()
	defer stop()
	o := client.ListOptions{Status: client.Status(*status), Priority: *priority, Limit: *limit, Cursor: *cursor}
	page := &client.Page{Jobs: []client.Job{}}
	if *all {
		for j, err := range cl.All(ctx, o) {
			if err != nil {
				return c.fail(err)
			}
			page.Jobs = append(page.Jobs, j)
		}
	} else {
		p, err := cl.List(ctx, o)
		if err != nil {
			return c.fail(err)
		}
		page = p
	}
	rows := make([][]string, 0, len(page.Jobs))
	for _, j := range page.Jobs {
		rows = append(rows, jobRow(j))
	}
	c.show(page, jobHeader, rows...)
	if c.output == "table" && page.NextCursor != "" {
		fmt.Fprintf(c.out, "more: etlctl jobs list --cursor %s (or --all)\n", page.NextCursor)
	}
	return exitOK
}

// cancelKeyPrefix starts the cancellation key cancel sends without --key.
const cancelKeyPrefix = "etlctl-cancel-"

// cancelKey is the default cancellation key of job id: cancelKeyPrefix and
// the id in lower case (the service reads ids case-insensitively), so every
// `etlctl jobs cancel ID` of one job is one intent: a repeat replays the
// first (200, replayed) instead of being refused as another key (422
// etl_job_cancellation_key_reused). A job id is 36 characters of the key
// alphabet, so the key (50 characters) is valid; an id that is not one is
// answered etl_job_not_found before the key is looked at.
func cancelKey(id string) string { return cancelKeyPrefix + strings.ToLower(id) }

func (c *jobsCmd) cancel(args []string) int {
	key := c.fs.String("key", "", "idempotency key; default "+cancelKeyPrefix+"<job id>, so repeating a cancel replays it")
	pos, cl, _, ok := c.setup(args, 1, nil)
	if !ok {
		return exitUsage
	}
	if *key == "" {
		*key = cancelKey(pos[0])
	}
	ctx, stop := signalContext()
	defer stop()
	res, err := cl.Cancel(ctx, pos[0], *key)
	if err != nil {
		return c.fail(err)
	}
	c.show(res, submissionHeader, submissionRow(res.Job.ID, res.Job.Status, res.Job.Priority, res.Job.NotBefore, res.Replayed, res.Key))
	return exitOK
}

func (c *jobsCmd) replay(args []string) int {
	var o payloadOptions
	c.fs.StringVar(&o.file, "file", "", "the original payload (default: standard input)")
	c.fs.StringVar(&o.key, "key", "", "idempotency key; generated when empty")
	c.uploadFlags(&o)
	c.scheduleFlags(&o)
	pos, cl, _, ok := c.setup(args, 1, nil)
	if !ok {
		return exitUsage
	}
	opts, ok := c.submitOptions(o, time.Now())
	if !ok {
		return exitUsage
	}
	o.replayOf = pos[0]
	return c.replayPayload(cl, o, opts)
}

func (c *jobsCmd) wait(args []string) int {
	timeout := c.fs.Duration("timeout", 0, "give up after this long (exit 4); 0 waits until the job ends")
	progress := c.fs.String("progress", progressAuto, "a large job's loading progress on standard error: auto (a bar on a terminal), bar, plain or none")
	pos, cl, _, ok := c.setup(args, 1, nil)
	if !ok {
		return exitUsage
	}
	mode, ok := progressMode(*progress, c.errw)
	if !ok {
		fmt.Fprintf(c.errw, "etlctl jobs wait: --progress must be auto, bar, plain or none\n")
		return exitUsage
	}
	ctx, stop := signalContext()
	defer stop()
	if *timeout > 0 {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, *timeout)
		defer cancel()
	}
	var seen func(*client.Job)
	m := newMeter(c.errw, mode)
	if mode != progressNone {
		var r loadRate
		seen = func(j *client.Job) {
			if j.Progress != nil {
				m.show(loadLine(j.Status, j.Progress, r.rate(j.Progress, time.Now())), j.Status.Terminal())
			}
		}
	}
	j, err := cl.Watch(ctx, pos[0], seen)
	m.end()
	if err != nil {
		if errors.Is(err, context.DeadlineExceeded) {
			if j != nil {
				c.printJob(j)
			}
			fmt.Fprintf(c.errw, "etlctl jobs wait: timeout after %v\n", *timeout)
			return exitTimeout
		}
		return c.fail(err)
	}
	c.printJob(j)
	switch j.Status {
	case client.StatusFailed:
		return exitFailed
	case client.StatusCancelled:
		return exitCancelled
	}
	return exitOK
}

func (c *jobsCmd) process(args []string) int {
	file := c.fs.String("file", "", "read records from this file instead of standard input")
	key := c.fs.String("key", "", "idempotency key; generated when empty")
	_, cl, body, ok := c.setup(args, 0, file)
	if !ok {
		return exitUsage
	}
	ctx, stop := signalContext()
	defer stop()
	res, err := cl.Process(ctx, body, *key)
	if err != nil {
		return c.fail(err)
	}
	rows := make([][]string, 0, len(res.Processed))
	for _, id := range res.Processed {
		rows = append(rows, []string{id})
	}
	c.show(res, "PROCESSED", rows...)
	if c.output == "table" {
		fmt.Fprintf(c.out, "key %s replayed %v\n", res.Key, res.Replayed)
	}
	return exitOK
}
