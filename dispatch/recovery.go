package dispatch

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"sync/atomic"
	"time"

	"github.com/google/uuid"

	"github.com/relayer-go/relayer"
	"github.com/relayer-go/relayer/internal/workerstore"
	"github.com/relayer-go/relayer/store"
)

// Recovery defaults and limits.
const (
	recoveryBatchSizeDefault     = 1000
	recoveryPollIntervalDefault  = time.Second
	recoveryLeaseDurationDefault = 30 * time.Second
	recoveryWorkersDefault       = 2
	recoveryMinAgeDefault        = time.Second
	RecoveryWorkersMax           = 16
	// groupSendsMax bounds the destinations one recovery take sends to at
	// once.
	groupSendsMax = 8
)

// RecoveryOptions configure recovery ([RunnerOptions].Recovery). The zero value of each field
// means its default.
type RecoveryOptions struct {
	// BatchSize is how many rows one take statement removes, 1 to 10,000;
	// sends are further bounded by each endpoint's MaxBatchSize. Large batches
	// are what make draining a backlog fast (see docs/benchmarks.md), up to
	// about 1,000 rows. A take commits once its rows are sent, so a crash or
	// a killed session during a take sends up to BatchSize rows again (per
	// worker). A destination still sending after a sixth of the claim, once
	// the take's other destinations are done, is set aside and its rows kept
	// unsent, so that it does not hold the others' rows. Default: 1000.
	BatchSize int
	// PollInterval is how long recovery waits after a scan found nothing, and so
	// the longest a scheduled message waits past its time. Default: 1s.
	PollInterval time.Duration
	// ClaimDuration is how long a claim holds rows; see DirectOptions.
	// Default: 30s.
	ClaimDuration time.Duration
	// LeaseDuration is how long the recovery lease lasts without renewal; another
	// instance takes over after it expires. It is renewed every third of it.
	// Default: 30s.
	LeaseDuration time.Duration
	// MinAge leaves rows younger than it to direct dispatch, which sends them
	// within milliseconds of their commit; recovery takes a row only once it is
	// that old (rows scheduled for later are taken as soon as they are due).
	// After a wake-up ([Runner.Wake], a direct dispatcher's overflow), the next pass
	// takes rows of any age, since direct dispatch dropped them. Default: 1s.
	MinAge time.Duration
	// Workers is how many goroutines take and send while this instance holds
	// the lease, each on its own pinned connection; 1 to 16. Their takes run
	// one at a time from a shared cursor, while the others send and commit, so
	// a second one pays when the broker takes time to answer and costs a
	// little when it answers at once (see docs/benchmarks.md). Default: 2.
	Workers int
	// Owner describes this instance in the lease row. Default: host name and
	// process id.
	Owner string
	// Logger receives the worker's logs. Default: slog.Default().
	Logger *slog.Logger
}

// options lists the fields that have a key, a range or a default.
func (o *RecoveryOptions) options() []option {
	return []option{
		intOption("BatchSize", &o.BatchSize, 1, BatchSizeMax, recoveryBatchSizeDefault),
		durationOption("PollInterval", &o.PollInterval, 1, 0, recoveryPollIntervalDefault),
		durationOption("ClaimDuration", &o.ClaimDuration, time.Millisecond, 0, claimDurationDefault),
		durationOption("LeaseDuration", &o.LeaseDuration, 10*time.Millisecond, 0, recoveryLeaseDurationDefault),
		intOption("Workers", &o.Workers, 1, RecoveryWorkersMax, recoveryWorkersDefault),
		durationOption("MinAge", &o.MinAge, 1, 0, recoveryMinAgeDefault),
		ownerOption("Owner", &o.Owner),
		loggerOption(&o.Logger),
	}
}

// Validate reports the first field out of range. Zero fields are valid: they
// mean the default.
func (o RecoveryOptions) Validate() error { return checkOptions(o.options()) }

// recoveryWorker delivers what direct dispatch did not; the package
// documentation (Recovery) describes its protocol.
type recoveryWorker struct {
	*outboxCore
	opts    RecoveryOptions
	stats   counters
	lease   workerstore.Lease
	holding atomic.Bool
	// scanMu serializes the drainers' takes and guards cursor, the last id
	// taken: concurrent takes from one cursor would each walk over the rows the
	// other has locked.
	scanMu sync.Mutex
	cursor uuid.UUID
	// passStart is when the last pass from the beginning started.
	passStart  time.Time
	urgentTill atomic.Int64 // after a Wake, until this Unix nano time rows of any age are taken
	wakeAll    broadcast
	// probeMu guards noRowsTill: the paused destinations a probe found
	// without unordered rows, and until when recovery leaves their probe to
	// other workers.
	probeMu    sync.Mutex
	noRowsTill map[endpoint]time.Time

	loop loop
}

// newRecovery builds a recovery worker on core, with opts validated.
func newRecovery(core *outboxCore, opts RecoveryOptions) *recoveryWorker {
	opts = withDefaults(opts)
	return &recoveryWorker{
		outboxCore: core,
		opts:       opts,
		lease:      workerstore.Lease{Name: store.RecoveryLeaseName, Owner: opts.Owner, Token: uuid.New()},
		loop:       newLoop(true),
		noRowsTill: map[endpoint]time.Time{},
	}
}

// Options returns the effective options, defaults applied.
func (r *recoveryWorker) Options() RecoveryOptions { return r.opts }

// Stats returns the worker's counters.
func (r *recoveryWorker) Stats() Stats { return r.stats.snapshot() }

// Paused returns the destinations recovery passes over while their broker is
// down or slow.
func (r *recoveryWorker) Paused() []store.Pause { return r.aside.paused() }

// Wake makes a waiting worker scan now, taking rows of any age for the next
// MinAge (after which every row is old enough anyway). It never blocks.
func (r *recoveryWorker) Wake() {
	r.urgentTill.Store(time.Now().Add(r.opts.MinAge).UnixNano())
	r.wakeAll.notify()
}

// wakeFor is Wake for rows that have just committed. A cursor already past
// the lowest of their ids goes back to just before it: rows commit in
// another order than their ids, and without it a row whose transaction
// committed after a later id was taken would wait for the next pass from the
// beginning, up to PollInterval away.
func (r *recoveryWorker) wakeFor(rows []relayer.Message) {
	if len(rows) > 0 {
		first := rows[0].ID
		for _, row := range rows[1:] {
			if bytes.Compare(row.ID[:], first[:]) < 0 {
				first = row.ID
			}
		}
		r.rewindBefore(first)
	}
	r.Wake()
}

// rewindBefore moves a cursor already past id back to just before it, so
// that the next take begins at id.
func (r *recoveryWorker) rewindBefore(id uuid.UUID) {
	r.scanMu.Lock()
	defer r.scanMu.Unlock()
	if r.cursor != uuid.Nil && bytes.Compare(id[:], r.cursor[:]) <= 0 {
		r.cursor = workerstore.IDBefore(id)
	}
}

// Start starts the worker; it runs until Stop or until ctx ends.
func (r *recoveryWorker) Start(ctx context.Context) error {
	return r.loop.start(ctx, "recovery", r.run)
}

// Stop lets the batches in flight finish, then releases the lease so that
// another instance can start at once. If ctx ends first, the takes in
// flight send nothing more: the sends under way return, and each take
// commits what it sent and puts back what it did not (for at most 10 s
// more), so that nothing is sent twice. Stop is idempotent.
func (r *recoveryWorker) Stop(ctx context.Context) error { return r.loop.stop(ctx) }

// Run starts the worker and blocks until ctx ends or Stop is called.
func (r *recoveryWorker) Run(ctx context.Context) error { return r.loop.run(ctx, "recovery", r.run) }

func (r *recoveryWorker) run(ctx context.Context) {
	release := r.serve(ctx, r.opts.Logger)
	defer release()
	var wg sync.WaitGroup
	for range r.opts.Workers {
		wg.Go(func() { r.drain(ctx, r.newDrainer()) })
	}
	r.holdLease(ctx)
	wg.Wait()
	if r.holding.Load() {
		cctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 5*time.Second)
		defer cancel()
		if err := r.store.ReleaseLease(cctx, r.lease); err != nil {
			r.opts.Logger.Warn("dispatch: recovery lease not released; it expires by itself", slog.String("error", err.Error()))
		}
	}
}

// holdLease takes and renews the recovery lease until ctx ends, on pooled
// connections of its own so that slow sends never delay a renewal.
func (r *recoveryWorker) holdLease(ctx context.Context) {
	var renewedAt time.Time
	for ctx.Err() == nil && !r.loop.quitting() {
		if r.holding.Load() && time.Since(renewedAt) < r.opts.LeaseDuration/3 {
			r.sleep(ctx, r.opts.LeaseDuration/3-time.Since(renewedAt), nil)
			continue
		}
		at := time.Now()
		held, _, err := r.store.AcquireLease(ctx, r.lease, r.opts.LeaseDuration)
		if err != nil {
			r.logError("dispatch: recovery lease", err)
		}
		was := r.holding.Swap(held && err == nil)
		if held && err == nil {
			renewedAt = at
			if !was {
				r.wakeAll.notify()
			}
			continue
		}
		r.sleep(ctx, r.opts.PollInterval, nil)
	}
}

// drainer is one of the goroutines that take and send while the lease is
// held, each on its own pinned connection.
type drainer struct {
	conn   *workerConn
	sender *sender
	buf    []store.Row
}

func (r *recoveryWorker) newDrainer() *drainer {
	return &drainer{
		conn: newTakingConn(r.db, r.store, r.opts.ClaimDuration),
		// Each chunk is bounded by the claim and MaxBatchSize.
		sender: r.newSender(BatchSizeMax, r.opts.ClaimDuration, r.opts.Logger, &r.stats, false),
	}
}

func (r *recoveryWorker) drain(ctx context.Context, d *drainer) {
	defer func() {
		cctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 5*time.Second)
		d.conn.release(cctx)
		cancel()
	}()
	for ctx.Err() == nil && !r.loop.quitting() {
		// Taken before the pass, so that a Wake during it is not missed.
		wake := r.wakeAll.wait()
		if !r.holding.Load() {
			r.sleep(ctx, r.opts.PollInterval, wake)
			continue
		}
		progress, from, err := r.batch(ctx, d)
		if err != nil {
			d.conn.broken()
			r.logError("dispatch: recovery batch", err)
			r.sleep(ctx, r.opts.PollInterval, wake)
			continue
		}
		if !progress && !r.rewind(from) {
			r.sleep(ctx, r.opts.PollInterval, wake)
		}
	}
}

func (r *recoveryWorker) logError(msg string, err error) {
	if !errors.Is(err, context.Canceled) {
		r.opts.Logger.Error(msg, slog.String("error", err.Error()))
	}
}

// sleep waits for d, ctx's end, Stop, or wake (nil: no wake-up).
func (r *recoveryWorker) sleep(ctx context.Context, d time.Duration, wake <-chan struct{}) {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
	case <-r.loop.quit:
	case <-t.C:
	case <-wake:
	}
}

// broadcast wakes every goroutine waiting on it.
type broadcast struct {
	mu sync.Mutex
	ch chan struct{}
}

func (b *broadcast) wait() <-chan struct{} {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.ch == nil {
		b.ch = make(chan struct{})
	}
	return b.ch
}

func (b *broadcast) notify() {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.ch != nil {
		close(b.ch)
		b.ch = nil
	}
}

// rewind is called after a take from cursor from found nothing. It reports
// whether the caller should take again at once: another drainer moved the
// cursor meanwhile, or the last pass from the beginning started at least
// PollInterval ago, in which case it moves the cursor back to the beginning. Rows behind the cursor are
// rows written back (failed sends, unroutable rows) and rows that committed
// late; going back for them at most once per PollInterval keeps a failing row
// from being retried in a busy loop.
func (r *recoveryWorker) rewind(from uuid.UUID) bool {
	if from == uuid.Nil {
		return false
	}
	r.scanMu.Lock()
	defer r.scanMu.Unlock()
	if r.cursor != from {
		return true
	}
	if time.Since(r.passStart) < r.opts.PollInterval {
		return false // the cursor stays, so that every drainer waits
	}
	r.cursor = uuid.Nil
	return true
}

// probe tests the paused destinations due for a probe whose probe this
// drainer claims: for each, it takes the destination's first eligible row
// and sends it alone. A success brings the destination back and commits; a
// failure pauses it again and rolls back, the row untouched (or, for a
// failure of the message itself, records it). A destination without
// unordered rows is left to another worker's probe.
//
// A destination found without unordered rows is not probed by recovery
// again for a PollInterval, so that a busy recovery does not look for them
// at every take.
func (r *recoveryWorker) probe(ctx, stop context.Context, d *drainer) error {
	for _, e := range r.aside.probeDue() {
		if halted(stop) {
			return nil
		}
		if !r.mayProbe(e) {
			continue
		}
		gen := r.aside.claimProbe(e)
		if gen == 0 {
			continue
		}
		found, err := r.probeOne(ctx, stop, d, e)
		r.aside.release(e, gen)
		if err != nil {
			return err
		}
		if !found {
			r.probeMu.Lock()
			r.noRowsTill[e] = time.Now().Add(r.opts.PollInterval)
			r.probeMu.Unlock()
		}
	}
	return nil
}

// mayProbe reports whether e was not found without rows within the last
// PollInterval.
func (r *recoveryWorker) mayProbe(e endpoint) bool {
	r.probeMu.Lock()
	defer r.probeMu.Unlock()
	now := time.Now()
	for k, till := range r.noRowsTill {
		if !now.Before(till) {
			delete(r.noRowsTill, k)
		}
	}
	_, waiting := r.noRowsTill[e]
	return !waiting
}

// probeOne takes one eligible row of e and sends it alone. It reports
// whether it found one.
func (r *recoveryWorker) probeOne(ctx, stop context.Context, d *drainer, e endpoint) (bool, error) {
	tr, _, ok := d.sender.resolve(ctx, e, 1)
	if !ok {
		return false, nil
	}
	t, err := d.sender.begin(ctx, d.conn, time.Now())
	if err != nil {
		return false, err
	}
	t.stop = stop
	rows, err := t.st.TakeNextUnorderedTo(ctx, nil, workerstore.Endpoint{Transport: e.transport, Destination: e.destination}, 1, r.clock.now())
	if err != nil || len(rows) == 0 || rows[0].Corrupt != nil {
		t.tx.Rollback()
		return false, err
	}
	r.stats.probes.Add(1)
	m := &rows[0].Message
	d.sender.sendTaken(ctx, t, e, tr, []*relayer.Message{m}, []workerstore.Taken{{ID: m.ID, Attempts: rows[0].Attempts, LastError: rows[0].LastError}})
	return true, d.sender.finish(ctx, t)
}

// batch takes the next rows after the shared cursor, sends them and commits
// the outcome. It reports whether it found any rows, and the cursor it took
// from.
//
// Cancelling ctx stops the take from sending more: the sends under way
// return, the rows not sent are kept, and the outcome is committed on a
// context of the take's own (see detach), so that a stop by cancellation
// sends nothing twice.
func (r *recoveryWorker) batch(ctx context.Context, d *drainer) (bool, uuid.UUID, error) {
	stop := ctx
	ctx, done := detach(stop, time.Now().Add(r.opts.ClaimDuration+idleTxMargin))
	defer done()
	if err := r.probe(ctx, stop, d); err != nil {
		return false, uuid.Nil, err
	}
	if halted(stop) {
		return false, uuid.Nil, nil
	}
	t, err := d.sender.begin(ctx, d.conn, time.Now())
	if err != nil {
		return false, uuid.Nil, err
	}
	t.stop = stop
	from, err := r.takeNext(ctx, d, t)
	if err != nil || len(d.buf) == 0 {
		t.tx.Rollback()
		return false, from, err
	}
	if !r.sendGroups(ctx, d, t, r.setAsideCorrupt(t, d.buf)) {
		d.buf = nil // an abandoned send may still read them
	}
	if err := d.sender.finish(ctx, t); err != nil {
		d.buf = nil
		return true, from, err
	}
	return true, from, nil
}

// takeNext takes the next rows after the shared cursor into d.buf, in t,
// and moves the cursor past them. It returns the cursor it took from.
func (r *recoveryWorker) takeNext(ctx context.Context, d *drainer, t *take) (uuid.UUID, error) {
	now := r.clock.now()
	r.stats.scans.Add(1)
	createdBefore := now.Add(-r.opts.MinAge)
	if time.Now().UnixNano() < r.urgentTill.Load() {
		createdBefore = now
	}
	r.scanMu.Lock()
	defer r.scanMu.Unlock()
	from := r.cursor
	if from == uuid.Nil {
		r.passStart = time.Now()
	}
	var err error
	d.buf, err = t.st.TakeNextUnordered(ctx, d.buf, from, r.opts.BatchSize, now, createdBefore, r.aside.list())
	if err == nil && len(d.buf) > 0 {
		r.cursor = d.buf[len(d.buf)-1].ID
	}
	return from, err
}

// sendGroups sends a take's rows, each destination's group on its own
// goroutine (at most groupSendsMax at once) with the whole claim as its
// budget, so that a destination that times out holds up only its own rows;
// it returns once every group is done, or once the groups still sending are
// stragglers (see stragglers). It reports whether the rows' memory may be
// reused: not when a send was abandoned and may still read them.
func (r *recoveryWorker) sendGroups(ctx context.Context, d *drainer, t *take, rows []store.Row) (reuse bool) {
	var (
		wg     sync.WaitGroup
		mu     sync.Mutex // guards t's outcome and reuse
		slots  = make(chan struct{}, groupSendsMax)
		timing = newStragglers(r.opts.ClaimDuration / slowSendDivisor)
	)
	defer timing.close()
	reuse = true
	for e, idx := range groupByEndpoint(rows, func(r *store.Row) endpoint { return endpoint{r.Transport, r.Destination} }) {
		msgs := make([]*relayer.Message, len(idx))
		prior := make([]workerstore.Taken, len(idx))
		for i, k := range idx {
			r := &rows[k]
			msgs[i] = &r.Message
			prior[i] = workerstore.Taken{ID: r.ID, Attempts: r.Attempts, LastError: r.LastError}
		}
		tr, size, ok := d.sender.resolve(ctx, e, len(idx))
		if !ok {
			mu.Lock()
			t.keep(msgs, prior) // released untouched, like a skipped direct group
			mu.Unlock()
			continue
		}
		slots <- struct{}{}
		gctx, done := timing.start(ctx)
		wg.Go(func() {
			defer func() { <-slots }()
			defer timing.finish()
			defer done()
			part := &take{until: t.until, stop: t.stop}
			abandoned := r.sendGroup(gctx, d, part, e, tr, size, msgs, prior)
			mu.Lock()
			defer mu.Unlock()
			t.merge(part)
			reuse = reuse && !abandoned
		})
	}
	wg.Wait()
	return reuse
}

// sendGroup sends one destination's rows of a take in chunks of size,
// recording the outcome in part. It reports whether a send was abandoned.
func (r *recoveryWorker) sendGroup(ctx context.Context, d *drainer, part *take, e endpoint, tr relayer.Transport, size int, msgs []*relayer.Message, prior []workerstore.Taken) (abandoned bool) {
	for start := 0; start < len(msgs); start += size {
		end := min(start+size, len(msgs))
		if start > 0 && (r.aside.skipped(e) || halted(part.stop)) {
			// Paused or slow since the first chunk, or stopping: the rest
			// waits, attempts untouched.
			part.keep(msgs[start:], prior[start:])
			break
		}
		if d.sender.sendTaken(ctx, part, e, tr, msgs[start:end], prior[start:end]) {
			abandoned = true
		}
	}
	return abandoned
}

// setAsideCorrupt moves the taken rows whose headers do not decode to the
// dead letters, their stored bytes unchanged, logs them, and returns the
// others, compacted in place.
func (r *recoveryWorker) setAsideCorrupt(t *take, rows []store.Row) []store.Row {
	good := rows[:0]
	for i := range rows {
		if rows[i].Corrupt == nil {
			good = append(good, rows[i])
			continue
		}
		row := rows[i] // a copy, with the stored header bytes
		row.LastError = rows[i].Corrupt.Error()
		t.dead = append(t.dead, row)
		t.reasons = append(t.reasons, store.ReasonCorrupt)
		t.recorded = true
		r.stats.corrupt.Add(1)
		r.opts.Logger.Error("dispatch: row with corrupt headers cannot be sent; moved to the dead letters with its bytes unchanged",
			slog.String("id", rows[i].ID.String()), slog.String("error", rows[i].Corrupt.Error()))
	}
	return good
}

// errStraggler ends a send that is still running, slow, when other work of
// its take or batch is done: a recovery take keeps the straggling group's
// rows, attempts untouched, and sets its destination aside as slow; an
// ordered batch records the send as failed and holds its key. Either way
// the rest commits at once instead of waiting for the slow send.
var errStraggler = fmt.Errorf("send slower than a sixth of its deadline while the other sends of its take or batch were done: %w", context.DeadlineExceeded)

// pinned is how many connections recovery pins: one per drainer.
func (r *recoveryWorker) pinned() int { return r.opts.Workers }
