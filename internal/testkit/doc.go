// Package testkit holds what the repository's tests share and no product
// code uses: here, the one wait for a condition ([Eventually], [Within]);
// in its subpackages, a test database per package run and a schema per test
// (testdb), the inbox's per-driver fixture (inboxtest), and the console's
// seeded outbox (consolefixture). Product code that tests use
// too lives beside it: internal/tool/pgcluster (the demo's throwaway PostgreSQL)
// and internal/tool/bench (the benchmark the relayer command runs).
package testkit
