package store_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/relayer-go/relayer/internal/tool/outboxtool"
	"github.com/relayer-go/relayer/internal/workerstore"

	"github.com/google/uuid"

	"github.com/relayer-go/relayer"
	"github.com/relayer-go/relayer/store"
)

// The operator reads on both drivers: live leases, parked keys, dead letters,
// limits, and Reset emptying what it names.
func TestOperatorReads(t *testing.T) {
	t.Parallel()
	eachDriver(t, func(t *testing.T, b *bundle) {
		ctx := context.Background()
		token := uuid.New()
		if held, _, err := b.store.AcquireLease(ctx, workerstore.Lease{Name: "member:x", Owner: "w", Token: token}, time.Minute); !held || err != nil {
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
		parked, err := b.store.ParkedKeys(ctx, store.ParkedFilter{}, 10)
		if err != nil || len(parked) != 1 || parked[0].Head.ID != m.ID || parked[0].Head.Key != "k" || parked[0].Head.LastError != "no" || parked[0].ParkedAt.IsZero() {
			t.Fatalf("ParkedKeys = %+v, %v", parked, err)
		}
		if dead, err := b.store.DeadLetters(ctx, store.DeadFilter{}, 10); err != nil || len(dead) != 0 {
			t.Fatalf("DeadLetters = %+v, %v", dead, err)
		}
		if _, err := b.store.DeadLetters(ctx, store.DeadFilter{}, 0); !errors.Is(err, store.ErrInvalidArgument) {
			t.Errorf("DeadLetters with limit 0 = %v, want ErrInvalidArgument", err)
		}
		if err := b.store.PublishPauses(ctx, token, "w", []store.Pause{{Transport: "t", Destination: "d", Since: time.Now(), NextProbe: time.Now()}}); err != nil {
			t.Fatal(err)
		}
		if err := outboxtool.Reset(ctx, b.db, b.store.Tables()); err != nil {
			t.Fatal(err)
		}
		if leases, _ := b.store.LiveLeases(ctx); len(leases) != 0 {
			t.Errorf("leases after Reset: %+v", leases)
		}
		if parked, _ := b.store.ParkedKeys(ctx, store.ParkedFilter{}, 10); len(parked) != 0 {
			t.Errorf("parked rows after Reset: %+v", parked)
		}
		if pauses, _ := b.store.Pauses(ctx); len(pauses) != 0 {
			t.Errorf("pauses after Reset: %+v", pauses)
		}
	})
}
