package tests

import (
	"database/sql"
	"testing"

	"github.com/relayer-go/relayer/enlist"
	"github.com/relayer-go/relayer/enlist/enlisttest"
)

// The writer's conformance suite on lib/pq: the core module runs it on pgx
// (enlist's TestConformance), and lib/pq is imported only here, in the tests
// module, so that users of the core do not inherit it. The adapters wrap the
// same writer statements, so their own suites run on pgx alone.
func TestWriterConformanceOnLibPQ(t *testing.T) {
	t.Parallel()
	enlisttest.Run(t, enlisttest.Adapter{
		Driver: "postgres",
		Open: func(t *testing.T, db *sql.DB, w *enlist.Writer) enlisttest.EntryPoint {
			return enlisttest.SQL(db, w)
		},
	})
}
