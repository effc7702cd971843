package store_test

import (
	"context"
	"slices"
	"testing"
	"time"

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

		got, err := b.store.Backlog(ctx, now)
		if err != nil {
			t.Fatal(err)
		}
		want := []store.DestinationBacklog{
			{Transport: "kafka", Destination: "audit", Dead: 1},
			{Transport: "nats", Destination: "ledger", Due: 1, Parked: 1, OldestDueAt: b.t0},
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
		var due, sched, parked, dead int64
		for _, d := range got {
			due, sched, parked, dead = due+d.Due, sched+d.Scheduled, parked+d.Parked, dead+d.Dead
		}
		if due != st.Eligible || sched != st.Scheduled || parked != st.Parked || dead != st.Dead {
			t.Errorf("backlog sums %d %d %d %d, Stats %+v", due, sched, parked, dead, st)
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
		lanes, err := b.store.Lanes(ctx)
		if err != nil {
			t.Fatal(err)
		}
		byLane := map[int]store.LaneSummary{}
		for _, l := range lanes {
			byLane[l.Lane] = l
		}
		if l := byLane[k1.Lane]; l.ParkedKeys != 1 || (k1.Lane != other.Lane && l.Pending != 1) {
			t.Errorf("lane of k: %+v, want 1 parked key and k's second row pending", l)
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
		deadline := time.Now().Add(10 * time.Second)
		for {
			ins, _, err := b.store.Activity(ctx)
			if err != nil {
				t.Fatal(err)
			}
			if ins >= 4 {
				break
			}
			if time.Now().After(deadline) {
				t.Fatalf("Activity: %d rows inserted, want the 4 written", ins)
			}
			time.Sleep(100 * time.Millisecond)
		}
	})
}
