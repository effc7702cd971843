package dispatch_test

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"net"
	"os"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/stdlib"

	"github.com/relayer-go/relayer"
	"github.com/relayer-go/relayer/dispatch"
	"github.com/relayer-go/relayer/enlist"
	"github.com/relayer-go/relayer/internal/testkit"
	"github.com/relayer-go/relayer/internal/testkit/testdb"
)

// A worker's lane count is its outbox's, so it cannot disagree with writers
// of the same outbox value; rows written by writers configured with more
// lanes (another deployment's setting) are reported.
func TestOrderedLaneCountComesFromTheOutbox(t *testing.T) {
	t.Parallel()
	b := setup(t, dispatch.DirectOptions{})
	outbox := b.outbox
	outbox.Lanes = 16
	// A writer elsewhere still uses 32 lanes; a worker of this outbox, 16.
	keys := keyList(40)
	b.shipped(t, keys, 1, 40)
	tr := b.mem
	outbox.Transports = map[string]relayer.Transport{"mem": tr}
	o, err := dispatch.NewOrdered(b.db, outbox, dispatch.OrderedOptions{Name: t.Name(), LeaseDuration: time.Second, PollInterval: 50 * time.Millisecond, Logger: b.logger()})
	must(t, err)
	must(t, o.Start(context.Background()))
	if got := len(o.Lanes()); got != 16 {
		t.Errorf("the only worker owns %d lanes, want the outbox's 16", got)
	}
	defer o.Stop(context.Background())
	beyond := 0
	for _, k := range keys {
		if l, _ := relayer.Lane(k, 32); l >= 16 {
			beyond++
		}
	}
	if n := o.RowsBeyondLanes(); n != int64(beyond) {
		t.Errorf("RowsBeyondLanes = %d, want %d", n, beyond)
	}
	if !strings.Contains(b.logs.String(), "rows in lanes this worker never scans") {
		t.Errorf("no error logged about rows beyond the worker's lanes:\n%s", b.logs.String())
	}
}

// arrivals records, per key, the message numbers in the order the broker
// accepted them. The first send of one message ignores its context and
// returns late, like a client library stuck on a slow broker.
type arrivals struct {
	relayer.Transport
	mu      sync.Mutex
	got     map[string][]int
	stuck   string // body of the message whose first send is late
	late    time.Duration
	stalled atomic.Bool
}

func (a *arrivals) Send(ctx context.Context, m *relayer.Message) error {
	if string(m.Body) == a.stuck && a.stalled.CompareAndSwap(false, true) {
		time.Sleep(a.late) // ignores ctx
	}
	var s Shipped
	fmt.Sscanf(string(m.Body), `{"N":%d}`, &s.N)
	a.mu.Lock()
	a.got[m.Key] = append(a.got[m.Key], s.N)
	a.mu.Unlock()
	return a.Transport.Send(ctx, m)
}

// A send that outlives its batch's deadline keeps the lane locked until the
// transport returns: no owner sends the lane meanwhile, so the late copy never
// arrives after a newer message of its key; and its outcome is recorded when
// it returns, so that nothing of the lane but the late send is sent again.
func TestOrderedLateSendHoldsItsLane(t *testing.T) {
	t.Parallel()
	b := setup(t, dispatch.DirectOptions{})
	a := &arrivals{Transport: b.mem, got: map[string][]int{}, stuck: `{"N":1}`, late: 2500 * time.Millisecond}
	b.shipped(t, []string{"k"}, 5, 5)
	opts := dispatch.OrderedOptions{LeaseDuration: time.Second, PollInterval: 50 * time.Millisecond}
	o1 := b.orderedWorker(t, b.db, a, opts)
	o2 := b.orderedWorker(t, b.db, a, opts)
	b.waitRows(t, 0)
	testkit.Within(10*time.Second, func() bool {
		a.mu.Lock()
		defer a.mu.Unlock()
		return len(a.got["k"]) >= 5
	})
	// Room for a copy sent again.
	morePasses(t, o1, 3)
	morePasses(t, o2, 3)
	a.mu.Lock()
	got := slices.Clone(a.got["k"])
	a.mu.Unlock()
	for i := 1; i < len(got); i++ {
		if got[i] < got[i-1] {
			t.Fatalf("arrivals of key k: %v: message %d arrived after %d", got, got[i], got[i-1])
		}
	}
	// The transport returns its context's error, late: whether the broker
	// has the message is unknown, so it is sent again, and only it.
	if !slices.Equal(got, []int{1, 2, 3, 4, 5}) && !slices.Equal(got, []int{1, 1, 2, 3, 4, 5}) {
		t.Errorf("arrivals of key k: %v, want 1..5, the late send first, and none but it again\n%s", got, b.logs)
	}
}

// freezableDB opens a pool whose connections can be black-holed: reads and
// writes block, nothing is closed, and the server sees a silent client, as
// behind a network partition. Closing the pool at cleanup unblocks them.
func freezableDB(t *testing.T) (*sql.DB, func()) {
	cfg, err := pgx.ParseConfig(testdb.URL(t))
	must(t, err)
	frozen := make(chan struct{})
	var once sync.Once
	var mu sync.Mutex
	var sockets []net.Conn
	d := &net.Dialer{}
	cfg.DialFunc = func(ctx context.Context, network, addr string) (net.Conn, error) {
		c, err := d.DialContext(ctx, network, addr)
		if err != nil {
			return nil, err
		}
		mu.Lock()
		sockets = append(sockets, c)
		mu.Unlock()
		return &freezable{Conn: c, frozen: frozen, closed: make(chan struct{})}, nil
	}
	db := stdlib.OpenDB(*cfg)
	t.Cleanup(func() {
		db.Close()
		mu.Lock()
		defer mu.Unlock()
		for _, c := range sockets {
			c.Close() // the partition heals: the server sees the sockets close
		}
	})
	return db, func() { once.Do(func() { close(frozen) }) }
}

type freezable struct {
	net.Conn
	frozen    chan struct{}
	closed    chan struct{}
	closeOnce sync.Once
	mu        sync.Mutex
	kick      chan struct{} // closed when a deadline in the past is set
}

// hold blocks while frozen until the connection is closed or a deadline in
// the past interrupts it (how pgx cancels a blocked read).
func (f *freezable) hold() error {
	select {
	case <-f.frozen:
	default:
		return nil
	}
	f.mu.Lock()
	if f.kick == nil {
		f.kick = make(chan struct{})
	}
	kick := f.kick
	f.mu.Unlock()
	select {
	case <-f.closed:
		return net.ErrClosed
	case <-kick:
		return os.ErrDeadlineExceeded
	}
}

func (f *freezable) SetDeadline(t time.Time) error {
	if !t.IsZero() && !t.After(time.Now()) {
		f.mu.Lock()
		if f.kick == nil {
			f.kick = make(chan struct{})
		}
		select {
		case <-f.kick:
		default:
			close(f.kick)
		}
		f.mu.Unlock()
	}
	return f.Conn.SetDeadline(t)
}

func (f *freezable) Read(p []byte) (int, error) {
	if err := f.hold(); err != nil {
		return 0, err
	}
	return f.Conn.Read(p)
}

func (f *freezable) Write(p []byte) (int, error) {
	if err := f.hold(); err != nil {
		return 0, err
	}
	return f.Conn.Write(p)
}

// Close while frozen closes nothing the server would see: behind a partition
// a FIN never arrives. freezableDB's cleanup closes the sockets.
func (f *freezable) Close() error {
	f.closeOnce.Do(func() { close(f.closed) })
	select {
	case <-f.frozen:
		return nil
	default:
		return f.Conn.Close()
	}
}

// A worker cut off by a partition in the middle of a batch holds its lane row
// only until the server's idle-in-transaction timeout ends its session; then a
// healthy worker takes the lane over.
func TestOrderedPartitionedWorkerLosesItsLane(t *testing.T) {
	t.Parallel()
	b := setup(t, dispatch.DirectOptions{})
	b.shipped(t, []string{"k"}, 20, 20)
	release := b.mem.Block(true)
	defer release()
	opts := dispatch.OrderedOptions{LeaseDuration: 2 * time.Second, PollInterval: 50 * time.Millisecond}
	cutDB, freeze := freezableDB(t)
	cut := b.orderedWorker(t, cutDB, b.mem, opts)
	testkit.Within(5*time.Second, func() bool { return b.mem.Sends() != 0 })
	freeze()
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 100*time.Millisecond)
		defer cancel()
		cut.Stop(ctx) // cut off: it cannot finish gracefully
	})
	free := newArrivalsOnly(b) // the healthy worker's transport is not blocked
	b.orderedWorker(t, b.db, free, opts)
	testkit.Eventually(t, 20*time.Second, func() bool { return free.n.Load() >= 20 }, "the healthy worker to deliver 20 messages while the partitioned one held the lane")
}

// arrivalsOnly is a transport that accepts everything at once and counts.
type arrivalsOnly struct {
	relayer.Transport
	n atomic.Int64
}

func newArrivalsOnly(b *bundle) *arrivalsOnly { return &arrivalsOnly{Transport: b.mem} }

func (a *arrivalsOnly) Send(ctx context.Context, m *relayer.Message) error {
	a.n.Add(1)
	return nil
}

// hungDestination blocks every send to one destination until it is
// released or the send's context ends; sends to the others are counted and
// accepted at once.
type hungDestination struct {
	relayer.Transport
	destination string
	release     chan struct{}
	n           atomic.Int64 // sends to other destinations
}

func (h *hungDestination) Send(ctx context.Context, m *relayer.Message) error {
	if m.Destination == h.destination {
		select {
		case <-h.release:
			return errors.New("destination hung up")
		case <-ctx.Done():
			return ctx.Err()
		}
	}
	h.n.Add(1)
	return nil
}

// A lane whose head hangs does not hold up the worker's other lanes, not
// even those sharing its batch. With a 60s lease a batch may run for 30s:
// before, a batch waited that long for its hung lane, holding the rows its
// other lanes had sent, then rolled back and sent them again. Now the hung
// send ends as a straggler once the batch's other lanes are done and it has
// run for a sixth of that (5s), and only its destination is set aside.
func TestOrderedSlowLaneDoesNotDelayTheOthers(t *testing.T) {
	t.Parallel()
	b := setup(t, dispatch.DirectOptions{})
	var routes relayer.Routes
	must(t, relayer.AddType[Shipped](&routes, relayer.Route{Transport: "mem", Destination: "orders.shipped", Ordered: true}))
	must(t, relayer.AddType[Billed](&routes, relayer.Route{Transport: "mem", Destination: "stuck", Ordered: true}))
	outbox := b.outbox
	outbox.Routes = &routes
	w, err := enlist.NewWriter(outbox, enlist.Options{})
	must(t, err)
	keys := keysOnDistinctLanes(8)
	// keys[0]'s messages go to the hung destination, the 7 others' to a
	// healthy one; each key has a lane of its own.
	for i := 1; i <= 200; i++ {
		msgs := []relayer.Outgoing{relayer.NewOutgoing(Billed{i}, relayer.Key(keys[0]))}
		for _, k := range keys[1:] {
			msgs = append(msgs, relayer.NewOutgoing(Shipped{i}, relayer.Key(k)))
		}
		must(t, w.RunInTx(context.Background(), b.db, nil, func(tx *enlist.Tx) error { return tx.PublishAll(context.Background(), msgs...) }))
	}
	tr := &hungDestination{Transport: b.mem, destination: "stuck", release: make(chan struct{})}
	outbox.Transports = map[string]relayer.Transport{"mem": tr}
	start := time.Now()
	o := b.orderedWorkerOn(t, b.db, outbox, dispatch.OrderedOptions{LeaseDuration: time.Minute, PollInterval: 50 * time.Millisecond, BatchSize: 10})
	t.Cleanup(func() { close(tr.release) }) // runs before the worker stops
	testkit.Eventually(t, 25*time.Second, func() bool { return tr.n.Load() >= 1400 }, "the healthy lanes to deliver 1400 messages beside a lane whose head hangs")
	morePasses(t, o, 3)
	if n := tr.n.Load(); n != 1400 {
		t.Fatalf("%d sends for the healthy lanes' 1400 messages: a hung lane made its batch send some twice", n)
	}
	t.Logf("1400 messages of 7 healthy lanes in %s beside a hung lane", time.Since(start).Round(time.Millisecond))
}

// failingHead fails every send of one key and blocks every send of another
// until its context ends.
type failingHead struct {
	relayer.Transport
	failing, slow string
}

func (f *failingHead) Send(ctx context.Context, m *relayer.Message) error {
	switch m.Key {
	case f.failing:
		return errors.New("rejected")
	case f.slow:
		<-ctx.Done()
		return ctx.Err()
	}
	return f.Transport.Send(ctx, m)
}

// A head that keeps failing is retried once per poll interval, even while
// another lane's batch is in flight.
func TestOrderedFailingHeadWaitsForThePoll(t *testing.T) {
	t.Parallel()
	b := setup(t, dispatch.DirectOptions{})
	ka, kb, _ := twoLaneKeys(t)
	b.shipped(t, []string{ka, kb}, 1, 2)
	tr := &failingHead{Transport: b.mem, failing: ka, slow: kb}
	b.orderedWorker(t, b.db, tr, dispatch.OrderedOptions{LeaseDuration: 4 * time.Second, PollInterval: 200 * time.Millisecond})
	// Tries in a fixed time: this asserts that no more come than one per poll.
	time.Sleep(time.Second)
	var attempts int
	must(t, b.db.QueryRow(`SELECT attempts FROM "`+b.schema+`".ob_outbox WHERE ordering_key = $1`, ka).Scan(&attempts))
	if attempts < 1 || attempts > 8 {
		t.Errorf("a failing head was tried %d times in 1s with a 200ms poll, want 1 to 8", attempts)
	}
}
