package dispatch_test

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/google/uuid"

	"github.com/relayer-go/relayer"
	"github.com/relayer-go/relayer/dispatch"
	"github.com/relayer-go/relayer/enlist"
	"github.com/relayer-go/relayer/internal/testkit"
	"github.com/relayer-go/relayer/internal/workerstore"
	"github.com/relayer-go/relayer/store"
)

func (b *bundle) recovery(t testing.TB, opts dispatch.RecoveryOptions) *dispatch.Recovery {
	t.Helper()
	if opts.Logger == nil {
		opts.Logger = b.logger()
	}
	r, err := dispatch.NewRecovery(b.db, b.outbox, opts)
	must(t, err)
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		r.Stop(ctx)
	})
	return r
}

// enlistOnly publishes without any dispatcher, as a process without one would,
// and returns the messages' ids.
func (b *bundle) enlistOnly(t testing.TB, msgs ...relayer.Outgoing) []uuid.UUID {
	t.Helper()
	ids := make([]uuid.UUID, len(msgs))
	for i := range msgs {
		if msgs[i].ID == uuid.Nil {
			msgs[i].ID = uuid.Must(relayer.NewID())
		}
		ids[i] = msgs[i].ID
	}
	w, err := enlist.NewWriter(b.outbox, enlist.Options{})
	must(t, err)
	must(t, w.RunInTx(context.Background(), b.db, nil, func(tx *enlist.Tx) error {
		return tx.PublishAll(context.Background(), msgs...)
	}))
	return ids
}

func (b *bundle) leaseOwner(t *testing.T) string {
	t.Helper()
	var owner string
	err := b.db.QueryRow(`SELECT owner FROM "`+b.schema+`".ob_relayer_leases WHERE name = $1 AND expires_at > now()`, store.RecoveryLeaseName).Scan(&owner)
	if err != nil {
		return ""
	}
	return owner
}

func TestRecoverySendsLeftoversAndLeavesOrderedRows(t *testing.T) {
	t.Parallel()
	b := setup(t, dispatch.DirectOptions{})
	msgs := []relayer.Outgoing{relayer.NewOutgoing(Shipped{0}, relayer.Key("k"))}
	for i := range 25 {
		msgs = append(msgs, relayer.NewOutgoing(Placed{i}), relayer.NewOutgoing(Billed{i}))
	}
	b.enlistOnly(t, msgs...)
	r := b.recovery(t, dispatch.RecoveryOptions{BatchSize: 7, PollInterval: 50 * time.Millisecond})
	must(t, r.Start(context.Background()))
	b.waitSent(t, 50)
	rows := b.waitRows(t, 1)
	if rows[0].claimed || rows[0].attempts != 0 {
		t.Errorf("ordered row touched by recovery: %+v", rows[0])
	}
	seen := map[uuid.UUID]int{}
	for _, m := range b.mem.All() {
		seen[m.ID]++
		if m.Ordered {
			t.Errorf("recovery sent ordered row %s", m.ID)
		}
	}
	if len(seen) != 50 {
		t.Errorf("sent %d distinct rows, want 50", len(seen))
	}
}

func TestRecoverySendsScheduledRowsOnTime(t *testing.T) {
	t.Parallel()
	b := setup(t, dispatch.DirectOptions{})
	const poll = 100 * time.Millisecond
	at := time.Now().Add(500 * time.Millisecond)
	b.enlistOnly(t, relayer.NewOutgoing(Placed{1}, relayer.DeliverAt(at)))
	r := b.recovery(t, dispatch.RecoveryOptions{PollInterval: poll})
	must(t, r.Start(context.Background()))
	b.waitSent(t, 1)
	got := time.Now()
	if got.Before(at) {
		t.Errorf("scheduled row sent %s early", at.Sub(got))
	}
	if late := got.Sub(at); late > poll+500*time.Millisecond {
		t.Errorf("scheduled row sent %s after its time; poll interval is %s", late, poll)
	}
	b.waitRows(t, 0)
}

func TestOneRecoveryAtATimeAndTakeover(t *testing.T) {
	t.Parallel()
	b := setup(t, dispatch.DirectOptions{})
	ctx := context.Background()
	// A crashed holder: its lease is live for a while and nobody renews it.
	st := b.store
	dead := workerstore.Lease{Name: store.RecoveryLeaseName, Owner: "crashed", Token: uuid.New()}
	held, _, err := st.AcquireLease(ctx, dead, 700*time.Millisecond)
	if err != nil || !held {
		t.Fatalf("lease for the crashed holder = %v, %v", held, err)
	}
	b.enlistOnly(t, relayer.NewOutgoing(Placed{1}))
	r1 := b.recovery(t, dispatch.RecoveryOptions{PollInterval: 50 * time.Millisecond, Owner: "r1", LeaseDuration: 2 * time.Second})
	r2 := b.recovery(t, dispatch.RecoveryOptions{PollInterval: 50 * time.Millisecond, Owner: "r2", LeaseDuration: 2 * time.Second})
	start := time.Now()
	must(t, r1.Start(ctx))
	must(t, r2.Start(ctx))
	b.waitSent(t, 1)
	if took := time.Since(start); took < 500*time.Millisecond {
		t.Errorf("row sent after %s, while the crashed holder's lease was live", took)
	}
	owner := b.leaseOwner(t)
	if owner != "r1" && owner != "r2" {
		t.Fatalf("lease owner %q, want r1 or r2", owner)
	}
	// Only the holder works; stopping it hands over at once.
	holder, other := r1, r2
	if owner == "r2" {
		holder, other = r2, r1
	}
	if other.Stats().Scans != 0 || holder.Stats().Scans == 0 {
		t.Errorf("scans while one held the lease: holder %d, other %d; want only the holder scanning",
			holder.Stats().Scans, other.Stats().Scans)
	}
	must(t, holder.Stop(ctx))
	b.enlistOnly(t, relayer.NewOutgoing(Placed{2}), relayer.NewOutgoing(Placed{3}))
	b.waitSent(t, 3)
	b.waitRows(t, 0)
	if other.Stats().Sent != 2 {
		t.Errorf("the remaining instance sent %d rows, want the 2 new ones", other.Stats().Sent)
	}
	if got := b.leaseOwner(t); got == owner || got == "" {
		t.Errorf("lease owner after handover = %q", got)
	}
}

func TestRecoveryRecordsFailuresAndReleasesUnroutableRows(t *testing.T) {
	t.Parallel()
	b := setup(t, dispatch.DirectOptions{})
	b.mem.FailWith(func(*relayer.Message) error { return errors.New("broker down") })
	ids := b.enlistOnly(t, relayer.NewOutgoing(Placed{1}), relayer.NewOutgoing(Lost{2}))
	// The unroutable row carries failures from earlier tries: releasing it must
	// keep them as they are.
	_, err := b.db.Exec(`UPDATE "`+b.schema+`".ob_outbox SET attempts = 2, last_error = 'earlier' WHERE id = $1`, ids[1])
	must(t, err)
	r := b.recovery(t, dispatch.RecoveryOptions{PollInterval: 30 * time.Millisecond})
	must(t, r.Start(context.Background()))
	var rows []rawRow
	testkit.Eventually(t, 10*time.Second, func() bool {
		rows = b.rows(t)
		return len(rows) == 2 && rows[0].attempts >= 2 && r.Stats().Scans >= 4
	}, "the failing row retried over 4 passes")
	if len(rows) != 2 || rows[0].id != ids[0] || rows[1].id != ids[1] {
		t.Fatalf("rows = %+v, want both", rows)
	}
	if rows[0].attempts < 2 || rows[0].lastErr.String != "broker down" {
		t.Errorf("failing row: attempts %d, error %q; want retries recorded", rows[0].attempts, rows[0].lastErr.String)
	}
	if rows[1].attempts != 2 || rows[1].lastErr.String != "earlier" || rows[1].claimed {
		t.Errorf("unroutable row: attempts %d, error %q, claimed %v; want its earlier failures kept and no claim",
			rows[1].attempts, rows[1].lastErr.String, rows[1].claimed)
	}
	b.mem.FailWith(nil)
	b.waitSent(t, 1)
	b.waitRows(t, 1)
}

func TestDirectOverflowWakesRecovery(t *testing.T) {
	t.Parallel()
	b := setup(t, dispatch.DirectOptions{})
	r := b.recovery(t, dispatch.RecoveryOptions{PollInterval: time.Hour})
	d, err := dispatch.NewDirectFor(b.db, b.outbox, dispatch.DirectOptions{QueueCapacity: 1, Logger: b.logger()}, r)
	must(t, err)
	w, err := enlist.NewWriter(b.outbox, enlist.Options{Listener: d, Logger: b.logger()})
	must(t, err)
	must(t, r.Start(context.Background()))
	// The first scan finds nothing; recovery now waits an hour.
	testkit.Eventually(t, 10*time.Second, func() bool { return r.Stats().Scans != 0 }, "recovery's first scan")
	for i := range 3 { // the dispatcher is not started: the second commit overflows
		must(t, w.RunInTx(context.Background(), b.db, nil, func(tx *enlist.Tx) error {
			return tx.Publish(context.Background(), Placed{i})
		}))
	}
	b.waitSent(t, 3)
	b.waitRows(t, 0)
}

func TestRecoveryOptions(t *testing.T) {
	t.Parallel()
	for _, c := range []struct {
		opts  dispatch.RecoveryOptions
		field string
	}{
		{dispatch.RecoveryOptions{BatchSize: -1}, "BatchSize"},
		{dispatch.RecoveryOptions{BatchSize: 10001}, "BatchSize"},
		{dispatch.RecoveryOptions{PollInterval: -time.Second}, "PollInterval"},
		{dispatch.RecoveryOptions{ClaimDuration: time.Microsecond}, "ClaimDuration"},
		{dispatch.RecoveryOptions{LeaseDuration: time.Millisecond}, "LeaseDuration"},
	} {
		if err := c.opts.Validate(); !errors.Is(err, dispatch.ErrInvalidOptions) || !strings.Contains(err.Error(), c.field) {
			t.Errorf("Validate(%+v) = %v, want an error naming %s", c.opts, err, c.field)
		}
	}
	o, err := dispatch.LoadRecoveryOptions(dispatch.MapSource(map[string]string{"BatchSize": "500", "PollInterval": "250ms"}))
	if err != nil || o.BatchSize != 500 || o.PollInterval != 250*time.Millisecond {
		t.Errorf("LoadRecoveryOptions = %+v, %v", o, err)
	}
	if _, err := dispatch.LoadRecoveryOptions(dispatch.MapSource(map[string]string{"LeaseDuration": "soon"})); err == nil || !strings.Contains(err.Error(), "LeaseDuration") {
		t.Errorf("bad LeaseDuration: %v", err)
	}
	b := setup(t, dispatch.DirectOptions{})
	eff := b.recovery(t, dispatch.RecoveryOptions{}).Options()
	if eff.BatchSize != 1000 || eff.PollInterval != time.Second || eff.LeaseDuration != 30*time.Second || eff.Owner == "" {
		t.Errorf("defaults %+v", eff)
	}
}

// TestRecoverySendsRowsOfACrashedDispatcher: a dispatcher claimed a row and died
// before sending; once the claim expires, recovery sends it exactly once.
func TestRecoverySendsRowsOfACrashedDispatcher(t *testing.T) {
	t.Parallel()
	b := setup(t, dispatch.DirectOptions{})
	b.enlistOnly(t, relayer.NewOutgoing(Placed{1}), relayer.NewOutgoing(Placed{2}))
	rows, err := b.store.ReadUnordered(context.Background(), nil, store.ReadOptions{Limit: 10})
	must(t, err)
	claimedUntil := time.Now().Add(700 * time.Millisecond)
	if ok, err := b.store.Claim(context.Background(), rows[0].ID, store.Claim{Token: uuid.New(), Until: claimedUntil}, time.Now()); !ok || err != nil {
		t.Fatalf("claim = %v, %v", ok, err)
	}
	r := b.recovery(t, dispatch.RecoveryOptions{PollInterval: 50 * time.Millisecond, MinAge: time.Nanosecond})
	must(t, r.Start(context.Background()))
	b.waitSent(t, 1)
	if got := b.mem.All()[0].ID; got != rows[1].ID {
		t.Errorf("first sent %s, want the unclaimed row %s", got, rows[1].ID)
	}
	b.waitSent(t, 2)
	if time.Now().Before(claimedUntil) {
		t.Error("the claimed row was sent before its claim expired")
	}
	b.waitRows(t, 0)
	morePasses(t, r, 3)
	if n := b.mem.Len(); n != 2 {
		t.Errorf("sent %d messages, want each of the 2 exactly once", n)
	}
}

// TestRecoveryLeavesFreshRowsToDirectDispatch: rows younger than MinAge are
// direct dispatch's; recovery takes them only once they are that old.
func TestRecoveryLeavesFreshRowsToDirectDispatch(t *testing.T) {
	t.Parallel()
	b := setup(t, dispatch.DirectOptions{})
	r := b.recovery(t, dispatch.RecoveryOptions{PollInterval: 50 * time.Millisecond, MinAge: 700 * time.Millisecond})
	must(t, r.Start(context.Background()))
	testkit.Eventually(t, 10*time.Second, func() bool { return r.Stats().Scans != 0 }, "recovery's first scan")
	start := time.Now()
	b.enlistOnly(t, relayer.NewOutgoing(Placed{1}))
	b.waitSent(t, 1)
	if took := time.Since(start); took < 600*time.Millisecond {
		t.Errorf("recovery took a row %s after its commit, before MinAge", took)
	}
}

// A row another writer stored with content this library would refuse (here an
// empty transport) is skipped and written back as it was; the rows taken with
// it are sent once and deleted, not rolled back and sent again on every pass.
func TestRecoverySendsTheRowsTakenWithAForeignRowOnce(t *testing.T) {
	t.Parallel()
	b := setup(t, dispatch.DirectOptions{})
	foreign := uuid.Must(relayer.NewID())
	r, _ := b.recoverWithOneBadRow(t, func(ids []uuid.UUID) {
		_, err := b.db.Exec(`INSERT INTO "`+b.schema+`".ob_outbox (id, message_type, transport, destination, body, headers)
			SELECT $1, 'x', '', 'd', '\x00', headers FROM "`+b.schema+`".ob_outbox LIMIT 1`, foreign)
		must(t, err)
	}, 10)
	rows := b.rows(t)
	if len(rows) != 1 || rows[0].id != foreign || rows[0].attempts != 0 || rows[0].claimed {
		t.Errorf("rows = %+v, want the foreign row back untouched", rows)
	}
	if st := r.Stats(); st.CompletionFailures != 0 || st.Deleted != 10 {
		t.Errorf("stats = %+v, want 10 deleted and no completion failure", st)
	}
}

// A row whose send fails waits for its retry time, then is tried again, and
// no more often than once per PollInterval even when its backoff is shorter.
func TestRecoveryRetriesFailingRowsAfterTheirBackoff(t *testing.T) {
	t.Parallel()
	b := setup(t, dispatch.DirectOptions{})
	b.mem.FailWith(func(*relayer.Message) error { return errors.New("broker down") })
	b.enlistOnly(t, relayer.NewOutgoing(Placed{1}))
	const poll = 200 * time.Millisecond
	b.outbox.Retry = relayer.Retry{Backoff: 50 * time.Millisecond, MaxBackoff: 50 * time.Millisecond, MaxAttempts: 100}
	r := b.recovery(t, dispatch.RecoveryOptions{PollInterval: poll, MinAge: time.Nanosecond})
	must(t, r.Start(context.Background()))
	// Tries in a fixed time: this asserts that no more come than one per poll.
	time.Sleep(5 * poll)
	rows := b.rows(t)
	if len(rows) != 1 || rows[0].attempts < 2 {
		t.Fatalf("rows = %+v, want the failing row tried more than once", rows)
	}
	// One try per poll, give or take the first pass and scheduling.
	if rows[0].attempts > 8 {
		t.Errorf("the failing row was tried %d times in %s with a %s poll interval", rows[0].attempts, 5*poll, poll)
	}
}

// A row whose stored headers do not decode cannot be sent; recovery moves it
// to the dead letters with its bytes unchanged, says so, and sends the rows
// taken with it once.
func TestRecoveryDeadLettersACorruptRowAndSendsTheOthers(t *testing.T) {
	t.Parallel()
	b := setup(t, dispatch.DirectOptions{})
	var msgs []relayer.Outgoing
	for i := range 10 {
		msgs = append(msgs, relayer.NewOutgoing(Placed{i}))
	}
	ids := b.enlistOnly(t, msgs...)
	_, err := b.db.Exec(`UPDATE "`+b.schema+`".ob_outbox SET headers = '\x0200000000000000' WHERE id = $1`, ids[4])
	must(t, err)
	r := b.recovery(t, dispatch.RecoveryOptions{PollInterval: 50 * time.Millisecond, MinAge: time.Nanosecond})
	must(t, r.Start(context.Background()))
	b.waitSent(t, 9)
	b.waitRows(t, 0)
	var stored []byte
	var reason, lastErr string
	must(t, b.db.QueryRow(`SELECT headers, reason, last_error FROM "`+b.schema+`".ob_dead WHERE id = $1`, ids[4]).Scan(&stored, &reason, &lastErr))
	if string(stored) != "\x02\x00\x00\x00\x00\x00\x00\x00" || reason != store.ReasonCorrupt || !strings.Contains(lastErr, "version") {
		t.Errorf("dead letter: headers %x, reason %q, error %q; want the stored bytes, %q and the decode error", stored, reason, lastErr, store.ReasonCorrupt)
	}
	morePasses(t, r, 3)
	if n := b.mem.Len(); n != 9 {
		t.Errorf("the broker received %d messages, want the 9 good rows once", n)
	}
	if st := r.Stats(); st.CorruptRows != 1 || st.DeadLettered != 1 || st.Deleted != 9 || st.CompletionFailures != 0 {
		t.Errorf("stats = %+v, want 1 corrupt row dead-lettered, 9 deleted", st)
	}
	if !strings.Contains(b.logs.String(), "corrupt headers") || !strings.Contains(b.logs.String(), ids[4].String()) {
		t.Errorf("no error naming the corrupt row in:\n%s", b.logs)
	}
}

// morePasses waits until w ran n more passes over the outbox than so far,
// so that what they would do wrong (send a row again) has had its chance.
func morePasses(t *testing.T, w interface{ Stats() dispatch.Stats }, n uint64) {
	t.Helper()
	from := w.Stats().Scans
	testkit.Eventually(t, 10*time.Second, func() bool { return w.Stats().Scans >= from+n }, "%d more passes", n)
}

// recoverWithOneBadRow publishes ten rows, lets spoil make one row unsendable,
// runs recovery until the good rows (want of them) are sent and a few passes
// more, and checks that the broker received each good row once.
func (b *bundle) recoverWithOneBadRow(t *testing.T, spoil func(ids []uuid.UUID), want int) (*dispatch.Recovery, []uuid.UUID) {
	t.Helper()
	var msgs []relayer.Outgoing
	for i := range 10 {
		msgs = append(msgs, relayer.NewOutgoing(Placed{i}))
	}
	ids := b.enlistOnly(t, msgs...)
	spoil(ids)
	r := b.recovery(t, dispatch.RecoveryOptions{PollInterval: 50 * time.Millisecond, MinAge: time.Nanosecond})
	must(t, r.Start(context.Background()))
	b.waitSent(t, want)
	b.waitRows(t, 1)
	morePasses(t, r, 3)
	if n := b.mem.Len(); n != want {
		t.Errorf("the broker received %d messages, want the %d good rows once", n, want)
	}
	return r, ids
}
