package store_test

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"testing"
	"time"

	"github.com/google/uuid"

	"github.com/relayer-go/relayer"
	"github.com/relayer-go/relayer/internal/testkit"
	"github.com/relayer-go/relayer/internal/workerstore"
	"github.com/relayer-go/relayer/store"
)

// leaseExpired reports whether the lease name has expired on the
// database's clock.
func (b *bundle) leaseExpired(t *testing.T, name string) bool {
	t.Helper()
	var expired bool
	q := fmt.Sprintf(`SELECT expires_at <= now() FROM "%s"."%srelayer_leases" WHERE name = $1`, b.opts.Schema, b.opts.TablePrefix)
	if err := b.db.QueryRow(q, name).Scan(&expired); err != nil {
		t.Fatal(err)
	}
	return expired
}

func TestLeaseTakeoverOnlyAfterExpiry(t *testing.T) {
	t.Parallel()
	eachDriver(t, func(t *testing.T, b *bundle) {
		ctx := context.Background()
		a := workerstore.Lease{Name: "recovery", Owner: "worker-a", Token: uuid.New()}
		c := workerstore.Lease{Name: "recovery", Owner: "worker-b", Token: uuid.New()}
		held, until, err := b.store.AcquireLease(ctx, a, 300*time.Millisecond)
		if err != nil || !held || until.IsZero() {
			t.Fatalf("first acquire = %v, %v, %v", held, until, err)
		}
		if held, _, _ := b.store.AcquireLease(ctx, c, time.Minute); held {
			t.Error("a live lease was taken over")
		}
		held, renewed, err := b.store.AcquireLease(ctx, a, time.Second)
		if err != nil || !held || !renewed.After(until) {
			t.Errorf("renewal by the owner = %v, %v, %v", held, renewed, err)
		}
		testkit.Eventually(t, 5*time.Second, func() bool { return b.leaseExpired(t, a.Name) }, "the renewed lease to expire")
		if held, _, _ := b.store.AcquireLease(ctx, c, time.Minute); !held {
			t.Error("an expired lease was not taken over")
		}
		if held, _, _ := b.store.AcquireLease(ctx, a, time.Minute); held {
			t.Error("the previous owner renewed a lease it lost")
		}
		if err := b.store.ReleaseLease(ctx, a); err != nil {
			t.Fatal(err)
		}
		if held, _, _ := b.store.AcquireLease(ctx, a, time.Minute); held {
			t.Error("a release by a non-owner freed the lease")
		}
		if err := b.store.ReleaseLease(ctx, c); err != nil {
			t.Fatal(err)
		}
		if held, _, _ := b.store.AcquireLease(ctx, a, time.Minute); !held {
			t.Error("a released lease could not be taken")
		}
		if _, _, err := b.store.AcquireLease(ctx, workerstore.Lease{Name: "x"}, time.Minute); !errors.Is(err, store.ErrInvalidArgument) {
			t.Errorf("lease without a token = %v", err)
		}
	})
}

func TestReleaseBatchFreesOnlyItsClaims(t *testing.T) {
	t.Parallel()
	eachDriver(t, func(t *testing.T, b *bundle) {
		ctx := context.Background()
		var msgs []relayer.Message
		for range 5 {
			msgs = append(msgs, b.unordered(t))
		}
		future := b.unordered(t)
		future.DeliverAt = b.t0.Add(time.Hour)
		b.insert(t, append(slices.Clone(msgs), future, b.ordered(t, "k", 4))...)
		want := sortedIDs(msgs...)
		held := store.Claim{Token: uuid.New(), Until: b.t0.Add(time.Minute)}
		if ok, _ := b.store.Claim(ctx, want[1], held, b.t0); !ok {
			t.Fatal("claim failed")
		}
		c := store.Claim{Token: uuid.New(), Until: b.t0.Add(time.Minute)}
		got, err := b.store.ClaimBatch(ctx, nil, append(slices.Clone(want), future.ID), c, b.t0)
		if wantIDs := []uuid.UUID{want[0], want[2], want[3], want[4]}; err != nil || !slices.Equal(ids(got), wantIDs) {
			t.Fatalf("ClaimBatch = %v, %v; want %v (not the held row, not the future one)", ids(got), err, wantIDs)
		}
		n, err := b.store.ReleaseBatch(ctx, want, c.Token, b.t0)
		if err != nil || n != 4 {
			t.Errorf("ReleaseBatch = %d, %v; want the 4 rows c held", n, err)
		}
		if n := b.count(t, b.t0); n != 5 {
			t.Errorf("eligible after release = %d, want 5 (all but the held row, plus the ordered one)", n)
		}
		rows := b.readUnordered(t, b.t0)
		for _, r := range rows {
			if r.Attempts != 0 {
				t.Errorf("release charged an attempt to %s", r.ID)
			}
		}
	})
}

// Several lanes' leases are taken in one statement: free and expired ones
// and the caller's own, never another's live lease.
func TestAcquireLaneLeases(t *testing.T) {
	t.Parallel()
	eachDriver(t, func(t *testing.T, b *bundle) {
		ctx := context.Background()
		mine, other := uuid.New(), uuid.New()
		if held, _, err := b.store.AcquireLease(ctx, workerstore.Lease{Name: workerstore.LaneLeaseName(3), Token: other}, time.Minute); err != nil || !held {
			t.Fatalf("other's lease: %v %v", held, err)
		}
		if held, _, err := b.store.AcquireLease(ctx, workerstore.Lease{Name: workerstore.LaneLeaseName(5), Token: other}, time.Millisecond); err != nil || !held {
			t.Fatalf("other's short lease: %v %v", held, err)
		}
		testkit.Eventually(t, 5*time.Second, func() bool { return b.leaseExpired(t, workerstore.LaneLeaseName(5)) }, "the short lease to expire")
		got, err := acquireLanes(ctx, b.store, []int{7, 3, 1, 5}, "me", mine, time.Minute)
		if want := []int{1, 5, 7}; err != nil || !slices.Equal(got, want) {
			t.Fatalf("AcquireLaneLeases = %v, %v; want %v (not lane 3, another's live lease)", got, err, want)
		}
		got, err = acquireLanes(ctx, b.store, []int{1, 3}, "me", mine, time.Minute)
		if want := []int{1}; err != nil || !slices.Equal(got, want) {
			t.Errorf("renewal = %v, %v; want %v", got, err, want)
		}
		if held, _, _ := b.store.AcquireLease(ctx, workerstore.Lease{Name: workerstore.LaneLeaseName(7), Token: other}, time.Minute); held {
			t.Error("a lane lease taken in a batch was taken over while live")
		}
		if _, err := acquireLanes(ctx, b.store, []int{1}, "me", uuid.Nil, time.Minute); !errors.Is(err, store.ErrInvalidArgument) {
			t.Errorf("no token: %v, want ErrInvalidArgument", err)
		}
		if got, err := acquireLanes(ctx, b.store, nil, "me", mine, time.Minute); err != nil || len(got) != 0 {
			t.Errorf("no lanes: %v, %v", got, err)
		}
	})
}

// One token holds lanes for several named owners: each lane records its own
// owner, and a lease renewed under another name of the same token keeps its
// acquired_at (lane cursors stay valid).
func TestAcquireLaneLeasesFor(t *testing.T) {
	t.Parallel()
	eachDriver(t, func(t *testing.T, b *bundle) {
		ctx := context.Background()
		token := uuid.New()
		got, err := b.store.AcquireLaneLeasesFor(ctx, []int{4, 2}, []string{"w-4", "w-2 \"quoted\", {braced}"}, token, time.Minute)
		if err != nil || !slices.Equal(got, []int{2, 4}) {
			t.Fatalf("AcquireLaneLeasesFor = %v, %v", got, err)
		}
		owners := func() map[string]string {
			live, err := b.store.LiveLeases(ctx)
			if err != nil {
				t.Fatal(err)
			}
			m := map[string]string{}
			for _, l := range live {
				if l.Token == token {
					m[l.Name] = l.Owner
				}
			}
			return m
		}
		acquired := func(lane int) time.Time {
			var at time.Time
			q := fmt.Sprintf(`SELECT acquired_at FROM "%s"."%srelayer_leases" WHERE name = $1`, b.opts.Schema, b.opts.TablePrefix)
			if err := b.db.QueryRow(q, workerstore.LaneLeaseName(lane)).Scan(&at); err != nil {
				t.Fatal(err)
			}
			return at
		}
		if o := owners(); o[workerstore.LaneLeaseName(4)] != "w-4" || o[workerstore.LaneLeaseName(2)] != `w-2 "quoted", {braced}` {
			t.Errorf("owners = %v", o)
		}
		before := acquired(2)
		if got, err := b.store.AcquireLaneLeasesFor(ctx, []int{2}, []string{"w-1"}, token, time.Minute); err != nil || !slices.Equal(got, []int{2}) {
			t.Fatalf("renewal under another name = %v, %v", got, err)
		}
		if o := owners(); o[workerstore.LaneLeaseName(2)] != "w-1" {
			t.Errorf("owner after renewal = %q, want w-1", o[workerstore.LaneLeaseName(2)])
		}
		if after := acquired(2); !after.Equal(before) {
			t.Errorf("acquired_at moved from %s to %s on a renewal by the same token", before, after)
		}
		if _, err := b.store.AcquireLaneLeasesFor(ctx, []int{1, 2}, []string{"x"}, token, time.Minute); !errors.Is(err, store.ErrInvalidArgument) {
			t.Errorf("owners and lanes of different lengths: %v, want ErrInvalidArgument", err)
		}
	})
}

// The heads of several lanes are read from their start in one statement, as
// each lane's alone would be.
func TestReadLanesFromTheirStart(t *testing.T) {
	t.Parallel()
	eachDriver(t, func(t *testing.T, b *bundle) {
		ctx := context.Background()
		const lanes = 16
		var msgs []relayer.Message
		for i := range 40 {
			msgs = append(msgs, b.ordered(t, fmt.Sprintf("key-%d", i%9), lanes))
		}
		b.insert(t, msgs...)
		var all []int
		for l := range lanes {
			all = append(all, l)
		}
		got, err := readHeads(ctx, b.store, nil, all, 3)
		if err != nil {
			t.Fatal(err)
		}
		var want []store.Row
		for _, l := range all {
			rows, err := readHeads(ctx, b.store, nil, []int{l}, 3)
			if err != nil {
				t.Fatal(err)
			}
			want = append(want, rows...)
		}
		if !slices.Equal(ids(got), ids(want)) {
			t.Errorf("ReadLanes from the start = %v, want each lane's head in lane order %v", ids(got), ids(want))
		}
		if _, err := readHeads(ctx, b.store, nil, all, 0); !errors.Is(err, store.ErrInvalidArgument) {
			t.Errorf("limit 0: %v, want ErrInvalidArgument", err)
		}
	})
}

// LockLaneLeases locks the lane leases a token holds for long enough,
// writing nothing, and keeps a competing owner off them until its
// transaction ends, even after they expire.
func TestLockLaneLeases(t *testing.T) {
	t.Parallel()
	eachDriver(t, func(t *testing.T, b *bundle) {
		ctx := context.Background()
		token, other := uuid.New(), uuid.New()
		if held, err := acquireLanes(ctx, b.store, []int{0, 1}, "w", token, time.Minute); err != nil || !slices.Equal(held, []int{0, 1}) {
			t.Fatalf("AcquireLaneLeases = %v, %v", held, err)
		}
		if held, err := acquireLanes(ctx, b.store, []int{2}, "other", other, time.Minute); err != nil || !slices.Equal(held, []int{2}) {
			t.Fatalf("another token's lease: %v, %v", held, err)
		}
		if held, err := acquireLanes(ctx, b.store, []int{4}, "w", token, 300*time.Millisecond); err != nil || !slices.Equal(held, []int{4}) {
			t.Fatalf("a short lease: %v, %v", held, err)
		}
		version := func(lane int) (xmin string, expires time.Time) {
			t.Helper()
			q := fmt.Sprintf(`SELECT xmin::text, expires_at FROM "%s"."%srelayer_leases" WHERE name = $1`, b.opts.Schema, b.opts.TablePrefix)
			if err := b.db.QueryRow(q, workerstore.LaneLeaseName(lane)).Scan(&xmin, &expires); err != nil {
				t.Fatal(err)
			}
			return xmin, expires
		}
		xmin, expires := version(0)
		got, err := b.store.LockLaneLeases(ctx, []int{4, 3, 2, 1, 0}, token, 30*time.Second)
		if err != nil || !slices.Equal(got, []int{0, 1}) {
			t.Errorf("LockLaneLeases = %v, %v; want lanes 0 and 1: lane 2 is another's, 3 no one's, 4 too short", got, err)
		}
		if got, err := b.store.LockLaneLeases(ctx, []int{0, 1}, token, 2*time.Minute); err != nil || len(got) > 0 {
			t.Errorf("LockLaneLeases for more time than the leases have = %v, %v; want none", got, err)
		}
		if x, e := version(0); x != xmin || !e.Equal(expires) {
			t.Errorf("LockLaneLeases wrote the lease: version %s, expiry %s; was %s, %s", x, e, xmin, expires)
		}

		tx, st := b.begin(t, nil)
		defer func() { _ = tx.Rollback() }()
		if got, err := st.LockLaneLeases(ctx, []int{4}, token, 0); err != nil || !slices.Equal(got, []int{4}) {
			t.Fatalf("LockLaneLeases in a transaction = %v, %v", got, err)
		}
		// The lease expires, its row still locked.
		testkit.Eventually(t, 5*time.Second, func() bool { return b.leaseExpired(t, workerstore.LaneLeaseName(4)) }, "lane 4's lease to expire")
		done := make(chan []int, 1)
		go func() {
			held, err := acquireLanes(ctx, b.store, []int{4}, "other", other, time.Minute)
			if err != nil {
				t.Error(err)
			}
			done <- held
		}()
		select {
		case held := <-done:
			t.Fatalf("another token took the lease (%v) while the locking transaction was open", held)
		case <-time.After(200 * time.Millisecond):
		}
		if err := tx.Commit(); err != nil {
			t.Fatal(err)
		}
		if held := <-done; !slices.Equal(held, []int{4}) {
			t.Errorf("after the locking transaction ended, the expired lease went to %v, want lane 4", held)
		}
		for _, bad := range []struct {
			what  string
			token uuid.UUID
			min   time.Duration
		}{{"no token", uuid.Nil, time.Second}, {"negative time", token, -time.Second}} {
			if _, err := b.store.LockLaneLeases(ctx, []int{0}, bad.token, bad.min); !errors.Is(err, store.ErrInvalidArgument) {
				t.Errorf("%s: %v, want ErrInvalidArgument", bad.what, err)
			}
		}
	})
}
