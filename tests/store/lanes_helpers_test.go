package store_test

import (
	"context"
	"time"

	"github.com/google/uuid"

	"github.com/relayer-go/relayer/internal/workerstore"
	"github.com/relayer-go/relayer/store"
)

// acquireLanes takes or renews the leases of lanes for one owner, as an
// ordered worker does for its own lanes (AcquireLaneLeasesFor with owner
// for every lane).
func acquireLanes(ctx context.Context, st *workerstore.Store, lanes []int, owner string, token uuid.UUID, d time.Duration) ([]int, error) {
	owners := make([]string, len(lanes))
	for i := range owners {
		owners[i] = owner
	}
	return st.AcquireLaneLeasesFor(ctx, lanes, owners, token, d)
}

// readHeads appends to dst[:0] the first limit rows of each of lanes from the lane's
// start, as a worker reads lanes it has just taken over (ReadLanes from new
// cursors).
func readHeads(ctx context.Context, st *workerstore.Store, dst []store.Row, lanes []int, limit int) ([]store.Row, error) {
	from := make([]workerstore.LaneCursor, len(lanes))
	for i, l := range lanes {
		from[i] = workerstore.NewLaneCursor(l)
	}
	rows, _, err := st.ReadLanes(ctx, dst, from, limit)
	return rows, err
}
