package dispatch

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/google/uuid"

	"github.com/relayer-go/relayer"
	"github.com/relayer-go/relayer/internal/workerstore"
	"github.com/relayer-go/relayer/store"
)

// Runner defaults and limits.
const (
	// runnerPoolHeadroomDefault is how many connections of a bounded pool
	// the runner leaves to the application by default.
	runnerPoolHeadroomDefault = 2
	// OrderedWorkersMax bounds RunnerOptions.OrderedWorkers.
	OrderedWorkersMax = 16
	// runnerBorrowed is the pooled connections the workers borrow briefly
	// besides those they pin: leases, heartbeats, clock measurements.
	runnerBorrowed = 1
)

// ErrPoolTooSmall is returned by [Runner.Start] when the *sql.DB's
// MaxOpenConns leaves too few connections for the workers and the
// application: the workers would wait for connections, or starve the
// application of them.
var ErrPoolTooSmall = errors.New("dispatch: connection pool too small for the workers")

// RunnerOptions configure a [Runner]. The zero value runs every worker with
// its defaults.
type RunnerOptions struct {
	// Direct configures direct dispatch. Its Recovery field is set by the
	// runner.
	Direct DirectOptions
	// DisableDirect turns direct dispatch off: committed rows then wait for
	// recovery (woken at each commit) instead of being sent at once.
	DisableDirect bool
	// Recovery configures recovery.
	Recovery RecoveryOptions
	// DisableRecovery turns recovery off in this process. Some process of the
	// outbox must run it: without it, failed sends, crash leftovers and
	// scheduled messages are never delivered.
	DisableRecovery bool
	// Ordered configures the ordered workers.
	Ordered OrderedOptions
	// OrderedWorkers is how many ordered workers this process runs, 0 to 16;
	// they share the lanes with each other and with other processes', each
	// counting as one member when the lanes are split, and one dispatch loop
	// batches the lanes of all of them (with Concurrency batches at once per
	// worker). Zero means one when the outbox routes a type to an ordered
	// route, and none otherwise. One worker running several lanes at once
	// (OrderedOptions.Concurrency) is usually enough per process.
	OrderedWorkers int
	// DisableOrdered runs no ordered worker in this process.
	DisableOrdered bool
	// Cleanup configures retention cleanup.
	Cleanup CleanupOptions
	// DisableCleanup turns retention cleanup off in this process.
	DisableCleanup bool
	// Listen turns on this process's side of the wake-up across processes
	// (writers send it: enlist.Options.Wake): one connection of the pool,
	// pinned while the runner runs, LISTENs on the outbox's channel, and
	// each notification makes recovery (taking rows of any age, as after
	// [Runner.Wake]) and the ordered workers scan at once instead of at
	// their poll. While that connection is down the workers poll as
	// always, and it reconnects after 1 s, doubling up to 30 s. It needs
	// Notifications. Default: false.
	Listen bool
	// Notifications waits for the notifications Listen subscribes to, on
	// connections of the pool's driver: pgxlisten.Waiter{} (package
	// github.com/relayer-go/relayer/dispatch/pgxlisten) for pgx's
	// database/sql driver. NewRunner refuses Listen without it, or with a
	// pool of a driver it cannot wait on. Default: nil.
	Notifications NotificationWaiter
	// PoolHeadroom is how many connections of a bounded pool (a *sql.DB with
	// MaxOpenConns set) must remain for the application besides the
	// workers' own; 0 to MaxOpenConns. Start refuses a smaller pool. A pool
	// without a bound is not checked. Default: 2.
	PoolHeadroom int
	// RefuseNewerSchema makes Start fail (with store.ErrSchemaNewer) when
	// the outbox's tables record a migration newer than this release knows.
	// Start checks the schema: an outdated one (store.ErrSchemaOutdated,
	// with how to migrate) always fails it; a newer one, which a newer
	// release migrated during a rolling deploy and this one still works
	// with, is logged as a warning unless this is set. Default: false.
	RefuseNewerSchema bool
	// Logger is every worker's logger unless its own options set one.
	// Default: slog.Default().
	Logger *slog.Logger
}

// Validate reports the first field out of range, each worker's options
// included.
func (o RunnerOptions) Validate() error {
	if err := o.Direct.Validate(); err != nil {
		return fmt.Errorf("in RunnerOptions.Direct: %w", err)
	}
	if err := o.Recovery.Validate(); err != nil {
		return fmt.Errorf("in RunnerOptions.Recovery: %w", err)
	}
	if err := o.Ordered.Validate(); err != nil {
		return fmt.Errorf("in RunnerOptions.Ordered: %w", err)
	}
	if err := o.Cleanup.Validate(); err != nil {
		return fmt.Errorf("in RunnerOptions.Cleanup: %w", err)
	}
	switch {
	case o.OrderedWorkers < 0 || o.OrderedWorkers > OrderedWorkersMax:
		return fmt.Errorf("%w: OrderedWorkers must be 0 to %d, got %d", ErrInvalidOptions, OrderedWorkersMax, o.OrderedWorkers)
	case o.PoolHeadroom < 0:
		return fmt.Errorf("%w: PoolHeadroom must not be negative, got %d", ErrInvalidOptions, o.PoolHeadroom)
	}
	return nil
}

// Runner runs an outbox's workers in one process: direct dispatch, recovery,
// ordered workers and retention cleanup, each of which can be turned off. It
// is the writer's commit listener ([enlist.Options].Listener), so that
// committed rows reach direct dispatch:
//
//	runner, err := dispatch.NewRunner(db, outbox, dispatch.RunnerOptions{})
//	writer, err := enlist.NewWriter(outbox, enlist.Options{Listener: runner})
//	err = runner.Start(ctx)
//	defer runner.Stop(shutdownCtx)
//
// Every worker takes the outbox's schema, prefix and lane count from the
// outbox value, so writers and workers built from it cannot disagree. To run
// each kind of worker in processes of its own, turn the others off with
// RunnerOptions (DisableDirect, DisableRecovery, DisableOrdered,
// DisableCleanup), or read the options from the environment with
// [LoadRunnerOptions].
type Runner struct {
	db     *sql.DB
	outbox relayer.Outbox
	opts   RunnerOptions
	core   *outboxCore // what every worker shares
	store  *workerstore.Store
	// crew holds the workers. A Start that fails replaces them, since a
	// worker stopped once does not start again.
	crew atomic.Pointer[crew]

	mu      sync.Mutex
	started bool
	// activity records the workers' deliveries for consoles; nil before
	// Start, and on tables older than migration 8.
	activity *activityRecorder
	stopped  chan struct{} // closed by Stop
}

// crew is a runner's workers.
type crew struct {
	direct   *directWorker
	recovery *recoveryWorker
	ordered  []*orderedWorker
	cleanup  *cleanupWorker
	listener *listener // nil unless RunnerOptions.Listen
}

// NewRunner builds the workers for outbox, validating every option; it does
// not touch the database. Its errors wrap a sentinel for [errors.Is]:
// [store.ErrNilDB] when db is nil; [ErrInvalidOptions] for an option out of
// range in opts (the message names the field); [ErrInvalidOptions] and
// [relayer.ErrInvalidOutbox] together when outbox is unusable (a lane count
// out of range, a nil transport, a retry policy out of range); and
// [store.ErrInvalidOptions] for a schema or table prefix that is not a valid
// identifier.
func NewRunner(db *sql.DB, outbox relayer.Outbox, opts RunnerOptions) (*Runner, error) {
	if db == nil {
		return nil, fmt.Errorf("dispatch: NewRunner: %w", store.ErrNilDB)
	}
	if err := opts.Validate(); err != nil {
		return nil, err
	}
	setDefault(&opts.Logger, slog.Default())
	setDefault(&opts.PoolHeadroom, runnerPoolHeadroomDefault)
	core, err := newOutboxCore(db, outbox)
	if err != nil {
		return nil, err
	}
	r := &Runner{db: db, outbox: outbox, opts: opts, core: core, store: core.store, stopped: make(chan struct{})}
	c, err := r.build()
	if err != nil {
		return nil, err
	}
	r.crew.Store(c)
	return r, nil
}

// build makes the workers the runner's options ask for, all on the runner's
// one outbox core.
func (r *Runner) build() (*crew, error) {
	outbox, opts, core := r.outbox, r.opts, r.core
	c := &crew{}
	if !opts.DisableRecovery {
		o := opts.Recovery
		setDefault(&o.Logger, opts.Logger)
		c.recovery = newRecovery(core, o)
	}
	if !opts.DisableDirect {
		o := opts.Direct
		setDefault(&o.Logger, opts.Logger)
		c.direct = newDirect(core, o, c.recovery)
	}
	workers := opts.OrderedWorkers
	if workers == 0 && hasOrderedRoute(outbox) {
		workers = 1
	}
	if opts.DisableOrdered {
		workers = 0
	}
	for i := range workers {
		o := opts.Ordered
		setDefault(&o.Logger, opts.Logger)
		o.Name = fmt.Sprintf("%s ordered-%d", ownerOrDefault(o.Name), i+1)
		c.ordered = append(c.ordered, newOrdered(core, o))
	}
	for _, o := range c.ordered {
		o.peersChanged = c.orderedPeersChanged
	}
	if len(c.ordered) > 1 {
		newLaneGroup(c.ordered...) // one dispatch loop batches every worker's lanes
	}
	if !opts.DisableCleanup {
		o := opts.Cleanup
		setDefault(&o.Logger, opts.Logger)
		c.cleanup = newCleanup(core.db, core.store, o)
	}
	if opts.Listen {
		var err error
		if c.listener, err = newListener(core.db, opts.Notifications, core.store.Tables(), r.wakeFrom, opts.Logger); err != nil {
			return nil, err
		}
	}
	return c, nil
}

func hasOrderedRoute(outbox relayer.Outbox) bool {
	if outbox.Routes == nil {
		return false
	}
	for _, r := range outbox.Routes.All() {
		if r.Ordered {
			return true
		}
	}
	return false
}

// Wake makes recovery and every ordered worker scan now instead of at their
// next poll; recovery then takes rows of any age (RecoveryOptions.MinAge
// leaves the youngest to direct dispatch otherwise). Call it when rows were
// committed that no commit listener saw: by another process without
// wake-ups, or before the runner started.
func (r *Runner) Wake() { r.wakeAll() }

// Tables returns the outbox's schema and prefix, for
// [enlist.CommitListener].
func (r *Runner) Tables() store.Tables { return r.store.Tables() }

// Committed hands committed rows to direct dispatch (with direct dispatch
// turned off, it wakes recovery instead, when some of them are unordered and
// due), and wakes the runner's ordered workers whose lanes the ordered rows
// are in. It implements [enlist.CommitListener].
func (r *Runner) Committed(rows []relayer.Message) error {
	c := r.crew.Load()
	r.wakeOrdered(rows)
	if c.direct != nil {
		return c.direct.Committed(rows)
	}
	if c.recovery != nil {
		// Recovery takes no ordered row and no row before its time: a
		// commit of those alone would only cost it a fruitless take.
		if due := dueUnordered(rows, time.Now()); len(due) > 0 {
			c.recovery.wakeFor(due)
		}
	}
	return nil
}

// SendsCommitted reports whether the runner sends the due unordered rows
// it is told about itself: it does when direct dispatch is on. It
// implements [enlist.Sender].
func (r *Runner) SendsCommitted() bool { return r.crew.Load().direct != nil }

// orderedPeersChanged makes every ordered worker of the crew read the
// membership and probe its lanes now: one of them joined, left or released
// lanes.
func (c *crew) orderedPeersChanged() {
	for _, o := range c.ordered {
		o.refreshMembership()
		o.Wake()
	}
}

// wakeAll makes recovery and every ordered worker scan now: rows committed
// in another process may be waiting.
// wakeFrom wakes the workers for a wake-up from another process, whose
// payload, when it is a message id, is the lowest id of the unordered rows
// its commits wrote: recovery takes from just before it.
func (r *Runner) wakeFrom(payload string) {
	if id, err := uuid.Parse(payload); err == nil && payload != "" {
		if c := r.crew.Load(); c.recovery != nil {
			c.recovery.rewindBefore(id)
		}
	}
	r.wakeAll()
}

func (r *Runner) wakeAll() {
	c := r.crew.Load()
	if c.recovery != nil {
		c.recovery.Wake()
	}
	for _, o := range c.ordered {
		o.Wake()
	}
}

// wakeOrdered wakes the ordered workers' dispatch loop for the lanes of
// committed ordered rows that their shares hold, so that the rows wait for
// no poll.
func (r *Runner) wakeOrdered(rows []relayer.Message) {
	c := r.crew.Load()
	if len(c.ordered) == 0 {
		return
	}
	var lanes []int // few: a transaction touches a handful of keys
	for i := range rows {
		if rows[i].Ordered && !slices.Contains(lanes, rows[i].Lane) {
			lanes = append(lanes, rows[i].Lane)
		}
	}
	c.ordered[0].group.wakeShared(lanes) // the workers share one loop
}

// Connections returns how many connections the workers pin from the pool
// while they run, and how many more they borrow for brief statements.
func (r *Runner) Connections() (pinned, borrowed int) {
	for _, w := range r.workers() {
		pinned += w.pinned()
	}
	return pinned, runnerBorrowed
}

// checkPool refuses a bounded pool without room for the workers and the
// application.
func (r *Runner) checkPool() error {
	limit := r.db.Stats().MaxOpenConnections
	if limit <= 0 {
		return nil
	}
	pinned, borrowed := r.Connections()
	need := pinned + borrowed + r.opts.PoolHeadroom
	if limit < need {
		return fmt.Errorf("%w: MaxOpenConns is %d; the workers pin %d and borrow %d, and PoolHeadroom keeps %d for the application: "+
			"raise it to at least %d (db.SetMaxOpenConns), or run fewer workers", ErrPoolTooSmall, limit, pinned, borrowed, r.opts.PoolHeadroom, need)
	}
	return nil
}

// Start checks the pool and the schema (see RunnerOptions.RefuseNewerSchema), then starts recovery, the ordered workers, cleanup
// and direct dispatch, in that order; they run until [Runner.Stop] or until
// ctx ends. If one fails to start (the database was not reachable, a
// session was killed while a worker joined), those already started are
// stopped, the runner makes its workers anew, and the error is returned: Start
// may then be called again; [Runner.Stats] then reports the new workers. A Start after one that succeeded fails.
func (r *Runner) Start(ctx context.Context) error {
	r.mu.Lock()
	defer r.mu.Unlock()
	select {
	case <-r.stopped:
		return ErrStopped
	default:
	}
	if r.started {
		return errors.New("dispatch: runner already started")
	}
	if err := r.checkPool(); err != nil {
		return err
	}
	version, err := r.checkSchema(ctx)
	if err != nil {
		return err
	}
	r.started = true
	c := r.crew.Load()
	var started []interface{ Stop(context.Context) error }
	fail := func(err error) error {
		sctx, cancel := context.WithCancel(context.WithoutCancel(ctx))
		cancel() // stop at once: nothing was sent yet
		for _, s := range started {
			s.Stop(sctx)
		}
		c.leaveUnstarted()
		if c, berr := r.build(); berr == nil { // the options were valid once
			r.crew.Store(c)
			r.started = false
		}
		return err
	}
	if err := c.joinOrdered(ctx, r.store); err != nil {
		return fail(err)
	}
	for _, w := range r.workers() {
		if err := w.Start(ctx); err != nil {
			return fail(err)
		}
		started = append(started, w)
	}
	if version >= activitySchemaVersion && (c.direct != nil || c.recovery != nil || len(c.ordered) > 0) {
		r.activity = newActivityRecorder(r.store, ownerOrDefault(r.opts.Recovery.Owner), r.delivered, r.opts.Logger)
		if err := r.activity.Start(ctx); err != nil {
			return fail(err)
		}
	}
	return nil
}

// activitySchemaVersion is the migration that made the table of the
// runners' delivery records: on older tables a runner records nothing.
const activitySchemaVersion = 8

// delivered is how many rows the runner's workers have delivered (sent
// and deleted) since it started.
func (r *Runner) delivered() int64 {
	s := r.Stats()
	n := deref(s.Direct).Deleted + deref(s.Recovery).Deleted
	for _, o := range s.Ordered {
		n += o.Stats.Deleted
	}
	return int64(n)
}

func deref[T any](p *T) T {
	if p == nil {
		var zero T
		return zero
	}
	return *p
}

// joinOrdered makes several ordered workers join the membership together
// before any starts, each then taking its share among all of them: started
// one by one, the first would take every lane, and the lanes would change
// hands as each of the others joined.
func (c *crew) joinOrdered(ctx context.Context, st *workerstore.Store) error {
	if len(c.ordered) < 2 {
		return nil
	}
	for _, o := range c.ordered {
		if err := o.join(ctx); err != nil {
			return err
		}
	}
	members, err := st.Members(ctx)
	if err != nil {
		return fmt.Errorf("dispatch: join membership: %w", err)
	}
	for _, o := range c.ordered {
		if !o.share(members) {
			return fmt.Errorf("dispatch: join membership: %s is missing from the members", o.name)
		}
	}
	return nil
}

// leaveUnstarted releases the membership of the ordered workers that joined
// but did not start; a started worker leaves when it stops.
func (c *crew) leaveUnstarted() {
	for _, o := range c.ordered {
		if o.joined.Load() && !o.loop.isStarted() {
			o.leave()
		}
	}
}

// checkSchema refuses an outdated or incomplete schema, or one that records
// another lane count than the outbox's; warns of (or refuses) a newer one;
// and tells of a schema that lacks only migrations the runner can do
// without.
func (r *Runner) checkSchema(ctx context.Context) (version int, err error) {
	v, err := r.store.CheckSchema(ctx)
	if errors.Is(err, store.ErrSchemaNewer) && !r.opts.RefuseNewerSchema {
		r.opts.Logger.Warn("dispatch: "+err.Error(), slog.Int("release_schema_version", store.SchemaVersion))
		err = nil
	}
	if err != nil {
		return 0, fmt.Errorf("dispatch: %w", err)
	}
	// Writers and workers must count the lanes alike: the first to start
	// records its count, the others check theirs against it.
	lanes, err := r.outbox.LaneCount()
	if err == nil {
		err = r.store.CheckLaneCount(ctx, lanes)
	}
	if err != nil {
		return 0, fmt.Errorf("dispatch: %w", err)
	}
	if v < store.SchemaVersion {
		// Each step says what it adds, which is not always speed (migration
		// 8 records deliveries for consoles).
		var pending []string
		steps, _ := store.Migrations(r.store.Tables())
		for _, m := range steps {
			if m.Version > v {
				pending = append(pending, fmt.Sprintf("%d: %s", m.Version, m.Name))
			}
		}
		r.opts.Logger.Info("dispatch: the outbox "+r.store.Tables().Label()+" lacks migrations of this release, which the workers run without; "+
			"run `relayer migrate` or store.Migrate (safe while writers and workers run) to apply them",
			slog.Int("schema_version", v), slog.Int("release_schema_version", store.SchemaVersion), slog.String("pending", strings.Join(pending, "; ")))
	}
	return v, nil
}

// worker is the lifecycle every worker kind shares.
type worker interface {
	Start(context.Context) error
	Stop(context.Context) error
	// pinned is how many connections the worker pins from the pool while
	// it runs.
	pinned() int
}

// workers returns the workers in start order.
func (r *Runner) workers() []worker {
	c := r.crew.Load()
	var ws []worker
	if c.recovery != nil {
		ws = append(ws, c.recovery)
	}
	for _, o := range c.ordered {
		ws = append(ws, o)
	}
	if c.cleanup != nil {
		ws = append(ws, c.cleanup)
	}
	if c.direct != nil {
		ws = append(ws, c.direct)
	}
	if c.listener != nil {
		ws = append(ws, c.listener)
	}
	return ws
}

// Stop stops every worker at once: each finishes what it has in flight (direct
// dispatch drains its queue) within ctx's deadline, then is cancelled. It
// returns the workers' errors joined (ctx's error when the deadline cut a
// drain short). Stop is idempotent.
func (r *Runner) Stop(ctx context.Context) error {
	r.mu.Lock()
	select {
	case <-r.stopped:
	default:
		close(r.stopped)
	}
	r.mu.Unlock()
	ws := r.workers()
	errs := make([]error, len(ws))
	var wg sync.WaitGroup
	for i, w := range ws {
		wg.Go(func() { errs[i] = w.Stop(ctx) })
	}
	wg.Wait()
	r.mu.Lock()
	activity := r.activity
	r.mu.Unlock()
	if activity != nil {
		// Last, so that it records what the workers finished.
		errs = append(errs, activity.Stop(ctx))
	}
	return errors.Join(errs...)
}

// Run starts the workers and blocks until ctx ends or Stop is called. When ctx
// ends, the workers stop: no row is admitted any more, the sends under way
// return, and what was sent is recorded (on a context of its own), so that
// nothing is sent twice. A send still running 10 s after ctx ended is
// abandoned, its rows kept for another worker, and the rest is committed
// within 5 s more: only that send's rows may go out again. Direct dispatch
// leaves its queued rows to recovery (use Stop for a drain). Run then
// returns ctx's error.
func (r *Runner) Run(ctx context.Context) error {
	if err := r.Start(ctx); err != nil {
		return err
	}
	select {
	case <-r.stopped:
		return nil
	case <-ctx.Done():
	}
	// ctx has ended, and with it every worker's: they admit nothing more.
	// Stop waits for them to record what they sent, within the grace: the
	// sends still running then are abandoned, and the rest is committed.
	sctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), recordGrace+commitGrace)
	defer cancel()
	r.Stop(sctx)
	return ctx.Err()
}
