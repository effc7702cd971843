package dispatch

import (
	"context"
	"database/sql"
	"fmt"
	"log/slog"
	"maps"
	"sync"
	"time"

	"github.com/relayer-go/relayer"
	"github.com/relayer-go/relayer/internal/workerstore"
	"github.com/relayer-go/relayer/store"
)

// outboxCore is what the workers of one outbox share: its store, its
// transports and retry policies, one capability cache (the 256-entry FIFO
// of capabilityCacheSize), one view of the destinations set aside as slow
// or unavailable, and one measure of the database's clock. A [Runner] builds
// one for all its workers; a worker built alone builds its own. Workers
// embed it. While any of them runs, the core keeps its clock measured and
// publishes its set-aside destinations (see serve), once for all of them.
type outboxCore struct {
	db         *sql.DB
	outbox     relayer.Outbox
	store      *workerstore.Store
	transports map[string]relayer.Transport
	retries    *retries
	caps       *capCache
	aside      *setAside
	clock      *dbClock
	// routes is the outbox's routes as they were when the core was made.
	routes *relayer.Routes
	// owner names the process in the published pauses.
	owner string

	// services counts the workers running (see serve); stopServices ends
	// the clock's measure and the publisher, and servicesDone is closed
	// once they have returned.
	servicesMu   sync.Mutex
	services     int
	stopServices context.CancelFunc
	servicesDone chan struct{}
}

// newOutboxCore validates what the outbox gives its workers and builds
// their shared state; it does not touch the database. db must not be nil.
func newOutboxCore(db *sql.DB, outbox relayer.Outbox) (*outboxCore, error) {
	st, err := workerstore.New(db, store.TablesOf(outbox))
	if err != nil {
		return nil, err
	}
	if err := outbox.Validate(); err != nil {
		return nil, fmt.Errorf("%w: %w", ErrInvalidOptions, err)
	}
	routes := &relayer.Routes{}
	if outbox.Routes != nil {
		routes = outbox.Routes.Clone()
	}
	return &outboxCore{
		db:         db,
		routes:     routes,
		outbox:     outbox,
		store:      st,
		transports: maps.Clone(outbox.Transports),
		retries:    newRetries(outbox),
		caps:       newCapCache(capabilityCacheSize),
		aside:      newSetAside(),
		clock:      &dbClock{},
		owner:      ownerOrDefault(""),
	}, nil
}

// serve runs the core's services for a worker whose body starts running,
// and returns what the worker calls once its body has returned. The first
// of the core's workers to run measures the database's clock before it
// returns, then starts measuring it every clockSyncEvery and publishing the
// set-aside destinations (see setAside.publish); the last to return stops
// both and waits for them, the publisher clearing what it published.
// logger is the first worker's.
func (c *outboxCore) serve(ctx context.Context, logger *slog.Logger) (release func()) {
	c.servicesMu.Lock()
	defer c.servicesMu.Unlock()
	c.services++
	if c.services == 1 {
		run, stop := context.WithCancel(context.WithoutCancel(ctx))
		done := make(chan struct{})
		c.stopServices, c.servicesDone = stop, done
		c.aside.setLogger(logger)
		c.syncClock(run, logger)
		var wg sync.WaitGroup
		wg.Go(func() { c.measureClock(run, logger) })
		wg.Go(func() { c.aside.publish(run, c.store, c.owner, logger) })
		go func() {
			wg.Wait()
			close(done)
		}()
	}
	var once sync.Once
	return func() { once.Do(c.leave) }
}

// leave ends one worker's use of the services (see serve).
func (c *outboxCore) leave() {
	c.servicesMu.Lock()
	c.services--
	last := c.services == 0
	stop, done := c.stopServices, c.servicesDone
	c.servicesMu.Unlock()
	if last {
		stop()
		<-done
	}
}

// measureClock measures the database's clock every clockSyncEvery until
// ctx ends.
func (c *outboxCore) measureClock(ctx context.Context, logger *slog.Logger) {
	every(ctx, clockSyncEvery, func() { c.syncClock(ctx, logger) })
}

// every calls f every d until ctx ends.
func every(ctx context.Context, d time.Duration, f func()) {
	t := time.NewTicker(d)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
			f()
		}
	}
}

// syncClock measures the database's clock once, within 5 s, logging a
// failure: until a measure succeeds the last one stands (none: the local
// clock).
func (c *outboxCore) syncClock(ctx context.Context, logger *slog.Logger) {
	sctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	if err := c.clock.sync(sctx, c.store); err != nil && ctx.Err() == nil {
		logger.Warn("dispatch: measuring the database clock failed", slog.String("error", err.Error()))
	}
}

// newSender returns a sender on the core's transports, capability cache,
// set-aside destinations, clock and retry policies, for a worker that sends
// up to batchSize rows a call, each take held for claimFor, counting in
// stats and logging to logger; chain is sender.chain.
func (c *outboxCore) newSender(batchSize int, claimFor time.Duration, logger *slog.Logger, stats *counters, chain bool) *sender {
	return &sender{
		transports: c.transports,
		caps:       c.caps,
		batchSize:  batchSize,
		claimFor:   claimFor,
		logger:     logger,
		stats:      stats,
		chain:      chain,
		aside:      c.aside,
		clock:      c.clock,
		retries:    c.retries,
	}
}
