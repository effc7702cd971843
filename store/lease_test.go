package store_test

import (
	"context"
	"errors"
	"slices"
	"testing"
	"time"

	"github.com/google/uuid"

	"github.com/relayer-go/relayer"
	"github.com/relayer-go/relayer/store"
)

func TestLeaseTakeoverOnlyAfterExpiry(t *testing.T) {
	t.Parallel()
	eachDriver(t, func(t *testing.T, b *bundle) {
		ctx := context.Background()
		a := store.Lease{Name: "recovery", Owner: "worker-a", Token: uuid.New()}
		c := store.Lease{Name: "recovery", Owner: "worker-b", Token: uuid.New()}
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
		time.Sleep(1100 * time.Millisecond)
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
		if _, _, err := b.store.AcquireLease(ctx, store.Lease{Name: "x"}, time.Minute); !errors.Is(err, store.ErrInvalidArgument) {
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
