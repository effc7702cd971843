package dispatch

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"time"

	"github.com/google/uuid"

	"github.com/relayer-go/relayer"
	"github.com/relayer-go/relayer/store"
)

// Direct dispatch defaults and limits.
const (
	queueCapacityDefault = 256
	batchSizeDefault     = 100
	BatchSizeMax         = 10000
	claimDurationDefault = 30 * time.Second
	directWorkersDefault = 1
	DirectWorkersMax     = 16
)

// Errors returned by [Runner.Committed], wrapped in a *[PendingError] that
// says how many committed rows were left for recovery.
var (
	ErrQueueFull = errors.New("dispatch: direct dispatch queue full")
	ErrStopped   = errors.New("dispatch: dispatcher stopped")
)

// DirectOptions configure direct dispatch ([RunnerOptions].Direct). The zero value of each field
// means its default.
type DirectOptions struct {
	// QueueCapacity bounds the commit notifications waiting to be dispatched
	// (not the rows in them). Default: 256.
	QueueCapacity int
	// BatchSize bounds the rows taken and sent together, further bounded by
	// each endpoint's MaxBatchSize. 1 to 10,000. Default: 100.
	BatchSize int
	// ClaimDuration is how long a claim holds rows: a send still running then
	// is abandoned and its rows are written back for recovery. The claim is
	// the take's transaction, open while the send runs; the server ends it 5s
	// after ClaimDuration if the worker stops responding. That transaction has
	// a transaction id, so while a send lasts, VACUUM anywhere in the database
	// cannot remove rows deleted after the take began: a broker that answers
	// slowly for long holds back vacuum. Choose ClaimDuration longer than a
	// send plus the database's latency, and give transports timeouts well
	// below it. Default: 30s.
	ClaimDuration time.Duration
	// Workers is how many goroutines take and send, each on its own pinned
	// connection, from one shared queue; 1 to 16. One makes the fewest and
	// largest statements, the least database work per message. A second
	// worker lets one take the next rows while the other waits for its
	// commit, which lowers latency and drains bursts of large transactions
	// faster (see docs/benchmarks.md). Default: 1.
	Workers int
	// Logger receives the dispatcher's logs. Default: slog.Default().
	Logger *slog.Logger
}

// options lists the fields that have a key, a range and a default.
func (o *DirectOptions) options() []option {
	return []option{
		intOption("QueueCapacity", &o.QueueCapacity, 1, 0, queueCapacityDefault),
		intOption("BatchSize", &o.BatchSize, 1, BatchSizeMax, batchSizeDefault),
		durationOption("ClaimDuration", &o.ClaimDuration, time.Millisecond, 0, claimDurationDefault),
		intOption("Workers", &o.Workers, 1, DirectWorkersMax, directWorkersDefault),
		loggerOption(&o.Logger),
	}
}

// Validate reports the first field out of range. Zero fields are valid: they
// mean the default.
func (o DirectOptions) Validate() error { return checkOptions(o.options()) }

// directWorker sends unordered rows right after their commit; the package
// documentation (Direct dispatch) describes its protocol. It runs
// Workers goroutines, each on one connection pinned from db.
type directWorker struct {
	*outboxCore
	opts    DirectOptions
	senders []*sender
	stats   counters
	// recovery, when set, is woken whenever the dispatcher leaves committed
	// rows behind (full queue, stopped), so that they go out without
	// waiting for its next poll.
	recovery *recoveryWorker

	mu     sync.RWMutex
	queue  chan []relayer.Message
	closed bool // the queue is closed: no more notifications
	loop   loop // its graceful stop is the drain of the closed queue
}

// newDirect builds a direct dispatcher on core, with opts validated.
func newDirect(core *outboxCore, opts DirectOptions, recovery *recoveryWorker) *directWorker {
	opts = withDefaults(opts)
	d := &directWorker{
		outboxCore: core,
		opts:       opts,
		recovery:   recovery,
		queue:      make(chan []relayer.Message, opts.QueueCapacity),
		loop:       newLoop(true),
	}
	for range opts.Workers {
		d.senders = append(d.senders, core.newSender(opts.BatchSize, opts.ClaimDuration, opts.Logger, &d.stats, true))
	}
	return d
}

// Options returns the effective options, defaults applied.
func (d *directWorker) Options() DirectOptions { return d.opts }

// Tables returns the schema and prefix of the outbox the dispatcher
// serves (enlist.CommitListener).
func (d *directWorker) Tables() store.Tables { return d.store.Tables() }

// Stats returns the dispatcher's counters.
func (d *directWorker) Stats() Stats { return d.stats.snapshot() }

// Committed queues the rows of a committed transaction (enlist.CommitListener).
// It never blocks. Ordered rows and rows scheduled for later are left to their
// workers. When the queue is full or the dispatcher has stopped it returns a
// *[PendingError] wrapping [ErrQueueFull] or [ErrStopped].
func (d *directWorker) Committed(rows []relayer.Message) error {
	kept := dueUnordered(rows, time.Now())
	if len(kept) == 0 {
		return nil
	}
	d.mu.RLock()
	defer d.mu.RUnlock()
	if d.closed {
		d.leave(kept)
		return &PendingError{Err: ErrStopped, Rows: len(kept)}
	}
	select {
	case d.queue <- kept:
		return nil
	default:
		d.leave(kept)
		return &PendingError{Err: fmt.Errorf("%w (capacity %d)", ErrQueueFull, d.opts.QueueCapacity), Rows: len(kept)}
	}
}

// dueUnordered returns the rows of rows that are unordered and due at now:
// those direct dispatch sends and recovery takes. It returns nil when there
// are none, and a new slice otherwise.
func dueUnordered(rows []relayer.Message, now time.Time) []relayer.Message {
	var due []relayer.Message
	for i := range rows {
		if !rows[i].Ordered && (rows[i].DeliverAt.IsZero() || !rows[i].DeliverAt.After(now)) {
			due = append(due, rows[i])
		}
	}
	return due
}

// SendsCommitted reports that the dispatcher sends the due unordered rows
// it is told about. It implements [enlist.Sender].
func (d *directWorker) SendsCommitted() bool { return true }

// leave counts rows left for recovery and wakes it.
func (d *directWorker) leave(rows []relayer.Message) {
	d.stats.left.Add(uint64(len(rows)))
	if d.recovery != nil {
		d.recovery.wakeFor(rows)
	}
}

// PendingError reports committed rows a dispatcher did not take. They are
// durable; recovery sends them.
type PendingError struct {
	Err  error
	Rows int
}

func (e *PendingError) Error() string {
	return fmt.Sprintf("%v: %d committed rows left for recovery", e.Err, e.Rows)
}

// Unwrap returns the reason, [ErrQueueFull] or [ErrStopped].
func (e *PendingError) Unwrap() error { return e.Err }

// PendingRows returns how many committed rows were left for recovery.
func (e *PendingError) PendingRows() int { return e.Rows }

// Start starts the worker. It runs until Stop or until ctx ends; when
// ctx ends, no further send starts, the sends under way return and are
// recorded (for at most 10 s more), and what was not sent stays in the table
// for recovery. Start returns an error if called twice.
func (d *directWorker) Start(ctx context.Context) error {
	return d.loop.start(ctx, "direct dispatcher", d.run)
}

// Stop stops accepting notifications and drains the queue, sending what it
// holds, until ctx ends; then it sends nothing more, lets the sends under
// way return and records them (for at most 10 s more; a transport that
// ignores cancellation is abandoned after that) and returns ctx's error. Unfinished
// rows stay in the table for recovery. No goroutine of the dispatcher outlives
// Stop, except an abandoned transport call, which ends when the transport
// returns. Stop is idempotent.
func (d *directWorker) Stop(ctx context.Context) error {
	d.closeQueue()
	return d.loop.stop(ctx)
}

// Run starts the dispatcher and blocks until ctx ends, then stops it without
// draining (unsent rows stay for recovery). It returns nil when the dispatcher
// was stopped by Stop, ctx's error otherwise.
func (d *directWorker) Run(ctx context.Context) error {
	return d.loop.run(ctx, "direct dispatcher", d.run)
}

func (d *directWorker) closeQueue() {
	d.mu.Lock()
	defer d.mu.Unlock()
	if !d.closed {
		d.closed = true
		close(d.queue)
	}
}

// gatherRows bounds how many rows one round of the worker collects from
// queued notifications before sending, so that groups of many small commits
// share claims and sends.
const gatherRows = 1000

// run runs the workers and, once they have all returned, counts what is still
// queued as left for recovery.
func (d *directWorker) run(ctx context.Context) {
	defer d.abandonQueued()
	release := d.serve(ctx, d.opts.Logger)
	defer release()
	var wg sync.WaitGroup
	for _, s := range d.senders {
		wg.Go(func() { d.work(ctx, s) })
	}
	wg.Wait()
}

// Paused returns the destinations this dispatcher passes over while their
// broker is down or slow, shared with the recovery it wakes.
func (d *directWorker) Paused() []store.Pause { return d.aside.paused() }

// work is one worker: it takes notifications from the shared queue, gathering
// what else is queued, and dispatches them with its sender on its own pinned
// connection.
func (d *directWorker) work(ctx context.Context, s *sender) {
	conn := newTakingConn(d.db, d.store, d.opts.ClaimDuration)
	// Chained transactions outlive each take: they begin under a context
	// that a cancellation of ctx ends only after the take in flight has
	// recorded its outcome.
	session, endSession := detach(ctx, time.Time{})
	s.session = session
	defer func() {
		s.endChain()
		endSession()
		rctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 5*time.Second)
		conn.release(rctx)
		cancel()
	}()
	idle := time.NewTimer(chainIdle)
	defer idle.Stop()
	var rows []relayer.Message
	for {
		var batch []relayer.Message
		var ok bool
		var idleC <-chan time.Time // armed only while a chained transaction is open
		if s.open != nil {
			idle.Reset(chainIdle)
			idleC = idle.C
		}
		select {
		case <-ctx.Done():
			d.closeQueue()
			return
		case <-idleC:
			s.endChain()
			continue
		case batch, ok = <-d.queue:
			if !ok {
				return
			}
		}
		rows = append(rows[:0], batch...)
	gather:
		for len(rows) < gatherRows {
			select {
			case batch, ok := <-d.queue:
				if !ok {
					break gather
				}
				rows = append(rows, batch...)
			default:
				break gather
			}
		}
		d.dispatch(ctx, s, conn, rows)
		if s.tainted {
			rows, s.tainted = nil, false // an abandoned send may still read them
		}
	}
}

func (d *directWorker) dispatch(ctx context.Context, s *sender, conn *workerConn, rows []relayer.Message) {
	rows = lastOfEachID(rows, &s.seen)
	for _, g := range groupRows(rows) {
		if ctx.Err() != nil {
			return
		}
		var probe uint64
		if s.aside.skipped(g.endpoint) {
			// Sends to it are slow, time out or find it unavailable: unless
			// this worker may probe it, its rows stay in the table,
			// untouched, and recovery sends them once it is back, while this
			// worker goes on with the other destinations.
			if probe = s.aside.claimProbe(g.endpoint); probe == 0 {
				d.stats.left.Add(uint64(len(g.msgs)))
				d.opts.Logger.Debug("dispatch: destination set aside; rows left for recovery",
					slog.String("transport", g.transport), slog.String("destination", g.destination), slog.Int("rows", len(g.msgs)))
				continue
			}
		}
		err := s.deliver(ctx, conn, g)
		s.aside.release(g.endpoint, probe)
		if err != nil {
			conn.broken()
			if ctx.Err() == nil {
				d.opts.Logger.Error("dispatch: database error; group left for recovery",
					slog.String("transport", g.transport), slog.String("destination", g.destination),
					slog.Int("rows", len(g.msgs)), slog.String("error", err.Error()))
			}
		}
	}
}

// lastOfEachID keeps, of rows sharing an id, only the last, in place and in
// order. A notification can hold a row that a rolled-back savepoint removed,
// and the transaction may have published the same id again after it: the
// last copy is the one that committed. seen is scratch space kept between
// calls.
func lastOfEachID(rows []relayer.Message, seen *map[uuid.UUID]int) []relayer.Message {
	if len(rows) < 2 {
		return rows
	}
	if *seen == nil {
		*seen = make(map[uuid.UUID]int, len(rows))
	}
	m := *seen
	clear(m)
	for i := range rows {
		m[rows[i].ID] = i
	}
	if len(m) == len(rows) {
		return rows
	}
	kept := rows[:0]
	for i := range rows {
		if m[rows[i].ID] == i {
			kept = append(kept, rows[i])
		}
	}
	return kept
}

// abandonQueued counts the notifications still queued at a hard stop.
func (d *directWorker) abandonQueued() {
	d.closeQueue()
	var left []relayer.Message
	for batch := range d.queue {
		left = append(left, batch...)
	}
	if len(left) > 0 {
		d.leave(left)
		d.opts.Logger.Warn("dispatch: stopped with queued rows; left for recovery", slog.Int("rows", len(left)))
	}
}

// pinned is how many connections the dispatcher pins: one per worker.
func (d *directWorker) pinned() int { return d.opts.Workers }
