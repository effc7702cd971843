package dispatch_test

import (
	"context"
	"errors"
	"runtime"
	"strings"
	"testing"
	"time"

	"github.com/google/uuid"

	"github.com/relayer-go/relayer"
	"github.com/relayer-go/relayer/dispatch"
	"github.com/relayer-go/relayer/internal/testkit"
	"github.com/relayer-go/relayer/internal/workerstore"
	"github.com/relayer-go/relayer/store"
)

func (b *bundle) cleanup(t testing.TB, opts dispatch.CleanupOptions) *dispatch.Cleanup {
	t.Helper()
	if opts.Logger == nil {
		opts.Logger = b.logger()
	}
	c, err := dispatch.NewCleanup(b.db, b.outbox, opts)
	must(t, err)
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		c.Stop(ctx)
	})
	return c
}

// addInbox records n messages for consumer, received age ago by the database's
// clock.
func (b *bundle) addInbox(t *testing.T, consumer string, n int, age time.Duration) {
	t.Helper()
	_, err := b.db.Exec(`INSERT INTO "`+b.schema+`".ob_inbox (consumer, message_id, received_at)
SELECT $1, gen_random_uuid(), now() - $2 * interval '1 microsecond' FROM generate_series(1, $3)`,
		consumer, age.Microseconds(), n)
	must(t, err)
}

// addDead writes n dead letters of type typ, dead for age by the database's
// clock.
func (b *bundle) addDead(t *testing.T, typ string, n int, age time.Duration) {
	t.Helper()
	_, err := b.db.Exec(`INSERT INTO "`+b.schema+`".ob_dead (id, message_type, transport, destination, body, headers,
    created_at, attempts, reason, dead_at)
SELECT gen_random_uuid(), $1, 'mem', 'd', '\x'::bytea, '\x0000000000000000'::bytea,
    now() - $2 * interval '1 microsecond', 5, 'retries exhausted', now() - $2 * interval '1 microsecond'
FROM generate_series(1, $3)`, typ, age.Microseconds(), n)
	must(t, err)
}

// tally counts the rows of table per value of column.
func (b *bundle) tally(t *testing.T, table, column string) map[string]int {
	t.Helper()
	rows, err := b.db.Query(`SELECT ` + column + `, count(*) FROM "` + b.schema + `".ob_` + table + ` GROUP BY 1`)
	must(t, err)
	defer rows.Close()
	got := map[string]int{}
	for rows.Next() {
		var k string
		var n int
		must(t, rows.Scan(&k, &n))
		got[k] = n
	}
	must(t, rows.Err())
	return got
}

// waitCleanup waits until ok holds for c's stats.
func waitCleanup(t *testing.T, c *dispatch.Cleanup, ok func(dispatch.CleanupStats) bool) dispatch.CleanupStats {
	t.Helper()
	var s dispatch.CleanupStats
	testkit.Eventually(t, 10*time.Second, func() bool { s = c.Stats(); return ok(s) }, "cleanup stats meeting the condition")
	return s
}

func TestCleanupDeletesOnlyRowsPastRetention(t *testing.T) {
	t.Parallel()
	b := setup(t, dispatch.DirectOptions{})
	const margin = time.Minute
	inbox, dead := dispatch.CleanupInboxRetentionDefault, dispatch.CleanupDeadRetentionDefault
	b.addInbox(t, "old", 3, inbox+margin)
	b.addInbox(t, "young", 2, inbox-margin)
	b.addInbox(t, "new", 1, 0)
	b.addDead(t, "old", 3, dead+margin)
	b.addDead(t, "young", 2, dead-margin)
	b.addDead(t, "inbox-old", 1, inbox+margin) // past the inbox's retention, not the dead letters'

	c := b.cleanup(t, dispatch.CleanupOptions{Interval: time.Hour})
	must(t, c.Start(context.Background()))
	s := waitCleanup(t, c, func(s dispatch.CleanupStats) bool { return s.Runs >= 1 })
	if s.InboxDeleted != 3 || s.DeadDeleted != 3 || s.InboxStatements != 1 || s.DeadStatements != 1 || s.Failures != 0 {
		t.Errorf("stats after one pass: %+v; want 3 rows from each table in one statement each", s)
	}
	if got := b.tally(t, "inbox", "consumer"); got["old"] != 0 || got["young"] != 2 || got["new"] != 1 {
		t.Errorf("inbox after cleanup: %v; want only the rows past retention gone", got)
	}
	if got := b.tally(t, "dead", "message_type"); got["old"] != 0 || got["young"] != 2 || got["inbox-old"] != 1 {
		t.Errorf("dead letters after cleanup: %v; want only the rows past retention gone", got)
	}
}

func TestCleanupDeletesInBoundedBatches(t *testing.T) {
	t.Parallel()
	b := setup(t, dispatch.DirectOptions{})
	b.addInbox(t, "old", 35, 8*24*time.Hour)
	b.addInbox(t, "new", 5, time.Hour)
	b.addDead(t, "old", 20, 31*24*time.Hour)
	c := b.cleanup(t, dispatch.CleanupOptions{BatchSize: 10, Interval: time.Hour})
	must(t, c.Start(context.Background()))
	s := waitCleanup(t, c, func(s dispatch.CleanupStats) bool { return s.Runs >= 1 })
	// 35 rows: three full batches and a short one. 20 rows: two full batches
	// and an empty one that ends the pass.
	want := dispatch.CleanupStats{Runs: 1, InboxDeleted: 35, InboxStatements: 4, DeadDeleted: 20, DeadStatements: 3}
	if s != want {
		t.Errorf("stats after one pass = %+v, want %+v", s, want)
	}
	if got := b.tally(t, "inbox", "consumer"); len(got) != 1 || got["new"] != 5 {
		t.Errorf("inbox after cleanup: %v", got)
	}
}

func (b *bundle) cleanupLeaseOwner(t *testing.T) string {
	t.Helper()
	var owner string
	err := b.db.QueryRow(`SELECT owner FROM "`+b.schema+`".ob_relayer_leases WHERE name = $1 AND expires_at > now()`, store.CleanupLeaseName).Scan(&owner)
	if err != nil {
		return ""
	}
	return owner
}

func TestOneCleanupAtATime(t *testing.T) {
	t.Parallel()
	b := setup(t, dispatch.DirectOptions{})
	ctx := context.Background()
	// A crashed holder: its lease is live for a while and nobody renews it.
	crashed := workerstore.Lease{Name: store.CleanupLeaseName, Owner: "crashed", Token: uuid.New()}
	start := time.Now()
	held, _, err := b.store.AcquireLease(ctx, crashed, time.Second)
	if err != nil || !held {
		t.Fatalf("lease for the crashed holder = %v, %v", held, err)
	}
	b.addInbox(t, "old", 5, 8*24*time.Hour)
	opts := dispatch.CleanupOptions{Interval: 20 * time.Millisecond, LeaseDuration: 3 * time.Second}
	opts.Owner = "c1"
	c1 := b.cleanup(t, opts)
	opts.Owner = "c2"
	c2 := b.cleanup(t, opts)
	must(t, c1.Start(ctx))
	must(t, c2.Start(ctx))
	if testkit.Within(time.Until(start.Add(500*time.Millisecond)), func() bool { return c1.Stats().Runs+c2.Stats().Runs != 0 }) {
		t.Fatalf("a pass ran while the crashed holder's lease was live: %+v, %+v", c1.Stats(), c2.Stats())
	}
	// Once it expires, one instance takes over and keeps the lease: its passes
	// come faster than a third of the lease, so it renews before anyone else
	// could take it.
	testkit.Eventually(t, 10*time.Second, func() bool { return c1.Stats().Runs+c2.Stats().Runs >= 10 }, "10 cleanup passes")
	holder, other := c1, c2
	if c2.Stats().Runs > 0 {
		holder, other = c2, c1
	}
	if s := other.Stats(); s.Runs != 0 || s.Skipped == 0 {
		t.Fatalf("both instances ran passes: holder %+v, other %+v", holder.Stats(), s)
	}
	if got := b.cleanupLeaseOwner(t); got != holder.Options().Owner {
		t.Errorf("lease owner %q, want %q", got, holder.Options().Owner)
	}
	if got := b.tally(t, "inbox", "consumer"); len(got) != 0 {
		t.Errorf("inbox after cleanup: %v", got)
	}
	// Stopping the holder releases the lease; the other instance takes over at
	// its next pass.
	must(t, holder.Stop(ctx))
	ran := holder.Stats().Runs
	waitCleanup(t, other, func(s dispatch.CleanupStats) bool { return s.Runs >= 3 })
	if got := holder.Stats().Runs; got != ran {
		t.Errorf("a stopped instance kept running passes: %d, then %d", ran, got)
	}
	if got := b.cleanupLeaseOwner(t); got != other.Options().Owner {
		t.Errorf("lease owner after handover %q, want %q", got, other.Options().Owner)
	}
}

func TestCleanupOptions(t *testing.T) {
	t.Parallel()
	for _, c := range []struct {
		opts  dispatch.CleanupOptions
		field string
	}{
		{dispatch.CleanupOptions{InboxRetention: -time.Hour}, "InboxRetention"},
		{dispatch.CleanupOptions{InboxRetention: 7}, "InboxRetention"},
		{dispatch.CleanupOptions{DeadRetention: 59 * time.Second}, "DeadRetention"},
		{dispatch.CleanupOptions{BatchSize: -1}, "BatchSize"},
		{dispatch.CleanupOptions{BatchSize: 10001}, "BatchSize"},
		{dispatch.CleanupOptions{Interval: -time.Second}, "Interval"},
		{dispatch.CleanupOptions{LeaseDuration: time.Millisecond}, "LeaseDuration"},
	} {
		if err := c.opts.Validate(); !errors.Is(err, dispatch.ErrInvalidOptions) || !strings.Contains(err.Error(), c.field) {
			t.Errorf("Validate(%+v) = %v, want an error naming %s", c.opts, err, c.field)
		}
	}
	if err := (dispatch.CleanupOptions{InboxRetention: time.Minute, BatchSize: 10000}).Validate(); err != nil {
		t.Errorf("options at the limits: %v", err)
	}
	o, err := dispatch.LoadCleanupOptions(dispatch.MapSource(map[string]string{
		"InboxRetention": "336h", "DeadRetention": "2160h", "BatchSize": "500", "Interval": "30s", "LeaseDuration": "1m",
	}))
	want := dispatch.CleanupOptions{InboxRetention: 14 * 24 * time.Hour, DeadRetention: 90 * 24 * time.Hour, BatchSize: 500, Interval: 30 * time.Second, LeaseDuration: time.Minute}
	if err != nil || o != want {
		t.Errorf("LoadCleanupOptions = %+v, %v; want %+v", o, err, want)
	}
	for key, value := range map[string]string{"InboxRetention": "7d", "DeadRetention": "30s", "BatchSize": "many", "Interval": "0s"} {
		if _, err := dispatch.LoadCleanupOptions(dispatch.MapSource(map[string]string{key: value})); !errors.Is(err, dispatch.ErrInvalidOptions) || !strings.Contains(err.Error(), key) {
			t.Errorf("LoadCleanupOptions(%s=%q) = %v, want an error naming %s", key, value, err, key)
		}
	}
	if _, err := dispatch.NewCleanup(nil, relayer.Outbox{}, dispatch.CleanupOptions{}); !errors.Is(err, store.ErrNilDB) {
		t.Errorf("NewCleanup(nil) = %v", err)
	}
	b := setup(t, dispatch.DirectOptions{})
	if _, err := dispatch.NewCleanup(b.db, b.outbox, dispatch.CleanupOptions{BatchSize: -5}); !errors.Is(err, dispatch.ErrInvalidOptions) {
		t.Errorf("NewCleanup with bad options = %v", err)
	}
	eff := b.cleanup(t, dispatch.CleanupOptions{}).Options()
	if eff.InboxRetention != 7*24*time.Hour || eff.DeadRetention != 30*24*time.Hour || eff.BatchSize != 1000 ||
		eff.Interval != time.Minute || eff.LeaseDuration != 30*time.Second || eff.Owner == "" || eff.Logger == nil {
		t.Errorf("defaults %+v", eff)
	}
}

// TestCleanupStartStop runs alone (not in parallel), so that only the worker's
// goroutines can differ before and after.
func TestCleanupStartStop(t *testing.T) {
	b := setup(t, dispatch.DirectOptions{})
	defer noNewGoroutines(t, runtime.NumGoroutine())
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	c := b.cleanup(t, dispatch.CleanupOptions{Interval: time.Hour})
	must(t, c.Start(ctx))
	if err := c.Start(ctx); err == nil {
		t.Error("a second Start succeeded")
	}
	waitCleanup(t, c, func(s dispatch.CleanupStats) bool { return s.Runs >= 1 })
	must(t, c.Stop(ctx))
	if err := c.Stop(ctx); err != nil {
		t.Errorf("second Stop = %v", err)
	}
	if err := c.Start(ctx); !errors.Is(err, dispatch.ErrStopped) {
		t.Errorf("Start after Stop = %v, want ErrStopped", err)
	}
	if got := b.cleanupLeaseOwner(t); got != "" {
		t.Errorf("lease still held by %q after Stop", got)
	}
	// Run returns when its context ends.
	r := b.cleanup(t, dispatch.CleanupOptions{Interval: time.Hour})
	rctx, rcancel := context.WithCancel(ctx)
	errc := make(chan error, 1)
	go func() { errc <- r.Run(rctx) }()
	waitCleanup(t, r, func(s dispatch.CleanupStats) bool { return s.Runs >= 1 })
	rcancel()
	if err := <-errc; !errors.Is(err, context.Canceled) {
		t.Errorf("Run = %v, want context.Canceled", err)
	}
}
