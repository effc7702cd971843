package store_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/google/uuid"

	"github.com/relayer-go/relayer"
	"github.com/relayer-go/relayer/store"
)

// The operator reads on both drivers: live leases, parked rows, limits, and
// Reset emptying what it names.
func TestOperatorReads(t *testing.T) {
	t.Parallel()
	eachDriver(t, func(t *testing.T, b *bundle) {
		ctx := context.Background()
		token := uuid.New()
		if held, _, err := b.store.AcquireLease(ctx, store.Lease{Name: "member:x", Owner: "w", Token: token}, time.Minute); !held || err != nil {
			t.Fatalf("lease: %v, %v", held, err)
		}
		leases, err := b.store.LiveLeases(ctx)
		if err != nil || len(leases) != 1 || leases[0].Name != "member:x" || leases[0].Owner != "w" || leases[0].Token != token {
			t.Fatalf("LiveLeases = %+v, %v", leases, err)
		}
		m := b.unordered(t)
		m.Key, m.Ordered, m.Lane = "k", true, 3
		if err := b.store.Insert(ctx, []relayer.Message{m}); err != nil {
			t.Fatal(err)
		}
		if _, err := b.db.ExecContext(ctx, `UPDATE "`+b.opts.Schema+`".orders_outbox SET parked_at = now(), last_error = 'no' WHERE id = $1`, m.ID); err != nil {
			t.Fatal(err)
		}
		parked, err := b.store.ListParked(ctx, 10)
		if err != nil || len(parked) != 1 || parked[0].ID != m.ID || parked[0].Key != "k" || parked[0].LastError != "no" || parked[0].Since.IsZero() {
			t.Fatalf("ListParked = %+v, %v", parked, err)
		}
		if dead, err := b.store.ListDead(ctx, 10); err != nil || len(dead) != 0 {
			t.Fatalf("ListDead = %+v, %v", dead, err)
		}
		if _, err := b.store.ListDead(ctx, 0); !errors.Is(err, store.ErrInvalidArgument) {
			t.Errorf("ListDead with limit 0 = %v, want ErrInvalidArgument", err)
		}
		if err := b.store.Reset(ctx); err != nil {
			t.Fatal(err)
		}
		if leases, _ := b.store.LiveLeases(ctx); len(leases) != 0 {
			t.Errorf("leases after Reset: %+v", leases)
		}
		if parked, _ := b.store.ListParked(ctx, 10); len(parked) != 0 {
			t.Errorf("parked rows after Reset: %+v", parked)
		}
	})
}
