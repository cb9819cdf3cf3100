// Package pg holds the PostgreSQL plumbing shared by every mightyETL binary:
// pool construction, the transaction helper, schema migration and the
// classification of database errors into transient and permanent.
//
// PostgreSQL is the only authority over a job's state. Nothing in this
// package caches or second-guesses what the database decided.
package pg
