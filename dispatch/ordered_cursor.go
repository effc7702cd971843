package dispatch

import (
	"slices"
	"sync"
	"time"

	"github.com/google/uuid"

	"github.com/relayer-go/relayer/internal/workerstore"
	"github.com/relayer-go/relayer/store"
)

// laneCursors are where an ordered worker's next read of each lane starts
// (see workerstore.LaneCursor): a lane it keeps holding is read from past the rows
// it already delivered, not from the lane's first index entry, so that the
// dead entries those rows leave behind cost nothing while an old snapshot
// keeps vacuum from removing them. A cursor made under a lease the worker no
// longer holds is harmless: the read checks the lease and starts from the
// lane's start. Batches of different lanes use it at once.
//
// A cursor is exact (see workerstore.LaneCursor) but is not trusted for long all
// the same: each lane is read from its start again once fullReadEvery has
// passed since it last was, so that a row a cursor missed, by a fault no
// test foresaw, waits that long at most.
type laneCursors struct {
	mu sync.Mutex
	at map[int]workerstore.LaneCursor
	// fullAt is when each lane was last read from its start, by a batch or
	// by a probe that found its head not ready.
	fullAt map[int]time.Time
}

// fullReadEvery is how often each lane is read from its start whatever its
// cursor says.
const fullReadEvery = 30 * time.Second

// fullReadSpread returns how much earlier than fullReadEvery after its first
// read from the start lane is read so again: lanes first read together (at
// a worker's start, or in one batch) are then read from their start again
// one by one over half of fullReadEvery, and keep those times apart. Read
// all at once, 32 lanes walking the index entries their deliveries left
// stalled a steady stream at 2,000 msg/s for 28–38 ms every 30 s, where
// one lane's read costs a batch about a millisecond.
func fullReadSpread(lane int) time.Duration {
	const slots = 32
	return fullReadEvery / 2 * time.Duration(lane%slots) / slots
}

// from returns the cursors of lanes, in lanes' order: a lane without a
// cursor, or not read from its start for fullReadEvery, gets one that reads
// from its start.
func (c *laneCursors) from(lanes []int) []workerstore.LaneCursor {
	out := make([]workerstore.LaneCursor, len(lanes))
	c.mu.Lock()
	defer c.mu.Unlock()
	now := time.Now()
	for i, l := range lanes {
		cur, ok := c.at[l]
		if !ok || now.Sub(c.fullAt[l]) >= fullReadEvery {
			cur = workerstore.NewLaneCursor(l)
		}
		out[i] = cur
	}
	return out
}

// readFromStart records that the lanes of from whose cursors read from the
// lane's start were read so at or after at; a lane's first such read is
// recorded earlier by its fullReadSpread, so that lanes read together do
// not come due together again.
func (c *laneCursors) readFromStart(from []workerstore.LaneCursor, at time.Time, except []int) {
	c.mu.Lock()
	defer c.mu.Unlock()
	for _, cur := range from {
		if !cur.FromStart() || slices.Contains(except, cur.Lane) {
			continue
		}
		if c.fullAt == nil {
			c.fullAt = map[int]time.Time{}
		}
		if _, ok := c.fullAt[cur.Lane]; !ok {
			c.fullAt[cur.Lane] = at.Add(-fullReadSpread(cur.Lane))
			continue
		}
		c.fullAt[cur.Lane] = at
	}
}

// forget drops the cursors of lanes: their next read starts from the lane's
// start. A batch that ended in an error, whose outcome is unknown, forgets
// its lanes.
func (c *laneCursors) forget(lanes []int) {
	c.mu.Lock()
	defer c.mu.Unlock()
	for _, l := range lanes {
		delete(c.at, l)
	}
}

// advance moves the cursors of a committed batch's lanes past what it
// settled: from holds the cursors the batch read from, reads what the read
// learned, heads the rows it read (each lane's contiguous, in id order),
// and parts what became of the rows it admitted.
func (c *laneCursors) advance(from []workerstore.LaneCursor, reads []workerstore.LaneRead, heads []store.Row, parts []laneBatch) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.at == nil {
		c.at = map[int]workerstore.LaneCursor{}
	}
	byLane := make(map[int]*laneBatch, len(parts))
	for i := range parts {
		byLane[parts[i].lane] = &parts[i]
	}
	next := 0 // index into from, both in lane order
	rest := heads
	for _, r := range reads {
		for next < len(from) && from[next].Lane != r.Lane {
			next++
		}
		if next == len(from) {
			return // not one of the batch's lanes: cannot happen
		}
		rows := rest[:r.Rows]
		rest = rest[r.Rows:]
		gone, retryAt, held := settled(rows, byLane[r.Lane])
		c.at[r.Lane] = from[next].Advance(r, rows, gone, retryAt, held...)
	}
}

// settled returns how many of a lane's head rows, from the first, left
// reads for good in a batch that committed with p (nil: none admitted), the
// earliest retry time it recorded for the lane, and the keys it held. A row
// is gone when it was sent (deleted), moved to the dead letters, parked, or
// recorded as failed with a retry time, and when its key is held from then
// on by such a failure of an earlier row; a row that waits untouched (its
// destination down or set aside, cut for want of time, not admitted) is not.
func settled(rows []store.Row, p *laneBatch) (gone int, retryAt time.Time, keys []string) {
	if p == nil {
		return 0, time.Time{}, nil
	}
	var held map[string]bool // made only when a batch recorded failures
	hold := func(id uuid.UUID) {
		if held == nil {
			held = map[string]bool{}
		}
		k := keyOf(p, id)
		if !held[k] {
			keys = append(keys, k)
		}
		held[k] = true
	}
	for _, f := range p.failures {
		switch {
		case f.row != nil: // buried: its key is not held
		case f.park:
			hold(f.ID)
		case !f.RetryAt.IsZero():
			hold(f.ID)
			if retryAt.IsZero() || f.RetryAt.Before(retryAt) {
				retryAt = f.RetryAt
			}
		}
	}
	for gone < len(rows) && gone < len(p.rows) {
		r := &p.rows[gone]
		switch p.outcomes[gone] {
		case rowSent:
		case rowFailed:
			if !held[r.Key] && !buried(p, r) {
				return gone, retryAt, keys // failed, but eligible again at once
			}
		default:
			if !held[r.Key] {
				return gone, retryAt, keys
			}
		}
		gone++
	}
	return gone, retryAt, keys
}

// keyOf returns the key of the row of p with id.
func keyOf(p *laneBatch, id uuid.UUID) string {
	for i := range p.rows {
		if p.rows[i].ID == id {
			return p.rows[i].Key
		}
	}
	return ""
}

// buried reports whether r's failure moved it to the dead letters.
func buried(p *laneBatch, r *store.Row) bool {
	for _, f := range p.failures {
		if f.ID == r.ID {
			return f.row != nil
		}
	}
	return false
}
