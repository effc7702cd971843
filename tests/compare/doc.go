// Package compare measures Relayer beside other ways of running an outbox on
// PostgreSQL, with the scenarios of "relayer bench": the hand-written loop
// that is the database's own limit, Relayer's direct, recovery and ordered
// dispatch, and Watermill's SQL Pub/Sub used as an outbox through its
// forwarder, with its defaults and with its two documented knobs turned. It
// lives in the tests module so that no contender's dependency reaches
// Relayer's users.
//
// The command tests/cmd/compare runs the comparison and writes the table and
// the charts of docs/benchmarks.md.
package compare
