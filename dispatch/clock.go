package dispatch

import (
	"context"
	"sync/atomic"
	"time"

	"github.com/relayer-go/relayer/store"
)

// clockSyncEvery is how often a worker measures its clock against the
// database's.
const clockSyncEvery = 30 * time.Second

// dbClock is the database server's clock as seen from this process: the local
// clock plus the offset last measured. Every instant that decides whether a
// row may be sent (due, claimed, old enough for recovery) comes from it, so
// that writers and workers whose clocks disagree still agree on eligibility:
// the database is the one clock they share. It is safe for concurrent use.
type dbClock struct {
	offset atomic.Int64 // nanoseconds to add to the local clock
	synced atomic.Int64 // Unix nanoseconds of the last measurement, or 0
}

// now returns the current time on the database's clock.
func (c *dbClock) now() time.Time {
	return time.Now().Add(time.Duration(c.offset.Load()))
}

// sync measures the offset: the server's time against the midpoint of the
// round trip that read it, or zero when it is within half that round trip.
func (c *dbClock) sync(ctx context.Context, st *store.Store) error {
	before := time.Now()
	server, err := st.ServerTime(ctx)
	if err != nil {
		return err
	}
	after := time.Now()
	half := after.Sub(before) / 2
	offset := server.Sub(before.Add(half))
	if offset.Abs() <= half {
		// The round trip cannot tell an offset this small from none: take
		// the clocks to agree rather than add noise to every instant.
		offset = 0
	}
	c.offset.Store(int64(offset))
	c.synced.Store(after.UnixNano())
	return nil
}

// stale reports whether the last measurement is older than clockSyncEvery.
func (c *dbClock) stale() bool {
	return time.Since(time.Unix(0, c.synced.Load())) >= clockSyncEvery
}
