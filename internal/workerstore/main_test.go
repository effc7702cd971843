package workerstore

import (
	"testing"

	"github.com/relayer-go/relayer/internal/testkit/testdb"
)

// The conformance tests of the workers' statements run on both database/sql
// drivers, pgx and lib/pq, and live in the tests module (tests/store), so
// that lib/pq stays out of this module's requirements. Here are the tests of
// their internals: plans, cursors, retention.
func TestMain(m *testing.M) { testdb.Main(m) }
