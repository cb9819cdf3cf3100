package faultinject

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"io"
	"math/rand/v2"
	"net/http"
	"strconv"
	"sync"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/mightyetl/mightyetl/internal/codes"
	"github.com/mightyetl/mightyetl/internal/events"
)

// Producer pacing and retry bounds.
const (
	// pause is the mean pause between one producer's submissions.
	pause = 120 * time.Millisecond
	// retryMin and retryMax bound the pause before a retry (full jitter).
	retryMin, retryMax = 50 * time.Millisecond, time.Second
	// natsReplyWait is how long a NATS producer waits for the intake's
	// reply before it publishes the same request again.
	natsReplyWait = 4 * time.Second
)

// Producers submit jobs until Stop, each retrying one submission with the
// same key and body until it is acknowledged (HTTP 202, or the intake's
// reply to a NATS request) or, for invalid bodies, refused with 422.
type Producers struct {
	sys    *System
	ledger *Ledger
	client *http.Client
	// stop ends new submissions; finish (later) ends retries of the ones
	// in flight.
	stop, finish context.Context
	wg           sync.WaitGroup
}

// StartProducers starts one HTTP producer per HTTP principal and one NATS
// producer per NATS principal. New submissions stop when stop ends; a
// submission in flight is retried until it is answered or finish ends.
func StartProducers(stop, finish context.Context, sys *System, ledger *Ledger, seed uint64) (*Producers, error) {
	p := &Producers{sys: sys, ledger: ledger, stop: stop, finish: finish,
		client: &http.Client{Timeout: 10 * time.Second, Transport: &http.Transport{MaxIdleConnsPerHost: 8}}}
	for i, pr := range sys.HTTP {
		rng := rand.New(rand.NewPCG(seed, uint64(i)))
		p.wg.Add(1)
		go func() {
			defer p.wg.Done()
			p.runHTTP(pr, rng)
		}()
	}
	for i, name := range sys.NATSNames {
		nc, err := nats.Connect(sys.NATSURL(), nats.Name("faultinject-producer"), nats.MaxReconnects(-1),
			nats.ReconnectWait(100*time.Millisecond), nats.RetryOnFailedConnect(true))
		if err != nil {
			return nil, errors.Join(err, p.Wait())
		}
		rng := rand.New(rand.NewPCG(seed, uint64(1000+i)))
		p.wg.Add(1)
		go func() {
			defer p.wg.Done()
			defer nc.Close()
			p.runNATS(nc, name, rng)
		}()
	}
	return p, nil
}

// Wait waits until every producer has returned (after stop and finish).
func (p *Producers) Wait() error {
	p.wg.Wait()
	p.client.CloseIdleConnections()
	return nil
}

// sleep pauses d or until ctx ends; it reports whether ctx is still live.
func sleep(ctx context.Context, d time.Duration) bool {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return false
	case <-t.C:
		return true
	}
}

func jitter(rng *rand.Rand, lo, hi time.Duration) time.Duration {
	return lo + time.Duration(rng.Int64N(int64(hi-lo)+1))
}

// runHTTP submits a mix of kinds over HTTP until stop.
func (p *Producers) runHTTP(pr Principal, rng *rand.Rand) {
	for p.stop.Err() == nil {
		s, err := p.newHTTPSubmission(pr, rng)
		if err != nil {
			p.ledger.unexpectedAnswer("harness: " + err.Error())
			return
		}
		p.ledger.add(s)
		jobID := p.submitHTTP(pr, s, rng)
		if s.Kind == KindCancel && jobID != "" {
			// Cancel while pending or running (the job runs 3-6 s).
			sleep(p.finish, jitter(rng, 0, 2*time.Second))
			p.cancelHTTP(pr, s, jobID, rng)
		}
		sleep(p.stop, jitter(rng, pause/2, 3*pause/2))
	}
}

// newHTTPSubmission picks a kind: mostly valid ETL jobs, some diagnostic
// jobs that succeed, fail or get cancelled, and a few invalid bodies.
func (p *Producers) newHTTPSubmission(pr Principal, rng *rand.Rand) (*Submission, error) {
	records, rows, err := etlRecords(rng, 1+rng.IntN(5))
	if err != nil {
		return nil, err
	}
	s := &Submission{Principal: pr.Name, Key: newKey("fi-http"), Path: "/api/etl/jobs", Expected: rows, Body: records}
	diag := func(d time.Duration, failWith string) error {
		s.Path = "/api/etl/diagnostic-jobs"
		s.Body, err = diagnosticBody(d, records, failWith)
		return err
	}
	switch n := rng.IntN(100); {
	case n < 60:
		s.Kind = KindETL
	case n < 65:
		s.Kind, s.Expected = KindInvalid, nil
		s.Body = []byte(`[{"id":"bad-` + randomHex(3) + `","amount":"not-a-number"}]`)
	case n < 75:
		s.Kind = KindDiagnostic
		err = diag(jitter(rng, 200*time.Millisecond, 1500*time.Millisecond), "")
	case n < 82:
		s.Kind = KindPermanent
		err = diag(jitter(rng, 0, 500*time.Millisecond), "permanent")
	case n < 87:
		s.Kind = KindTransient
		err = diag(jitter(rng, 0, 200*time.Millisecond), "transient")
	default:
		s.Kind = KindCancel
		err = diag(jitter(rng, 3*time.Second, 6*time.Second), "")
	}
	return s, err
}

// submitHTTP posts s until it is acknowledged (returns the job id) or
// refused as expected (returns ""), or finish ends (returns "").
func (p *Producers) submitHTTP(pr Principal, s *Submission, rng *rand.Rand) string {
	for {
		s.mu.Lock()
		s.attempts++
		s.mu.Unlock()
		status, code, body, retryAfter, err := p.post(pr, s.Path, s.Key, s.Body)
		wait := jitter(rng, retryMin, retryMax)
		switch {
		case err != nil:
			p.ledger.response("http transport error")
			p.ledger.refused(s, "http transport error")
		case status == http.StatusAccepted:
			p.ledger.response("http 202")
			var r struct {
				JobRecordID string `json:"jobRecordId"`
			}
			if json.Unmarshal(body, &r) != nil || r.JobRecordID == "" {
				p.ledger.unexpectedAnswer("http 202 without a job id")
				break
			}
			p.ledger.acked(s, r.JobRecordID)
			return r.JobRecordID
		case status == http.StatusUnprocessableEntity && code == codes.InvalidRecord && s.Kind == KindInvalid:
			p.ledger.response("http 422 " + codes.InvalidRecord)
			s.mu.Lock()
			s.rejected = true
			s.mu.Unlock()
			return ""
		case status >= 500:
			// Retry with the same key and body, as the contract says for
			// 503, after its Retry-After when it has one; a 500 is
			// retried too but counted on its own.
			p.ledger.response("http " + strconv.Itoa(status) + " " + code)
			class := "http " + strconv.Itoa(status) + " " + code
			if status == http.StatusServiceUnavailable {
				if d, ok := parseRetryAfter(retryAfter); ok {
					class += " with Retry-After"
					wait = d + jitter(rng, 0, retryMin)
				} else {
					class += " without Retry-After"
				}
			}
			p.ledger.refused(s, class)
		default:
			p.ledger.response("http " + strconv.Itoa(status) + " " + code)
			p.ledger.unexpectedAnswer("submit: http " + strconv.Itoa(status) + " " + code)
		}
		if !sleep(p.finish, wait) {
			p.ledger.gaveUp()
			return ""
		}
	}
}

// parseRetryAfter reads a Retry-After of delay-seconds (RFC 9110 10.2.3;
// the intake never sends the HTTP-date form).
func parseRetryAfter(v string) (time.Duration, bool) {
	n, err := strconv.Atoi(v)
	if v == "" || err != nil || n < 0 {
		return 0, false
	}
	return time.Duration(n) * time.Second, true
}

// cancelHTTP cancels jobID with a key of its own until a definitive answer.
func (p *Producers) cancelHTTP(pr Principal, s *Submission, jobID string, rng *rand.Rand) {
	key := newKey("fi-cancel")
	for {
		status, code, _, _, err := p.post(pr, "/api/etl/jobs/"+jobID+"/cancellation", key, nil)
		ans := CancelNone
		switch {
		case err != nil:
			p.ledger.response("cancel transport error")
		case status == http.StatusOK:
			ans = CancelDone
		case status == http.StatusConflict && code == codes.AlreadySucceeded:
			ans = CancelSucceeded
		case status == http.StatusConflict && code == codes.AlreadyFailed:
			ans = CancelFailed
		case status == http.StatusNotFound && code == codes.JobNotFound:
			ans = CancelNotFound
		case status >= 500:
			p.ledger.response("cancel " + strconv.Itoa(status) + " " + code)
		default:
			p.ledger.unexpectedAnswer("cancel: http " + strconv.Itoa(status) + " " + code)
		}
		if ans != CancelNone {
			p.ledger.response("cancel " + ans)
			s.mu.Lock()
			s.cancelAns = ans
			s.mu.Unlock()
			return
		}
		if !sleep(p.finish, jitter(rng, retryMin, retryMax)) {
			return
		}
	}
}

// post sends one POST with Basic auth and an Idempotency-Key and returns
// the status, the problem's errorCode (if any), the body and the
// Retry-After header.
func (p *Producers) post(pr Principal, path, key string, body []byte) (int, string, []byte, string, error) {
	ctx, cancel := context.WithTimeout(p.finish, 10*time.Second)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, p.sys.IntakeURL+path, bytes.NewReader(body))
	if err != nil {
		return 0, "", nil, "", err
	}
	req.Header.Set("Authorization", pr.Authorization)
	req.Header.Set("Idempotency-Key", key)
	if body != nil {
		req.Header.Set("Content-Type", "application/json")
	}
	resp, err := p.client.Do(req)
	if err != nil {
		return 0, "", nil, "", err
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(io.LimitReader(resp.Body, 1<<20))
	if err != nil {
		return 0, "", nil, "", err
	}
	var prob struct {
		ErrorCode string `json:"errorCode"`
	}
	if resp.StatusCode >= 400 {
		_ = json.Unmarshal(b, &prob)
	}
	return resp.StatusCode, prob.ErrorCode, b, resp.Header.Get("Retry-After"), nil
}

// runNATS submits valid ETL jobs as JetStream requests until stop.
func (p *Producers) runNATS(nc *nats.Conn, principal string, rng *rand.Rand) {
	js, err := jetstream.New(nc)
	if err != nil {
		p.ledger.unexpectedAnswer("harness: jetstream: " + err.Error())
		return
	}
	subjects, err := events.NewSubjects(p.sys.Prefix)
	if err != nil {
		p.ledger.unexpectedAnswer("harness: " + err.Error())
		return
	}
	subject, err := subjects.Requests(principal)
	if err != nil {
		p.ledger.unexpectedAnswer("harness: " + err.Error())
		return
	}
	for p.stop.Err() == nil {
		records, rows, err := etlRecords(rng, 1+rng.IntN(5))
		if err != nil {
			p.ledger.unexpectedAnswer("harness: " + err.Error())
			return
		}
		s := &Submission{Kind: KindETLNATS, Principal: principal, Key: newKey("fi-nats"), Body: records, Expected: rows}
		p.ledger.add(s)
		p.submitNATS(nc, js, subject, s, rng)
		sleep(p.stop, jitter(rng, pause/2, 3*pause/2))
	}
}

// submitNATS publishes s (key in events.IdempotencyKeyHeader, reply inbox
// in the Mightyetl-Reply-To header) and waits for the intake's reply;
// without one it publishes the same request again. One inbox serves every copy, so
// a late reply to an earlier copy acknowledges too.
func (p *Producers) submitNATS(nc *nats.Conn, js jetstream.JetStream, subject string, s *Submission, rng *rand.Rand) {
	inbox := events.NewReplyInbox(s.Principal)
	sub, err := nc.SubscribeSync(inbox)
	if err != nil {
		p.ledger.unexpectedAnswer("harness: subscribe inbox")
		p.ledger.gaveUp()
		return
	}
	defer func() { _ = sub.Unsubscribe() }()
	for {
		s.mu.Lock()
		s.attempts++
		s.mu.Unlock()
		msg := nats.NewMsg(subject)
		msg.Data = s.Body
		msg.Header.Set(events.IdempotencyKeyHeader, s.Key)
		msg.Header.Set(events.ReplyToHeader, inbox)
		pctx, cancel := context.WithTimeout(p.finish, 3*time.Second)
		_, perr := js.PublishMsg(pctx, msg)
		cancel()
		if perr != nil {
			p.ledger.response("nats publish error")
		} else {
			p.ledger.response("nats published")
			deadline := time.Now().Add(natsReplyWait)
			for time.Now().Before(deadline) && p.finish.Err() == nil {
				reply, rerr := sub.NextMsg(min(time.Until(deadline), 500*time.Millisecond))
				if errors.Is(rerr, nats.ErrTimeout) {
					continue
				}
				if rerr != nil {
					break
				}
				if code := reply.Header.Get(events.ErrorCodeHeader); code != "" {
					p.ledger.response("nats reply " + code)
					p.ledger.unexpectedAnswer("nats: reply " + code)
					continue
				}
				var r struct {
					JobRecordID string `json:"jobRecordId"`
				}
				if json.Unmarshal(reply.Data, &r) != nil || r.JobRecordID == "" {
					p.ledger.unexpectedAnswer("nats: reply without a job id")
					continue
				}
				p.ledger.response("nats reply job")
				p.ledger.acked(s, r.JobRecordID)
				return
			}
			p.ledger.response("nats reply timeout")
		}
		if !sleep(p.finish, jitter(rng, retryMin, retryMax)) {
			p.ledger.gaveUp()
			return
		}
	}
}
