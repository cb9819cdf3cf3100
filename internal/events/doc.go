// Package events is mightyETL's NATS side: subject names under a
// configurable prefix, the CloudEvents 1.0 envelope of lifecycle events, the
// JetStream streams, the connection with its outage handling, the advisory
// subscriptions workers use, and the request consumer of event-driven intake.
//
// NATS never carries authority. Every message is advisory (wake-ups,
// revocations: workers still claim and renew only through the database) or
// idempotent (lifecycle events carry their event id as Nats-Msg-Id, requests
// carry the client's idempotency key, decided per principal by the
// database). A message may be lost, repeated, delayed or reordered and the
// system stays correct, only slower, down to the fallback poll interval.
//
// Subjects, for prefix p (MIGHTYETL_NATS_SUBJECT_PREFIX, default "mightyetl"):
//
//	p.jobs.available      core NATS  advisory wake-up, empty body, one per relay batch
//	p.jobs.revoked        core NATS  advisory, body = the revoked job's id (UUID text)
//	p.lifecycle.<state>   JetStream  CloudEvents JSON, Nats-Msg-Id = event id (outbox id@occurred µs)
//	p.requests.<principal> JetStream job submissions, key in Mightyetl-Idempotency-Key, no Nats-Msg-Id;
//	                      a record array, or an ObjectRequest naming an object of the
//	                      principal's Object Store bucket (Subjects.ObjectBucket)
//	p.rejections          core NATS  payload-free rejections of invalid requests
//
// Nothing here logs or labels a payload, principal, key, hash or id.
package events
