package store

import (
	"testing"

	"github.com/relayer-go/relayer/internal/testkit/testdb"
)

// The store's conformance tests run on both database/sql drivers, pgx and
// lib/pq, and live in the tests module (tests/store), so that lib/pq stays
// out of this module's requirements. Here are the tests of its internals
// and its benchmarks.
func TestMain(m *testing.M) { testdb.Main(m) }
