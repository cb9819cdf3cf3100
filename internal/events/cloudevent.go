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
	ID              string        `json:"id"`              // Lifecycle.EventID: "<outbox id>" or "<outbox id>-<member>" (+ "@<µs>" for a reused outbox id)
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
	// Reused marks an event whose outbox id JetStream already holds for
	// another transition (the id was handed out again after a failover to
	// an asynchronous standby); its id gets the occurred_at suffix.
	Reused bool
}

// EventID is the event's stable id: the outbox id in decimal for a plain
// row, "<outbox id>-<member>" for a member of a group row (the v0.1.0
// format). It never changes for a given row and member, whichever release
// publishes it, so a republished event keeps its id (JetStream drops the
// copy inside its duplicate window), and the two forms never collide.
//
// Outbox ids alone are not unique across a failover to an asynchronous
// standby: the promoted primary hands out again the ids the lost primary
// used last, whose events the relay may have published. The relay detects
// that through JetStream's duplicate acknowledgement (the stored message
// under the id is another transition) and republishes the event with
// Reused set: the id is then followed by "@" and occurred_at in Unix
// microseconds (ReusedEventID).
func (e Lifecycle) EventID() string {
	if e.Reused {
		return e.ReusedEventID()
	}
	return e.plainID()
}

// ReusedEventID is the id of e when its outbox id was reused:
// "<outbox id>[-<member>]@<occurred_at in Unix microseconds>".
func (e Lifecycle) ReusedEventID() string {
	return e.plainID() + "@" + strconv.FormatInt(e.OccurredAt.UnixMicro(), 10)
}

func (e Lifecycle) plainID() string {
	if !e.Grouped {
		return strconv.FormatInt(e.OutboxID, 10)
	}
	return strconv.FormatInt(e.OutboxID, 10) + "-" + strconv.Itoa(e.Member)
}

// SameTransition reports whether body, a stored lifecycle message, is the
// CloudEvent of the same transition as e: same job, same status, same
// occurred time (to the microsecond, the database's precision). It
// compares the decoded fields, not bytes (the source or the traceparent may
// differ between relays and releases). A body that is not a lifecycle
// CloudEvent is not the same transition.
func SameTransition(body []byte, e Lifecycle) bool {
	var ce CloudEvent
	if err := json.Unmarshal(body, &ce); err != nil {
		return false
	}
	return ce.Data.JobRecordID == e.JobID &&
		ce.Data.JobStatus == e.Status &&
		ce.Type == "io.mightyetl.job."+strings.ToLower(e.Status) &&
		ce.Time.Truncate(time.Microsecond).Equal(e.OccurredAt.Truncate(time.Microsecond))
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
