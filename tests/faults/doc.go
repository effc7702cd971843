// Package faults runs the whole of Relayer (producers through every entry
// point, direct dispatch, ordered workers, recovery and cleanup) against a
// real PostgreSQL under injected faults, then checks the promise of an
// outbox by comparing what committed with what the broker received: no
// committed message lost, no rolled-back message delivered, per-key order
// kept among first deliveries, duplicates counted and bounded, and the
// outbox empty at the end apart from what a scenario parked or
// dead-lettered on purpose. In each scenario whose broker got duplicates,
// a consumer stage then hands everything the broker got, duplicates
// included, to a consume.Consumer (four deliveries
// at once, shuffled, so that copies of a message race): every delivered
// message must end with exactly one effect row, and none may belong to a
// message no producer committed.
//
// Its tests are the suite: a short profile runs in CI, and
//
//	go test ./tests/faults -soak 10m -report docs/reliability-soak.md
//
// runs each scenario for longer and writes the report table.
package faults
