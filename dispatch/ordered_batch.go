package dispatch

// One ordered batch of a lane group, as named steps: lease the lanes, read
// their heads and admit what may go (this file), send it lane by lane
// (ordered_send.go), and settle the outcome (ordered_settle.go).

import (
	"context"
	"slices"
	"time"

	"github.com/relayer-go/relayer/internal/workerstore"
	"github.com/relayer-go/relayer/store"
)

// laneBatch is one lane's part of a batch: its admitted head rows, the
// probe it claimed, and what became of each row.
type laneBatch struct {
	lane  int
	read  int // head rows read, admitted or not
	rows  []store.Row
	probe probeClaim
	// outcomes[i] is what became of rows[i]; failures holds the failures
	// recorded, in row order.
	outcomes []rowOutcome
	failures []laneFailure
	sent     int
	// slow is set when the lane's sends failed or were slow (see slowSend).
	slow bool
	// cut is set when rows were left unsent for want of time or because the
	// worker is stopping, rather than because their key or destination had
	// to wait: the lane may have more to send at once.
	cut bool
	// handed is set when a send of the lane outlived its time: the batch
	// leaves its row untouched and commits without it, and a keeper holds
	// the lane until the send returns (see keeper).
	handed *straggler
}

// rowOutcome is what a batch did with one admitted row.
type rowOutcome uint8

const (
	// rowUntouched: not sent; the row stays as it was.
	rowUntouched rowOutcome = iota
	// rowSent: the broker accepted it; the batch deletes it.
	rowSent
	// rowFailed: its failure is recorded; its key is held from then on.
	rowFailed
)

// batch runs one batch over lanes in a transaction (see the package
// documentation), in named steps: lease the lanes, read their heads and
// admit what may go, send it, and settle the outcome. The lanes' leases,
// heads and deletes take one statement each whatever the number of lanes.
// It returns the lanes that sent and deleted at least one
// row, so that a head that keeps failing backs off by PollInterval instead
// of spinning. Any error leaves the transaction open: the caller drops the
// connection, which rolls it back.
//
// The transaction is run with BEGIN and COMMIT statements on the pinned
// connection rather than a *sql.Tx, whose context would roll it back the
// moment the batch's deadline passes, releasing the lane rows while a late
// send may still reach the broker. It ends with COMMIT AND CHAIN or
// ROLLBACK AND CHAIN, so that the slot's next batch needs no BEGIN (see
// workerConn.endBatch).
//
// Cancelling ctx stops the batch from sending more rows; the sends under way
// return and what was sent is recorded and committed on a context of the
// batch's own (see detach), so that a stop by cancellation sends nothing
// twice.
func (g *laneGroup) batch(ctx context.Context, conn *workerConn, buf []store.Row, lanes []int) (out []store.Row, res batchResult, err error) {
	defer func() {
		if len(res.handed) > 0 {
			// A send handed off still reads its row: the slot's next
			// batch reads into a buffer of its own.
			out = nil
		}
	}()
	start := time.Now()
	stop := ctx
	ctx, cancel := detach(stop, start.Add(g.opts.LeaseDuration/2))
	defer cancel()
	st, err := conn.store(ctx)
	if err != nil {
		return buf, res, err
	}
	end := func(stmt string) error { return conn.endBatch(ctx, stmt) }
	if err := conn.openBatch(ctx); err != nil {
		return buf, res, err
	}
	held, renewed, from, buf, reads, err := g.leaseAndRead(ctx, st, conn, buf, lanes)
	if err != nil {
		return buf, res, err
	}
	if renewed == nil && len(held) < len(lanes) {
		// A lease renewed a moment ago is gone (an operator released it):
		// the lanes go again at once, renewing.
		g.renewals.forget(lanes)
		res.more = lanes
		return buf, res, end("ROLLBACK")
	}
	if len(held) == 0 {
		return buf, res, end("ROLLBACK")
	}
	now := g.clock.now()
	defer func() {
		if err != nil {
			g.cursors.forget(held)
		}
	}()
	parts := g.admitHeads(buf, now)
	defer g.releaseProbes(parts)
	if len(parts) == 0 {
		return buf, res, end("ROLLBACK")
	}
	if err := g.sendLanes(ctx, stop, parts, start.Add(g.opts.LeaseDuration/4)); err != nil {
		return buf, res, err
	}
	done := g.result(parts, held)
	res.slow, res.handed = done.slow, done.handed // reported whatever the end
	if len(done.handed) > 0 {
		// Renewed for a whole lease, so that no other owner can take the
		// lanes between this commit and their keepers' locks.
		lanes := make([]int, len(done.handed))
		for i, h := range done.handed {
			lanes[i] = h.lane
		}
		if _, err := st.AcquireLaneLeasesFor(ctx, lanes, g.owners(lanes), g.token, g.opts.LeaseDuration); err != nil {
			return buf, res, err
		}
	}
	if !settles(parts) && len(done.handed) == 0 {
		// Nothing sent and nothing to record (the destinations are set
		// aside): the leases' renewal goes with the rollback.
		return buf, res, end("ROLLBACK")
	}
	if err := g.settle(ctx, st, conn, parts); err != nil {
		return buf, res, err
	}
	if renewed != nil {
		renewed()
	}
	g.cursors.advance(from, reads, buf, parts)
	g.cursors.readFromStart(from, start, nil)
	g.logFailures(parts) // once they are recorded for good
	for _, p := range parts {
		g.member(p.lane).stats.deleted.Add(uint64(p.sent))
	}
	return buf, done, nil
}

// leaseAndRead takes the batch's hold on lanes in the open transaction and
// reads the heads of the lanes it holds, returning the lanes it holds in
// ascending order, the cursors it read from and what the read returned. When
// every one of lanes was renewed under its owner within the last third of
// the lease, it locks their lease rows without writing them, and renewed is
// nil (the lock and the read go in one round trip: see
// workerstore.Store.LockAndReadLanes); otherwise it takes or renews each lease,
// and renewed records the renewal, to be called once the transaction has
// committed.
func (g *laneGroup) leaseAndRead(ctx context.Context, st *workerstore.Store, conn *workerConn, buf []store.Row, lanes []int) (held []int, renewed func(), from []workerstore.LaneCursor, rows []store.Row, reads []workerstore.LaneRead, err error) {
	d := g.opts.LeaseDuration
	owners := g.owners(lanes)
	if g.renewals.fresh(lanes, owners, d-d/3) {
		// The database checks the leases too, with room for the clocks.
		// The read's cursors go in lane order, as its rows come.
		from = g.cursors.from(slices.Sorted(slices.Values(lanes)))
		held, rows, reads, err = st.LockAndReadLanes(ctx, lanes, g.token, d/2, buf, from, g.opts.BatchSize)
		if err != nil {
			g.cursors.forget(lanes)
		}
		return held, nil, from, rows, reads, err
	}
	txFrom := conn.txFrom // the transaction's now(), which the renewal counts from, is no earlier
	if held, err = st.AcquireLaneLeasesFor(ctx, lanes, owners, g.token, d); err != nil {
		return nil, nil, nil, buf, nil, err
	}
	renewed = func() { g.renewals.renewed(held, lanes, owners, txFrom.Add(d)) }
	if len(held) == 0 {
		return nil, renewed, nil, buf, nil, nil
	}
	from = g.cursors.from(held)
	if rows, reads, err = st.ReadLanes(ctx, buf, from, g.opts.BatchSize); err != nil {
		g.cursors.forget(held)
		return nil, nil, nil, rows, nil, err
	}
	return held, renewed, from, rows, reads, nil
}

// admitHeads splits the held lanes' head rows, read in lane and id order,
// into one laneBatch per lane that has rows to send now: the prefix
// [admit] lets through, cut at a set-aside destination (see untilSetAside).
func (g *laneGroup) admitHeads(heads []store.Row, now time.Time) []laneBatch {
	var parts []laneBatch
	for rest := heads; len(rest) > 0; {
		n := 1
		for n < len(rest) && rest[n].Lane == rest[0].Lane {
			n++
		}
		rows, probe := g.untilSetAside(rest[0].Lane, admit(rest[:n], now))
		if len(rows) > 0 {
			parts = append(parts, laneBatch{lane: rest[0].Lane, read: n, rows: rows, probe: probe})
		}
		rest = rest[n:]
	}
	return parts
}

// releaseProbes gives back the probes of paused destinations the batch
// claimed, whatever became of them.
func (g *laneGroup) releaseProbes(parts []laneBatch) {
	for _, p := range parts {
		if p.probe.gen != 0 {
			g.aside.release(p.probe.e, p.probe.gen)
		}
	}
}

// settles reports whether a batch has anything to record: a row sent or a
// failure.
func settles(parts []laneBatch) bool {
	for _, p := range parts {
		if p.sent > 0 || len(p.failures) > 0 {
			return true
		}
	}
	return false
}

// sentIn counts the rows a batch sent.
func sentIn(parts []laneBatch) int {
	n := 0
	for _, p := range parts {
		n += p.sent
	}
	return n
}

// result is what a batch that commits did with the held lanes.
func (g *laneGroup) result(parts []laneBatch, held []int) batchResult {
	res := batchResult{held: held, progressed: sentIn(parts) > 0}
	for _, p := range parts {
		if p.slow {
			res.slow = append(res.slow, p.lane)
		}
		if p.handed != nil {
			res.handed = append(res.handed, p.handed)
			continue // its keeper says when it may go again
		}
		// A lane whose whole head was sent, or whose keys that could not be
		// sent are now held, is empty up to the rows committed since, which
		// wake it: it is batched again at once only when it may hold more
		// (its read was full, or rows were left for want of time).
		if (p.sent > 0 || len(p.failures) > 0) && (p.read >= g.opts.BatchSize || p.cut) {
			res.more = append(res.more, p.lane)
		}
	}
	return res
}

// admit returns the prefix of a lane's head rows that a batch may take at
// now: up to the first row that another program has claimed (through the
// store's claim contract) and whose claim runs, since nothing overtakes a
// claimed head before its claim ends. A row scheduled for later is admitted:
// the batch makes it hold its key until its time (see laneSend.row), and
// the lane's other keys go on.
func admit(rows []store.Row, now time.Time) []store.Row {
	for i := range rows {
		if rows[i].ClaimedUntil.After(now) {
			return rows[:i]
		}
	}
	return rows
}

// probeClaim is a probe of a paused destination that a batch claimed.
type probeClaim struct {
	e   endpoint
	gen uint64 // 0: none
}

// untilSetAside cuts lane's rows before the first whose destination is set
// aside as slow or unavailable: the lane waits there, its rows untouched. When that
// destination is due for a probe and the batch claims it, the row is kept as
// the batch's last, to be sent as the probe.
func (g *laneGroup) untilSetAside(lane int, rows []store.Row) ([]store.Row, probeClaim) {
	for i := range rows {
		e := endpoint{rows[i].Transport, rows[i].Destination}
		if g.aside.skipped(e) {
			if gen := g.aside.claimProbe(e); gen != 0 {
				return rows[:i+1], probeClaim{e: e, gen: gen}
			}
			g.aside.hold(e, lane)
			return rows[:i], probeClaim{}
		}
	}
	return rows, probeClaim{}
}
