package dispatch_test

import (
	"context"
	"errors"
	"fmt"
	"reflect"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/google/uuid"

	"github.com/relayer-go/relayer"
	"github.com/relayer-go/relayer/dispatch"
	"github.com/relayer-go/relayer/enlist"
	"github.com/relayer-go/relayer/internal/testkit"
	"github.com/relayer-go/relayer/internal/testkit/testdb"
	"github.com/relayer-go/relayer/store"
)

// runnerFor builds a runner on b's outbox and a writer that notifies it.
func runnerFor(t *testing.T, b *bundle, opts dispatch.RunnerOptions) (*dispatch.Runner, *enlist.Writer) {
	t.Helper()
	if opts.Logger == nil {
		opts.Logger = b.logger()
	}
	opts.Recovery.PollInterval = 50 * time.Millisecond
	opts.Ordered.PollInterval = 50 * time.Millisecond
	r, err := dispatch.NewRunner(b.db, b.outbox, opts)
	must(t, err)
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		r.Stop(ctx)
	})
	w, err := enlist.NewWriter(b.outbox, enlist.Options{Listener: r})
	must(t, err)
	return r, w
}

func publishWith(t *testing.T, b *bundle, w *enlist.Writer, msgs ...relayer.Outgoing) {
	t.Helper()
	must(t, w.RunInTx(context.Background(), b.db, nil, func(tx *enlist.Tx) error {
		return tx.PublishAll(context.Background(), msgs...)
	}))
}

// One runner delivers unordered messages at once, ordered ones in order and
// scheduled ones when due, and stops cleanly.
func TestRunnerDeliversEveryKind(t *testing.T) {
	t.Parallel()
	b := setup(t, dispatch.DirectOptions{})
	r, w := runnerFor(t, b, dispatch.RunnerOptions{})
	if s := r.Stats(); len(s.Ordered) != 1 || s.Direct == nil || s.Recovery == nil || s.Cleanup == nil {
		t.Fatalf("runner workers: direct %v, recovery %v, %d ordered, cleanup %v; want all, one ordered",
			s.Direct != nil, s.Recovery != nil, len(s.Ordered), s.Cleanup != nil)
	}
	must(t, r.Start(context.Background()))
	if err := r.Start(context.Background()); err == nil {
		t.Error("a second Start succeeded")
	}
	publishWith(t, b, w,
		relayer.NewOutgoing(Placed{1}),
		relayer.NewOutgoing(Shipped{1}, relayer.Key("k")),
		relayer.NewOutgoing(Shipped{2}, relayer.Key("k")),
		relayer.NewOutgoing(Billed{1}, relayer.DeliverAt(time.Now().Add(300*time.Millisecond))))
	b.waitSent(t, 4)
	b.waitRows(t, 0)
	checkOrder(t, b.mem.Messages("orders.shipped"), []string{"k"}, 2, false)
	if s := r.Stats(); s.Direct.Sent != 1 || s.Recovery.Sent != 1 || s.Ordered[0].Stats.Sent != 2 {
		t.Errorf("sent by direct %d, recovery %d, ordered %d; want 1, 1, 2",
			s.Direct.Sent, s.Recovery.Sent, s.Ordered[0].Stats.Sent)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	must(t, r.Stop(ctx))
	must(t, r.Stop(ctx))
	if err := r.Start(context.Background()); !errors.Is(err, dispatch.ErrStopped) {
		t.Errorf("Start after Stop = %v, want ErrStopped", err)
	}
}

// Each worker kind can be turned off; with direct dispatch off, commits wake
// recovery, which sends at once.
func TestRunnerWithoutDirectDispatch(t *testing.T) {
	t.Parallel()
	b := setup(t, dispatch.DirectOptions{})
	r, w := runnerFor(t, b, dispatch.RunnerOptions{DisableDirect: true, DisableOrdered: true, DisableCleanup: true,
		Recovery: dispatch.RecoveryOptions{MinAge: time.Hour}})
	if s := r.Stats(); s.Direct != nil || len(s.Ordered) != 0 || s.Cleanup != nil || s.Recovery == nil {
		t.Fatal("workers turned off are still there")
	}
	if pinned, _ := r.Connections(); pinned != dispatch.RecoveryWorkersDefault {
		t.Errorf("recovery alone pins %d connections, want %d", pinned, dispatch.RecoveryWorkersDefault)
	}
	must(t, r.Start(context.Background()))
	publishWith(t, b, w, relayer.NewOutgoing(Placed{1}))
	b.waitSent(t, 1)
	b.waitRows(t, 0)
}

// With direct dispatch off, a row that commits after a later id was sent is
// sent at its commit too, not when recovery next goes back to the beginning
// (a minute away here).
func TestRunnerWithoutDirectDispatchSendsLateCommitsAtOnce(t *testing.T) {
	t.Parallel()
	b := setup(t, dispatch.DirectOptions{})
	r, err := dispatch.NewRunner(b.db, b.outbox, dispatch.RunnerOptions{DisableDirect: true, DisableOrdered: true, DisableCleanup: true,
		Logger: b.logger(), Recovery: dispatch.RecoveryOptions{MinAge: time.Hour, PollInterval: time.Minute}})
	must(t, err)
	t.Cleanup(func() { r.Stop(context.Background()) })
	w, err := enlist.NewWriter(b.outbox, enlist.Options{Listener: r})
	must(t, err)
	must(t, r.Start(context.Background()))
	ctx := context.Background()
	late, err := w.Begin(ctx, b.db, nil)
	must(t, err)
	defer late.Rollback()
	must(t, late.Publish(ctx, Placed{1})) // the lower id, committed last
	publishWith(t, b, w, relayer.NewOutgoing(Placed{2}))
	b.waitSent(t, 1)
	start := time.Now()
	must(t, late.Commit())
	b.waitSent(t, 2)
	if d := time.Since(start); d > 5*time.Second {
		t.Errorf("the late commit was sent after %s", d)
	}
	b.waitRows(t, 0)
}

// startedRunner builds a runner on b's outbox with opts and a writer that
// notifies it, starts it, and returns once its ordered worker has joined and
// its workers have made their first, empty scans.
func startedRunner(t *testing.T, b *bundle, opts dispatch.RunnerOptions) (*dispatch.Runner, *enlist.Writer) {
	t.Helper()
	r, err := dispatch.NewRunner(b.db, b.outbox, opts)
	must(t, err)
	t.Cleanup(func() { r.Stop(context.Background()) })
	w, err := enlist.NewWriter(b.outbox, enlist.Options{Listener: r})
	must(t, err)
	must(t, r.Start(context.Background()))
	testkit.Eventually(t, 10*time.Second, func() bool { return len(r.Lanes()) != 0 }, "the ordered worker joining")
	firstScans(t, r)
	return r, w
}

// firstScans waits until each of r's recovery and ordered workers has made
// its first scan: what they do next waits for a wake-up or their poll.
func firstScans(t *testing.T, r *dispatch.Runner) {
	t.Helper()
	testkit.Eventually(t, 10*time.Second, func() bool {
		st := r.Stats()
		if st.Recovery != nil && st.Recovery.Scans == 0 {
			return false
		}
		for _, o := range st.Ordered {
			if o.Stats.Scans == 0 {
				return false
			}
		}
		return true
	}, "every worker's first scan")
}

// With direct dispatch off, commits of ordered rows wake the ordered workers
// and not recovery, which would take nothing (its poll is a minute away
// here); a commit of an unordered row still wakes it.
func TestRunnerWithoutDirectDispatchWakesRecoveryForUnorderedRowsOnly(t *testing.T) {
	t.Parallel()
	b := setup(t, dispatch.DirectOptions{})
	r, w := startedRunner(t, b, dispatch.RunnerOptions{DisableDirect: true, DisableCleanup: true, Logger: b.logger(),
		Recovery: dispatch.RecoveryOptions{PollInterval: time.Minute}, Ordered: dispatch.OrderedOptions{PollInterval: 5 * time.Second}})
	before := r.Stats().Recovery.Scans
	const commits = 20
	for i := 1; i <= commits; i++ {
		publishWith(t, b, w, relayer.NewOutgoing(Shipped{i}, relayer.Key("k")))
		b.waitSent(t, i)
	}
	if scans := r.Stats().Recovery.Scans - before; scans > 2 {
		t.Errorf("%d commits of ordered rows made recovery take %d times, want no take", commits, scans)
	}
	start := time.Now()
	publishWith(t, b, w, relayer.NewOutgoing(Placed{1}))
	b.waitSent(t, commits+1)
	if d := time.Since(start); d > 5*time.Second {
		t.Errorf("an unordered row was sent %s after its commit", d)
	}
	b.waitRows(t, 0)
}

// An ordered message committed through a runner's writer is sent at once,
// not at the ordered worker's next poll (5 s away here).
func TestRunnerWakesOrderedWorkersAtCommit(t *testing.T) {
	t.Parallel()
	b := setup(t, dispatch.DirectOptions{})
	_, w := startedRunner(t, b, dispatch.RunnerOptions{DisableCleanup: true, Logger: b.logger(),
		Ordered: dispatch.OrderedOptions{PollInterval: 5 * time.Second}})
	for i := 1; i <= 3; i++ {
		start := time.Now()
		publishWith(t, b, w, relayer.NewOutgoing(Shipped{i}, relayer.Key("k")))
		b.waitSent(t, i)
		if d := time.Since(start); d > 2*time.Second {
			t.Errorf("ordered message %d sent %s after its commit", i, d)
		}
	}
	checkOrder(t, b.mem.Messages("orders.shipped"), []string{"k"}, 3, false)
}

// A bounded pool without room for the workers and the application is refused
// at Start, with the numbers and the fix.
func TestRunnerRefusesASmallPool(t *testing.T) {
	t.Parallel()
	b := setup(t, dispatch.DirectOptions{})
	db := testdb.Open(t, "pgx")
	db.SetMaxOpenConns(2)
	outbox := b.outbox
	r, err := dispatch.NewRunner(db, outbox, dispatch.RunnerOptions{Logger: b.logger()})
	must(t, err)
	defer r.Stop(context.Background())
	err = r.Start(context.Background())
	if !errors.Is(err, dispatch.ErrPoolTooSmall) || !strings.Contains(err.Error(), "MaxOpenConns is 2") || !strings.Contains(err.Error(), "at least 9") {
		t.Fatalf("Start with a pool of 2 = %v, want ErrPoolTooSmall asking for at least 9", err)
	}
	db.SetMaxOpenConns(9)
	r2, err := dispatch.NewRunner(db, outbox, dispatch.RunnerOptions{Logger: b.logger(), DisableOrdered: true})
	must(t, err)
	must(t, r2.Start(context.Background()))
	must(t, r2.Stop(context.Background()))
}

func TestRunnerOptions(t *testing.T) {
	t.Parallel()
	b := setup(t, dispatch.DirectOptions{})
	for name, opts := range map[string]dispatch.RunnerOptions{
		"Direct":         {Direct: dispatch.DirectOptions{Workers: 99}},
		"Recovery":       {Recovery: dispatch.RecoveryOptions{BatchSize: -1}},
		"Ordered":        {Ordered: dispatch.OrderedOptions{Concurrency: 100}},
		"Cleanup":        {Cleanup: dispatch.CleanupOptions{BatchSize: -1}},
		"OrderedWorkers": {OrderedWorkers: 17},
		"PoolHeadroom":   {PoolHeadroom: -1},
	} {
		_, err := dispatch.NewRunner(b.db, b.outbox, opts)
		if !errors.Is(err, dispatch.ErrInvalidOptions) || !strings.Contains(err.Error(), name) {
			t.Errorf("%s out of range: %v, want ErrInvalidOptions naming it", name, err)
		}
	}
	if _, err := dispatch.NewRunner(nil, b.outbox, dispatch.RunnerOptions{}); !errors.Is(err, store.ErrNilDB) {
		t.Errorf("NewRunner with a nil *sql.DB = %v, want store.ErrNilDB", err)
	}
	badSchema := b.outbox
	badSchema.Schema = "Bad-Name"
	if _, err := dispatch.NewRunner(b.db, badSchema, dispatch.RunnerOptions{}); !errors.Is(err, store.ErrInvalidOptions) {
		t.Errorf("NewRunner with an invalid schema name = %v, want store.ErrInvalidOptions", err)
	}
	badLanes := b.outbox
	badLanes.Lanes = 70000
	if _, err := dispatch.NewRunner(b.db, badLanes, dispatch.RunnerOptions{}); !errors.Is(err, dispatch.ErrInvalidOptions) || !errors.Is(err, relayer.ErrInvalidOutbox) {
		t.Errorf("NewRunner with a lane count out of range = %v, want ErrInvalidOptions and relayer.ErrInvalidOutbox", err)
	}
}

// A Runner's stats count the rows its ordered workers never deliver: here a
// row another program moved to a lane out of the outbox's range.
func TestRunnerStatsCountRowsBeyondLanes(t *testing.T) {
	t.Parallel()
	b := setup(t, dispatch.DirectOptions{})
	b.shipped(t, keyList(1), 1, 1)
	_, err := b.db.Exec(`UPDATE "` + b.schema + `".ob_outbox SET lane = -1`)
	must(t, err)
	r, _ := startedRunner(t, b, dispatch.RunnerOptions{DisableDirect: true, DisableRecovery: true, DisableCleanup: true, Logger: b.logger(),
		Ordered: dispatch.OrderedOptions{LeaseDuration: 3 * time.Second, PollInterval: 50 * time.Millisecond}})
	testkit.Eventually(t, 10*time.Second, func() bool { return r.Stats().RowsBeyondLanes == 1 }, "the row beyond the lanes counted in the runner's stats")
}

// Run blocks until its context ends, cancelling the workers, or until Stop.
func TestRunnerRun(t *testing.T) {
	t.Parallel()
	b := setup(t, dispatch.DirectOptions{})
	r, w := runnerFor(t, b, dispatch.RunnerOptions{DisableOrdered: true, DisableCleanup: true})
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- r.Run(ctx) }()
	publishWith(t, b, w, relayer.NewOutgoing(Placed{1}))
	b.waitSent(t, 1)
	cancel()
	select {
	case err := <-done:
		if !errors.Is(err, context.Canceled) {
			t.Errorf("Run after its context ended = %v, want context.Canceled", err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("Run did not return after its context ended")
	}

	r2, w2 := runnerFor(t, b, dispatch.RunnerOptions{DisableOrdered: true, DisableCleanup: true})
	go func() { done <- r2.Run(context.Background()) }()
	publishWith(t, b, w2, relayer.NewOutgoing(Placed{2}))
	b.waitSent(t, 2) // running
	must(t, r2.Stop(context.Background()))
	select {
	case err := <-done:
		if err != nil {
			t.Errorf("Run after Stop = %v, want nil", err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("Run did not return after Stop")
	}
}

// capsFailing is a transport whose Capabilities fails while fails is
// positive, as a broker that is not reachable yet.
type capsFailing struct {
	relayer.Transport
	fails atomic.Int32
}

func (c *capsFailing) Capabilities(ctx context.Context, destination string) (relayer.Capabilities, error) {
	if c.fails.Add(-1) >= 0 {
		return relayer.Capabilities{}, errors.New("broker not reachable yet")
	}
	return c.Transport.Capabilities(ctx, destination)
}

// A Start that fails after some workers started leaves a runner that starts
// again, with new workers, and delivers.
func TestRunnerStartsAgainAfterAFailedStart(t *testing.T) {
	t.Parallel()
	b := setup(t, dispatch.DirectOptions{})
	tr := &capsFailing{Transport: b.mem}
	tr.fails.Store(1)
	outbox := b.outbox
	outbox.Transports = map[string]relayer.Transport{"mem": tr}
	r, err := dispatch.NewRunner(b.db, outbox, dispatch.RunnerOptions{Logger: b.logger()})
	must(t, err)
	t.Cleanup(func() { r.Stop(context.Background()) })
	w, err := enlist.NewWriter(outbox, enlist.Options{Listener: r})
	must(t, err)
	first := r.RecoveryWorker()
	if err := r.Start(context.Background()); err == nil || !strings.Contains(err.Error(), "not reachable") {
		t.Fatalf("first Start = %v, want the transport's error", err)
	}
	must(t, r.Start(context.Background()))
	if r.RecoveryWorker() == first {
		t.Error("the runner kept the recovery worker its failed Start had stopped")
	}
	publishWith(t, b, w, relayer.NewOutgoing(Placed{1}), relayer.NewOutgoing(Shipped{1}, relayer.Key("k")))
	b.waitSent(t, 2)
	if err := r.Start(context.Background()); err == nil {
		t.Error("a Start after one that succeeded succeeded")
	}
}

// LoadRunnerOptions reads the runner's own keys and each worker's section,
// and names the key of a bad value.
func TestLoadRunnerOptions(t *testing.T) {
	t.Parallel()
	o, err := dispatch.LoadRunnerOptions(dispatch.MapSource(map[string]string{
		"DisableRecovery": "true", "Listen": "1", "OrderedWorkers": "3", "PoolHeadroom": "4",
		"Direct.BatchSize": "50", "Recovery.MinAge": "2s", "Recovery.Owner": "node-a",
		"Ordered.Concurrency": "4", "Ordered.Name": "node-a", "Cleanup.Interval": "1m",
	}))
	must(t, err)
	want := dispatch.RunnerOptions{DisableRecovery: true, Listen: true, OrderedWorkers: 3, PoolHeadroom: 4,
		Direct: dispatch.DirectOptions{BatchSize: 50}, Recovery: dispatch.RecoveryOptions{MinAge: 2 * time.Second, Owner: "node-a"},
		Ordered: dispatch.OrderedOptions{Concurrency: 4, Name: "node-a"}, Cleanup: dispatch.CleanupOptions{Interval: time.Minute}}
	if !reflect.DeepEqual(o, want) {
		t.Errorf("LoadRunnerOptions = %+v,\nwant %+v", o, want)
	}
	for key, value := range map[string]string{
		"DisableOrdered": "maybe", "OrderedWorkers": "17", "Direct.BatchSize": "0",
		"Recovery.PollInterval": "soon", "Ordered.LeaseDuration": "1ms", "Cleanup.DeadRetention": "1s",
	} {
		_, err := dispatch.LoadRunnerOptions(dispatch.MapSource(map[string]string{key: value}))
		field := key[strings.LastIndex(key, ".")+1:]
		if !errors.Is(err, dispatch.ErrInvalidOptions) || !strings.Contains(err.Error(), field) {
			t.Errorf("LoadRunnerOptions(%s=%q) = %v, want an invalid-options error naming %s", key, value, err, field)
		}
	}
}

// From the environment, a section's key is the section and field in upper
// snake case.
func TestLoadRunnerOptionsFromEnvironment(t *testing.T) {
	t.Setenv("ORDERS_DISABLE_CLEANUP", "true")
	t.Setenv("ORDERS_DIRECT_QUEUE_CAPACITY", "64")
	t.Setenv("ORDERS_ORDERED_POLL_INTERVAL", "250ms")
	o, err := dispatch.LoadRunnerOptions(dispatch.EnvSource("ORDERS_"))
	must(t, err)
	if !o.DisableCleanup || o.Direct.QueueCapacity != 64 || o.Ordered.PollInterval != 250*time.Millisecond {
		t.Errorf("LoadRunnerOptions(env) = %+v", o)
	}
	if got := dispatch.EnvName("ORDERS_", "Ordered.PollInterval"); got != "ORDERS_ORDERED_POLL_INTERVAL" {
		t.Errorf("EnvName(Ordered.PollInterval) = %s, want the variable EnvSource read", got)
	}
}

// sendTimes wraps a transport and notes when each message was sent.
type sendTimes struct {
	relayer.Transport
	mu sync.Mutex
	at map[uuid.UUID]time.Time
}

func (s *sendTimes) Send(ctx context.Context, m *relayer.Message) error {
	err := s.Transport.Send(ctx, m)
	if err == nil {
		s.mu.Lock()
		if _, ok := s.at[m.ID]; !ok {
			s.at[m.ID] = time.Now()
		}
		s.mu.Unlock()
	}
	return err
}

// No message waits for a poll when members change: with four ordered
// workers started together and one of them stopping while commits go on,
// every ordered message is sent well within the poll interval of its
// commit, whichever worker's lane it is in before, during and after the
// change.
func TestRunnerOrderedMembershipChangeWaitsForNoPoll(t *testing.T) {
	t.Parallel()
	b := setup(t, dispatch.DirectOptions{})
	times := &sendTimes{Transport: b.mem, at: map[uuid.UUID]time.Time{}}
	outbox := b.outbox
	outbox.Transports = map[string]relayer.Transport{"mem": times}
	const poll = 3 * time.Second
	r, err := dispatch.NewRunner(b.db, outbox, dispatch.RunnerOptions{
		DisableDirect: true, DisableRecovery: true, DisableCleanup: true, OrderedWorkers: 4,
		Ordered: dispatch.OrderedOptions{PollInterval: poll, LeaseDuration: 30 * time.Second, Concurrency: 1}, Logger: b.logger()})
	must(t, err)
	t.Cleanup(func() { r.Stop(context.Background()) })
	w, err := enlist.NewWriter(outbox, enlist.Options{Listener: r})
	must(t, err)
	must(t, r.Start(context.Background()))

	committed := map[uuid.UUID]time.Time{}
	keys := keyList(64)
	publish := func(rounds int) {
		for i := range rounds {
			id := uuid.Must(relayer.NewID())
			msg := relayer.NewOutgoing(Shipped{i}, relayer.Key(keys[i%len(keys)]), relayer.WithID(id))
			publishWith(t, b, w, msg)
			committed[id] = time.Now()
			time.Sleep(2 * time.Millisecond)
		}
	}
	publish(200)
	settled := func() bool {
		for _, o := range r.Stats().Ordered {
			if len(o.Lanes) != 8 {
				return false
			}
		}
		return true
	}
	testkit.Eventually(t, 15*time.Second, settled, "the four workers splitting the lanes")
	must(t, r.OrderedWorkers()[1].Stop(context.Background()))
	publish(200)
	b.waitSent(t, len(committed))

	var slowest time.Duration
	over := 0
	times.mu.Lock()
	defer times.mu.Unlock()
	for id, c := range committed {
		d := times.at[id].Sub(c)
		slowest = max(slowest, d)
		if d > 100*time.Millisecond {
			over++
		}
	}
	t.Logf("%d messages; %d sent over 100 ms after their commit; slowest %s", len(committed), over, slowest.Round(time.Millisecond))
	if slowest >= poll/3 {
		t.Errorf("a message waited %s after its commit, as for a poll (%s) or a renewal", slowest.Round(time.Millisecond), poll)
	}
}

// A runner's ordered workers join the membership together before any starts,
// so that each begins with its share: none holds every lane while the
// others join.
func TestRunnerOrderedWorkersStartWithTheirShares(t *testing.T) {
	t.Parallel()
	b := setup(t, dispatch.DirectOptions{})
	r, err := dispatch.NewRunner(b.db, b.outbox, dispatch.RunnerOptions{
		DisableDirect: true, DisableRecovery: true, DisableCleanup: true, OrderedWorkers: 4,
		Ordered: dispatch.OrderedOptions{PollInterval: 3 * time.Second, Concurrency: 1}, Logger: b.logger()})
	must(t, err)
	t.Cleanup(func() { r.Stop(context.Background()) })
	must(t, r.Start(context.Background()))
	lanes, _ := b.outbox.LaneCount()
	var all []int
	for _, o := range r.Stats().Ordered {
		if len(o.Lanes) != lanes/4 {
			t.Errorf("%s starts with %d lanes, want %d: %v", o.Name, len(o.Lanes), lanes/4, o.Lanes)
		}
		all = append(all, o.Lanes...)
	}
	slices.Sort(all)
	want := make([]int, lanes)
	for l := range want {
		want[l] = l
	}
	if !slices.Equal(all, want) {
		t.Errorf("the workers' lanes together = %v, want each of the %d lanes once", all, lanes)
	}
}

// heldSends holds every send until release is closed, counting the sends
// it holds.
type heldSends struct {
	relayer.Transport
	release chan struct{}
	held    atomic.Int64
}

func (g *heldSends) Send(ctx context.Context, m *relayer.Message) error {
	g.held.Add(1)
	select {
	case <-g.release:
	case <-ctx.Done():
		return ctx.Err()
	}
	return g.Transport.Send(ctx, m)
}

// A runner's ordered workers share one dispatch loop: rows that commit
// together in lanes of four workers' shares go out in one transaction; the
// lane leases carry one token, each naming the worker whose share holds the
// lane; each worker counts the rows of its own lanes; and Stop releases
// every lease.
func TestRunnerOrderedWorkersBatchTogether(t *testing.T) {
	t.Parallel()
	b := setup(t, dispatch.DirectOptions{})
	gate := &heldSends{Transport: b.mem, release: make(chan struct{})}
	outbox := b.outbox
	outbox.Transports = map[string]relayer.Transport{"mem": gate}
	r, err := dispatch.NewRunner(b.db, outbox, dispatch.RunnerOptions{
		DisableDirect: true, DisableRecovery: true, DisableCleanup: true, OrderedWorkers: 4,
		Ordered: dispatch.OrderedOptions{PollInterval: 3 * time.Second, Concurrency: 1}, Logger: b.logger()})
	must(t, err)
	t.Cleanup(func() { r.Stop(context.Background()) })
	w, err := enlist.NewWriter(outbox, enlist.Options{Listener: r})
	must(t, err)
	must(t, r.Start(context.Background()))
	// Let the loop scan once with every worker started, so that no probe
	// begun while the workers were starting, over the first one's lanes
	// alone, is still running when the rows commit.
	scans := func() uint64 { return r.Stats().Ordered[0].Stats.Scans }
	before := scans()
	r.Wake()
	testkit.Eventually(t, 10*time.Second, func() bool { return scans() > before }, "the ordered loop's scan after Wake")

	lanes, _ := outbox.LaneCount()
	workers := r.Stats().Ordered
	ownerOf := map[int]string{}
	for _, o := range workers {
		for _, l := range o.Lanes {
			ownerOf[l] = o.Name
		}
	}
	// One key in each worker's share, committed together.
	var msgs []relayer.Outgoing
	keyLanes := map[string]int{}
	for i := 0; len(keyLanes) < len(workers); i++ {
		key := fmt.Sprintf("key-%d", i)
		l, err := relayer.Lane(key, lanes)
		must(t, err)
		if slices.ContainsFunc(msgs, func(m relayer.Outgoing) bool { return ownerOf[keyLanes[m.Key]] == ownerOf[l] }) {
			continue
		}
		keyLanes[key] = l
		msgs = append(msgs, relayer.NewOutgoing(Shipped{i}, relayer.Key(key)))
	}
	publishWith(t, b, w, msgs...)
	testkit.Eventually(t, 10*time.Second, func() bool { return gate.held.Load() >= int64(len(msgs)) },
		"%d sends under way; keys and lanes %v, workers %+v", len(msgs), keyLanes, workers)
	var open int
	must(t, b.db.QueryRow(`SELECT count(*) FROM pg_stat_activity
		WHERE state = 'idle in transaction' AND query LIKE '%' || $1 || '%'`, b.schema).Scan(&open))
	if open != 1 {
		t.Errorf("%d transactions hold the sends of four workers' lanes, want 1", open)
	}
	close(gate.release)
	b.waitSent(t, len(msgs))
	b.waitRows(t, 0)
	var leases []struct {
		name, owner string
		token       uuid.UUID
	}
	rows, err := b.db.Query(`SELECT name, owner, owner_token FROM "` + b.schema + `".ob_relayer_leases WHERE name LIKE 'lane:%'`)
	must(t, err)
	for rows.Next() {
		var l struct {
			name, owner string
			token       uuid.UUID
		}
		must(t, rows.Scan(&l.name, &l.owner, &l.token))
		leases = append(leases, l)
	}
	must(t, rows.Err())
	if len(leases) != len(msgs) {
		t.Errorf("%d lane leases, want %d: %v", len(leases), len(msgs), leases)
	}
	for _, l := range leases {
		lane, _ := strconv.Atoi(strings.TrimPrefix(l.name, "lane:"))
		if l.token != leases[0].token || l.owner != ownerOf[lane] {
			t.Errorf("lease %s: owner %q, token %s; want owner %q and one token for all (%s)", l.name, l.owner, l.token, ownerOf[lane], leases[0].token)
		}
	}
	counted := func() bool {
		for _, o := range r.Stats().Ordered {
			if o.Stats.Sent != 1 || o.Stats.Deleted != 1 {
				return false
			}
		}
		return true
	}
	testkit.Eventually(t, 5*time.Second, counted, "each worker to have sent and deleted the row of its lane")
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	must(t, r.Stop(ctx))
	var left int
	must(t, b.db.QueryRow(`SELECT count(*) FROM "`+b.schema+`".ob_relayer_leases`).Scan(&left))
	if left != 0 {
		t.Errorf("%d leases left after Stop, want none", left)
	}
}
