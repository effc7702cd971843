package dispatch

import (
	"context"
	"log/slog"
	"time"

	"github.com/google/uuid"

	"github.com/relayer-go/relayer/internal/workerstore"
)

// activityEvery is how often a runner records its deliveries while the
// count grows.
const activityEvery = time.Second

// activityRecorder records, for consoles, how many rows a runner's workers
// have delivered since it started (store.Store.DeliveredCounts): about once
// a second while the count grows, and once more when the runner stops.
type activityRecorder struct {
	st     *workerstore.Store
	token  uuid.UUID
	owner  string
	total  func() int64
	logger *slog.Logger
	loop   loop

	recorded int64 // the count last recorded; -1 before the first
	failing  bool  // the last record failed (logged once until one succeeds)
}

func newActivityRecorder(st *workerstore.Store, owner string, total func() int64, logger *slog.Logger) *activityRecorder {
	return &activityRecorder{st: st, token: uuid.New(), owner: owner, total: total, logger: logger, loop: newLoop(false), recorded: -1}
}

func (a *activityRecorder) Start(ctx context.Context) error {
	return a.loop.start(ctx, "delivery record", a.run)
}

func (a *activityRecorder) Stop(ctx context.Context) error {
	err := a.loop.stop(ctx)
	// The workers have stopped: record their final count.
	rctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 2*time.Second)
	defer cancel()
	a.record(rctx)
	return err
}

func (a *activityRecorder) pinned() int { return 0 }

func (a *activityRecorder) run(ctx context.Context) {
	if err := a.st.PruneDelivered(ctx); err != nil && ctx.Err() == nil {
		a.logger.Debug("dispatch: pruning old delivery records failed", slog.String("error", err.Error()))
	}
	a.record(ctx)
	every(ctx, activityEvery, func() { a.record(ctx) })
}

// record writes the count when it changed since the last record.
func (a *activityRecorder) record(ctx context.Context) {
	n := a.total()
	if n == a.recorded {
		return
	}
	if err := a.st.RecordDelivered(ctx, a.token, a.owner, n); err != nil {
		if !a.failing && ctx.Err() == nil {
			a.logger.Warn("dispatch: recording the deliveries for consoles failed; trying again each second", slog.String("error", err.Error()))
		}
		a.failing = true
		return
	}
	a.recorded, a.failing = n, false
}
