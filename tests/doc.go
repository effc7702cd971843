// Package tests holds benchmarks and integration tests that span packages:
// the whole path from a committed transaction to a real broker's
// acknowledgement, and the inbox with each data layer's transaction. It is a
// module of its own, so that what it needs (broker clients, ORMs) never
// reaches the core module's users.
package tests
