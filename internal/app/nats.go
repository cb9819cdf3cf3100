package app

import (
	"github.com/mightyetl/mightyetl/internal/config"
	"github.com/mightyetl/mightyetl/internal/events"
	"github.com/mightyetl/mightyetl/internal/natsbridge"
	"github.com/mightyetl/mightyetl/internal/outbox"
)

// NATSConn is the connection of the NATS settings n (URL, credentials and
// TLS files) named name in NATS monitoring; the reconnect wait and connect
// timeout are events' defaults. An empty n.URL gives an empty URL: NATS is
// not configured.
func NATSConn(n config.NATS, name string) events.Options {
	return events.Options{URL: n.URL, Name: name, CredsFile: n.CredsFile,
		TLSCAFile: n.TLSCAFile, TLSCertFile: n.TLSCertFile, TLSKeyFile: n.TLSKeyFile}
}

// BridgeOptions translates the NATS settings n into the options of a
// bridge whose connection is named name: the connection, the subject
// prefix, the relay's poll interval and batch size, and, when
// n.RequestsEnabled, the request consumer with its concurrency, deliveries,
// stream limits and Object Store ingests, each message capped at
// maxRequestBytes (the intake's payload limit). The caller sets Pool,
// Service, Registry and Log.
func BridgeOptions(n config.NATS, name string, maxRequestBytes int) natsbridge.Options {
	return natsbridge.Options{
		Conn:            NATSConn(n, name),
		SubjectPrefix:   n.SubjectPrefix,
		Relay:           outbox.Options{PollInterval: n.OutboxPollInterval, BatchSize: n.OutboxBatchSize, StreamReplicas: n.StreamReplicas},
		ConsumeRequests: n.RequestsEnabled,
		Requests: events.RequestConsumerOptions{
			MaxRequestBytes:       int32(maxRequestBytes),
			Concurrency:           n.RequestConcurrency,
			MaxDeliveries:         n.RequestMaxDeliveries,
			StreamMaxBytes:        int64(n.RequestsMaxBytes),
			StreamMaxPerPrincipal: int64(n.RequestsMaxPerPrincipal),
			StreamReplicas:        n.StreamReplicas,
		},
		ObjectIngests: n.ObjectIngests,
	}
}
