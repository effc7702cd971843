package dispatch

// The sends of an ordered batch: each lane's admitted rows in id order, on
// a goroutine of the lane's own, a failing key holding only itself.

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"time"

	"github.com/relayer-go/relayer"
	"github.com/relayer-go/relayer/store"
)

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
// not end by its hand-off time (see laneRuns) leaves its lane to a
// keeper, and the batch commits the others without waiting for it. A lane
// found slow is marked so (laneBatch.slow) and runs alone afterwards. An
// error means the batch must roll back.
func (g *laneGroup) sendLanes(ctx, stop context.Context, parts []laneBatch, admitUntil time.Time) error {
	for i := range parts {
		parts[i].outcomes = make([]rowOutcome, len(parts[i].rows))
	}
	var timing *stragglers
	if len(parts) > 1 {
		timing = newStragglers(g.opts.LeaseDuration / 2 / slowSendDivisor)
		defer timing.close()
	}
	fs := newLaneRuns(len(parts))
	errs := make([]error, len(parts))
	for i := range parts {
		p := &parts[i]
		if i > 0 && (time.Now().After(admitUntil) || halted(stop)) {
			p.cut = true
			continue // the later lanes' rows stay untouched
		}
		fs.start(i, func(f *laneRun) error {
			return g.sendLane(ctx, stop, timing, p, f, admitUntil)
		}, func(err error) {
			errs[i] = err
			if timing != nil {
				timing.finish()
			}
		})
	}
	deadline, _ := ctx.Deadline()
	fs.wait(ctx, func() time.Duration { return time.Until(deadline) / slowSendDivisor }, func(i int, f *laneRun) {
		p := &parts[i]
		member := g.member(p.lane)
		p.handed = &straggler{lane: p.lane, e: f.e, row: f.row, msg: p.rows[f.row], done: f.handed, started: f.started, timer: f.timer, member: member}
		p.slow = true
		member.stats.sent.Add(uint64(p.sent))
		if timing != nil {
			timing.finish()
		}
	})
	return errors.Join(errs...)
}

// sendLane sends a lane's admitted rows one by one, in id order, each
// through f (see laneRuns). A row that
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
func (g *laneGroup) sendLane(ctx, stop context.Context, timing *stragglers, p *laneBatch, f *laneRun, admitUntil time.Time) (err error) {
	ls := laneSend{g: g, w: g.member(p.lane), p: p, run: f}
	if timing != nil {
		ls.timer = timing.lane(ctx)
		defer ls.timer.close()
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
	g *laneGroup
	w *orderedWorker // the member whose share the lane is in, for counts and logs
	// timer times the lane's sends against the batch's other lanes';
	// nil when the lane is the batch's only one.
	timer *laneTimer
	p     *laneBatch
	// run is what the lane's sends share with the batch, which times
	// them for their slow and hand-off times.
	run *laneRun
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
	g, w, p := ls.g, ls.w, ls.p
	r := &p.rows[i]
	m := &r.Message
	if ls.waiting[m.Key] {
		return nil
	}
	if r.Corrupt != nil {
		w.stats.corrupt.Add(1)
		g.recordFailure(p, i, laneFailure{Failure: store.Failure{ID: r.ID, Error: r.Corrupt.Error()}, park: true, corrupt: true})
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
	if m.DeliverAt.After(g.clock.now()) {
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
	if ls.down[e] || (!isProbe && g.aside.skipped(e)) {
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
		// with its key, until the destination is back. Its pause is logged
		// once for every lane (see setAside.settle).
		g.opts.Logger.Debug("dispatch: ordered destination unavailable; the key waits at this row, attempts untouched", attrs()...)
		g.aside.hold(e, p.lane)
		if ls.down == nil {
			ls.down = map[endpoint]bool{}
		}
		ls.down[e] = true
		ls.hold(m.Key)
	case err != nil:
		v := g.retries.judge(m, r.Attempts, err, g.clock.now())
		g.recordFailure(p, i, laneFailure{Failure: store.Failure{ID: r.ID, Error: err.Error(), RetryAt: v.retryAt}, park: v.reason != ""})
		ls.hold(m.Key)
	default:
		p.outcomes[i] = rowSent
		p.sent++
	}
	return nil
}

// send resolves r's transport and sends r, row i of the lane, through the
// lane's run, timed as a possible straggler when the lane shares its
// batch, and records the outcome for the destination: a send that runs for
// a sixth of the batch's deadline sets its destination aside while it
// runs. A send still running at its hand-off time (see handOffAfter) is
// handed off: it returns errHandedOff, and the batch has set ls.p.handed.
func (ls *laneSend) send(ctx context.Context, i int, e endpoint, r *store.Row) error {
	m := &r.Message
	tr, err := ls.g.resolve(ctx, m)
	if err != nil {
		if errors.Is(err, relayer.ErrUnavailable) {
			// The transport cannot say what the destination is (no stream
			// captures the subject): paused as if a send had found it so.
			ls.g.aside.record(e, unavailable, err)
		}
		return err
	}
	sctx, done := ctx, func() {}
	if ls.timer != nil {
		sctx, done = ls.timer.start(), ls.timer.done
	}
	deadline, _ := ctx.Deadline()
	timer := ls.g.aside.follow(e)
	started := time.Now()
	err = ls.run.send(ctx, sctx, tr, m, i, e, timer, started, started.Add(time.Until(deadline)/slowSendDivisor), started.Add(ls.g.handOffAfter()))
	done()
	if err != errHandedOff { // a handed-off send's keeper ends its timer
		timer.end(outcomeOf(err, err == errHalted), err)
	}
	return err
}

// recordFailure notes that row i of p failed with f. A row over the
// outbox's limits cannot be parked nor wait for a retry (its key or
// endpoint would not fit the index that records it): it leaves for the
// dead letters instead, and its key's later rows go on.
func (g *laneGroup) recordFailure(p *laneBatch, i int, f laneFailure) {
	p.outcomes[i] = rowFailed
	if err := store.OverLimit(&p.rows[i].Message); err != nil {
		f.row, f.reason = &p.rows[i], store.ReasonOverLimit
		f.Error = fmt.Sprintf("%s (and %v: moved to the dead letters, since its failure cannot be recorded)", f.Error, err)
	}
	p.failures = append(p.failures, f)
}

// errHandedOff reports a send still running at its hand-off time: its lane
// is handed to a keeper (see keeper) and the batch goes on without it.
var errHandedOff = errors.New("ordered send handed off to a keeper of its lane")

// handOffAfter is how long an ordered send may run before its lane is
// handed off: a sixth of the batch's deadline, when a send counts as slow
// and a straggler is ended (see sendLanes), and slowSend more for a
// transport that honours that end to return.
func (g *laneGroup) handOffAfter() time.Duration {
	return g.opts.LeaseDuration/2/slowSendDivisor + slowSend
}

// resolve finds the transport of an ordered row and checks that its endpoint
// keeps per-key order. Its errors are recorded on the row.
func (g *laneGroup) resolve(ctx context.Context, m *relayer.Message) (relayer.Transport, error) {
	tr, ok := g.transports[m.Transport]
	if !ok {
		return nil, fmt.Errorf("transport %q is not registered with this worker", m.Transport)
	}
	if _, err := g.caps.getChecked(ctx, endpoint{m.Transport, m.Destination}, tr, requireOrdering); err != nil {
		return nil, err
	}
	return tr, nil
}
