package dispatch_test

import (
	"context"
	"database/sql"
	"database/sql/driver"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/relayer-go/relayer"
	"github.com/relayer-go/relayer/dispatch"
	"github.com/relayer-go/relayer/dispatch/pgxlisten"
	"github.com/relayer-go/relayer/enlist"
	"github.com/relayer-go/relayer/internal/testkit"
	"github.com/relayer-go/relayer/internal/testkit/testdb"
)

// listeningRunner starts a runner with the wake-up listener on a pool of its
// own (as another process would have), polling rarely, and waits until it
// listens.
func listeningRunner(t *testing.T, b *bundle, opts dispatch.RunnerOptions) *dispatch.Runner {
	t.Helper()
	opts.Listen = true
	if opts.Notifications == nil {
		opts.Notifications = pgxlisten.Waiter{}
	}
	opts.Logger = b.logger()
	opts.DisableCleanup = true
	opts.Recovery.PollInterval = 20 * time.Second
	opts.Ordered.PollInterval = 9 * time.Second // under a third of the 30 s lease
	r, err := dispatch.NewRunner(testdb.Open(t, "pgx"), b.outbox, opts)
	must(t, err)
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		r.Stop(ctx)
	})
	must(t, r.Start(context.Background()))
	testkit.Eventually(t, 10*time.Second, func() bool { return r.Stats().Listening }, "the runner listens")
	firstScans(t, r) // now they wait for their poll
	return r
}

// wakingWriter is a writer of another process: no listener of its own, the
// wake-up on.
func wakingWriter(t *testing.T, b *bundle) *enlist.Writer {
	t.Helper()
	w, err := enlist.NewWriter(b.outbox, enlist.Options{Wake: b.db, Logger: b.logger()})
	must(t, err)
	return w
}

// deliveredWithin publishes msgs with w and fails unless all of them reach
// the broker within limit: far less than the workers' poll.
func deliveredWithin(t *testing.T, b *bundle, w *enlist.Writer, limit time.Duration, msgs ...relayer.Outgoing) {
	t.Helper()
	before := len(b.mem.All())
	start := time.Now()
	publishWith(t, b, w, msgs...)
	ctx, cancel := context.WithTimeout(context.Background(), limit)
	defer cancel()
	if err := b.mem.WaitFor(ctx, before+len(msgs)); err != nil {
		t.Fatalf("%d of %d messages delivered %s after the commit; the poll is seconds away", len(b.mem.All())-before, len(msgs), time.Since(start))
	}
}

// A commit in one process wakes the ordered worker and recovery of another
// at once, though both poll only every 9 and 20 seconds and recovery leaves
// rows younger than a second to direct dispatch.
func TestWakeUpAcrossProcesses(t *testing.T) {
	t.Parallel()
	b := setup(t, dispatch.DirectOptions{})
	r := listeningRunner(t, b, dispatch.RunnerOptions{DisableDirect: true})
	w := wakingWriter(t, b)
	deliveredWithin(t, b, w, 2*time.Second, relayer.NewOutgoing(Shipped{1}, relayer.Key("k")))
	deliveredWithin(t, b, w, 2*time.Second, relayer.NewOutgoing(Placed{1}))
	if r.Stats().WakeUpsReceived == 0 || w.WakeUps() == 0 {
		t.Errorf("wake-ups sent %d, received %d; want some", w.WakeUps(), r.Stats().WakeUpsReceived)
	}
}

// A row whose transaction commits after a later id was taken is behind
// recovery's cursor; the writer's wake-up names the row's id, and recovery
// takes from there at once rather than at its next pass from the beginning
// (20 s away here), as a relay's recovery must, taking rows of any age.
func TestWakeUpTakesRowsThatCommittedLate(t *testing.T) {
	t.Parallel()
	b := setup(t, dispatch.DirectOptions{})
	listeningRunner(t, b, dispatch.RunnerOptions{DisableDirect: true, DisableOrdered: true,
		Recovery: dispatch.RecoveryOptions{MinAge: time.Nanosecond}})
	w := wakingWriter(t, b)
	ctx := context.Background()
	late, err := w.Begin(ctx, b.db, nil)
	must(t, err)
	defer late.Rollback()
	must(t, late.Publish(ctx, Placed{1})) // the lower id, committed last
	deliveredWithin(t, b, w, 2*time.Second, relayer.NewOutgoing(Placed{2}))
	before := len(b.mem.All())
	must(t, late.Commit())
	wctx, cancel := context.WithTimeout(ctx, 2*time.Second)
	defer cancel()
	if err := b.mem.WaitFor(wctx, before+1); err != nil {
		t.Fatalf("the row that committed late was not delivered within 2 s: recovery's cursor passed it")
	}
}

// waitOnly is a NotificationWaiter that reads no payload, as the waiters
// of earlier releases did.
type waitOnly struct{ w pgxlisten.Waiter }

func (o waitOnly) Check(db *sql.DB) error { return o.w.Check(db) }

func (o waitOnly) Wait(ctx context.Context, dc any, statement string, listening, notified func()) error {
	return o.w.Wait(ctx, dc, statement, listening, notified)
}

// The wake-up works between releases: a listener that reads no payload is
// woken by this release's writers, whose NOTIFYs carry one, and this
// release's listener is woken by a NOTIFY without a payload, as earlier
// releases' writers send.
func TestWakeUpAcrossReleases(t *testing.T) {
	t.Parallel()
	t.Run("a listener that reads no payload", func(t *testing.T) {
		t.Parallel()
		b := setup(t, dispatch.DirectOptions{})
		listeningRunner(t, b, dispatch.RunnerOptions{DisableDirect: true, Notifications: waitOnly{}})
		deliveredWithin(t, b, wakingWriter(t, b), 2*time.Second, relayer.NewOutgoing(Placed{1}))
	})
	t.Run("a writer that sends no payload", func(t *testing.T) {
		t.Parallel()
		b := setup(t, dispatch.DirectOptions{})
		listeningRunner(t, b, dispatch.RunnerOptions{DisableDirect: true})
		silent, err := enlist.NewWriter(b.outbox, enlist.Options{Logger: b.logger()})
		must(t, err)
		before := len(b.mem.All())
		publishWith(t, b, silent, relayer.NewOutgoing(Placed{2}))
		_, err = b.db.Exec(b.opts.NotifySQL())
		must(t, err)
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
		defer cancel()
		if err := b.mem.WaitFor(ctx, before+1); err != nil {
			t.Fatal("a NOTIFY without a payload did not wake recovery")
		}
	})
}

// When the listener's session is killed, the listener reconnects and the
// wake-up works again; meanwhile the workers poll.
func TestWakeUpListenerReconnects(t *testing.T) {
	t.Parallel()
	b := setup(t, dispatch.DirectOptions{})
	r := listeningRunner(t, b, dispatch.RunnerOptions{DisableDirect: true, DisableRecovery: true})
	w := wakingWriter(t, b)
	var killed int
	must(t, b.db.QueryRow(`SELECT count(pg_terminate_backend(pid)) FROM pg_stat_activity WHERE query = $1`,
		b.opts.ListenSQL()).Scan(&killed))
	if killed != 1 {
		t.Fatalf("terminated %d listening sessions, want 1", killed)
	}
	testkit.Eventually(t, 10*time.Second, func() bool { return !r.Stats().Listening }, "the listener notices")
	scans := r.Stats().Ordered[0].Stats.Scans
	testkit.Eventually(t, 10*time.Second, func() bool { return r.Stats().Listening }, "the listener is back")
	// Back, the listener wakes the workers once; that scan must not be
	// the one that delivers the next row.
	testkit.Eventually(t, 10*time.Second, func() bool { return r.Stats().Ordered[0].Stats.Scans > scans }, "the workers' scan at the listener's return")
	deliveredWithin(t, b, w, 2*time.Second, relayer.NewOutgoing(Shipped{2}, relayer.Key("k")))
	if logs := b.logs.String(); !strings.Contains(logs, "wake-up listener lost its connection") {
		t.Errorf("no warning about the lost listener in the log:\n%s", logs)
	}
}

// A writer whose listener is a direct dispatcher does not wake other
// processes for unordered rows, which it sends itself; it does for ordered
// ones.
func TestWakeUpOnlyForRowsLeftToOthers(t *testing.T) {
	t.Parallel()
	b := setup(t, dispatch.DirectOptions{})
	local, err := dispatch.NewRunner(b.db, b.outbox, dispatch.RunnerOptions{DisableOrdered: true, DisableRecovery: true, DisableCleanup: true, Logger: b.logger()})
	must(t, err)
	must(t, local.Start(context.Background()))
	t.Cleanup(func() { local.Stop(context.Background()) })
	w, err := enlist.NewWriter(b.outbox, enlist.Options{Listener: local, Wake: b.db, Logger: b.logger()})
	must(t, err)
	r := listeningRunner(t, b, dispatch.RunnerOptions{DisableDirect: true, DisableRecovery: true})
	for i := range 5 {
		deliveredWithin(t, b, w, 2*time.Second, relayer.NewOutgoing(Placed{i}))
	}
	// An absence: a NOTIFY goes out on a goroutine of its own, and none may
	// come.
	time.Sleep(50 * time.Millisecond)
	if n := w.WakeUps(); n != 0 {
		t.Errorf("%d wake-ups for rows direct dispatch sent, want none", n)
	}
	deliveredWithin(t, b, w, 2*time.Second, relayer.NewOutgoing(Shipped{1}, relayer.Key("k")))
	// The server hands a NOTIFY to its listeners as it commits, which may
	// be before the writer hears that it succeeded and counts it.
	testkit.Eventually(t, 10*time.Second, func() bool {
		return w.WakeUps() > 0 && r.Stats().WakeUpsReceived > 0
	}, "the ordered row's wake-up counted as sent and received")
}

// otherDriver is a database/sql driver that is not pgx's, such as lib/pq.
type otherDriver struct{}

func (otherDriver) Open(string) (driver.Conn, error) { return nil, errors.New("not a database") }

func init() { sql.Register("relayer-test-other", otherDriver{}) }

func TestListenNeedsPgx(t *testing.T) {
	t.Parallel()
	b := setup(t, dispatch.DirectOptions{})
	db, err := sql.Open("relayer-test-other", "")
	must(t, err)
	t.Cleanup(func() { db.Close() })
	_, err = dispatch.NewRunner(db, b.outbox, dispatch.RunnerOptions{Listen: true, Notifications: pgxlisten.Waiter{}})
	if !errors.Is(err, dispatch.ErrInvalidOptions) || !errors.Is(err, pgxlisten.ErrNotPgx) {
		t.Errorf("NewRunner with Listen on another driver = %v, want ErrInvalidOptions and pgxlisten.ErrNotPgx", err)
	}
	_, err = dispatch.NewRunner(b.db, b.outbox, dispatch.RunnerOptions{Listen: true})
	if !errors.Is(err, dispatch.ErrInvalidOptions) || !strings.Contains(err.Error(), "Notifications") {
		t.Errorf("NewRunner with Listen and no Notifications = %v, want ErrInvalidOptions naming Notifications", err)
	}
}
