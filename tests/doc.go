// Package tests holds benchmarks and integration tests that span packages:
// the whole path from a committed transaction to a real broker's
// acknowledgement.
package tests
