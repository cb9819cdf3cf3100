package events

import (
	"encoding/json"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/google/uuid"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
)

// DefaultSource is the CloudEvents source of lifecycle events when none is
// configured.
const DefaultSource = "urn:mightyetl:relay"

// CloudEventsContentType is the Content-Type header of a structured-mode
// CloudEvents JSON message.
const CloudEventsContentType = "application/cloudevents+json"

// CloudEvent is a CloudEvents 1.0 structured-mode JSON envelope of a job
// lifecycle event. It is payload-free: no records, no principal, no key, no
// hash, no lease id.
type CloudEvent struct {
	SpecVersion     string        `json:"specversion"`     // always "1.0"
	ID              string        `json:"id"`              // Lifecycle.EventID: "<outbox id>@<µs>" or "<outbox id>-<member>@<µs>"
	Source          string        `json:"source"`          // DefaultSource unless configured
	Type            string        `json:"type"`            // io.mightyetl.job.<status lowercase>
	Time            time.Time     `json:"time"`            // when the state change committed (database clock), RFC 3339
	DataContentType string        `json:"datacontenttype"` // always "application/json"
	Data            LifecycleData `json:"data"`
	// Traceparent is the CloudEvents distributed-tracing extension: the W3C
	// traceparent of the job's submit, absent when it was not traced.
	Traceparent string `json:"traceparent,omitempty"`
}

// LifecycleData is the data of a lifecycle CloudEvent.
type LifecycleData struct {
	JobRecordID  uuid.UUID `json:"jobRecordId"`
	JobStatus    string    `json:"jobStatus"`
	AttemptCount int       `json:"attemptCount"`
	// FailureCode is set for FAILED only.
	FailureCode string `json:"failureCode,omitempty"`
	// CancellationCode is set for CANCELLED only.
	CancellationCode string `json:"cancellationCode,omitempty"`
}

// Lifecycle is one job_lifecycle outbox row.
type Lifecycle struct {
	OutboxID int64
	// Grouped is true for a member of a group outbox row (one row for a
	// whole finish group, migration 00006); Member is then the job's 0-based
	// position in the row's arrays.
	Grouped      bool
	Member       int
	JobID        uuid.UUID
	Status       string // upper case, as stored: SUCCEEDED, FAILED, CANCELLED
	AttemptCount int
	Code         string // failure or cancellation code; empty when none
	OccurredAt   time.Time
	// Traceparent is the job's stored submit traceparent (W3C), empty when
	// the submit was not traced; it becomes the CloudEvents
	// distributed-tracing extension attribute.
	Traceparent string
}

// EventID is the event's stable id: the outbox id in decimal for a plain
// row, "<outbox id>-<member>" for a member of a group row, followed by "@"
// and the row's occurred_at in Unix microseconds. It never changes for a
// given row and member, so a republished event keeps its id, and the two
// forms never collide. The time is part of it because outbox ids alone are
// not unique across a failover to an asynchronous standby: the ids the lost
// primary handed out last (and whose events the relay may have published)
// are handed out again by the promoted one, and JetStream's Nats-Msg-Id
// window (and a consumer that deduplicates by id) would drop the new events
// as copies of the old (docs/operations/failover.md). A zero OccurredAt
// (never from a stored row) leaves the suffix out.
func (e Lifecycle) EventID() string {
	id := strconv.FormatInt(e.OutboxID, 10)
	if e.Grouped {
		id += "-" + strconv.Itoa(e.Member)
	}
	if !e.OccurredAt.IsZero() {
		id += "@" + strconv.FormatInt(e.OccurredAt.UnixMicro(), 10)
	}
	return id
}

// NewCloudEvent builds the envelope of e with the given source (empty means
// DefaultSource). The stored code goes to failureCode for FAILED and to
// cancellationCode for CANCELLED and is omitted otherwise.
func NewCloudEvent(source string, e Lifecycle) CloudEvent {
	if source == "" {
		source = DefaultSource
	}
	d := LifecycleData{JobRecordID: e.JobID, JobStatus: e.Status, AttemptCount: e.AttemptCount}
	switch e.Status {
	case "FAILED":
		d.FailureCode = e.Code
	case "CANCELLED":
		d.CancellationCode = e.Code
	}
	return CloudEvent{
		SpecVersion:     "1.0",
		ID:              e.EventID(),
		Source:          source,
		Type:            "io.mightyetl.job." + strings.ToLower(e.Status),
		Time:            e.OccurredAt.UTC(),
		DataContentType: "application/json",
		Data:            d,
		Traceparent:     e.Traceparent,
	}
}

// LifecycleMsg builds the JetStream message of e: subject
// "<p>.lifecycle.<status>", header Nats-Msg-Id = the event id (so
// JetStream drops a republished copy inside the stream's duplicate window),
// Content-Type application/cloudevents+json, body the CloudEvent. It returns
// an error when the status is not a subject token.
func LifecycleMsg(s Subjects, source string, e Lifecycle) (*nats.Msg, error) {
	subject, err := s.Lifecycle(e.Status)
	if err != nil {
		return nil, err
	}
	body, err := json.Marshal(NewCloudEvent(source, e))
	if err != nil {
		return nil, fmt.Errorf("encode lifecycle event: %w", err)
	}
	m := nats.NewMsg(subject)
	m.Data = body
	m.Header.Set(jetstream.MsgIDHeader, e.EventID())
	m.Header.Set("Content-Type", CloudEventsContentType)
	return m, nil
}
