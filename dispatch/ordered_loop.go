package dispatch

// The dispatch loop of a lane group: which lanes it batches, on which of its
// connections, and when it probes, waits or releases lanes.

import (
	"context"
	"errors"
	"log/slog"
	"slices"
	"time"

	"github.com/relayer-go/relayer/internal/workerstore"
	"github.com/relayer-go/relayer/store"
)

// laneSlot is one of the worker's Concurrency batch runners: the connection
// its batches use and its row buffer.
type laneSlot struct {
	conn *workerConn
	buf  []store.Row
}

// laneDone is what a batch goroutine reports.
type laneDone struct {
	slot  *laneSlot
	lanes []int // the batch's lanes
	solo  bool  // the batch ran a lane alone
	// kept: a keeper's report (see keeper), not a batch's: it held no slot.
	kept bool
	batchResult
	err error
}

// batchResult is what a committed batch did.
type batchResult struct {
	// held holds the lanes whose leases the batch committed.
	held []int
	// progressed is set when the batch sent and deleted a row.
	progressed bool
	// more holds the lanes that sent rows and may hold more: they are
	// batched again at once.
	more []int
	// slow holds the lanes whose sends failed or were slow.
	slow []int
	// handed holds the sends the batch handed off: their lanes stay
	// running, held by keepers, until those report.
	handed []*straggler
}

// lanesPerBatch bounds the lanes one batch takes: their leases, heads and
// deletes share one statement each, so a batch of many ready
// lanes costs the database about what one lane's does.
const lanesPerBatch = 16

// slowSend is the time per row beyond which a lane's sends count as slow:
// such a lane, or one whose send failed, runs in batches of its own until
// it sends cleanly again, so that it holds up no other lane's batch.
const slowSend = 100 * time.Millisecond

func (g *laneGroup) newSlot() *laneSlot {
	// A batch may keep its transaction open until a late send returns, which
	// it does with keep-alive statements; the timeout ends the transaction of
	// a worker that stopped answering. Generic plans with sequential scans
	// off, as for takes: a batch's statements cost more to plan than to run,
	// and every plan of theirs follows an index however stale the queue
	// table's statistics (store's TestOrderedSessionsPlanWithIndexes).
	c := newWorkerConn(g.db, g.store)
	c.idleTx = g.opts.LeaseDuration/2 + idleTxMargin
	c.generic = genericTakePlans
	return &laneSlot{conn: c}
}

// run is the group's dispatch loop: it batches the serving members' lanes
// until every member stopped or ctx ends.
func (g *laneGroup) run(ctx context.Context) {
	s := &groupLoop{
		g:       g,
		results: make(chan laneDone, g.concurrency()),
		running: map[int]bool{},
		again:   map[int]bool{},
		held:    map[int]bool{},
		solo:    map[int]bool{},
		began:   map[*laneSlot]time.Time{},
	}
	defer s.close(ctx)
	for ctx.Err() == nil && !g.quitting() {
		s.addWoken()
		if len(s.pending) == 0 && !s.refill(ctx) {
			wait := g.opts.PollInterval
			if !s.nextProbe.IsZero() {
				wait = time.Until(s.nextProbe)
			}
			if at := s.unchainIdle(ctx); !at.IsZero() {
				wait = min(wait, time.Until(at))
			}
			g.idle(ctx, wait, s.results, s.finished)
			s.fruitless = false
			continue
		}
		// Lanes that commits woke while a probe ran go in the same batches
		// as the lanes it found, instead of waiting for them to end.
		s.addWoken()
		s.startPending(ctx)
		if !s.batching() {
			continue
		}
		select {
		case <-ctx.Done():
		case <-g.quit:
		case <-g.wake:
			s.fruitless = false
		case r := <-s.results:
			s.finished(r)
		case <-s.chainTimer(ctx):
		case <-s.startTimer():
		}
	}
}

// chainTimer ends the chained transactions of free slots unused for
// chainIdle, and returns a channel that fires when the next of the others
// will have been, or nil when none is left.
func (s *groupLoop) chainTimer(ctx context.Context) <-chan time.Time {
	at := s.unchainIdle(ctx)
	if at.IsZero() {
		return nil
	}
	if s.timer == nil {
		s.timer = time.NewTimer(time.Until(at))
	} else {
		s.timer.Reset(time.Until(at))
	}
	return s.timer.C
}

// unchainIdle ends the chained transactions (see workerConn.endBatch) of free
// slots unused for chainIdle or longer, so that no session stays idle in a
// transaction once batches stop, and returns when the next of the others
// will have been unused that long: zero when none is left chained.
func (s *groupLoop) unchainIdle(ctx context.Context) time.Time {
	if ctx.Err() != nil {
		return time.Time{} // stopping: close ends the chains as it returns the connections
	}
	var next time.Time
	now := time.Now()
	for _, sl := range s.free {
		if !sl.conn.chained() {
			continue
		}
		at := sl.conn.chainedAt.Add(chainIdle)
		if !now.Before(at) {
			if err := sl.conn.unchain(ctx); err != nil {
				s.g.logError("dispatch: end an ordered slot's chained transaction", err)
			}
			continue
		}
		if next.IsZero() || at.Before(next) {
			next = at
		}
	}
	return next
}

// groupLoop is the state of an ordered worker's dispatch loop: its
// Concurrency slots and the lanes it knows to be ready. Only the worker's run
// goroutine uses it; batches report on results.
type groupLoop struct {
	g       *laneGroup
	slots   []*laneSlot // every slot made so far
	free    []*laneSlot
	results chan laneDone
	running map[int]bool // lanes with a batch in flight
	// again holds the lanes of running that commits woke meanwhile: they
	// go again when their batch ends.
	again map[int]bool
	held  map[int]bool // lanes whose lease this instance took
	// solo holds the lanes whose last sends failed or were slow: each runs
	// in a batch of its own until it sends cleanly.
	solo map[int]bool
	// pending holds the ready lanes not started yet, in the order found: a
	// probe fills it, and a lane whose batch made progress goes back to its
	// end, since it may hold more. Lanes are probed again once it is empty,
	// so that one probe serves many batches.
	pending []int
	// probedAt is when the last probe ran, progressAt when a batch last
	// made progress, and nextProbe, when set, when refill probes again.
	probedAt, progressAt, nextProbe time.Time
	// probeGap is the least time between two probes while batches make
	// progress (see nextProbeGap).
	probeGap time.Duration
	// together counts the batches in flight of lanes that do not run alone.
	together int
	// keeping counts the lanes of running held by keepers (see keeper),
	// not by batches.
	keeping int
	// began holds when each batch in flight began, by its slot.
	began map[*laneSlot]time.Time
	// startAt, when set, is when lanes left waiting for a running batch
	// (see startPending) stop waiting for it.
	startAt   time.Time
	startWait *time.Timer
	// timer is chainTimer's, made at its first use.
	timer *time.Timer
	// fruitless is set by a probe and cleared by any progress: when every
	// lane the last probe found ended without progress (failing or stalled
	// heads), the next probe waits for the poll, even while other lanes are
	// busy, so that a failing head is not retried in a loop.
	fruitless bool
}

// addWoken adds the lanes commits woke to the pending ones.
func (s *groupLoop) addWoken() { s.addLanes(s.g.takeWoken()) }

// addLanes adds the lanes commits woke to the pending ones.
func (s *groupLoop) addLanes(woken []int) {
	for _, lane := range woken {
		if !slices.Contains(s.pending, lane) {
			s.pending = append(s.pending, lane)
			s.fruitless = false
		}
	}
}

// slot returns a free slot, making one when fewer than Concurrency exist, or
// nil when every slot is busy.
func (s *groupLoop) slot() *laneSlot {
	if n := len(s.free); n > 0 {
		sl := s.free[n-1]
		s.free = s.free[:n-1]
		return sl
	}
	if len(s.slots) < s.g.concurrency() {
		sl := s.g.newSlot()
		s.slots = append(s.slots, sl)
		return sl
	}
	return nil
}

// refill probes for ready lanes, on a free slot's connection. It reports
// false when the worker should wait for the poll instead: every lane the last
// probe found ended without progress, or the probe found nothing while no
// batch runs. With every slot busy it probes nothing: the next batch to end
// says what to do.
func (s *groupLoop) refill(ctx context.Context) bool {
	s.nextProbe = time.Time{}
	if s.fruitless {
		return false
	}
	asked := s.g.probeNow.Swap(false)
	if s.probeGap == 0 {
		s.probeGap = busyProbeGap
	}
	if next := s.probedAt.Add(s.probeGap); !asked && s.progressAt.After(s.probedAt) && time.Now().Before(next) {
		// Busy with the lanes commits woke, which need no probe: probe for
		// the others (rows of other processes, retries come due) at most
		// once per probeGap.
		s.nextProbe = next
		return s.batching()
	}
	sl := s.slot()
	if sl == nil {
		if asked {
			s.g.probeNow.Store(true) // for when a batch ends
		}
		return true
	}
	found := s.g.probe(ctx, sl, s.held, s.running)
	s.probedAt = time.Now()
	s.free = append(s.free, sl)
	s.fruitless = true
	// Lanes commits woke while the probe ran were not its finding.
	woken := s.g.takeWoken()
	s.pending = found
	s.addLanes(woken)
	s.probeGap = nextProbeGap(s.probeGap, found, woken, s.running, s.g.opts.PollInterval)
	return len(s.pending) > 0 || s.batching()
}

// busyProbeGap is the least time between two probes while batches make
// progress on woken lanes.
const busyProbeGap = 20 * time.Millisecond

// nextProbeGap returns the least time from a probe that found the ready
// lanes found to the next while batches make progress: busyProbeGap when it
// found a lane that neither a batch in flight nor a commit's wake-up (woken)
// accounts for, such as rows of another process; otherwise twice gap, up to
// poll. A Runner whose commits wake every lane it has rows for then probes
// about once per poll rather than 50 times a second, while rows of other
// processes keep being found within busyProbeGap once one is.
func nextProbeGap(gap time.Duration, found, woken []int, running map[int]bool, poll time.Duration) time.Duration {
	for _, lane := range found {
		if !running[lane] && !slices.Contains(woken, lane) {
			return busyProbeGap
		}
	}
	return min(max(2*gap, busyProbeGap), max(poll, busyProbeGap))
}

// startPending starts batches for the pending lanes while slots are free.
// A lane that runs alone (see solo) gets a batch of its own whenever a slot
// is free. The other lanes go together: while one of their batches runs,
// another starts only for at least half a batch of ready lanes, as in a
// backlog, where each batch takes up to lanesPerBatch lanes (a batch sends
// its lanes at once, so more and smaller batches would gain no broker time
// and cost the database more transactions). Lanes that commits woke
// meanwhile wait for the running batch to end and go in the next one:
// several small batches at once would cost the database a transaction each,
// and every commit-to-send latency with it.
func (s *groupLoop) startPending(ctx context.Context) {
	assigned := s.g.share()
	for len(s.pending) > 0 {
		ready := s.pending[:0:0]
		for _, lane := range s.pending {
			switch {
			case !slices.Contains(assigned, lane): // the share changed
			case s.running[lane]:
				// A commit woke it during its batch, perhaps after the
				// batch read it: it goes again once the batch ends.
				s.again[lane] = true
			default:
				ready = append(ready, lane)
			}
		}
		s.pending = ready
		if len(ready) == 0 {
			return
		}
		var lanes, rest []int
		solo := false
		if i := slices.IndexFunc(ready, func(l int) bool { return s.solo[l] }); i >= 0 {
			lanes, solo = []int{ready[i]}, true // alone
			rest = append(slices.Clone(ready[:i]), ready[i+1:]...)
		} else {
			if s.together > 0 && len(ready) < lanesPerBatch/2 {
				// Wait for the batches in flight, unless they have run
				// for slowSend already: a slow or stuck send holds only
				// its own batch.
				if at := s.youngest().Add(slowSend); time.Now().Before(at) {
					s.startAt = at
					return
				}
			}
			n := min(len(ready), lanesPerBatch)
			lanes, rest = ready[:n:n], ready[n:]
		}
		sl := s.slot()
		if sl == nil {
			return
		}
		s.pending = rest
		for _, lane := range lanes {
			s.running[lane] = true
		}
		if !solo {
			s.together++
		}
		s.began[sl] = time.Now()
		go func() {
			r := laneDone{slot: sl, lanes: lanes, solo: solo}
			sl.buf, r.batchResult, r.err = s.g.batch(ctx, sl.conn, sl.buf, lanes)
			for _, h := range r.handed {
				go s.keeper(h)
			}
			s.results <- r
		}()
	}
}

// batching reports whether a batch is in flight: one will report on
// results.
func (s *groupLoop) batching() bool { return len(s.running) > s.keeping }

// youngest returns when the last batch in flight began.
func (s *groupLoop) youngest() time.Time {
	var t time.Time
	for _, at := range s.began {
		if at.After(t) {
			t = at
		}
	}
	return t
}

// startTimer returns a channel that fires when lanes left waiting for the
// batches in flight stop waiting (see startPending), or nil when none wait.
func (s *groupLoop) startTimer() <-chan time.Time {
	if s.startAt.IsZero() {
		return nil
	}
	wait := time.Until(s.startAt)
	s.startAt = time.Time{}
	if s.startWait == nil {
		s.startWait = time.NewTimer(wait)
	} else {
		s.startWait.Reset(wait)
	}
	return s.startWait.C
}

// finished records a batch's end, or a keeper's, and reports whether it
// made progress.
func (s *groupLoop) finished(r laneDone) bool {
	for _, lane := range r.lanes {
		if !slices.ContainsFunc(r.handed, func(h *straggler) bool { return h.lane == lane }) {
			delete(s.running, lane)
			if s.again[lane] {
				delete(s.again, lane)
				if !slices.Contains(s.pending, lane) {
					s.pending = append(s.pending, lane)
				}
			}
		}
	}
	for _, h := range r.handed {
		s.solo[h.lane] = true
		s.keeping++
	}
	if r.kept {
		s.keeping--
	} else {
		if !r.solo {
			s.together--
		}
		delete(s.began, r.slot)
		s.free = append(s.free, r.slot)
	}
	if r.err != nil {
		r.slot.conn.broken()
		s.g.logError("dispatch: ordered batch", r.err, slog.Any("lanes", r.lanes))
		for _, lane := range r.lanes {
			s.solo[lane] = true // which one failed is unknown
		}
		return false
	}
	for _, lane := range r.held {
		s.held[lane] = true
		if !slices.Contains(r.slow, lane) {
			delete(s.solo, lane)
		}
	}
	for _, lane := range r.slow {
		s.solo[lane] = true
	}
	if r.progressed {
		s.fruitless = false
		s.progressAt = time.Now()
	}
	for _, lane := range r.more {
		if !slices.Contains(s.pending, lane) {
			s.pending = append(s.pending, lane)
		}
	}
	return r.progressed
}

// close waits for the batches in flight and returns the slots' connections
// to the pool.
func (s *groupLoop) close(ctx context.Context) {
	for len(s.running) > 0 {
		s.finished(<-s.results)
	}
	cctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 5*time.Second)
	defer cancel()
	for _, sl := range s.slots {
		sl.conn.release(cctx)
	}
}

// probe releases the leases of lanes that left this instance's share and
// returns the lanes of its share whose head is ready, on the connection of
// slot sl. A failure drops that connection and returns no lane.
func (g *laneGroup) probe(ctx context.Context, sl *laneSlot, held, running map[int]bool) []int {
	lanes := g.share()
	// Bounded, so that a pool with no connection to spare stalls the scan
	// instead of hanging it.
	ctx, cancel := context.WithTimeout(ctx, g.opts.LeaseDuration/2)
	defer cancel()
	if err := sl.conn.unchain(ctx); err != nil {
		g.logError("dispatch: ordered probe", err)
		return nil
	}
	g.releaseSurplus(ctx, sl.conn, held, running, lanes)
	st, err := sl.conn.store(ctx)
	var ready []int
	if err == nil {
		g.lead().stats.scans.Add(1)
		at, from := time.Now(), g.cursors.from(lanes)
		if ready, err = st.ProbeLanes(ctx, from, g.token); err == nil {
			// A lane read from its start and found not ready needs no
			// other read from its start for a while; one found ready gets
			// it from its batch.
			g.cursors.readFromStart(from, at, ready)
		}
	}
	if err != nil {
		sl.conn.broken()
		g.logError("dispatch: ordered probe", err)
		return nil
	}
	return ready
}

// idle waits for wait, or until a wake-up, Stop, ctx's end, or a batch
// that made progress; finished handles each batch that ends meanwhile.
func (g *laneGroup) idle(ctx context.Context, wait time.Duration, results <-chan laneDone, finished func(laneDone) bool) {
	t := time.NewTimer(wait)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-g.quit:
			return
		case <-t.C:
			return
		case <-g.wake:
			return
		case r := <-results:
			if finished(r) {
				return
			}
		}
	}
}

// releaseSurplus gives up the leases of lanes that left this instance's share
// and have no batch in flight, so a lane is only released after its batch
// committed.
func (g *laneGroup) releaseSurplus(ctx context.Context, conn *workerConn, held, running map[int]bool, share []int) {
	released := false
	defer func() {
		if released {
			g.lead().tellPeers(ctx)
		}
	}()
	for lane := range held {
		if running[lane] || slices.Contains(share, lane) {
			continue
		}
		st, err := conn.store(ctx)
		if err == nil {
			err = st.ReleaseLease(ctx, workerstore.Lease{Name: workerstore.LaneLeaseName(lane), Token: g.token})
		}
		if err != nil {
			conn.broken()
			g.logError("dispatch: release lane", err, slog.Int("lane", lane))
			return
		}
		delete(held, lane)
		g.renewals.forget([]int{lane})
		released = true
	}
}

func (g *laneGroup) logError(msg string, err error, attrs ...any) {
	if errors.Is(err, context.Canceled) {
		return
	}
	g.opts.Logger.Error(msg, append([]any{slog.String("worker", g.lead().name), slog.String("error", err.Error())}, attrs...)...)
}
