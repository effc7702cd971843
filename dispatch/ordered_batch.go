package dispatch

// One ordered batch, as named steps: lease the lanes, read their heads and
// admit what may go, send it lane by lane, and settle the outcome.

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"time"

	"github.com/google/uuid"

	"github.com/relayer-go/relayer"
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
	handed *handedSend
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
func (o *orderedWorker) batch(ctx context.Context, conn *workerConn, buf []store.Row, lanes []int) (out []store.Row, res batchResult, err error) {
	defer func() {
		if len(res.handed) > 0 {
			// A send handed off still reads its row: the slot's next
			// batch reads into a buffer of its own.
			out = nil
		}
	}()
	start := time.Now()
	stop := ctx
	ctx, cancel := detach(stop, start.Add(o.opts.LeaseDuration/2))
	defer cancel()
	st, err := conn.store(ctx)
	if err != nil {
		return buf, res, err
	}
	end := func(stmt string) error { return conn.endBatch(ctx, stmt) }
	if err := conn.openBatch(ctx); err != nil {
		return buf, res, err
	}
	g := o.group
	held, renewed, from, buf, reads, err := o.leaseAndRead(ctx, st, conn, buf, lanes)
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
	now := o.clock.now()
	defer func() {
		if err != nil {
			g.cursors.forget(held)
		}
	}()
	parts := o.admitHeads(buf, now)
	defer o.releaseProbes(parts)
	if len(parts) == 0 {
		return buf, res, end("ROLLBACK")
	}
	if err := o.sendLanes(ctx, stop, parts, start.Add(o.opts.LeaseDuration/4)); err != nil {
		return buf, res, err
	}
	done := o.result(parts, held)
	res.slow, res.handed = done.slow, done.handed // reported whatever the end
	if len(done.handed) > 0 {
		// Renewed for a whole lease, so that no other owner can take the
		// lanes between this commit and their keepers' locks.
		lanes := make([]int, len(done.handed))
		for i, h := range done.handed {
			lanes[i] = h.lane
		}
		if _, err := st.AcquireLaneLeasesFor(ctx, lanes, g.owners(lanes), g.token, o.opts.LeaseDuration); err != nil {
			return buf, res, err
		}
	}
	if !settles(parts) && len(done.handed) == 0 {
		// Nothing sent and nothing to record (the destinations are set
		// aside): the leases' renewal goes with the rollback.
		return buf, res, end("ROLLBACK")
	}
	if err := o.settle(ctx, st, conn, parts); err != nil {
		return buf, res, err
	}
	if renewed != nil {
		renewed()
	}
	g.cursors.advance(from, reads, buf, parts)
	g.cursors.readFromStart(from, start, nil)
	o.logFailures(parts) // once they are recorded for good
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
func (o *orderedWorker) leaseAndRead(ctx context.Context, st *workerstore.Store, conn *workerConn, buf []store.Row, lanes []int) (held []int, renewed func(), from []workerstore.LaneCursor, rows []store.Row, reads []workerstore.LaneRead, err error) {
	g, d := o.group, o.opts.LeaseDuration
	owners := g.owners(lanes)
	if g.renewals.fresh(lanes, owners, d-d/3) {
		// The database checks the leases too, with room for the clocks.
		// The read's cursors go in lane order, as its rows come.
		from = g.cursors.from(slices.Sorted(slices.Values(lanes)))
		held, rows, reads, err = st.LockAndReadLanes(ctx, lanes, g.token, d/2, buf, from, o.opts.BatchSize)
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
	if rows, reads, err = st.ReadLanes(ctx, buf, from, o.opts.BatchSize); err != nil {
		g.cursors.forget(held)
		return nil, nil, nil, rows, nil, err
	}
	return held, renewed, from, rows, reads, nil
}

// admitHeads splits the held lanes' head rows, read in lane and id order,
// into one laneBatch per lane that has rows to send now: the prefix
// [admit] lets through, cut at a set-aside destination (see untilSetAside).
func (o *orderedWorker) admitHeads(heads []store.Row, now time.Time) []laneBatch {
	var parts []laneBatch
	for rest := heads; len(rest) > 0; {
		n := 1
		for n < len(rest) && rest[n].Lane == rest[0].Lane {
			n++
		}
		rows, probe := o.untilSetAside(admit(rest[:n], now))
		if len(rows) > 0 {
			parts = append(parts, laneBatch{lane: rest[0].Lane, read: n, rows: rows, probe: probe})
		}
		rest = rest[n:]
	}
	return parts
}

// releaseProbes gives back the probes of paused destinations the batch
// claimed, whatever became of them.
func (o *orderedWorker) releaseProbes(parts []laneBatch) {
	for _, p := range parts {
		if p.probe.gen != 0 {
			o.aside.release(p.probe.e, p.probe.gen)
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
func (o *orderedWorker) result(parts []laneBatch, held []int) batchResult {
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
		if (p.sent > 0 || len(p.failures) > 0) && (p.read >= o.opts.BatchSize || p.cut) {
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

// untilSetAside cuts rows before the first whose destination is set aside as
// slow or unavailable: the lane waits there, its rows untouched. When that
// destination is due for a probe and the batch claims it, the row is kept as
// the batch's last, to be sent as the probe.
func (o *orderedWorker) untilSetAside(rows []store.Row) ([]store.Row, probeClaim) {
	for i := range rows {
		e := endpoint{rows[i].Transport, rows[i].Destination}
		if o.aside.skipped(e) {
			if gen := o.aside.claimProbe(e); gen != 0 {
				return rows[:i+1], probeClaim{e: e, gen: gen}
			}
			return rows[:i], probeClaim{}
		}
	}
	return rows, probeClaim{}
}

// laneFailure is a failed send (or a row that cannot be sent), as the
// retry policy judged it.
type laneFailure struct {
	store.Failure
	// park: the row leaves delivery and holds its key.
	park bool
	// corrupt: the row's stored headers do not decode.
	corrupt bool
	// row is set for a row whose failure cannot be recorded: one over the
	// outbox's limits (see store.OverLimit), or one without a key to hold.
	// It moves to the dead letters for reason (a store.Reason*).
	row    *store.Row
	reason string
	// deferred: not a failure but a row scheduled for later, made to hold
	// its key until RetryAt, its delivery time (store.Store.DeferLaneRows).
	deferred bool
}

// sendLanes sends the lanes of a batch, each on a goroutine of its own, so
// that a lane whose destination is slow holds up none of the others. Once a
// lane is done, a send of another lane still running after a sixth of the
// batch's deadline is a straggler (see stragglers): it ends, recorded as
// failed, so that the batch commits what the others sent instead of holding
// their rows, and rolling them back, until the deadline. A send that does
// not end by its hand-off time (see laneFlights) leaves its lane to a
// keeper, and the batch commits the others without waiting for it. A lane
// found slow is marked so (laneBatch.slow) and runs alone afterwards. An
// error means the batch must roll back.
func (o *orderedWorker) sendLanes(ctx, stop context.Context, parts []laneBatch, admitUntil time.Time) error {
	for i := range parts {
		parts[i].outcomes = make([]rowOutcome, len(parts[i].rows))
	}
	var watch *stragglers
	if len(parts) > 1 {
		watch = newStragglers(o.opts.LeaseDuration / 2 / slowSendDivisor)
		defer watch.close()
	}
	fs := newLaneFlights(len(parts))
	errs := make([]error, len(parts))
	for i := range parts {
		p := &parts[i]
		if i > 0 && (time.Now().After(admitUntil) || halted(stop)) {
			p.cut = true
			continue // the later lanes' rows stay untouched
		}
		fs.start(i, func(f *laneFlight) error {
			return o.sendLane(ctx, stop, watch, p, f, admitUntil)
		}, func(err error) {
			errs[i] = err
			if watch != nil {
				watch.finish()
			}
		})
	}
	deadline, _ := ctx.Deadline()
	fs.wait(ctx, func() time.Duration { return time.Until(deadline) / slowSendDivisor }, func(i int, f *laneFlight) {
		p := &parts[i]
		member := o.group.member(p.lane)
		p.handed = &handedSend{lane: p.lane, e: f.e, row: f.row, msg: p.rows[f.row], done: f.handed, started: f.started, watch: f.watch, member: member}
		p.slow = true
		member.stats.sent.Add(uint64(p.sent))
		if watch != nil {
			watch.finish()
		}
	})
	return errors.Join(errs...)
}

// sendLane sends a lane's admitted rows one by one, in id order, each
// through f (see laneFlights). A row that
// fails holds its key: the key's later rows in the batch are not sent (they
// wait, released, for the failed row's retry or redrive), and the lane's
// other keys go on in the same batch, so that a failing key costs the others
// nothing. A row whose headers do not decode is parked with its key without
// a send. A destination that is unavailable or set aside holds the rows
// bound for it, and their keys, the same way, attempts untouched. No row is
// admitted after admitUntil has passed (keeping the rest of the deadline for
// recording) or once stop is cancelled; the last row is the probe of a
// paused destination when p.probe is set. A send handed off ends the lane's
// sends: sendLane then returns errHandedOff, having touched nothing of p
// since that send began. Any other error means the batch must roll back.
func (o *orderedWorker) sendLane(ctx, stop context.Context, watch *stragglers, p *laneBatch, f *laneFlight, admitUntil time.Time) (err error) {
	ls := laneSend{o: o, w: o.group.member(p.lane), p: p, flight: f}
	if watch != nil {
		ls.straggler = watch.lane(ctx)
		defer ls.straggler.close()
	}
	began := time.Now()
	defer func() {
		if err == errHandedOff {
			return // the batch records the lane as it stood
		}
		ls.w.stats.sent.Add(uint64(p.sent))
		p.slow = p.failed() > 0 || time.Since(began) > slowSend*time.Duration(p.sent+1)
	}()
	for i := range p.rows {
		if i > 0 && (time.Now().After(admitUntil) || halted(stop)) {
			p.cut = true
			break
		}
		switch err := ls.row(ctx, i); err {
		case nil:
		case errHalted:
			p.cut = true
			return nil
		default:
			return err
		}
	}
	return nil
}

// failed counts the failures the lane's batch recorded, rows deferred to
// their delivery time aside.
func (p *laneBatch) failed() int {
	n := 0
	for _, f := range p.failures {
		if !f.deferred {
			n++
		}
	}
	return n
}

// laneSend is the state of one lane's sends in a batch.
type laneSend struct {
	o *orderedWorker
	w *orderedWorker // the worker whose share the lane is in, for counts and logs
	// straggler times the lane's sends against the batch's other lanes';
	// nil when the lane is the batch's only one.
	straggler *laneStraggler
	p         *laneBatch
	// flight is what the lane's sends share with the batch, which watches
	// them for their slow and hand-off times.
	flight *laneFlight
	// waiting holds the keys whose rows wait from here on; down, the
	// destinations found unavailable in this batch.
	waiting map[string]bool
	down    map[endpoint]bool
}

// hold makes key's later rows in the batch wait.
func (ls *laneSend) hold(key string) {
	if ls.waiting == nil {
		ls.waiting = map[string]bool{}
	}
	ls.waiting[key] = true
}

// row sends row i of the lane, or holds it with its key, and notes its
// outcome. An error means the batch must roll back.
func (ls *laneSend) row(ctx context.Context, i int) error {
	o, w, p := ls.o, ls.w, ls.p
	r := &p.rows[i]
	m := &r.Message
	if ls.waiting[m.Key] {
		return nil
	}
	if r.Corrupt != nil {
		w.stats.corrupt.Add(1)
		o.recordFailure(p, i, laneFailure{Failure: store.Failure{ID: r.ID, Error: r.Corrupt.Error()}, park: true, corrupt: true})
		ls.hold(m.Key)
		return nil
	}
	if m.Key == "" {
		// Only another program writes an ordered row without a key (the
		// outbox has no check constraint since migration 6). It has no key
		// to hold, so it cannot be parked: it leaves for the dead letters,
		// and the lane goes on.
		w.stats.corrupt.Add(1)
		p.outcomes[i] = rowFailed
		p.failures = append(p.failures, laneFailure{Failure: store.Failure{ID: r.ID, Error: "ordered row has no ordering key"},
			corrupt: true, row: r, reason: store.ReasonCorrupt})
		return nil
	}
	if m.DeliverAt.After(o.clock.now()) {
		// Scheduled for later: the key waits for it, the lane's other keys
		// go on. Its key is held in the table until then, as by a waiting
		// retry, so that later reads pass it; a row whose key the held-key
		// index cannot take (over the limits) waits in this batch only.
		if store.OverLimit(m) == nil {
			p.outcomes[i] = rowFailed
			p.failures = append(p.failures, laneFailure{Failure: store.Failure{ID: r.ID, RetryAt: m.DeliverAt}, deferred: true})
		}
		ls.hold(m.Key)
		return nil
	}
	e := endpoint{m.Transport, m.Destination}
	isProbe := p.probe.gen != 0 && i == len(p.rows)-1
	if ls.down[e] || (!isProbe && o.aside.skipped(e)) {
		ls.hold(m.Key) // the destination is down or set aside: the key waits, untouched
		return nil
	}
	err := ls.send(ctx, i, e, r)
	attrs := func() []any {
		return []any{slog.String("worker", w.name), slog.Int("lane", p.lane), slog.String("id", r.ID.String()), slog.String("error", err.Error())}
	}
	switch {
	case err == errHandedOff || err == errHalted:
		// Handed off: the send outlived its time; the row stays untouched
		// in this batch, which went on to commit the other lanes, and a
		// keeper holds this lane until the transport returned (see
		// keeper). Halted: the batch ran out of time before the send.
		return err
	case errors.Is(err, relayer.ErrUnavailable):
		// The destination is down: the row keeps its attempts and waits,
		// with its key, until the destination is back.
		o.opts.Logger.Warn("dispatch: ordered destination unavailable; the key waits at this row, attempts untouched", attrs()...)
		if ls.down == nil {
			ls.down = map[endpoint]bool{}
		}
		ls.down[e] = true
		ls.hold(m.Key)
	case err != nil:
		v := o.retries.judge(m, r.Attempts, err, o.clock.now())
		o.recordFailure(p, i, laneFailure{Failure: store.Failure{ID: r.ID, Error: err.Error(), RetryAt: v.retryAt}, park: v.reason != ""})
		ls.hold(m.Key)
	default:
		p.outcomes[i] = rowSent
		p.sent++
	}
	return nil
}

// send resolves r's transport and sends r, row i of the lane, through the
// lane's flight, watched as a possible straggler when the lane shares its
// batch, and records the outcome for the destination: a send that runs for
// a sixth of the batch's deadline sets its destination aside while it
// runs. A send still running at its hand-off time (see handOffAfter) is
// handed off: it returns errHandedOff, and the batch has set ls.p.handed.
func (ls *laneSend) send(ctx context.Context, i int, e endpoint, r *store.Row) error {
	m := &r.Message
	tr, err := ls.o.resolve(ctx, m)
	if err != nil {
		return err
	}
	sctx, done := ctx, func() {}
	if ls.straggler != nil {
		sctx, done = ls.straggler.start(), ls.straggler.done
	}
	deadline, _ := ctx.Deadline()
	watch := ls.o.aside.follow(e)
	started := time.Now()
	err = ls.flight.send(ctx, sctx, tr, m, i, e, watch, started, started.Add(time.Until(deadline)/slowSendDivisor), started.Add(ls.o.handOffAfter()))
	done()
	if err != errHandedOff { // a handed-off send's keeper ends its watch
		watch.end(outcomeOf(err, err == errHalted), err)
	}
	return err
}

// recordFailure notes that row i of p failed with f. A row over the
// outbox's limits cannot be parked nor wait for a retry (its key or
// endpoint would not fit the index that records it): it leaves for the
// dead letters instead, and its key's later rows go on.
func (o *orderedWorker) recordFailure(p *laneBatch, i int, f laneFailure) {
	p.outcomes[i] = rowFailed
	if err := store.OverLimit(&p.rows[i].Message); err != nil {
		f.row, f.reason = &p.rows[i], store.ReasonOverLimit
		f.Error = fmt.Sprintf("%s (and %v: moved to the dead letters, since its failure cannot be recorded)", f.Error, err)
	}
	p.failures = append(p.failures, f)
}

// settle records a batch's outcome under its lanes' leases, each write
// fenced by the worker's lease token and in one statement for all its
// lanes, and commits it: it deletes the sent rows (all of them, or the
// batch rolls back) and records the failed rows' attempts and errors. The
// rest stay as they are. A batch that only deletes sends its delete with
// its commit (see workerstore.Store.CommitLaneDeletes).
func (o *orderedWorker) settle(ctx context.Context, st *workerstore.Store, conn *workerConn, parts []laneBatch) error {
	out := sortOutcomes(parts)
	if len(out.buried) > 0 {
		// Written to the dead letters, then deleted with the sent rows in
		// the same transaction: a row is in exactly one of the two tables.
		if err := st.Bury(ctx, out.buried, out.reasons); err != nil {
			return err
		}
	}
	ids := out.sent
	for i := range out.buried {
		ids = append(ids, out.buried[i].ID)
	}
	if len(ids) > 0 && len(out.fails)+len(out.parks)+len(out.defers) == 0 {
		return conn.commitDeletes(ctx, ids, o.group.token)
	}
	if len(ids) > 0 {
		n, err := st.DeleteLaneRows(ctx, ids, o.group.token)
		if err != nil {
			return err
		}
		if n != int64(len(ids)) {
			return fmt.Errorf("deleted %d of %d sent or dead-lettered rows; rolling back, they will be sent again", n, len(ids))
		}
	}
	for _, f := range []struct {
		failures []store.Failure
		record   func(context.Context, []store.Failure, uuid.UUID) (int64, error)
	}{{out.fails, st.FailLaneRows}, {out.parks, st.ParkLaneRows}, {out.defers, st.DeferLaneRows}} {
		if len(f.failures) == 0 {
			continue
		}
		n, err := f.record(ctx, f.failures, o.group.token)
		if err != nil {
			return err
		}
		if n != int64(len(f.failures)) {
			return fmt.Errorf("recorded %d of %d failures; rolling back", n, len(f.failures))
		}
	}
	return conn.endBatch(ctx, "COMMIT")
}

// batchOutcomes are a batch's rows sorted by what settles them.
type batchOutcomes struct {
	sent    []uuid.UUID     // deleted
	fails   []store.Failure // wait for their retry
	parks   []store.Failure // parked with their key
	defers  []store.Failure // scheduled: hold their key until their time
	buried  []store.Row     // over the limits: to the dead letters
	reasons []string        // of buried
}

func sortOutcomes(parts []laneBatch) batchOutcomes {
	var out batchOutcomes
	for _, p := range parts {
		for i := range p.rows {
			if p.outcomes[i] == rowSent {
				out.sent = append(out.sent, p.rows[i].ID)
			}
		}
		for _, f := range p.failures {
			switch {
			case f.row != nil:
				row := *f.row
				row.Attempts++
				row.LastError = f.Error
				out.buried, out.reasons = append(out.buried, row), append(out.reasons, f.reason)
			case f.park:
				out.parks = append(out.parks, f.Failure)
			case f.deferred:
				out.defers = append(out.defers, f.Failure)
			default:
				out.fails = append(out.fails, f.Failure)
			}
		}
	}
	return out
}

// logFailures logs and counts the failures a batch recorded, after its
// commit: a count never runs ahead of what the table shows.
func (o *orderedWorker) logFailures(parts []laneBatch) {
	for _, p := range parts {
		w := o.group.member(p.lane) // the worker whose share the lane is in
		for _, f := range p.failures {
			if f.deferred {
				continue // not a failure
			}
			attrs := []any{slog.String("worker", w.name), slog.Int("lane", p.lane), slog.String("id", f.ID.String()), slog.String("error", f.Error)}
			switch {
			case f.row != nil && f.corrupt:
				w.stats.buried.Add(1)
				o.opts.Logger.Error("dispatch: ordered row without an ordering key cannot be sent in order; moved to the dead letters, the lane's other keys go on", attrs...)
				continue
			case f.row != nil:
				w.stats.buried.Add(1)
				o.opts.Logger.Error("dispatch: ordered row over the outbox's limits failed; moved to the dead letters, its key's later rows go on", attrs...)
				continue
			case f.corrupt:
				w.stats.parked.Add(1)
				o.opts.Logger.Error("dispatch: ordered row with corrupt headers cannot be sent; parked with its key, bytes unchanged, until an operator redrives or skips it; the lane's other keys go on", attrs...)
				continue
			case f.park:
				w.stats.parked.Add(1)
				o.opts.Logger.Warn("dispatch: ordered send failed for good or out of attempts; the row is parked and holds its key until redriven", attrs...)
			default:
				if !f.RetryAt.IsZero() {
					attrs = append(attrs, slog.Time("retry_at", f.RetryAt))
				}
				o.opts.Logger.Warn("dispatch: ordered send failed; its key waits for the retry, the lane's other keys go on", attrs...)
			}
			w.stats.failed.Add(1)
		}
	}
}

// errHandedOff reports a send still running at its hand-off time: its lane
// is handed to a keeper (see keeper) and the batch goes on without it.
var errHandedOff = errors.New("ordered send handed off to a keeper of its lane")

// handOffAfter is how long an ordered send may run before its lane is
// handed off: a sixth of the batch's deadline, when a send counts as slow
// and a straggler is ended (see sendLanes), and slowSend more for a
// transport that honours that end to return.
func (o *orderedWorker) handOffAfter() time.Duration {
	return o.opts.LeaseDuration/2/slowSendDivisor + slowSend
}

// resolve finds the transport of an ordered row and checks that its endpoint
// keeps per-key order. Its errors are recorded on the row.
func (o *orderedWorker) resolve(ctx context.Context, m *relayer.Message) (relayer.Transport, error) {
	tr, ok := o.transports[m.Transport]
	if !ok {
		return nil, fmt.Errorf("transport %q is not registered with this worker", m.Transport)
	}
	if _, err := o.caps.getChecked(ctx, endpoint{m.Transport, m.Destination}, tr, requireOrdering); err != nil {
		return nil, err
	}
	return tr, nil
}
