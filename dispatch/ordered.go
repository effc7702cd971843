package dispatch

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/google/uuid"

	"github.com/relayer-go/relayer"
	"github.com/relayer-go/relayer/store"
)

// Ordered dispatch defaults and limits.
const (
	laneLeaseDurationDefault = 30 * time.Second
	LaneLeaseDurationMin     = time.Second
	LaneLeaseDurationMax     = time.Hour
	orderedPollDefault       = time.Second
	// orderedConcurrencyDefault and OrderedConcurrencyMax bound
	// OrderedOptions.Concurrency.
	orderedConcurrencyDefault = 2
	OrderedConcurrencyMax     = 64
)

// OrderedOptions configure ordered dispatch ([RunnerOptions].Ordered). The zero value of each field
// means its default.
type OrderedOptions struct {
	// LeaseDuration is how long lane and membership leases last without
	// renewal, 1s to 1h. A batch may take at most half of it, and stops
	// admitting rows after a quarter. Default: 30s.
	LeaseDuration time.Duration
	// PollInterval is how long the worker waits after a scan that made no
	// progress; positive and less than a third of LeaseDuration. Default: 1s.
	PollInterval time.Duration
	// BatchSize is the most rows a batch reads and sends per lane, 1 to
	// 10,000. Default: 100.
	BatchSize int
	// Concurrency is how many batches the worker runs at once, 1 to 64, each
	// on a connection pinned from the pool for it (pinned on first use and
	// kept until the worker stops; size the pool for them) and over up to 16
	// ready lanes. A lane whose send failed or was slow runs in batches of
	// its own until it sends cleanly, so with Concurrency n, up to n-1 slow
	// lanes leave the rest flowing. Default: 2.
	Concurrency int
	// Name describes the worker in its logs and in the owner column of its
	// lease rows, for operators; any text. Default: host name and process id.
	Name string
	// Logger receives the worker's logs. Default: slog.Default().
	Logger *slog.Logger
}

// load reads the options' keys from l (see [LoadRunnerOptions]).
func (o *OrderedOptions) load(l *loader) {
	l.duration("LeaseDuration", &o.LeaseDuration)
	l.duration("PollInterval", &o.PollInterval)
	l.int("BatchSize", &o.BatchSize)
	l.int("Concurrency", &o.Concurrency)
	l.string("Name", &o.Name)
}

// Validate reports the first field out of range, defaults applied.
func (o OrderedOptions) Validate() error {
	d := o.withDefaults()
	switch {
	case d.LeaseDuration < LaneLeaseDurationMin || d.LeaseDuration > LaneLeaseDurationMax:
		return fmt.Errorf("%w: LeaseDuration must be %s to %s, got %s", ErrInvalidOptions, LaneLeaseDurationMin, LaneLeaseDurationMax, o.LeaseDuration)
	case d.PollInterval <= 0 || d.PollInterval >= d.LeaseDuration/3:
		return fmt.Errorf("%w: PollInterval must be positive and less than a third of LeaseDuration (%s), got %s", ErrInvalidOptions, d.LeaseDuration, d.PollInterval)
	case d.BatchSize < 1 || d.BatchSize > BatchSizeMax:
		return fmt.Errorf("%w: BatchSize must be 1 to %d, got %d", ErrInvalidOptions, BatchSizeMax, o.BatchSize)
	case d.Concurrency < 1 || d.Concurrency > OrderedConcurrencyMax:
		return fmt.Errorf("%w: Concurrency must be 1 to %d, got %d", ErrInvalidOptions, OrderedConcurrencyMax, o.Concurrency)
	}
	return nil
}

func (o OrderedOptions) withDefaults() OrderedOptions {
	setDefault(&o.LeaseDuration, laneLeaseDurationDefault)
	if o.PollInterval == 0 {
		o.PollInterval = orderedPollDefault
		if o.PollInterval >= o.LeaseDuration/3 {
			o.PollInterval = o.LeaseDuration / 4
		}
	}
	setDefault(&o.BatchSize, batchSizeDefault)
	setDefault(&o.Concurrency, orderedConcurrencyDefault)
	o.Name = ownerOrDefault(o.Name)
	setDefault(&o.Logger, slog.Default())
	return o
}

// orderedWorker is one member of an outbox's lane group; the package
// documentation (Ordered dispatch) describes its protocol.
type orderedWorker struct {
	name     string
	lanes    int // the outbox's lane count
	instance string
	token    uuid.UUID
	db       *sql.DB
	opts     OrderedOptions
	store    *store.Store
	routes   *relayer.Routes
	sender   *sender
	stats    counters
	clock    *dbClock

	assigned atomic.Pointer[[]int]
	members  atomic.Int64
	beyond   atomic.Int64 // pending rows in lanes past o.lanes, at the last heartbeat
	wake     chan struct{}
	// wokenMu guards woken: lanes a commit in this process touched, which
	// the worker batches next without probing for them.
	wokenMu sync.Mutex
	woken   []int
	// probeNow asks the next scan to probe even while busy: Wake
	// sets it.
	probeNow atomic.Bool
	loop     loop
	// aside is the destinations set aside as slow or unavailable; a runner
	// shares one among its workers.
	aside *setAside
}

// newOrdered builds an ordered worker on core, with opts and the outbox's
// lane count validated.
func newOrdered(core *outboxCore, opts OrderedOptions) *orderedWorker {
	opts = opts.withDefaults()
	lanes, _ := core.outbox.LaneCount()
	routes := &relayer.Routes{}
	if core.outbox.Routes != nil {
		routes = core.outbox.Routes.Clone()
	}
	o := &orderedWorker{
		name:     opts.Name,
		lanes:    lanes,
		instance: uuid.NewString(),
		token:    uuid.New(),
		db:       core.db,
		opts:     opts,
		store:    core.store,
		routes:   routes,
		clock:    core.clock,
		wake:     make(chan struct{}, 1),
		loop:     newLoop(true),
		aside:    core.aside,
	}
	o.sender = &sender{
		transports: core.transports,
		caps:       core.caps,
		batchSize:  opts.BatchSize,
		claimFor:   opts.LeaseDuration / 2,
		logger:     opts.Logger,
		stats:      &o.stats,
		clock:      core.clock,
		retries:    core.retries,
	}
	empty := []int{}
	o.assigned.Store(&empty)
	return o
}

// Options returns the effective options.
func (o *orderedWorker) Options() OrderedOptions { return o.opts }

// Name returns the worker's name.
func (o *orderedWorker) Name() string { return o.name }

// Stats returns the worker's counters.
func (o *orderedWorker) Stats() Stats { return o.stats.snapshot() }

// Lanes returns the lanes currently assigned to this instance.
func (o *orderedWorker) Lanes() []int { return slices.Clone(*o.assigned.Load()) }

// Paused returns the destinations the worker's lanes wait for while their
// broker is down or slow.
func (o *orderedWorker) Paused() []store.Pause { return o.aside.paused() }

// Wake makes a waiting worker scan now.
func (o *orderedWorker) Wake() {
	o.probeNow.Store(true)
	o.signal()
}

// signal wakes the worker's loop without asking for a probe.
func (o *orderedWorker) signal() {
	select {
	case o.wake <- struct{}{}:
	default:
	}
}

// wakeLanes makes the worker batch lanes next, without a probe: rows have
// just committed in them. Lanes outside the worker's share are ignored
// when it takes them.
func (o *orderedWorker) wakeLanes(lanes []int) {
	o.wokenMu.Lock()
	for _, l := range lanes {
		if !slices.Contains(o.woken, l) {
			o.woken = append(o.woken, l)
		}
	}
	o.wokenMu.Unlock()
	o.signal()
}

// takeWoken returns and clears the lanes woken since the last call.
func (o *orderedWorker) takeWoken() []int {
	o.wokenMu.Lock()
	defer o.wokenMu.Unlock()
	w := o.woken
	o.woken = nil
	return w
}

func requireOrdering(c relayer.Capabilities) error {
	if !c.OrderedByKey {
		return errors.New("the endpoint does not report OrderedByKey, so it cannot keep per-key order")
	}
	return nil
}

// Start checks every ordered route's endpoint for native key ordering, joins
// the membership, and starts the worker. It runs until Stop or until
// ctx ends.
func (o *orderedWorker) Start(ctx context.Context) error {
	return o.loop.startAfter(ctx, "ordered dispatcher", o.join, o.work)
}

// Run starts the worker and blocks until ctx ends or Stop is called.
func (o *orderedWorker) Run(ctx context.Context) error {
	if err := o.Start(ctx); err != nil {
		return err
	}
	<-o.loop.done
	return ctx.Err()
}

// join checks the ordered routes' endpoints and joins the membership.
func (o *orderedWorker) join(ctx context.Context) error {
	for typ, r := range o.routes.All() {
		if !r.Ordered {
			continue
		}
		tr, ok := o.sender.transports[r.Transport]
		if !ok {
			return fmt.Errorf("%w: ordered route of %q names transport %q, which is not registered", ErrInvalidOptions, typ, r.Transport)
		}
		if _, err := o.sender.caps.getChecked(ctx, endpoint{r.Transport, r.Destination}, tr, requireOrdering); err != nil {
			return fmt.Errorf("%w: ordered route of %q: %w", ErrInvalidOptions, typ, err)
		}
	}
	if err := o.heartbeat(ctx); err != nil {
		return fmt.Errorf("dispatch: join membership: %w", err)
	}
	return nil
}

// work heartbeats and dispatches until ctx ends or Stop, then leaves.
func (o *orderedWorker) work(ctx context.Context) {
	var wg sync.WaitGroup
	wg.Go(func() { o.heartbeats(ctx) })
	wg.Go(func() { o.run(ctx) })
	wg.Go(func() { o.aside.publish(ctx, o.loop.quit, o.store, o.name, o.opts.Logger) })
	wg.Wait()
	o.leave()
}

// Stop lets the batch in flight finish and commit, then releases the worker's
// membership and lane leases so that other members take over at once; a crash
// instead leaves them to expire. If ctx ends first, the batch admits no more
// rows, records what it sent (for at most 10 s more) and ends, and Stop
// returns ctx's error. Stop is idempotent.
func (o *orderedWorker) Stop(ctx context.Context) error { return o.loop.stop(ctx) }

// leave releases every lease this instance holds.
func (o *orderedWorker) leave() {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if err := o.store.ReleaseLeases(ctx, o.token); err != nil {
		o.opts.Logger.Warn("dispatch: ordered leases not released; they expire by themselves",
			slog.String("worker", o.name), slog.String("error", err.Error()))
	}
}

// heartbeat renews membership, recomputes this instance's lanes, measures the
// database clock, and looks for rows in lanes this worker never scans.
func (o *orderedWorker) heartbeat(ctx context.Context) error {
	member := store.Lease{Name: store.MemberLeaseName(o.instance), Owner: o.name, Token: o.token}
	members, err := o.store.Heartbeat(ctx, member, o.opts.LeaseDuration)
	if err != nil {
		return err
	}
	rank := slices.Index(members, member.Name)
	if rank < 0 {
		return errors.New("own membership missing after heartbeat")
	}
	lanes := laneShare(rank, len(members), o.lanes)
	o.assigned.Store(&lanes)
	o.members.Store(int64(len(members)))
	if err := o.clock.sync(ctx, o.store); err != nil {
		return err
	}
	beyond, err := o.store.RowsBeyondLanes(ctx, o.lanes)
	if err != nil {
		return err
	}
	o.beyond.Store(beyond)
	if beyond > 0 {
		o.opts.Logger.Error("dispatch: rows in lanes this worker never scans; a writer uses more lanes than the worker's outbox",
			slog.String("worker", o.name), slog.Int("lanes", o.lanes), slog.Int64("rows", beyond))
	}
	return nil
}

// RowsBeyondLanes returns how many pending rows (counted up to 10,000) the
// last heartbeat found in lanes numbered the outbox's lane count or more.
// Such rows are never delivered by this worker: their writers were
// configured with a different lane count. Anything but zero is logged as an error at each heartbeat.
func (o *orderedWorker) RowsBeyondLanes() int64 { return o.beyond.Load() }

// heartbeats runs on its own goroutine and pooled connections, never behind a
// slow send. When heartbeats fail for a whole lease, the instance gives up its
// lanes, since the others may already have taken them.
func (o *orderedWorker) heartbeats(ctx context.Context) {
	every := o.opts.LeaseDuration / 3
	last := time.Now()
	t := time.NewTicker(every)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-o.loop.quit:
			return
		case <-t.C:
		}
		hctx, cancel := context.WithTimeout(ctx, every)
		err := o.heartbeat(hctx)
		cancel()
		if err != nil {
			if ctx.Err() != nil {
				return
			}
			o.opts.Logger.Error("dispatch: ordered heartbeat failed", slog.String("worker", o.name), slog.String("error", err.Error()))
			if time.Since(last) >= o.opts.LeaseDuration {
				empty := []int{}
				o.assigned.Store(&empty)
			}
			continue
		}
		last = time.Now()
	}
}

// laneShare returns the lanes of the member of the given rank: members split
// the lanes into contiguous ranges whose sizes differ by at most one.
func laneShare(rank, members, lanes int) []int {
	if members <= 0 || rank < 0 || rank >= members {
		return nil
	}
	from, to := rank*lanes/members, (rank+1)*lanes/members
	share := make([]int, 0, to-from)
	for l := from; l < to; l++ {
		share = append(share, l)
	}
	return share
}

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
}

// lanesPerBatch bounds the lanes one batch takes: their leases, heads,
// claims and deletes share one statement each, so a batch of many ready
// lanes costs the database about what one lane's does.
const lanesPerBatch = 16

// slowSend is the time per row beyond which a lane's sends count as slow:
// such a lane, or one whose send failed, runs in batches of its own until
// it sends cleanly again, so that it holds up no other lane's batch.
const slowSend = 100 * time.Millisecond

func (o *orderedWorker) newSlot() *laneSlot {
	// A batch may keep its transaction open until a late send returns, which
	// it does with keep-alive statements; the timeout ends the transaction of
	// a worker that stopped answering. Custom plans, since statistics of a
	// queue table are often stale.
	c := newWorkerConn(o.db, o.store)
	c.idleTx = o.opts.LeaseDuration/2 + idleTxMargin
	return &laneSlot{conn: c}
}

func (o *orderedWorker) run(ctx context.Context) {
	s := &laneScheduler{
		o:       o,
		results: make(chan laneDone, o.opts.Concurrency),
		running: map[int]bool{},
		held:    map[int]bool{},
		solo:    map[int]bool{},
	}
	defer s.close(ctx)
	for ctx.Err() == nil && !o.quitting() {
		s.addWoken()
		if len(s.pending) == 0 && !s.refill(ctx) {
			wait := o.opts.PollInterval
			if !s.nextProbe.IsZero() {
				wait = time.Until(s.nextProbe)
			}
			o.idle(ctx, wait, s.results, s.finished)
			s.fruitless = false
			continue
		}
		s.startPending(ctx)
		if len(s.running) == 0 {
			continue
		}
		select {
		case <-ctx.Done():
		case <-o.loop.quit:
		case <-o.wake:
			s.fruitless = false
		case r := <-s.results:
			s.finished(r)
		}
	}
}

// laneScheduler is the state of an ordered worker's dispatch loop: its
// Concurrency slots and the lanes it knows to be ready. Only the worker's run
// goroutine uses it; batches report on results.
type laneScheduler struct {
	o       *orderedWorker
	slots   []*laneSlot // every slot made so far
	free    []*laneSlot
	results chan laneDone
	running map[int]bool // lanes with a batch in flight
	held    map[int]bool // lanes whose lease this instance took
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
	// fruitless is set by a probe and cleared by any progress: when every
	// lane the last probe found ended without progress (failing or stalled
	// heads), the next probe waits for the poll, even while other lanes are
	// busy, so that a failing head is not retried in a loop.
	fruitless bool
}

// addWoken adds the lanes commits woke to the pending ones.
func (s *laneScheduler) addWoken() {
	for _, lane := range s.o.takeWoken() {
		if !slices.Contains(s.pending, lane) {
			s.pending = append(s.pending, lane)
			s.fruitless = false
		}
	}
}

// slot returns a free slot, making one when fewer than Concurrency exist, or
// nil when every slot is busy.
func (s *laneScheduler) slot() *laneSlot {
	if n := len(s.free); n > 0 {
		sl := s.free[n-1]
		s.free = s.free[:n-1]
		return sl
	}
	if len(s.slots) < s.o.opts.Concurrency {
		sl := s.o.newSlot()
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
func (s *laneScheduler) refill(ctx context.Context) bool {
	s.nextProbe = time.Time{}
	if s.fruitless {
		return false
	}
	if next := s.probedAt.Add(busyProbeGap); !s.o.probeNow.Swap(false) && s.progressAt.After(s.probedAt) && time.Now().Before(next) {
		// Busy with the lanes commits woke, which need no probe: probe for
		// the others (rows of other processes, retries come due) at most
		// once per busyProbeGap.
		s.nextProbe = next
		return len(s.running) > 0
	}
	sl := s.slot()
	if sl == nil {
		return true
	}
	s.pending = s.o.probe(ctx, sl, s.held, s.running)
	s.probedAt = time.Now()
	s.free = append(s.free, sl)
	s.fruitless = true
	return len(s.pending) > 0 || len(s.running) > 0
}

// busyProbeGap is the least time between two probes while batches make
// progress on woken lanes.
const busyProbeGap = 20 * time.Millisecond

// startPending starts batches for the pending lanes while slots are free,
// sharing the lanes among the free slots (at most lanesPerBatch each), so
// that ready lanes go out together instead of waiting for a slot each.
func (s *laneScheduler) startPending(ctx context.Context) {
	assigned := *s.o.assigned.Load()
	for len(s.pending) > 0 {
		ready := s.pending[:0:0]
		for _, lane := range s.pending {
			if !s.running[lane] && slices.Contains(assigned, lane) { // else in flight, or the share changed
				ready = append(ready, lane)
			}
		}
		s.pending = ready
		if len(ready) == 0 {
			return
		}
		free := len(s.free) + s.o.opts.Concurrency - len(s.slots)
		sl := s.slot()
		if sl == nil {
			return
		}
		n := min(lanesPerBatch, (len(ready)+free-1)/free)
		var lanes, rest []int
		for _, lane := range ready {
			switch {
			case len(lanes) == 0 && s.solo[lane]:
				lanes, n = append(lanes, lane), 1 // alone
			case len(lanes) < n && !s.solo[lane]:
				lanes = append(lanes, lane)
			default:
				rest = append(rest, lane)
			}
		}
		s.pending = rest
		for _, lane := range lanes {
			s.running[lane] = true
		}
		go func() {
			r := laneDone{slot: sl, lanes: lanes}
			sl.buf, r.batchResult, r.err = s.o.batch(ctx, sl.conn, sl.buf, lanes)
			s.results <- r
		}()
	}
}

// finished records a batch's end and reports whether it made progress.
func (s *laneScheduler) finished(r laneDone) bool {
	for _, lane := range r.lanes {
		delete(s.running, lane)
	}
	s.free = append(s.free, r.slot)
	if r.err != nil {
		r.slot.conn.broken()
		s.o.logError("dispatch: ordered batch", r.err, slog.Any("lanes", r.lanes))
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
func (s *laneScheduler) close(ctx context.Context) {
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
func (o *orderedWorker) probe(ctx context.Context, sl *laneSlot, held, running map[int]bool) []int {
	lanes := *o.assigned.Load()
	// Bounded, so that a pool with no connection to spare stalls the scan
	// instead of hanging it.
	ctx, cancel := context.WithTimeout(ctx, o.opts.LeaseDuration/2)
	defer cancel()
	o.releaseSurplus(ctx, sl.conn, held, running, lanes)
	st, err := sl.conn.store(ctx)
	var ready []int
	if err == nil {
		o.stats.scans.Add(1)
		ready, err = st.ProbeLanes(ctx, lanes, o.token)
	}
	if err != nil {
		sl.conn.broken()
		o.logError("dispatch: ordered probe", err)
		return nil
	}
	return ready
}

// idle waits for wait, or until a wake-up, Stop, ctx's end, or a batch
// that made progress; finished handles each batch that ends meanwhile.
func (o *orderedWorker) idle(ctx context.Context, wait time.Duration, results <-chan laneDone, finished func(laneDone) bool) {
	t := time.NewTimer(wait)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-o.loop.quit:
			return
		case <-t.C:
			return
		case <-o.wake:
			return
		case r := <-results:
			if finished(r) {
				return
			}
		}
	}
}

func (o *orderedWorker) quitting() bool { return o.loop.quitting() }

// releaseSurplus gives up the leases of lanes that left this instance's share
// and have no batch in flight, so a lane is only released after its batch
// committed.
func (o *orderedWorker) releaseSurplus(ctx context.Context, conn *workerConn, held, running map[int]bool, share []int) {
	for lane := range held {
		if running[lane] || slices.Contains(share, lane) {
			continue
		}
		st, err := conn.store(ctx)
		if err == nil {
			err = st.ReleaseLease(ctx, store.Lease{Name: store.LaneLeaseName(lane), Token: o.token})
		}
		if err != nil {
			conn.broken()
			o.logError("dispatch: release lane", err, slog.Int("lane", lane))
			return
		}
		delete(held, lane)
	}
}

func (o *orderedWorker) logError(msg string, err error, attrs ...any) {
	if errors.Is(err, context.Canceled) {
		return
	}
	o.opts.Logger.Error(msg, append([]any{slog.String("worker", o.name), slog.String("error", err.Error())}, attrs...)...)
}

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
}

// rowOutcome is what a batch did with one admitted row.
type rowOutcome uint8

const (
	// rowReleased: not sent; its claim is released, the row untouched.
	rowReleased rowOutcome = iota
	// rowSent: the broker accepted it; the batch deletes it.
	rowSent
	// rowFailed: its failure is recorded; its key is held from then on.
	rowFailed
)

// batch runs one batch over lanes in a transaction (see the type's
// documentation): the lanes' leases, heads, claims and deletes take one
// statement each whatever the number of lanes. It returns the lanes that
// sent and deleted at least one row, so that a head that keeps failing backs
// off by PollInterval instead of spinning. Any error leaves the transaction
// open: the caller drops the connection, which rolls it back.
//
// The transaction is run with BEGIN and COMMIT statements on the pinned
// connection rather than a *sql.Tx, whose context would roll it back the
// moment the batch's deadline passes, releasing the lane rows while a late
// send may still reach the broker.
//
// Cancelling ctx stops the batch from sending more rows; the sends under way
// return and what was sent is recorded and committed on a context of the
// batch's own (see detach), so that a stop by cancellation sends nothing
// twice.
func (o *orderedWorker) batch(ctx context.Context, conn *workerConn, buf []store.Row, lanes []int) (_ []store.Row, res batchResult, err error) {
	start := time.Now()
	stop := ctx
	ctx, cancel := detach(stop, start.Add(o.opts.LeaseDuration/2))
	defer cancel()

	st, err := conn.store(ctx)
	if err != nil {
		return buf, res, err
	}
	if _, err := conn.conn.ExecContext(ctx, "BEGIN"); err != nil {
		return buf, res, err
	}
	end := func(stmt string) error {
		_, err := conn.conn.ExecContext(ctx, stmt)
		return err
	}
	held, err := st.AcquireLaneLeases(ctx, lanes, o.name, o.token, o.opts.LeaseDuration)
	if err != nil {
		return buf, res, err
	}
	if len(held) == 0 {
		return buf, res, end("ROLLBACK")
	}
	buf, err = st.ReadLaneHeads(ctx, buf, held, o.opts.BatchSize)
	if err != nil {
		return buf, res, err
	}
	now := o.clock.now()
	var parts []laneBatch
	var ids []uuid.UUID
	for rest := buf; len(rest) > 0; {
		n := 1
		for n < len(rest) && rest[n].Lane == rest[0].Lane {
			n++
		}
		rows, probe := o.untilSetAside(admit(rest[:n], now))
		if probe.gen != 0 {
			defer o.aside.release(probe.e, probe.gen)
		}
		if len(rows) > 0 {
			parts = append(parts, laneBatch{lane: rest[0].Lane, read: n, rows: rows, probe: probe})
			for i := range rows {
				ids = append(ids, rows[i].ID)
			}
		}
		rest = rest[n:]
	}
	if len(parts) == 0 {
		return buf, res, end("ROLLBACK")
	}
	claim := store.NewClaim(now, o.opts.LeaseDuration/2)
	n, err := st.ClaimLaneRows(ctx, ids, claim, now)
	if err != nil {
		return buf, res, err
	}
	if n != int64(len(ids)) {
		return buf, res, fmt.Errorf("lanes %v: claimed %d of %d head rows under the lane locks", held, n, len(ids))
	}
	if err := o.sendLanes(ctx, stop, conn, parts, start.Add(o.opts.LeaseDuration/4)); err != nil {
		return buf, res, err
	}
	anything := false
	for i := range parts {
		p := &parts[i]
		if p.slow {
			res.slow = append(res.slow, p.lane)
		}
		anything = anything || p.sent > 0 || len(p.failures) > 0
	}
	if !anything {
		// Nothing sent and nothing to record (the destinations are set
		// aside): the claims go with the rollback, no row is rewritten.
		return buf, res, end("ROLLBACK")
	}
	if err := o.settle(ctx, st, parts, claim.Token); err != nil {
		return buf, res, err
	}
	if err := end("COMMIT"); err != nil {
		return buf, res, err
	}
	deleted := 0
	for _, p := range parts {
		deleted += p.sent
		// A lane whose whole head was sent, or whose keys that could not be
		// sent are now held, is empty up to the rows committed since, which
		// wake it: it is batched again at once only when it may hold more
		// (its read was full, or rows were left for want of time).
		if (p.sent > 0 || len(p.failures) > 0) && (p.read >= o.opts.BatchSize || p.cut) {
			res.more = append(res.more, p.lane)
		}
	}
	o.stats.deleted.Add(uint64(deleted))
	res.held, res.progressed = held, deleted > 0
	return buf, res, nil
}

// admit returns the prefix of a lane's head rows that may be sent at now: up
// to the first row that is scheduled for later or claimed, since a scheduled
// or claimed head stalls its lane and nothing overtakes it.
func admit(rows []store.Row, now time.Time) []store.Row {
	for i := range rows {
		if rows[i].DeliverAt.After(now) || rows[i].ClaimedUntil.After(now) {
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
	// row is set for a row over the outbox's limits (see store.OverLimit),
	// whose failure cannot be recorded: it moves to the dead letters.
	row *store.Row
}

// sendLanes sends the lanes of a batch, each on a goroutine of its own, so
// that a lane whose destination is slow holds up none of the others. Once a
// lane is done, a send of another lane still running after a sixth of the
// batch's deadline is a straggler (see stragglers): it ends, recorded as
// failed, so that the batch commits what the others sent instead of holding
// their rows, and rolling them back, until the deadline. A lane found slow is
// marked so (laneBatch.slow) and runs alone afterwards. An error means the
// batch must roll back (a send outlived the batch).
func (o *orderedWorker) sendLanes(ctx, stop context.Context, conn *workerConn, parts []laneBatch, admitUntil time.Time) error {
	for i := range parts {
		parts[i].outcomes = make([]rowOutcome, len(parts[i].rows))
	}
	if len(parts) == 1 {
		return o.sendLane(ctx, stop, nil, conn, &parts[0], admitUntil)
	}
	watch := newStragglers(o.opts.LeaseDuration / 2 / slowSendDivisor)
	defer watch.close()
	var wg sync.WaitGroup
	errs := make([]error, len(parts))
	for i := range parts {
		p := &parts[i]
		if i > 0 && (time.Now().After(admitUntil) || halted(stop)) {
			p.cut = true
			continue // the later lanes' claims are released, their rows untouched
		}
		wg.Go(func() {
			defer watch.finish()
			errs[i] = o.sendLane(ctx, stop, watch, conn, p, admitUntil)
		})
	}
	wg.Wait()
	return errors.Join(errs...)
}

// sendLane sends a lane's admitted rows one by one, in id order. A row that
// fails holds its key: the key's later rows in the batch are not sent (they
// wait, released, for the failed row's retry or redrive), and the lane's
// other keys go on in the same batch, so that a failing key costs the others
// nothing. A row whose headers do not decode is parked with its key without
// a send. A destination that is unavailable or set aside holds the rows
// bound for it, and their keys, the same way, attempts untouched. No row is
// admitted after admitUntil has passed (keeping the rest of the deadline for
// recording) or once stop is cancelled; the last row is the probe of a
// paused destination when p.probe is set. An error means the batch must
// roll back (a send outlived the batch).
func (o *orderedWorker) sendLane(ctx, stop context.Context, watch *stragglers, conn *workerConn, p *laneBatch, admitUntil time.Time) error {
	sent := 0
	began := time.Now()
	defer func() {
		o.stats.sent.Add(uint64(sent))
		p.slow = len(p.failures) > 0 || time.Since(began) > slowSend*time.Duration(sent+1)
	}()
	var (
		waiting map[string]bool   // keys whose rows wait from here on
		down    map[endpoint]bool // destinations found unavailable in this batch
	)
	hold := func(key string) {
		if waiting == nil {
			waiting = map[string]bool{}
		}
		waiting[key] = true
	}
	for i := range p.rows {
		if i > 0 && (time.Now().After(admitUntil) || halted(stop)) {
			p.cut = true
			break
		}
		r := &p.rows[i]
		m := &r.Message
		if waiting[m.Key] {
			continue
		}
		if r.Corrupt != nil {
			o.stats.corrupt.Add(1)
			o.recordFailure(p, i, laneFailure{Failure: store.Failure{ID: r.ID, Error: r.Corrupt.Error()}, park: true, corrupt: true})
			hold(m.Key)
			continue
		}
		e := endpoint{m.Transport, m.Destination}
		isProbe := p.probe.gen != 0 && i == len(p.rows)-1
		if down[e] || (!isProbe && o.aside.skipped(e)) {
			hold(m.Key) // the destination is down or set aside: the key waits, untouched
			continue
		}
		tr, err := o.resolve(ctx, m)
		if err == nil {
			sctx, done := ctx, func() {}
			if watch != nil {
				sctx, done = watch.start(ctx)
			}
			err = o.sendHeld(ctx, sctx, conn, tr, m)
			done()
			o.aside.record(e, outcomeOf(err, false), err)
		}
		if errors.Is(err, relayer.ErrUnavailable) && !errors.Is(err, errLateSend) {
			// The destination is down: the row keeps its attempts and
			// waits, with its key, until the destination is back.
			o.opts.Logger.Warn("dispatch: ordered destination unavailable; the key waits at this row, attempts untouched",
				slog.String("worker", o.name), slog.Int("lane", p.lane), slog.String("id", r.ID.String()),
				slog.String("error", err.Error()))
			if down == nil {
				down = map[endpoint]bool{}
			}
			down[e] = true
			hold(m.Key)
			continue
		}
		if errors.Is(err, errLateSend) {
			// Whether the broker has the row is unknown, and the deadline
			// for recording anything has passed: roll back, attempts
			// untouched; the lane row was held until the transport returned,
			// so nothing of this lane was sent meanwhile.
			o.stats.expired.Add(1)
			o.opts.Logger.Warn("dispatch: ordered send returned after the batch deadline; the lane was held until then and its rows will be sent again",
				slog.String("worker", o.name), slog.Int("lane", p.lane), slog.String("id", r.ID.String()),
				slog.String("error", err.Error()))
			return err
		}
		if err != nil {
			v := o.sender.retries.judge(m, r.Attempts, err, o.clock.now())
			o.recordFailure(p, i, laneFailure{Failure: store.Failure{ID: r.ID, Error: err.Error(), RetryAt: v.retryAt}, park: v.reason != ""})
			hold(m.Key)
			continue
		}
		p.outcomes[i] = rowSent
		p.sent++
		sent++
	}
	return nil
}

// recordFailure notes that row i of p failed with f. A row over the
// outbox's limits cannot be parked nor wait for a retry (its key or
// endpoint would not fit the index that records it): it leaves for the
// dead letters instead, and its key's later rows go on.
func (o *orderedWorker) recordFailure(p *laneBatch, i int, f laneFailure) {
	p.outcomes[i] = rowFailed
	if err := store.OverLimit(&p.rows[i].Message); err != nil {
		f.row = &p.rows[i]
		f.Error = fmt.Sprintf("%s (and %v: moved to the dead letters, since its failure cannot be recorded)", f.Error, err)
	}
	p.failures = append(p.failures, f)
}

// settle records a batch's outcome under its claim, each in one statement
// for all its lanes: it deletes the sent rows (all of them, or the batch
// rolls back), records the failed rows' attempts and errors, and releases
// the claims of the rest.
func (o *orderedWorker) settle(ctx context.Context, st *store.Store, parts []laneBatch, token uuid.UUID) error {
	var sent, rest []uuid.UUID
	var fails, parks []store.Failure
	var buried []store.Row
	var reasons []string
	for _, p := range parts {
		for i := range p.rows {
			switch p.outcomes[i] {
			case rowSent:
				sent = append(sent, p.rows[i].ID)
			case rowReleased:
				rest = append(rest, p.rows[i].ID)
			}
		}
		for _, f := range p.failures {
			switch {
			case f.row != nil:
				row := *f.row
				row.Attempts++
				row.LastError = f.Error
				buried, reasons = append(buried, row), append(reasons, store.ReasonOverLimit)
			case f.park:
				parks = append(parks, f.Failure)
			default:
				fails = append(fails, f.Failure)
			}
		}
	}
	if len(buried) > 0 {
		// Written to the dead letters, then deleted with the sent rows in
		// the same transaction: a row is in exactly one of the two tables.
		if err := st.Bury(ctx, buried, reasons); err != nil {
			return err
		}
	}
	if gone := len(sent) + len(buried); gone > 0 {
		ids := sent
		for i := range buried {
			ids = append(ids, buried[i].ID)
		}
		n, err := st.CompleteBatch(ctx, ids, token, o.clock.now())
		if err != nil {
			return err
		}
		if n != int64(gone) {
			return fmt.Errorf("deleted %d of %d sent or dead-lettered rows; rolling back, they will be sent again", n, gone)
		}
	}
	for _, f := range []struct {
		failures []store.Failure
		record   func(context.Context, []store.Failure, uuid.UUID, time.Time) (int64, error)
	}{{fails, st.FailBatch}, {parks, st.Park}} {
		if len(f.failures) == 0 {
			continue
		}
		n, err := f.record(ctx, f.failures, token, o.clock.now())
		if err != nil {
			return err
		}
		if n != int64(len(f.failures)) {
			return fmt.Errorf("recorded %d of %d failures; rolling back", n, len(f.failures))
		}
	}
	for _, p := range parts {
		for _, f := range p.failures {
			attrs := []any{slog.String("worker", o.name), slog.Int("lane", p.lane), slog.String("id", f.ID.String()), slog.String("error", f.Error)}
			switch {
			case f.row != nil:
				o.stats.buried.Add(1)
				o.opts.Logger.Error("dispatch: ordered row over the outbox's limits failed; moved to the dead letters, its key's later rows go on", attrs...)
				continue
			case f.corrupt:
				o.stats.parked.Add(1)
				o.opts.Logger.Error("dispatch: ordered row with corrupt headers cannot be sent; parked with its key, bytes unchanged, until an operator redrives or skips it; the lane's other keys go on", attrs...)
				continue
			case f.park:
				o.stats.parked.Add(1)
				o.opts.Logger.Warn("dispatch: ordered send failed for good or out of attempts; the row is parked and holds its key until redriven", attrs...)
			default:
				if !f.RetryAt.IsZero() {
					attrs = append(attrs, slog.Time("retry_at", f.RetryAt))
				}
				o.opts.Logger.Warn("dispatch: ordered send failed; its key waits for the retry, the lane's other keys go on", attrs...)
			}
			o.stats.failed.Add(1)
		}
	}
	if len(rest) > 0 {
		if _, err := st.ReleaseBatch(ctx, rest, token, o.clock.now()); err != nil {
			return err
		}
	}
	return nil
}

// errLateSend reports a send that returned after its batch's deadline.
var errLateSend = errors.New("send returned after the batch deadline")

// sendHeld sends m on sendCtx (ctx, or a child that ends a straggler) and
// waits for the transport to return, however long past ctx's deadline, the
// batch's, that takes: the caller's transaction holds the lane row
// until then, so that no other owner sends this lane while the send may
// still reach the broker. Past the deadline it keeps that transaction alive
// with a trivial statement every third of the session's idle timeout; if the
// worker stops answering (a partition), the server ends the transaction. A
// send that returns after the deadline, with or without an error, reports
// errLateSend; one ended as a straggler before it reports errStraggler.
func (o *orderedWorker) sendHeld(ctx, sendCtx context.Context, conn *workerConn, tr relayer.Transport, m *relayer.Message) error {
	done := make(chan error, 1)
	go func() {
		defer func() {
			if r := recover(); r != nil {
				done <- fmt.Errorf("transport panicked: %v", r)
			}
		}()
		done <- tr.Send(sendCtx, m)
	}()
	select {
	case err := <-done:
		switch {
		case err != nil && ctx.Err() != nil:
			return fmt.Errorf("%w: %w", errLateSend, err)
		case err != nil && sendCtx.Err() != nil:
			// Ended as a straggler, in time to record it.
			return fmt.Errorf("%w: %w", context.Cause(sendCtx), err)
		}
		return err
	case <-ctx.Done():
	}
	tick := time.NewTicker(conn.idleTx / 3)
	defer tick.Stop()
	alive := true
	for {
		select {
		case err := <-done:
			return fmt.Errorf("%w (%w): transport returned %v", errLateSend, ctx.Err(), err)
		case <-tick.C:
			if !alive {
				continue
			}
			kctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), conn.idleTx/3)
			_, err := conn.conn.ExecContext(kctx, "SELECT 1")
			cancel()
			if err != nil {
				alive = false // the transaction is lost; still wait for the transport
			}
		}
	}
}

// resolve finds the transport of an ordered row and checks that its endpoint
// keeps per-key order. Its errors are recorded on the row.
func (o *orderedWorker) resolve(ctx context.Context, m *relayer.Message) (relayer.Transport, error) {
	if m.Key == "" {
		return nil, errors.New("ordered row has no ordering key")
	}
	tr, ok := o.sender.transports[m.Transport]
	if !ok {
		return nil, fmt.Errorf("transport %q is not registered with this worker", m.Transport)
	}
	if _, err := o.sender.caps.getChecked(ctx, endpoint{m.Transport, m.Destination}, tr, requireOrdering); err != nil {
		return nil, err
	}
	return tr, nil
}

// pinned is how many connections the worker pins: one per batch it runs
// at once.
func (o *orderedWorker) pinned() int { return o.opts.Concurrency }

// wakeAssigned wakes the worker for those of lanes in its share, which
// committed rows touched; it ignores the others.
func (o *orderedWorker) wakeAssigned(lanes []int) {
	assigned := *o.assigned.Load()
	var mine []int
	for _, l := range lanes {
		if slices.Contains(assigned, l) {
			mine = append(mine, l)
		}
	}
	if len(mine) > 0 {
		o.wakeLanes(mine)
	}
}
