package dispatch_test

import (
	"context"
	"database/sql"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/stdlib"

	"github.com/relayer-go/relayer"
	"github.com/relayer-go/relayer/dispatch"
	"github.com/relayer-go/relayer/internal/testkit"
	"github.com/relayer-go/relayer/internal/testkit/testdb"
)

// laneWatch wraps the in-memory transport and counts sends of one lane that
// overlap in time: each worker sends sequentially, so an overlap means two
// owners of a lane were sending at once.
type laneWatch struct {
	relayer.Transport
	mu       sync.Mutex
	inflight map[int]int
	overlaps atomic.Int64
}

func newLaneWatch(tr relayer.Transport) *laneWatch {
	return &laneWatch{Transport: tr, inflight: map[int]int{}}
}

func (w *laneWatch) Send(ctx context.Context, m *relayer.Message) error {
	w.mu.Lock()
	w.inflight[m.Lane]++
	if w.inflight[m.Lane] > 1 {
		w.overlaps.Add(1)
	}
	w.mu.Unlock()
	time.Sleep(20 * time.Microsecond) // widen the window an overlap would need
	err := w.Transport.Send(ctx, m)
	w.mu.Lock()
	w.inflight[m.Lane]--
	w.mu.Unlock()
	return err
}

var workerSeq atomic.Int64

// orderedWorker returns a started ordered dispatcher on db, stopped at cleanup.
func (b *bundle) orderedWorker(t testing.TB, db *sql.DB, tr relayer.Transport, opts dispatch.OrderedOptions) *dispatch.Ordered {
	t.Helper()
	outbox := b.outbox
	outbox.Transports = map[string]relayer.Transport{"mem": tr}
	return b.orderedWorkerOn(t, db, outbox, opts)
}

// orderedWorkerOn is orderedWorker for an outbox of the caller's.
func (b *bundle) orderedWorkerOn(t testing.TB, db *sql.DB, outbox relayer.Outbox, opts dispatch.OrderedOptions) *dispatch.Ordered {
	t.Helper()
	if opts.Logger == nil {
		opts.Logger = b.logger()
	}
	if opts.Name == "" {
		opts.Name = fmt.Sprintf("%s-%d", t.Name(), workerSeq.Add(1))
	}
	o, err := dispatch.NewOrdered(db, outbox, opts)
	must(t, err)
	must(t, o.Start(context.Background()))
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		o.Stop(ctx)
	})
	return o
}

// shipped publishes n messages for each key, numbered 1..n per key, spread
// over transactions of perTx messages.
func (b *bundle) shipped(t testing.TB, keys []string, n, perTx int, opts ...relayer.Option) {
	t.Helper()
	var msgs []relayer.Outgoing
	for i := 1; i <= n; i++ {
		for _, k := range keys {
			msgs = append(msgs, relayer.NewOutgoing(Shipped{i}, append([]relayer.Option{relayer.Key(k)}, opts...)...))
			if len(msgs) == perTx {
				b.enlistOnly(t, msgs...)
				msgs = nil
			}
		}
	}
	if len(msgs) > 0 {
		b.enlistOnly(t, msgs...)
	}
}

// sequences returns, per key, the message numbers in the order received.
func sequences(t testing.TB, msgs []relayer.Message) map[string][]int {
	seq := map[string][]int{}
	for _, m := range msgs {
		var s Shipped
		if err := json.Unmarshal(m.Body, &s); err != nil {
			t.Fatal(err)
		}
		seq[m.Key] = append(seq[m.Key], s.N)
	}
	return seq
}

// checkOrder asserts that every key's messages 1..n arrived in order. With
// allowReplays, a message may arrive again (a crash after the broker accepted
// it), so only first arrivals must be in order; otherwise duplicates fail.
func checkOrder(t *testing.T, msgs []relayer.Message, keys []string, n int, allowReplays bool) {
	t.Helper()
	seq := sequences(t, msgs)
	dups := 0
	for _, k := range keys {
		seen := map[int]bool{}
		last := 0
		for _, v := range seq[k] {
			if seen[v] {
				dups++
				continue
			}
			seen[v] = true
			if v != last+1 {
				t.Errorf("key %s: message %d arrived after %d", k, v, last)
				return
			}
			last = v
		}
		if last != n {
			t.Errorf("key %s: received up to %d of %d", k, last, n)
		}
	}
	if dups > 0 && !allowReplays {
		t.Errorf("%d duplicate deliveries", dups)
	}
	t.Logf("%d messages, %d duplicates", len(msgs), dups)
}

// keysOnDistinctLanes returns n keys, key-0, key-1, …, skipping those whose
// lane (of relayer.LanesDefault) an earlier one has: each in a lane of its
// own.
func keysOnDistinctLanes(n int) []string {
	var keys []string
	lanes := map[int]bool{}
	for i := 0; len(keys) < n; i++ {
		k := fmt.Sprintf("key-%d", i)
		if l, _ := relayer.Lane(k, relayer.LanesDefault); !lanes[l] {
			lanes[l] = true
			keys = append(keys, k)
		}
	}
	return keys
}

func keyList(n int) []string {
	keys := make([]string, n)
	for i := range keys {
		keys[i] = fmt.Sprintf("customer-%d", i)
	}
	return keys
}

func TestOrderedPerKeyOrderWithThreeWorkers(t *testing.T) {
	t.Parallel()
	b := setup(t, dispatch.DirectOptions{})
	watch := newLaneWatch(b.mem)
	keys := keyList(50)
	b.shipped(t, keys, 40, 100) // 2,000 messages
	for range 3 {
		b.orderedWorker(t, b.db, watch, dispatch.OrderedOptions{LeaseDuration: 5 * time.Second, PollInterval: 50 * time.Millisecond, BatchSize: 50})
	}
	b.waitSent(t, 2000)
	b.waitRows(t, 0)
	checkOrder(t, b.mem.All(), keys, 40, false)
	if n := watch.overlaps.Load(); n != 0 {
		t.Errorf("%d overlapping sends of one lane by two owners", n)
	}
}

func TestOrderedRebalancesWhenWorkersJoinAndLeave(t *testing.T) {
	t.Parallel()
	b := setup(t, dispatch.DirectOptions{})
	watch := newLaneWatch(b.mem)
	keys := keyList(40)
	opts := dispatch.OrderedOptions{LeaseDuration: 3 * time.Second, PollInterval: 20 * time.Millisecond, BatchSize: 20}
	w1 := b.orderedWorker(t, b.db, watch, opts)
	done := make(chan struct{})
	go func() {
		defer close(done)
		for i := 1; i <= 30; i++ {
			var msgs []relayer.Outgoing
			for _, k := range keys {
				msgs = append(msgs, relayer.NewOutgoing(Shipped{i}, relayer.Key(k)))
			}
			b.enlistOnly(t, msgs...)
			time.Sleep(20 * time.Millisecond)
		}
	}()
	testkit.Eventually(t, 10*time.Second, func() bool { return len(w1.Lanes()) == 32 && b.mem.Len() != 0 }, "the first worker sending on every lane")
	w2 := b.orderedWorker(t, b.db, watch, opts)
	testkit.Eventually(t, 10*time.Second, func() bool { return len(w2.Lanes()) != 0 }, "the second worker taking its share")
	must(t, w1.Stop(context.Background()))
	<-done
	b.waitSent(t, 30*len(keys))
	b.waitRows(t, 0)
	checkOrder(t, b.mem.All(), keys, 30, false)
	if n := watch.overlaps.Load(); n != 0 {
		t.Errorf("%d overlapping sends of one lane by two owners", n)
	}
	if len(w2.Lanes()) != 32 {
		t.Errorf("the remaining worker owns %d lanes, want all 32", len(w2.Lanes()))
	}
}

// killableDB opens a pool whose connections can all be cut at once, and whose
// new connections then fail: a process that died without a goodbye.
func killableDB(t *testing.T) (*sql.DB, func()) {
	cfg, err := pgx.ParseConfig(testdb.URL(t))
	must(t, err)
	var dead atomic.Bool
	var mu sync.Mutex
	var conns []net.Conn
	d := &net.Dialer{}
	cfg.DialFunc = func(ctx context.Context, network, addr string) (net.Conn, error) {
		if dead.Load() {
			return nil, errors.New("the process is dead")
		}
		c, err := d.DialContext(ctx, network, addr)
		if err == nil {
			mu.Lock()
			conns = append(conns, c)
			mu.Unlock()
		}
		return c, err
	}
	db := stdlib.OpenDB(*cfg)
	t.Cleanup(func() { db.Close() })
	return db, func() {
		dead.Store(true)
		mu.Lock()
		defer mu.Unlock()
		for _, c := range conns {
			c.Close()
		}
	}
}

func TestOrderedKilledWorkerLanesAreTakenOverAfterExpiry(t *testing.T) {
	t.Parallel()
	b := setup(t, dispatch.DirectOptions{})
	keys := keyList(20)
	b.shipped(t, keys, 20, 100)
	slow := newLaneWatch(b.mem)
	b.mem.SetDelay(20 * time.Millisecond) // so that the doomed worker still has rows to send when killed
	opts := dispatch.OrderedOptions{LeaseDuration: time.Second, PollInterval: 50 * time.Millisecond, BatchSize: 10}
	doomedDB, kill := killableDB(t)
	doomed := b.orderedWorker(t, doomedDB, slow, opts)
	survivor := b.orderedWorker(t, b.db, slow, opts)
	testkit.Within(5*time.Second, func() bool { return len(doomed.Lanes()) != 0 && len(survivor.Lanes()) != 0 })
	if len(doomed.Lanes()) == 0 || len(survivor.Lanes()) == 32 {
		t.Logf("lanes before the kill: doomed %d, survivor %d", len(doomed.Lanes()), len(survivor.Lanes()))
	}
	kill()
	b.mem.SetDelay(0)
	b.waitSent(t, 400)
	b.waitRows(t, 0)
	checkOrder(t, b.mem.All(), keys, 20, true)
	// The survivor takes the doomed worker's share once its membership
	// expires, which may be after the last row was sent.
	testkit.Eventually(t, 5*time.Second, func() bool { return len(survivor.Lanes()) == 32 }, "the survivor owning all 32 lanes")
}

// twoLaneKeys returns keys in distinct lanes, and a third key sharing the
// first key's lane.
func twoLaneKeys(t *testing.T) (a, b, sameAsA string) {
	laneOf := func(k string) int { l, _ := relayer.Lane(k, relayer.LanesDefault); return l }
	a = "key-a"
	for i := 0; ; i++ {
		k := fmt.Sprintf("key-%d", i)
		if b == "" && laneOf(k) != laneOf(a) {
			b = k
		}
		if sameAsA == "" && k != a && laneOf(k) == laneOf(a) {
			sameAsA = k
		}
		if b != "" && sameAsA != "" {
			return
		}
	}
}

func TestOrderedFailureStopsItsLaneOnly(t *testing.T) {
	t.Parallel()
	b := setup(t, dispatch.DirectOptions{})
	ka, kb, _ := twoLaneKeys(t)
	b.mem.FailWith(func(m *relayer.Message) error {
		if m.Key == ka && string(m.Body) == `{"N":5}` {
			return errors.New("rejected N=5")
		}
		return nil
	})
	b.shipped(t, []string{ka, kb}, 10, 100)
	o := b.orderedWorker(t, b.db, b.mem, dispatch.OrderedOptions{LeaseDuration: 2 * time.Second, PollInterval: 30 * time.Millisecond})
	b.waitSent(t, 14)
	morePasses(t, o, 3)
	seq := sequences(t, b.mem.All())
	if fmt.Sprint(seq[ka]) != "[1 2 3 4]" || len(seq[kb]) != 10 {
		t.Errorf("with %s failing at 5: %s got %v, %s got %v", ka, ka, seq[ka], kb, seq[kb])
	}
	var attempts int
	var lastErr string
	must(t, b.db.QueryRow(`SELECT attempts, last_error FROM "`+b.schema+`".ob_outbox WHERE ordering_key = $1 ORDER BY id LIMIT 1`, ka).Scan(&attempts, &lastErr))
	if attempts < 1 || lastErr != "rejected N=5" {
		t.Errorf("failed head: attempts %d, error %q", attempts, lastErr)
	}
	b.mem.FailWith(nil)
	b.waitSent(t, 20)
	b.waitRows(t, 0)
	checkOrder(t, b.mem.All(), []string{ka, kb}, 10, false)
}

func TestOrderedFutureHeadStallsOnlyItsLane(t *testing.T) {
	t.Parallel()
	b := setup(t, dispatch.DirectOptions{})
	ka, kb, _ := twoLaneKeys(t)
	at := time.Now().Add(time.Second)
	b.enlistOnly(t, relayer.NewOutgoing(Shipped{1}, relayer.Key(ka), relayer.DeliverAt(at)))
	b.shipped(t, []string{kb}, 3, 10)
	b.enlistOnly(t, relayer.NewOutgoing(Shipped{2}, relayer.Key(ka)), relayer.NewOutgoing(Shipped{3}, relayer.Key(ka)))
	b.orderedWorker(t, b.db, b.mem, dispatch.OrderedOptions{LeaseDuration: 2 * time.Second, PollInterval: 50 * time.Millisecond})
	b.waitSent(t, 3)
	if seq := sequences(t, b.mem.All()); len(seq[ka]) != 0 || len(seq[kb]) != 3 {
		t.Errorf("before the head is due: %v", seq)
	}
	b.waitSent(t, 6)
	if time.Now().Before(at) {
		t.Error("the scheduled head went out early")
	}
	checkOrder(t, b.mem.All(), []string{ka, kb}, 3, false)
}

func TestOrderedParkedKeyStaysParkedOthersPass(t *testing.T) {
	t.Parallel()
	b := setup(t, dispatch.DirectOptions{})
	ka, kb, kc := twoLaneKeys(t)
	b.shipped(t, []string{ka, kb, kc}, 3, 100)
	_, err := b.db.Exec(`UPDATE "`+b.schema+`".ob_outbox SET parked_at = now()
		WHERE id = (SELECT id FROM "`+b.schema+`".ob_outbox WHERE ordering_key = $1 ORDER BY id LIMIT 1)`, ka)
	must(t, err)
	o := b.orderedWorker(t, b.db, b.mem, dispatch.OrderedOptions{LeaseDuration: 2 * time.Second, PollInterval: 30 * time.Millisecond})
	b.waitSent(t, 6)
	morePasses(t, o, 3)
	seq := sequences(t, b.mem.All())
	if len(seq[ka]) != 0 || len(seq[kb]) != 3 || len(seq[kc]) != 3 {
		t.Errorf("with %s parked: %v (%s shares its lane)", ka, seq, kc)
	}
	b.waitRows(t, 3)
}

func TestOrderedSlowSendsCommitAConfirmedPrefix(t *testing.T) {
	t.Parallel()
	b := setup(t, dispatch.DirectOptions{})
	b.shipped(t, []string{"slow"}, 12, 100)
	b.mem.SetDelay(100 * time.Millisecond) // a quarter lease admits about three
	o := b.orderedWorker(t, b.db, b.mem, dispatch.OrderedOptions{LeaseDuration: time.Second, PollInterval: 50 * time.Millisecond})
	b.waitSent(t, 2)
	testkit.Eventually(t, 5*time.Second, func() bool { return o.Stats().Deleted != 0 }, "the first batch's rows deleted")
	if left := len(b.rows(t)); left == 0 || left == 12 {
		t.Errorf("%d rows left after the first batch, want a committed prefix", left)
	}
	b.waitSent(t, 12)
	b.waitRows(t, 0)
	checkOrder(t, b.mem.All(), []string{"slow"}, 12, false)
}

func TestOrderedRoutesAndLanesAreChecked(t *testing.T) {
	t.Parallel()
	b := setup(t, dispatch.DirectOptions{})
	o, err := dispatch.NewOrdered(b.db, b.outbox, dispatch.OrderedOptions{Name: t.Name()})
	must(t, err)
	if o.Name() != t.Name() {
		t.Errorf("Name = %q, want %q", o.Name(), t.Name())
	}
	b.mem.SetCapabilities("orders.shipped", relayer.Capabilities{MaxBatchSize: 10})
	if err := o.Start(context.Background()); !errors.Is(err, dispatch.ErrInvalidOptions) || !strings.Contains(err.Error(), "OrderedByKey") {
		t.Errorf("Start with an unordered endpoint on an ordered route = %v", err)
	}
	must(t, o.Stop(context.Background()))
	if _, err := dispatch.NewOrdered(b.db, relayer.Outbox{Lanes: 70000}, dispatch.OrderedOptions{}); !errors.Is(err, dispatch.ErrInvalidOptions) {
		t.Errorf("NewOrdered with Outbox.Lanes 70000 = %v, want ErrInvalidOptions", err)
	}
	unnamed, err := dispatch.NewOrdered(b.db, b.outbox, dispatch.OrderedOptions{})
	must(t, err)
	if unnamed.Name() == "" {
		t.Error("an unnamed worker has no name; want host name and process id")
	}
}

func TestOrderedUnsendableRowsFailDurably(t *testing.T) {
	t.Parallel()
	b := setup(t, dispatch.DirectOptions{})
	ka, kb, _ := twoLaneKeys(t)
	laneA, _ := relayer.Lane(ka, relayer.LanesDefault)
	// A row written for a transport this worker does not have.
	_, err := b.db.Exec(`INSERT INTO "`+b.schema+`".ob_outbox (id, message_type, transport, destination, body, headers, ordering_key, lane)
		VALUES (gen_random_uuid(), 't', 'nowhere', 'd', '\x7b7d', '\x0100000000000000', $1, $2)`, ka, laneA)
	must(t, err)
	b.shipped(t, []string{kb}, 3, 10)
	b.orderedWorker(t, b.db, b.mem, dispatch.OrderedOptions{LeaseDuration: 2 * time.Second, PollInterval: 30 * time.Millisecond})
	b.waitSent(t, 3)
	var attempts int
	var lastErr string
	testkit.Eventually(t, 5*time.Second, func() bool {
		must(t, b.db.QueryRow(`SELECT attempts, coalesce(last_error, '') FROM "`+b.schema+`".ob_outbox WHERE transport = 'nowhere'`).Scan(&attempts, &lastErr))
		return attempts > 0
	}, "the unsendable row's failure recorded")
	if attempts == 0 || !strings.Contains(lastErr, `transport "nowhere" is not registered`) {
		t.Errorf("unsendable row: attempts %d, error %q; want the failure recorded with an actionable error", attempts, lastErr)
	}
}

// TestOrderedHeartbeatsOutliveSlowSends keeps every send slower than a third
// of the lease: membership must stay live throughout.
func TestOrderedHeartbeatsOutliveSlowSends(t *testing.T) {
	t.Parallel()
	b := setup(t, dispatch.DirectOptions{})
	b.shipped(t, []string{"k"}, 6, 10)
	b.mem.SetDelay(400 * time.Millisecond)
	b.orderedWorker(t, b.db, b.mem, dispatch.OrderedOptions{LeaseDuration: time.Second, PollInterval: 50 * time.Millisecond})
	for range 8 {
		// An absence over time: no moment in 1.6 s without a live member.
		time.Sleep(200 * time.Millisecond)
		var live int
		must(t, b.db.QueryRow(`SELECT count(*) FROM "`+b.schema+`".ob_relayer_leases WHERE name LIKE 'member:%' AND expires_at > now()`).Scan(&live))
		if live != 1 {
			t.Fatalf("%d live members while sends are slow, want 1", live)
		}
	}
}

// Ready lanes go out together: one batch's statements serve many lanes, so
// delivering one row in each of 16 lanes takes a handful of round trips, not
// a handful per lane.
func TestOrderedBatchesReadyLanesTogether(t *testing.T) {
	t.Parallel()
	b := setup(t, dispatch.DirectOptions{})
	keys := keysOnDistinctLanes(16)
	b.shipped(t, keys, 1, 16)
	db, writes := testdb.OpenCounting(t)
	b.orderedWorker(t, db, b.mem, dispatch.OrderedOptions{Concurrency: 1, PollInterval: 5 * time.Second})
	b.waitSent(t, 16)
	b.waitRows(t, 0)
	// Joining the group, tuning the session, one probe and one batch of six
	// statements, and a probe or two more (27 when measured); a batch per
	// lane would take 96 for its statements alone.
	n := writes.Load()
	if n > 40 {
		t.Errorf("%d round trips to deliver one row in each of 16 lanes, want at most 40", n)
	}
	t.Logf("%d round trips for one row in each of 16 lanes", n)
	checkOrder(t, b.mem.Messages("orders.shipped"), keys, 1, false)
}

// Members that join or leave change the split at once, not at the next
// renewal a third of the lease (10 s here) later: a joiner takes up its
// share from the member that held it, and after a member leaves, the one
// left sends its former lanes' rows as promptly as its own.
func TestOrderedSharesLanesPromptlyWhenMembersJoinAndLeave(t *testing.T) {
	t.Parallel()
	b := setup(t, dispatch.DirectOptions{})
	keys := keyList(64)
	opts := dispatch.OrderedOptions{LeaseDuration: 30 * time.Second}
	w1 := b.orderedWorker(t, b.db, b.mem, opts)
	b.shipped(t, keys, 1, len(keys)) // every lane's lease taken by w1
	b.waitSent(t, len(keys))

	w2 := b.orderedWorker(t, b.db, b.mem, opts)
	testkit.Eventually(t, 3*time.Second, func() bool {
		return len(w1.Lanes()) == 16 && len(w2.Lanes()) == 16
	}, "the first worker gives the joiner its share")
	b.shipped(t, keys, 1, len(keys))
	b.waitSent(t, 2*len(keys))
	if w2.Stats().Sent == 0 {
		t.Error("the joiner sent none of its share: the first worker kept its lanes")
	}

	must(t, w2.Stop(context.Background()))
	testkit.Eventually(t, 3*time.Second, func() bool { return len(w1.Lanes()) == 32 }, "the worker left takes back every lane")
	b.shipped(t, keys, 1, len(keys))
	testkit.Eventually(t, 3*time.Second, func() bool {
		return len(b.mem.All()) >= 3*len(keys)
	}, "the rows of the leaver's former lanes are sent")
	if n := len(b.mem.All()); n != 3*len(keys) {
		t.Errorf("%d messages sent, want %d: some twice", n, 3*len(keys))
	}
}

// gatedSends holds the sends of one key until opened, and records the most
// sends in flight at once.
type gatedSends struct {
	relayer.Transport
	key      string
	open     chan struct{}
	held     atomic.Int64 // sends of key waiting at the gate
	inflight atomic.Int64
	most     atomic.Int64
}

func (g *gatedSends) Send(ctx context.Context, m *relayer.Message) error {
	n := g.inflight.Add(1)
	defer g.inflight.Add(-1)
	for {
		most := g.most.Load()
		if n <= most || g.most.CompareAndSwap(most, n) {
			break
		}
	}
	if m.Key == g.key {
		g.held.Add(1)
		<-g.open
	}
	return g.Transport.Send(ctx, m)
}

// Lanes that become ready while a batch runs wait for it to end and go
// together in the next batch, rather than each starting a small batch of
// its own on a free slot (every transaction costs the database), but only
// for slowSend: a slow or stuck send holds its own batch, not the lanes
// that became ready after it.
func TestOrderedLanesReadyDuringASlowBatchDoNotWaitForIt(t *testing.T) {
	t.Parallel()
	b := setup(t, dispatch.DirectOptions{})
	keys := keysOnDistinctLanes(3)
	g := &gatedSends{Transport: b.mem, key: keys[0], open: make(chan struct{})}
	o := b.orderedWorker(t, b.db, g, dispatch.OrderedOptions{Concurrency: 2, PollInterval: 5 * time.Second})
	b.shipped(t, keys[:1], 1, 1)
	o.Wake()
	testkit.Eventually(t, 10*time.Second, func() bool { return g.held.Load() == 1 }, "the first lane's send at the gate")
	b.shipped(t, keys[1:], 1, 2)
	o.Wake()
	b.waitSent(t, 2) // while the first lane's send is held at the gate
	if g.held.Load() != 1 {
		t.Errorf("the gated send ended early")
	}
	close(g.open)
	b.waitSent(t, 3)
	checkOrder(t, b.mem.Messages("orders.shipped"), keys, 1, false)
}
