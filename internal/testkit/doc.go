// Package testkit holds, in its subpackages, what the repository's tests
// share and no product code uses: a test database per package run and a
// schema per test (testdb), the inbox's per-driver fixture (inboxtest), and
// the console's seeded outbox (consolefixture). Product code that tests use
// too lives beside it: internal/pgcluster (the demo's throwaway PostgreSQL)
// and internal/bench (the benchmark the relayer command runs).
package testkit
