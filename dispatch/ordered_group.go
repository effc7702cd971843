package dispatch

// The lane group: one dispatch loop shared by the ordered workers of a
// Runner. Each worker stays a member of the outbox's membership in its own
// right (its membership lease, its share of the lanes, its name and
// counters), but their lanes are batched together, so that lanes of several
// workers go in one transaction: more workers in one process then cost the
// database no more transactions than one.

import (
	"context"
	"log/slog"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/google/uuid"
)

// laneGroup is the ordered dispatch of one or more ordered workers of a
// process, its members: one loop (ordered_loop.go) that batches the lanes
// of their shares, each batch in named steps (ordered_batch.go,
// ordered_send.go, ordered_settle.go), the keepers of lanes whose send
// outlived its batch (ordered_keeper.go), the lanes' cursors and lease
// renewals. The lane leases it takes carry its token, whichever member's
// share the lane is in, and each lease records that member's name as
// owner; the members' membership leases carry their own tokens.
type laneGroup struct {
	// outboxCore is the members' (a Runner's workers share one).
	*outboxCore
	// opts are the members' options, the first member's name aside: every
	// member of a group has the same options but for its name.
	opts OrderedOptions
	// members are the workers the group dispatches for, in the order built;
	// the first leads: lane leases out of any share are recorded under its
	// name, and its counters count the probes.
	members []*orderedWorker
	token   uuid.UUID
	// cursors are where the next read of each lane starts.
	cursors laneCursors
	// renewals says which lanes' leases were renewed a moment ago.
	renewals laneRenewals
	// live holds the members serving now (see serve): the group batches the
	// lanes of their shares only.
	live atomic.Pointer[[]*orderedWorker]

	wake chan struct{}
	// wokenMu guards woken: lanes a commit in this process touched, which
	// the group batches next without probing for them.
	wokenMu sync.Mutex
	woken   []int
	// probeNow asks the next scan to probe even while busy: Wake sets it.
	probeNow atomic.Bool

	mu     sync.Mutex
	active int  // members started and not yet stopped serving (see enlist)
	begun  bool // the loop has started
	quit   chan struct{}
	done   chan struct{}
	cancel context.CancelFunc // ends the loop's context
	killed context.Context    // ends detached work at once (see detach)
	kill   context.CancelFunc
}

// newLaneGroup makes one group of members and sets it as theirs.
func newLaneGroup(members ...*orderedWorker) *laneGroup {
	killed, kill := context.WithCancel(context.Background())
	g := &laneGroup{
		outboxCore: members[0].outboxCore,
		opts:       members[0].opts,
		members:    members,
		token:      uuid.New(),
		wake:       make(chan struct{}, 1),
		quit:       make(chan struct{}),
		done:       make(chan struct{}),
		killed:     killed,
		kill:       kill,
	}
	none := []*orderedWorker{}
	g.live.Store(&none)
	for _, m := range members {
		m.group = g
	}
	return g
}

// lead is the group's first member (see members).
func (g *laneGroup) lead() *orderedWorker { return g.members[0] }

// concurrency is how many batches the group runs at once: the sum of its
// members', so that a group pins as many connections as its members would.
func (g *laneGroup) concurrency() int {
	n := 0
	for _, m := range g.members {
		n += m.opts.Concurrency
	}
	return n
}

// share returns the lanes of the serving members' shares, ascending.
func (g *laneGroup) share() []int {
	live := *g.live.Load()
	if len(live) == 1 {
		return *live[0].assigned.Load()
	}
	var lanes []int
	for _, m := range live {
		lanes = append(lanes, *m.assigned.Load()...)
	}
	slices.Sort(lanes)
	return slices.Compact(lanes)
}

// member returns the serving member whose share holds lane, or the lead
// when none does (a lane held while it changes hands).
func (g *laneGroup) member(lane int) *orderedWorker {
	for _, m := range *g.live.Load() {
		if slices.Contains(*m.assigned.Load(), lane) {
			return m
		}
	}
	return g.lead()
}

// owners returns the name recorded as the owner of each of lanes' leases.
func (g *laneGroup) owners(lanes []int) []string {
	names := make([]string, len(lanes))
	for i, l := range lanes {
		names[i] = g.member(l).name
	}
	return names
}

// signal wakes the loop without asking for a probe.
func (g *laneGroup) signal() {
	select {
	case g.wake <- struct{}{}:
	default:
	}
}

// wakeLanes makes the group batch lanes next, without a probe: rows have
// just committed in them. Lanes outside the serving shares are ignored when
// it takes them.
func (g *laneGroup) wakeLanes(lanes []int) {
	g.wokenMu.Lock()
	for _, l := range lanes {
		if !slices.Contains(g.woken, l) {
			g.woken = append(g.woken, l)
		}
	}
	g.wokenMu.Unlock()
	g.signal()
}

// wakeShared wakes the group for those of lanes in the serving members'
// shares, which committed rows touched; it ignores the others.
func (g *laneGroup) wakeShared(lanes []int) {
	share := g.share()
	mine := lanes[:0:0]
	for _, l := range lanes {
		if slices.Contains(share, l) {
			mine = append(mine, l)
		}
	}
	if len(mine) > 0 {
		g.wakeLanes(mine)
	}
}

// takeWoken returns and clears the lanes woken since the last call.
func (g *laneGroup) takeWoken() []int {
	g.wokenMu.Lock()
	defer g.wokenMu.Unlock()
	w := g.woken
	g.woken = nil
	return w
}

// quitting reports whether every member stopped serving.
func (g *laneGroup) quitting() bool { return isClosed(g.quit) }

// setLive records which members serve now.
func (g *laneGroup) setLive(m *orderedWorker, serving bool) {
	live := slices.Clone(*g.live.Load())
	if serving {
		live = append(live, m)
	} else {
		live = slices.DeleteFunc(live, func(x *orderedWorker) bool { return x == m })
	}
	g.live.Store(&live)
}

// enlist counts m, whose Start succeeded, and adds its share to the lanes
// the group batches: the group's loop ends only once every member counted
// has stopped serving. It is called before the member's body runs, so that
// the lanes of every member started are batched from the first scan, and a
// member stopping early cannot end the loop before a sibling that started
// has served.
func (g *laneGroup) enlist(m *orderedWorker) {
	g.mu.Lock()
	g.active++
	g.setLive(m, true)
	g.mu.Unlock()
}

// serve makes m one of the members the group dispatches for until m stops
// or ctx ends. The first member to serve starts the loop; the last to stop
// ends it, waiting for the batches in flight to commit, and releases the
// group's lane leases. A member that stops earlier leaves its lanes to the
// others' next read of the membership.
func (g *laneGroup) serve(ctx context.Context, m *orderedWorker) {
	g.mu.Lock()
	if !g.begun {
		g.begun = true
		var run context.Context
		run, g.cancel = context.WithCancel(context.WithValue(context.WithoutCancel(ctx), killKey{}, g.killed))
		go func() {
			defer close(g.done)
			g.run(run)
		}()
	}
	g.mu.Unlock()
	g.signal()

	select {
	case <-ctx.Done():
	case <-m.loop.quit:
	}
	g.mu.Lock()
	g.setLive(m, false)
	g.active--
	last := g.active == 0
	if last {
		close(g.quit)
	}
	g.mu.Unlock()
	g.signal()
	if !last {
		return
	}
	// The last member: the loop finishes its batches in flight, as a
	// worker's Stop promises, unless ctx ends (no row is admitted any more)
	// or Stop's own deadline passes (work in flight ends at once).
	killed, _ := ctx.Value(killKey{}).(context.Context)
	if killed == nil {
		killed = context.Background()
	}
	for waiting := true; waiting; {
		select {
		case <-g.done:
			waiting = false
		case <-ctx.Done():
			g.cancel()
			ctx = context.Background()
		case <-killed.Done():
			g.kill()
			g.cancel()
			killed = context.Background()
		}
	}
	g.cancel()
	g.releaseLanes()
}

// releaseLanes gives up every lane lease the group holds, so that other
// members take over at once; a crash instead leaves them to expire.
func (g *laneGroup) releaseLanes() {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if err := g.store.ReleaseLeases(ctx, g.token); err != nil {
		g.opts.Logger.Warn("dispatch: ordered lane leases not released; they expire by themselves",
			slog.String("worker", g.lead().name), slog.String("error", err.Error()))
	}
}
