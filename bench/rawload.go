package main

import (
	"bufio"
	"bytes"
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"net"
	"strconv"
	"sync"
	"time"
)

// Load clients. The intake scenarios measure the server, but on a small
// machine the load generator shares the cores with it: Go's net/http client
// costs about 40 CPU-µs per request (its transport hands every request
// between goroutines), as much as a third of what the intake itself uses,
// while pgbench, the baseline the intake is compared with, is a lean C
// client. The "raw" client is the HTTP counterpart of pgbench (and of wrk):
// one goroutine and one keep-alive connection per client writing a request
// prepared once (only its Idempotency-Key changes, in place) and parsing the
// response's status line and framing. -intake-client nethttp selects Go's
// client instead.
const (
	loadClientRaw     = "raw"
	loadClientNetHTTP = "nethttp"
)

// rawKeyDigits is the width of the per-request counter inside the key.
const rawKeyDigits = 16

// rawRequest is one client's prepared request: buf holds the whole request
// and key the offset of its counter digits.
type rawRequest struct {
	buf []byte
	key int
}

// newRawRequest prepares a POST of body to path on host with the given
// Authorization value and a key "bench-key-<run>-<client>-<counter>", the
// run part random so that no two runs share keys.
func newRawRequest(host, path, authorization, run string, client int, body []byte) rawRequest {
	var b bytes.Buffer
	fmt.Fprintf(&b, "POST %s HTTP/1.1\r\nHost: %s\r\n", path, host)
	if authorization != "" {
		fmt.Fprintf(&b, "Authorization: %s\r\n", authorization)
	}
	fmt.Fprintf(&b, "Content-Type: application/json\r\nIdempotency-Key: bench-key-%s-%d-", run, client)
	key := b.Len()
	b.WriteString(fmt.Sprintf("%0*d", rawKeyDigits, 0))
	fmt.Fprintf(&b, "\r\nContent-Length: %d\r\n\r\n", len(body))
	b.Write(body)
	return rawRequest{buf: b.Bytes(), key: key}
}

// setCounter writes n as the key's counter digits (decimal, zero padded).
func (r rawRequest) setCounter(n uint64) {
	d := r.buf[r.key : r.key+rawKeyDigits]
	for i := rawKeyDigits - 1; i >= 0; i-- {
		d[i] = byte('0' + n%10)
		n /= 10
	}
}

// errRawResponse is a response the raw client cannot frame.
var errRawResponse = errors.New("malformed HTTP response")

// readRawResponse reads one HTTP/1.1 response from r, discarding its body,
// and returns its status and whether the server will close the connection.
func readRawResponse(r *bufio.Reader) (status int, closing bool, err error) {
	line, err := r.ReadSlice('\n')
	if err != nil {
		return 0, false, err
	}
	// "HTTP/1.1 202 Accepted\r\n"
	if len(line) < 12 || !bytes.HasPrefix(line, []byte("HTTP/1.")) || line[8] != ' ' {
		return 0, false, errRawResponse
	}
	status, err = strconv.Atoi(string(line[9:12]))
	if err != nil {
		return 0, false, errRawResponse
	}
	length, chunked := int64(-1), false
	for {
		line, err = r.ReadSlice('\n')
		if err != nil {
			return 0, false, err
		}
		h := bytes.TrimRight(line, "\r\n")
		if len(h) == 0 {
			break
		}
		name, value, ok := bytes.Cut(h, []byte(":"))
		if !ok {
			return 0, false, errRawResponse
		}
		value = bytes.TrimSpace(value)
		switch {
		case bytes.EqualFold(name, []byte("Content-Length")):
			if length, err = strconv.ParseInt(string(value), 10, 64); err != nil || length < 0 {
				return 0, false, errRawResponse
			}
		case bytes.EqualFold(name, []byte("Transfer-Encoding")):
			chunked = bytes.EqualFold(value, []byte("chunked"))
		case bytes.EqualFold(name, []byte("Connection")):
			closing = bytes.EqualFold(value, []byte("close"))
		}
	}
	switch {
	case chunked:
		err = discardChunked(r)
	case length >= 0:
		_, err = r.Discard(int(length))
	default: // no framing: the body runs to the end of the connection
		_, err = io.Copy(io.Discard, r)
		closing = true
	}
	return status, closing, err
}

// discardChunked reads a chunked body and its trailer.
func discardChunked(r *bufio.Reader) error {
	for {
		line, err := r.ReadSlice('\n')
		if err != nil {
			return err
		}
		sizeText, _, _ := bytes.Cut(bytes.TrimRight(line, "\r\n"), []byte(";"))
		size, err := strconv.ParseInt(string(bytes.TrimSpace(sizeText)), 16, 64)
		if err != nil || size < 0 {
			return errRawResponse
		}
		if size == 0 {
			for { // trailer, up to the empty line
				line, err = r.ReadSlice('\n')
				if err != nil {
					return err
				}
				if len(bytes.TrimRight(line, "\r\n")) == 0 {
					return nil
				}
			}
		}
		if _, err := r.Discard(int(size) + 2); err != nil { // data and its CRLF
			return err
		}
	}
}

// rawPostLoad is postLoad with the raw client: intakeConcurrency clients,
// each on its own keep-alive connection to addr (host:port), POST body to
// path with a fresh Idempotency-Key per request for dur; authorization(c)
// is client c's Authorization value ("" for none).
func rawPostLoad(ctx context.Context, addr, path string, body []byte, dur time.Duration, authorization func(c int) string) httpLoad {
	return rawPostLoadTo(ctx, []string{addr}, path, body, dur, authorization)
}

// rawPostLoadTo is rawPostLoad over several servers: client c sends to
// addrs[c % len(addrs)], still intakeConcurrency clients in all.
func rawPostLoadTo(ctx context.Context, addrs []string, path string, body []byte, dur time.Duration, authorization func(c int) string) httpLoad {
	runCtx, cancel := context.WithTimeout(ctx, dur)
	defer cancel()
	run := make([]byte, 6)
	_, _ = rand.Read(run)
	var (
		mu  sync.Mutex
		out = httpLoad{failures: map[int]int{}}
		wg  sync.WaitGroup
	)
	start := time.Now()
	for c := range intakeConcurrency {
		wg.Add(1)
		go func() {
			defer wg.Done()
			addr := addrs[c%len(addrs)]
			req := newRawRequest(addr, path, authorization(c), hex.EncodeToString(run), c, body)
			lat := make([]time.Duration, 0, 4096)
			failures := map[int]int{}
			defer func() {
				mu.Lock()
				out.accepted += len(lat)
				out.lat = append(out.lat, lat...)
				for code, n := range failures {
					out.failures[code] += n
				}
				mu.Unlock()
			}()
			var conn net.Conn
			var r *bufio.Reader
			// The connection ends with the run: a request in flight then
			// fails, and that failure is not counted.
			stop := context.AfterFunc(runCtx, func() {
				mu.Lock()
				defer mu.Unlock()
				if conn != nil {
					_ = conn.SetDeadline(time.Now())
				}
			})
			defer stop()
			defer func() {
				if conn != nil {
					conn.Close()
				}
			}()
			for n := uint64(0); runCtx.Err() == nil; n++ {
				if conn == nil {
					var d net.Dialer
					nc, err := d.DialContext(runCtx, "tcp", addr)
					if err != nil {
						if runCtx.Err() == nil {
							failures[0]++
						}
						return
					}
					mu.Lock()
					conn = nc
					mu.Unlock()
					r = bufio.NewReaderSize(conn, 4096)
				}
				req.setCounter(n)
				t := time.Now()
				status, closing, err := roundTrip(conn, r, req.buf)
				if err != nil {
					if runCtx.Err() == nil {
						failures[0]++
					}
					return
				}
				if status == 202 {
					lat = append(lat, time.Since(t))
				} else {
					failures[status]++
				}
				if closing {
					mu.Lock()
					conn.Close()
					conn = nil
					mu.Unlock()
				}
			}
		}()
	}
	wg.Wait()
	out.elapsed = time.Since(start)
	return out
}

// roundTrip writes one prepared request and reads its response.
func roundTrip(conn net.Conn, r *bufio.Reader, req []byte) (status int, closing bool, err error) {
	if _, err := conn.Write(req); err != nil {
		return 0, false, err
	}
	return readRawResponse(r)
}
