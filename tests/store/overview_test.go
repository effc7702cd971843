package store_test

import (
	"context"
	"errors"
	"slices"
	"testing"
	"time"

	"github.com/google/uuid"

	"github.com/relayer-go/relayer"
	"github.com/relayer-go/relayer/internal/testkit"
	"github.com/relayer-go/relayer/store"
)

// The backlog by destination splits every row into the classes Stats
// counts, and adds each destination's dead letters.
func TestBacklogByDestination(t *testing.T) {
	t.Parallel()
	eachDriver(t, func(t *testing.T, b *bundle) {
		ctx := context.Background()
		now := b.t0.Add(time.Hour)
		due1, due2 := b.unordered(t), b.unordered(t)
		later := b.unordered(t)
		later.Destination, later.DeliverAt = "reminders", b.t0.Add(2*time.Hour)
		head, behind := b.ordered(t, "k", 32), b.ordered(t, "k", 32)
		head.Destination, behind.Destination = "ledger", "ledger"
		gone := b.unordered(t)
		gone.Transport, gone.Destination = "kafka", "audit"
		b.insert(t, due1, due2, later, head, behind, gone)
		b.park(t, head)
		b.bury(t, store.ReasonPermanent, gone)

		backlog, err := b.store.Backlog(ctx, now, 100_000)
		if err != nil {
			t.Fatal(err)
		}
		got := backlog.Destinations
		if backlog.Sample != 1 || backlog.DeadSample != 1 || backlog.ParkedKeys != 1 || !backlog.OldestDueAt.Equal(b.t0) {
			t.Errorf("Backlog: sample %v/%v, %d parked keys, oldest due %v; want exact, 1, %v", backlog.Sample, backlog.DeadSample,
				backlog.ParkedKeys, backlog.OldestDueAt, b.t0)
		}
		want := []store.DestinationBacklog{
			{Transport: "kafka", Destination: "audit", Dead: 1},
			{Transport: "nats", Destination: "ledger", Blocked: 1, Parked: 1},
			{Transport: "nats", Destination: "orders.placed", Due: 2, OldestDueAt: b.t0},
			{Transport: "nats", Destination: "reminders", Scheduled: 1},
		}
		if !slices.Equal(got, want) {
			t.Errorf("Backlog =\n%+v\nwant\n%+v", got, want)
		}
		st, err := b.store.Stats(ctx, now)
		if err != nil {
			t.Fatal(err)
		}
		var due, blocked, sched, parked, dead int64
		for _, d := range got {
			due, blocked, sched, parked, dead = due+d.Due, blocked+d.Blocked, sched+d.Scheduled, parked+d.Parked, dead+d.Dead
		}
		if due+blocked != st.Eligible || blocked != st.Blocked || sched != st.Scheduled || parked != st.Parked || dead != st.Dead {
			t.Errorf("backlog sums %d %d %d %d %d, Stats %+v", due, blocked, sched, parked, dead, st)
		}
	})
}

// Rows behind a held key (its head parked, or waiting for its retry) are
// blocked, not due: the overview and Stats count them apart, and the longest
// wait passes over them, even where they are the oldest rows of their lane,
// so that a parked key does not read as a delivery falling behind. The
// count of eligible rows, a store contract, still includes them.
func TestBlockedRowsAreNotDue(t *testing.T) {
	t.Parallel()
	eachDriver(t, func(t *testing.T, b *bundle) {
		ctx := context.Background()
		now := b.t0.Add(time.Hour)
		at := func(key string, created time.Time) relayer.Message {
			m := b.ordered(t, key, 1) // one lane: every key shares it
			m.CreatedAt = created
			return m
		}
		parkedHead, behindParked := at("parked", b.t0.Add(-3*time.Hour)), at("parked", b.t0.Add(-2*time.Hour))
		retryHead, behindRetry := at("retrying", b.t0.Add(-3*time.Hour)), at("retrying", b.t0.Add(-2*time.Hour))
		free := at("free", b.t0)
		b.insert(t, parkedHead, behindParked, retryHead, behindRetry, free)
		b.park(t, parkedHead)
		b.exec(t, `UPDATE $outbox SET attempts = 1, retry_at = $1 WHERE id = $2`, now.Add(time.Minute), retryHead.ID)

		st, err := b.store.Stats(ctx, now)
		if err != nil {
			t.Fatal(err)
		}
		if st.Eligible != 3 || st.Blocked != 2 || st.Retrying != 1 || st.Parked != 1 || !st.OldestDueAt.Equal(b.t0) || !st.OldestCreatedAt.Equal(b.t0) {
			t.Errorf("Stats = %+v; want 3 eligible of which 2 blocked, 1 retrying, 1 parked, the oldest due and created %v (the free key's row)", st, b.t0)
		}
		if n := b.count(t, now); n != 3 {
			t.Errorf("CountEligible = %d, want 3: blocked rows are eligible", n)
		}
		backlog, err := b.store.Backlog(ctx, now, 100_000)
		if err != nil {
			t.Fatal(err)
		}
		tot := backlog.Total
		if tot.Due != 1 || tot.Blocked != 2 || tot.Retrying != 1 || tot.Parked != 1 || !backlog.OldestDueAt.Equal(b.t0) || !tot.OldestDueAt.Equal(b.t0) {
			t.Errorf("Backlog total = %+v, oldest due %v; want 1 due, 2 blocked, 1 retrying, 1 parked, the longest wait from %v",
				tot, backlog.OldestDueAt, b.t0)
		}
		// The lanes count the rows of held keys apart too, the retrying
		// head with them, and date a lane by the first row a worker can
		// send.
		lanes, _, err := b.store.Lanes(ctx, 100_000)
		if err != nil {
			t.Fatal(err)
		}
		if len(lanes) != 1 || lanes[0].Pending != 1 || lanes[0].Blocked != 3 || lanes[0].ParkedKeys != 1 || !lanes[0].HeadCreatedAt.Equal(b.t0) {
			t.Errorf("Lanes = %+v; want one lane with 1 pending, 3 blocked, 1 parked key, its head created %v (the free key's row)", lanes, b.t0)
		}
	})
}

// Rows no worker can send while a destination is paused are blocked, not
// due: the paused destination's unordered rows, its ordered head and the
// rows of that key behind it, whatever their destination. Other keys and
// destinations stay due.
func TestRowsBehindAPausedDestinationAreBlocked(t *testing.T) {
	t.Parallel()
	eachDriver(t, func(t *testing.T, b *bundle) {
		ctx := context.Background()
		now := b.t0.Add(time.Hour)
		pausedHead, behind := b.ordered(t, "k", 1), b.ordered(t, "k", 1)
		pausedHead.Destination, behind.Destination = "ledger", "orders.placed"
		free := b.ordered(t, "free", 1)
		free.Destination = "orders.placed"
		pausedUnordered, due := b.unordered(t), b.unordered(t)
		pausedUnordered.Destination = "ledger"
		b.insert(t, pausedHead, behind, free, pausedUnordered, due)
		b.exec(t, `INSERT INTO $pauses (owner_token, transport, destination, owner, since, next_probe)
VALUES (gen_random_uuid(), 'nats', 'ledger', 'w1', now(), now() + interval '1 minute')`)
		// A pause its worker stopped refreshing (it crashed) does not count.
		b.exec(t, `INSERT INTO $pauses (owner_token, transport, destination, owner, since, next_probe, updated_at)
VALUES (gen_random_uuid(), 'nats', 'orders.placed', 'gone', now() - interval '2 hours', now(), now() - interval '2 hours')`)

		st, err := b.store.Stats(ctx, now)
		if err != nil {
			t.Fatal(err)
		}
		if st.Eligible != 5 || st.Blocked != 3 {
			t.Errorf("Stats = %+v; want 5 eligible of which 3 blocked (the paused destination's rows and the row behind its head)", st)
		}
		backlog, err := b.store.Backlog(ctx, now, 100_000)
		if err != nil {
			t.Fatal(err)
		}
		want := []store.DestinationBacklog{
			{Transport: "nats", Destination: "ledger", Blocked: 2},
			{Transport: "nats", Destination: "orders.placed", Due: 2, Blocked: 1, OldestDueAt: b.t0},
		}
		if got := backlog.Destinations; !slices.Equal(got, want) {
			t.Errorf("Backlog =\n%+v\nwant\n%+v", got, want)
		}
	})
}

func TestLanesAndMessage(t *testing.T) {
	t.Parallel()
	eachDriver(t, func(t *testing.T, b *bundle) {
		ctx := context.Background()
		k1, k2, other := b.ordered(t, "k", 32), b.ordered(t, "k", 32), b.ordered(t, "other", 32)
		plain := b.unordered(t)
		b.insert(t, k1, k2, other, plain)
		b.park(t, k1)
		lanes, sample, err := b.store.Lanes(ctx, 100_000)
		if err != nil || sample != 1 {
			t.Fatalf("Lanes: sample %v, %v", sample, err)
		}
		byLane := map[int]store.LaneSummary{}
		for _, l := range lanes {
			byLane[l.Lane] = l
		}
		if l := byLane[k1.Lane]; l.ParkedKeys != 1 || l.Blocked != 1 || (k1.Lane != other.Lane && l.Pending != 0) {
			t.Errorf("lane of k: %+v, want 1 parked key and k's second row blocked behind it", l)
		}
		if l := byLane[other.Lane]; l.Pending < 1 || !l.HeadCreatedAt.Equal(b.t0) {
			t.Errorf("lane of other: %+v", l)
		}
		row, parkedAt, found, err := b.store.Message(ctx, k1.ID)
		if err != nil || !found || row.ID != k1.ID || parkedAt.IsZero() || row.LastError != "schema rejected" {
			t.Errorf("Message(k1) = %+v parked %v found %v, %v", row.Message, parkedAt, found, err)
		}
		if _, _, found, err := b.store.Message(ctx, newID(t)); found || err != nil {
			t.Errorf("Message(unknown) found %v, %v", found, err)
		}
		// The server's statistics lag by about a second.
		testkit.Eventually(t, 10*time.Second, func() bool {
			ins, _, err := b.store.Activity(ctx)
			if err != nil {
				t.Fatal(err)
			}
			return ins >= 4
		}, "Activity counting the 4 rows inserted")
	})
}

// On an outbox larger than exactUpTo, the big classes are estimated from a
// sample of pages and the rare ones stay exact.
func TestBacklogSampled(t *testing.T) {
	t.Parallel()
	eachDriver(t, func(t *testing.T, b *bundle) {
		ctx := context.Background()
		now := b.t0.Add(time.Hour)
		var msgs []relayer.Message
		for range 3000 {
			msgs = append(msgs, b.unordered(t))
		}
		failing := b.unordered(t)
		failing.Destination = "flaky"
		head := b.ordered(t, "k", 32)
		b.insert(t, append(msgs, failing, head)...)
		b.park(t, head)
		c := store.NewClaim(now, time.Minute)
		if _, err := b.store.ClaimBatch(ctx, nil, []uuid.UUID{failing.ID}, c, now); err != nil {
			t.Fatal(err)
		}
		if n, err := b.store.FailBatch(ctx, []store.Failure{{ID: failing.ID, Error: "no", RetryAt: now.Add(time.Minute)}}, c.Token, now); err != nil || n != 1 {
			t.Fatalf("FailBatch = %d, %v", n, err)
		}
		b.exec(t, `ANALYZE $outbox`)
		backlog, err := b.store.Backlog(ctx, now, 500)
		if err != nil {
			t.Fatal(err)
		}
		if backlog.Sample >= 1 || backlog.Sample <= 0 {
			t.Fatalf("sample %v, want a share below 1 of a 3,002-row outbox read with exactUpTo 500", backlog.Sample)
		}
		if backlog.Total.Parked != 1 || backlog.Total.Retrying != 1 || backlog.ParkedKeys != 1 || !backlog.OldestDueAt.Equal(b.t0) {
			t.Errorf("exact parts: %+v, %d keys, oldest %v", backlog.Total, backlog.ParkedKeys, backlog.OldestDueAt)
		}
		for _, d := range backlog.Destinations {
			if d.Destination == "flaky" && d.Retrying != 1 {
				t.Errorf("the failing destination: %+v", d)
			}
		}
		if _, err := b.store.Backlog(ctx, now, 0); !errors.Is(err, store.ErrInvalidArgument) {
			t.Errorf("exactUpTo 0: %v", err)
		}
		lanes, sample, err := b.store.Lanes(ctx, 500)
		if err != nil || sample != 1 && (sample <= 0 || sample > 1) {
			t.Fatalf("Lanes: %v, %v", sample, err)
		}
		if len(lanes) != 1 || lanes[0].ParkedKeys != 1 || lanes[0].Lane != head.Lane {
			t.Errorf("lanes %+v", lanes)
		}
	})
}
