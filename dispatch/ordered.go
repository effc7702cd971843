package dispatch

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/google/uuid"

	"github.com/relayer-go/relayer"
	"github.com/relayer-go/relayer/internal/workerstore"
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
	// membershipWatchMax bounds the time between two reads of the lane
	// group's membership: a member that joins or leaves changes the others'
	// shares within it, where renewals come a third of the lease apart.
	membershipWatchMax = 500 * time.Millisecond
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
	// 10,000. Default: 100. A batch holds up to 16 lanes' rows in memory at
	// once. Larger values deliver a backlog in fewer reads of each lane, at
	// the cost of that memory and of longer transactions.
	BatchSize int
	// Concurrency is how many batches the worker runs at once, 1 to 64, each
	// on a connection pinned from the pool for it (pinned on first use and
	// kept until the worker stops; size the pool for them) and over up to 16
	// ready lanes. A lane whose send failed or was slow runs in batches of
	// its own until it sends cleanly, so with Concurrency n, up to n-1 slow
	// lanes leave the rest flowing. The other lanes share one batch at a
	// time, unless half a batch of them or more are ready at once, as in a
	// backlog (see the package documentation). Default: 2.
	Concurrency int
	// Name describes the worker in its logs and in the owner column of its
	// lease rows, for operators; any text. Default: host name and process id.
	Name string
	// Logger receives the worker's logs. Default: slog.Default().
	Logger *slog.Logger
}

// options lists the fields that have a key, a range or a default; the
// poll interval's default and bound depend on the lease (see Validate and
// withDefaults).
func (o *OrderedOptions) options() []option {
	return []option{
		durationOption("LeaseDuration", &o.LeaseDuration, LaneLeaseDurationMin, LaneLeaseDurationMax, laneLeaseDurationDefault),
		durationOption("PollInterval", &o.PollInterval, 1, 0, 0),
		intOption("BatchSize", &o.BatchSize, 1, BatchSizeMax, batchSizeDefault),
		intOption("Concurrency", &o.Concurrency, 1, OrderedConcurrencyMax, orderedConcurrencyDefault),
		ownerOption("Name", &o.Name),
		loggerOption(&o.Logger),
	}
}

// Validate reports the first field out of range, defaults applied.
func (o OrderedOptions) Validate() error {
	if err := checkOptions(o.options()); err != nil {
		return err
	}
	if d := o.withDefaults(); d.PollInterval >= d.LeaseDuration/3 {
		return fmt.Errorf("%w: PollInterval must be less than a third of LeaseDuration (%s), got %s", ErrInvalidOptions, d.LeaseDuration, d.PollInterval)
	}
	return nil
}

func (o OrderedOptions) withDefaults() OrderedOptions {
	o = withDefaults(o)
	if o.PollInterval == 0 {
		o.PollInterval = orderedPollDefault
		if o.PollInterval >= o.LeaseDuration/3 {
			o.PollInterval = o.LeaseDuration / 4
		}
	}
	return o
}

// orderedWorker is one member of an outbox's lane group: its membership
// lease, its share of the lanes, its counters and its lifecycle. Its group
// (laneGroup) runs the batches of every member's share; the package
// documentation (Ordered dispatch) describes the protocol.
type orderedWorker struct {
	*outboxCore
	name     string
	lanes    int // the outbox's lane count
	instance string
	token    uuid.UUID
	opts     OrderedOptions
	stats    counters

	assigned atomic.Pointer[[]int]
	members  atomic.Int64
	beyond   atomic.Int64 // pending rows in lanes past o.lanes, at the last heartbeat
	// group is the dispatch loop the worker shares with its siblings in a
	// Runner (a group of its own when built alone).
	group *laneGroup
	// refresh asks the heartbeat goroutine to read the membership now.
	refresh chan struct{}
	// peersChanged, when set, tells the worker's siblings in this process
	// that the membership changed or lanes were released (a Runner sets
	// it); other processes hear of it through the outbox's wake-up channel.
	peersChanged func()
	// joined is set once the worker joined the membership; a Runner joins
	// its ordered workers together before starting any (see joinOrdered).
	joined atomic.Bool
	loop   loop
}

// newOrdered builds an ordered worker on core, with opts and the outbox's
// lane count validated.
func newOrdered(core *outboxCore, opts OrderedOptions) *orderedWorker {
	opts = opts.withDefaults()
	lanes, _ := core.outbox.LaneCount()
	o := &orderedWorker{
		outboxCore: core,
		name:       opts.Name,
		lanes:      lanes,
		instance:   uuid.NewString(),
		token:      uuid.New(),
		opts:       opts,
		refresh:    make(chan struct{}, 1),
		loop:       newLoop(true),
	}
	empty := []int{}
	o.assigned.Store(&empty)
	newLaneGroup(o)
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
	o.group.probeNow.Store(true)
	o.group.signal()
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
	return o.loop.startAfter(ctx, "ordered dispatcher", func(ctx context.Context) error {
		if !o.joined.Load() {
			if err := o.join(ctx); err != nil {
				return err
			}
		}
		o.group.enlist(o)
		return nil
	}, o.work)
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
		tr, ok := o.transports[r.Transport]
		if !ok {
			return fmt.Errorf("%w: ordered route of %q names transport %q, which is not registered", ErrInvalidOptions, typ, r.Transport)
		}
		if _, err := o.caps.getChecked(ctx, endpoint{r.Transport, r.Destination}, tr, requireOrdering); err != nil {
			return fmt.Errorf("%w: ordered route of %q: %w", ErrInvalidOptions, typ, err)
		}
	}
	if err := o.heartbeat(ctx); err != nil {
		return fmt.Errorf("dispatch: join membership: %w", err)
	}
	o.joined.Store(true)
	o.tellPeers(ctx)
	return nil
}

// work heartbeats and dispatches until ctx ends or Stop, then leaves.
func (o *orderedWorker) work(ctx context.Context) {
	release := o.serve(ctx, o.opts.Logger)
	defer release()
	var wg sync.WaitGroup
	wg.Go(func() { o.heartbeats(ctx) })
	wg.Go(func() { o.group.serve(ctx, o) })
	wg.Wait()
	o.leave()
}

// Stop lets the batch in flight finish and commit, then releases the worker's
// membership and lane leases so that other members take over at once; a crash
// instead leaves them to expire. If ctx ends first, the batch admits no more
// rows, records what it sent (for at most 10 s more) and ends, and Stop
// returns ctx's error. Stop is idempotent.
func (o *orderedWorker) Stop(ctx context.Context) error { return o.loop.stop(ctx) }

// leave releases the worker's membership lease (its group releases the lane
// leases when its last member stops).
func (o *orderedWorker) leave() {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if err := o.store.ReleaseLeases(ctx, o.token); err != nil {
		o.opts.Logger.Warn("dispatch: ordered leases not released; they expire by themselves",
			slog.String("worker", o.name), slog.String("error", err.Error()))
		return
	}
	o.tellPeers(ctx)
}

// tellPeers tells the other members that the membership changed or that
// lanes were released, so that they take up their new share at once rather
// than at their next read of the membership or their poll: the siblings in
// this process directly, the others through the outbox's wake-up channel
// (heard by runners with RunnerOptions.Listen).
func (o *orderedWorker) tellPeers(ctx context.Context) {
	if o.peersChanged != nil {
		o.peersChanged()
	}
	nctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), time.Second)
	defer cancel()
	if err := o.store.Notify(nctx, uuid.Nil); err != nil {
		o.opts.Logger.Debug("dispatch: ordered worker could not notify the others; they see the change at their next read",
			slog.String("worker", o.name), slog.String("error", err.Error()))
	}
}

// refreshMembership makes the heartbeat goroutine read the membership now.
func (o *orderedWorker) refreshMembership() {
	select {
	case o.refresh <- struct{}{}:
	default:
	}
}

// heartbeat renews membership, recomputes this instance's lanes, and looks
// for rows in lanes this worker never scans.
func (o *orderedWorker) heartbeat(ctx context.Context) error {
	member := workerstore.Lease{Name: workerstore.MemberLeaseName(o.instance), Owner: o.name, Token: o.token}
	members, err := o.store.Heartbeat(ctx, member, o.opts.LeaseDuration)
	if err != nil {
		return err
	}
	if !o.share(members) {
		return errors.New("own membership missing after heartbeat")
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

// share takes this instance's share of the lanes among members, the live
// members' lease names in order; a share that changed wakes the worker, so
// that it releases the lanes it lost and probes those it gained. It reports
// false when this instance is not among members.
func (o *orderedWorker) share(members []string) bool {
	rank := slices.Index(members, workerstore.MemberLeaseName(o.instance))
	if rank < 0 {
		return false
	}
	lanes := laneShare(rank, len(members), o.lanes)
	o.members.Store(int64(len(members)))
	if old := o.assigned.Swap(&lanes); !slices.Equal(*old, lanes) {
		o.Wake()
	}
	return true
}

// RowsBeyondLanes returns how many pending rows (counted up to 10,000) the
// last heartbeat found in lanes numbered the outbox's lane count or more.
// Such rows are never delivered by this worker: their writers were
// configured with a different lane count. Anything but zero is logged as an error at each heartbeat.
func (o *orderedWorker) RowsBeyondLanes() int64 { return o.beyond.Load() }

// heartbeats runs on its own goroutine and pooled connections, never behind a
// slow send. It renews the membership every third of the lease and, between
// renewals, reads it (writing nothing) every membershipWatchMax or when
// told to, so that members joining and leaving change the split within
// that. When renewals fail for a whole lease, the instance gives up its
// lanes, since the others may already have taken them.
func (o *orderedWorker) heartbeats(ctx context.Context) {
	renewEvery := o.opts.LeaseDuration / 3
	watchEvery := min(renewEvery, membershipWatchMax)
	renewed, tried := time.Now(), time.Now()
	t := time.NewTicker(watchEvery)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-o.loop.quit:
			return
		case <-t.C:
		case <-o.refresh:
		}
		if time.Since(tried) < renewEvery {
			o.watchMembers(ctx, watchEvery)
			continue
		}
		tried = time.Now()
		hctx, cancel := context.WithTimeout(ctx, renewEvery)
		err := o.heartbeat(hctx)
		cancel()
		switch {
		case err == nil:
			renewed = time.Now()
		case ctx.Err() != nil:
			return
		default:
			o.opts.Logger.Error("dispatch: ordered heartbeat failed", slog.String("worker", o.name), slog.String("error", err.Error()))
			if time.Since(renewed) >= o.opts.LeaseDuration {
				empty := []int{}
				o.assigned.Store(&empty)
			}
		}
	}
}

// watchMembers reads the membership and takes this instance's share of it.
// A failed read changes nothing: the next renewal reports failures.
func (o *orderedWorker) watchMembers(ctx context.Context, within time.Duration) {
	wctx, cancel := context.WithTimeout(ctx, within)
	defer cancel()
	if members, err := o.store.Members(wctx); err == nil {
		o.share(members)
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

// pinned is how many connections the worker pins: one per batch it runs
// at once.
func (o *orderedWorker) pinned() int { return o.opts.Concurrency }
