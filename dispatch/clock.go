package dispatch

import (
	"context"
	"sync/atomic"
	"time"

	"github.com/relayer-go/relayer/internal/workerstore"
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

// sync measures the offset (see offsetOf) with one round trip.
func (c *dbClock) sync(ctx context.Context, st *workerstore.Store) error {
	before := time.Now()
	server, err := st.ServerTime(ctx)
	if err != nil {
		return err
	}
	after := time.Now()
	c.offset.Store(int64(offsetOf(before, server, after)))
	c.synced.Store(after.UnixNano())
	return nil
}

// clockTolerance is the offset below which the two clocks are taken to
// agree, beyond the round trip's own uncertainty: a few microseconds of skew
// between the cores or processes that read one machine's clock, or a
// fraction of a millisecond between hosts, decide nothing (claims and
// schedules are seconds long) and would only add noise to every instant.
const clockTolerance = time.Millisecond

// offsetOf returns the server's time against the midpoint of the round trip
// [before, after] that read it, or zero when that is within half the round
// trip plus clockTolerance.
func offsetOf(before, server, after time.Time) time.Duration {
	half := after.Sub(before) / 2
	offset := server.Sub(before.Add(half))
	if offset.Abs() <= half+clockTolerance {
		return 0
	}
	return offset
}

// stale reports whether the last measurement is older than clockSyncEvery.
func (c *dbClock) stale() bool {
	return time.Since(time.Unix(0, c.synced.Load())) >= clockSyncEvery
}
