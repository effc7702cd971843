// Package tests holds benchmarks and integration tests that span packages:
// the whole path from a committed transaction to a real broker's
// acknowledgement, the inbox with each data layer's transaction, and the
// install test that gets each published module as a user would, and a
// Runner's dispatch on each database/sql driver, lib/pq included. It is a
// module of its own, so that what it needs (broker clients, ORMs) never
// reaches the published modules' users.
//
// Its subdirectories hold the tests of published packages that need a
// dependency those modules must not require: the store's and the inbox's
// tests, which run on lib/pq as well as pgx (store, inbox); the transports'
// tests against an embedded NATS server, a fake Kafka cluster and RabbitMQ,
// with their goroutine-leak checks (transport/...); and the OpenTelemetry
// wrapper's tests, which read spans and metrics back through the SDK (otel).
// The fault suite (faults), the console's browser test (console) and the
// published comparison (compare) live here too.
package tests
