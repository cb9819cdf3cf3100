// Package metrics defines every Prometheus collector of mightyETL and the
// finite set of label values each may carry. Collectors are registered on a
// registry the caller passes in; there are no globals, so tests and the
// all-in-one dev process can hold several independent sets.
//
// No label ever carries a job id, lease id, principal, key, hash, payload, SQL
// or error text.
package metrics
