// Package clientcontract holds no code: its tests hold the public client
// module (github.com/mightyetl/mightyetl/client, in client/) to the service.
//
// The client module depends on the standard library and nats.go only, so it
// cannot import this module's packages, not even in its tests. The tests
// that need the service live here instead:
//
//   - every Client method and Producer call against a real intake, worker,
//     PostgreSQL and NATS (the stack of `etlctl dev`), including retries after
//     lost answers and every problem a call can meet as a typed *client.Error;
//   - the client against the contract: every operation of docs/openapi.yaml,
//     every code of internal/codes, the NATS conventions of internal/events;
//   - the client module's go.mod: no requirement beyond nats.go and what
//     nats.go needs, and a go directive below the service's.
package clientcontract
