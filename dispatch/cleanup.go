package dispatch

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"log/slog"
	"sync/atomic"
	"time"

	"github.com/google/uuid"

	"github.com/relayer-go/relayer/internal/workerstore"
	"github.com/relayer-go/relayer/store"
)

// Cleanup defaults and limits.
const (
	// cleanupInboxRetentionDefault keeps inbox records for seven days: the
	// default deduplication window.
	cleanupInboxRetentionDefault = 7 * 24 * time.Hour
	cleanupDeadRetentionDefault  = 30 * 24 * time.Hour
	// CleanupRetentionMin is the shortest retention accepted, for either table.
	// It guards against a unit mistake (InboxRetention: 7 is 7ns), which would
	// silently switch deduplication off.
	CleanupRetentionMin         = time.Minute
	cleanupBatchSizeDefault     = 1000
	cleanupIntervalDefault      = time.Minute
	cleanupLeaseDurationDefault = 30 * time.Second
)

// CleanupOptions configure retention cleanup ([RunnerOptions].Cleanup). The zero value of each field
// means its default.
type CleanupOptions struct {
	// InboxRetention is how long consumer inbox records are kept.
	//
	// THIS IS THE DEDUPLICATION WINDOW. A message redelivered after its inbox
	// record was deleted is not recognized as a duplicate, and its handler runs
	// again. Choose it longer than the longest time a message can take to be
	// delivered again: broker retention and redelivery delays, consumer
	// downtime, replays from an old offset, and a stuck outbox row being
	// retried. At least 1 minute. Default: 7 days (168h).
	InboxRetention time.Duration
	// DeadRetention is how long dead letters are kept, counted from when they
	// were moved to the dead-letter table; after it they can no longer be
	// inspected or redriven. At least 1 minute. Default: 30 days (720h).
	DeadRetention time.Duration
	// BatchSize bounds the rows one DELETE statement removes, 1 to 10,000, so
	// that a large backlog is deleted in short statements. Default: 1000.
	BatchSize int
	// Interval is the wait between two passes. Default: 1m.
	Interval time.Duration
	// LeaseDuration is how long the cleanup lease lasts without renewal; a pass
	// renews it every third of it. Between passes longer apart than the lease,
	// another instance may take it. At least 10ms. Default: 30s.
	LeaseDuration time.Duration
	// Owner describes this instance in the lease row. Default: host name and
	// process id.
	Owner string
	// Logger receives the worker's logs. Default: slog.Default().
	Logger *slog.Logger
}

// options lists the fields that have a key, a range or a default.
func (o *CleanupOptions) options() []option {
	return []option{
		durationOption("InboxRetention", &o.InboxRetention, CleanupRetentionMin, 0, cleanupInboxRetentionDefault),
		durationOption("DeadRetention", &o.DeadRetention, CleanupRetentionMin, 0, cleanupDeadRetentionDefault),
		intOption("BatchSize", &o.BatchSize, 1, BatchSizeMax, cleanupBatchSizeDefault),
		durationOption("Interval", &o.Interval, 1, 0, cleanupIntervalDefault),
		durationOption("LeaseDuration", &o.LeaseDuration, 10*time.Millisecond, 0, cleanupLeaseDurationDefault),
		ownerOption("Owner", &o.Owner),
		loggerOption(&o.Logger),
	}
}

// Validate reports the first field out of range. Zero fields are valid: they
// mean the default.
func (o CleanupOptions) Validate() error { return checkOptions(o.options()) }

// CleanupStats are retention cleanup's counters since it was made.
type CleanupStats struct {
	// Runs counts passes completed under the lease.
	Runs uint64
	// Skipped counts passes not made because another instance held the lease.
	Skipped uint64
	// Failures counts passes ended by an error, or by losing the lease; each is
	// logged.
	Failures uint64
	// InboxDeleted and DeadDeleted count the rows deleted from each table.
	InboxDeleted uint64
	DeadDeleted  uint64
	// InboxStatements and DeadStatements count the DELETE statements run on
	// each table: a pass runs one per BatchSize rows, plus the short one that
	// ends it.
	InboxStatements uint64
	DeadStatements  uint64
}

type cleanupCounters struct {
	runs, skipped, failures                                    atomic.Uint64
	inboxDeleted, deadDeleted, inboxStatements, deadStatements atomic.Uint64
}

func (c *cleanupCounters) snapshot() CleanupStats {
	return CleanupStats{
		Runs: c.runs.Load(), Skipped: c.skipped.Load(), Failures: c.failures.Load(),
		InboxDeleted: c.inboxDeleted.Load(), DeadDeleted: c.deadDeleted.Load(),
		InboxStatements: c.inboxStatements.Load(), DeadStatements: c.deadStatements.Load(),
	}
}

// errLeaseLost ends a pass whose lease renewal was refused.
var errLeaseLost = errors.New("dispatch: cleanup lease lost to another instance")

// cleanupWorker deletes expired inbox records and dead letters; the
// package documentation (Retention) describes it.
type cleanupWorker struct {
	db    *sql.DB
	opts  CleanupOptions
	store *workerstore.Store
	lease workerstore.Lease
	stats cleanupCounters

	loop loop
}

// newCleanup builds a cleanup worker on st, with opts validated.
func newCleanup(db *sql.DB, st *workerstore.Store, opts CleanupOptions) *cleanupWorker {
	opts = withDefaults(opts)
	return &cleanupWorker{
		db:    db,
		opts:  opts,
		store: st,
		lease: workerstore.Lease{Name: store.CleanupLeaseName, Owner: opts.Owner, Token: uuid.New()},
		loop:  newLoop(false),
	}
}

// Options returns the effective options, defaults applied.
func (c *cleanupWorker) Options() CleanupOptions { return c.opts }

// Stats returns the worker's counters.
func (c *cleanupWorker) Stats() CleanupStats { return c.stats.snapshot() }

// Start starts the worker, whose first pass begins at once; it runs until
// Stop or until ctx ends. A worker starts once: Start returns an
// error when it already started, and [ErrStopped] after Stop.
func (c *cleanupWorker) Start(ctx context.Context) error {
	return c.loop.start(ctx, "cleanup", c.run)
}

// Stop cancels the worker, waits for it within ctx, and releases the lease so
// that another instance can work at once. A statement cut short deletes
// nothing; the next pass, here or elsewhere, deletes its rows. Stop is
// idempotent.
func (c *cleanupWorker) Stop(ctx context.Context) error { return c.loop.stop(ctx) }

// Run starts the worker and blocks until ctx ends or Stop is called.
func (c *cleanupWorker) Run(ctx context.Context) error { return c.loop.run(ctx, "cleanup", c.run) }

func (c *cleanupWorker) run(ctx context.Context) {
	conn := newWorkerConn(c.db, c.store)
	acquired := false // whether this instance may hold the lease
	defer func() {
		cctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 5*time.Second)
		defer cancel()
		if acquired {
			if st, err := conn.store(cctx); err == nil {
				if err := st.ReleaseLease(cctx, c.lease); err != nil {
					c.opts.Logger.Warn("dispatch: cleanup lease not released; it expires by itself", slog.String("error", err.Error()))
				}
			}
		}
		conn.release(cctx)
	}()
	for ctx.Err() == nil {
		held, err := c.pass(ctx, conn)
		// After an error the lease may still be held; releasing it at the end is
		// fenced by the token, so trying costs nothing.
		acquired = held || acquired && err != nil
		switch {
		case errors.Is(err, errLeaseLost):
			c.stats.failures.Add(1)
			c.opts.Logger.Warn("dispatch: cleanup lease lost during a pass; another instance continues")
			conn.release(ctx)
		case err != nil:
			conn.broken()
			if ctx.Err() == nil {
				c.stats.failures.Add(1)
				c.opts.Logger.Error("dispatch: cleanup pass failed", slog.String("error", err.Error()))
			}
		default:
			conn.release(ctx)
		}
		c.idle(ctx)
	}
}

func (c *cleanupWorker) idle(ctx context.Context) {
	t := time.NewTimer(c.opts.Interval)
	defer t.Stop()
	select {
	case <-ctx.Done():
	case <-t.C:
	}
}

// pass makes one cleanup pass if it can take the lease. It reports whether it
// held the lease when it ended.
func (c *cleanupWorker) pass(ctx context.Context, conn *workerConn) (held bool, err error) {
	st, err := conn.store(ctx)
	if err != nil {
		return false, err
	}
	renewedAt := time.Now()
	held, until, err := st.AcquireLease(ctx, c.lease, c.opts.LeaseDuration)
	if err != nil {
		return false, err
	}
	if !held {
		c.stats.skipped.Add(1)
		return false, nil
	}
	// The lease expires LeaseDuration after the database's now(), the clock
	// that stamped received_at and dead_at; no round trip of its own is needed
	// to read it.
	now := until.Add(-c.opts.LeaseDuration)
	started := time.Now()
	tables := []struct {
		name              string
		before            time.Time
		del               func(context.Context, time.Time, int) (int64, error)
		deleted, executed *atomic.Uint64
	}{
		{"inbox", now.Add(-c.opts.InboxRetention), st.DeleteInboxBefore, &c.stats.inboxDeleted, &c.stats.inboxStatements},
		{"dead", now.Add(-c.opts.DeadRetention), st.DeleteDeadBefore, &c.stats.deadDeleted, &c.stats.deadStatements},
	}
	var deleted [2]int64
	for i, t := range tables {
		for {
			if time.Since(renewedAt) >= c.opts.LeaseDuration/3 {
				at := time.Now()
				if held, _, err = st.AcquireLease(ctx, c.lease, c.opts.LeaseDuration); err != nil {
					return true, err
				}
				if !held {
					return false, errLeaseLost
				}
				renewedAt = at
			}
			n, err := t.del(ctx, t.before, c.opts.BatchSize)
			if err != nil {
				return true, fmt.Errorf("%s: %w", t.name, err)
			}
			t.executed.Add(1)
			t.deleted.Add(uint64(n))
			deleted[i] += n
			if n < int64(c.opts.BatchSize) {
				break
			}
		}
	}
	c.stats.runs.Add(1)
	level := slog.LevelDebug
	if deleted[0]+deleted[1] > 0 {
		level = slog.LevelInfo
	}
	c.opts.Logger.Log(ctx, level, "dispatch: cleanup pass done",
		slog.Int64("inbox_deleted", deleted[0]), slog.Int64("dead_deleted", deleted[1]),
		slog.Time("inbox_cutoff", tables[0].before), slog.Time("dead_cutoff", tables[1].before),
		slog.Duration("took", time.Since(started)))
	return true, nil
}

// pinned is how many connections cleanup pins: one.
func (c *cleanupWorker) pinned() int { return 1 }
