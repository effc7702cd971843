package store_test

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"reflect"
	"slices"
	"testing"
	"time"

	"github.com/google/uuid"

	"github.com/relayer-go/relayer"
	"github.com/relayer-go/relayer/store"
)

// bury takes msgs in one transaction and moves them to the dead letters with
// reason, as a dispatcher does.
func (b *bundle) bury(t *testing.T, reason string, msgs ...relayer.Message) {
	t.Helper()
	ctx := context.Background()
	tx, err := b.db.BeginTx(ctx, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer tx.Rollback()
	st, err := b.store.With(tx)
	if err != nil {
		t.Fatal(err)
	}
	ids := make([]uuid.UUID, len(msgs))
	for i := range msgs {
		ids[i] = msgs[i].ID
	}
	taken, err := st.TakeIDs(ctx, nil, ids, b.t0.Add(time.Hour))
	if err != nil || len(taken) != len(msgs) {
		t.Fatalf("TakeIDs = %d, %v", len(taken), err)
	}
	rows := make([]store.Row, len(msgs))
	reasons := make([]string, len(msgs))
	for i := range msgs {
		rows[i] = store.Row{Message: msgs[i], Attempts: 3, LastError: "refused " + msgs[i].Type}
		reasons[i] = reason
	}
	if err := st.Bury(ctx, rows, reasons); err != nil {
		t.Fatal(err)
	}
	if err := tx.Commit(); err != nil {
		t.Fatal(err)
	}
}

func TestDeadLettersListRequeueAndPurge(t *testing.T) {
	t.Parallel()
	eachDriver(t, func(t *testing.T, b *bundle) {
		ctx := context.Background()
		a, c, d := b.unordered(t), b.unordered(t), b.unordered(t)
		c.Type = "billing.Charged"
		d.Type = "billing.Charged"
		b.insert(t, a, c, d)
		b.bury(t, store.ReasonPermanent, a)
		b.bury(t, store.ReasonExhausted, c, d)

		byReason, err := b.store.DeadByReason(ctx)
		if err != nil || len(byReason) != 2 || byReason[store.ReasonPermanent] != 1 || byReason[store.ReasonExhausted] != 2 {
			t.Errorf("DeadByReason = %v, %v; want 1 permanent, 2 exhausted", byReason, err)
		}
		all, err := b.store.DeadLetters(ctx, store.DeadFilter{}, 10)
		if err != nil || len(all) != 3 {
			t.Fatalf("DeadLetters = %d, %v; want 3", len(all), err)
		}
		got, err := b.store.DeadLetters(ctx, store.DeadFilter{IDs: []uuid.UUID{a.ID}}, 10)
		if err != nil || len(got) != 1 {
			t.Fatalf("DeadLetters by id = %+v, %v", got, err)
		}
		if g := got[0]; g.ID != a.ID || g.Reason != store.ReasonPermanent || g.Attempts != 3 || g.LastError != "refused orders.OrderPlaced" ||
			string(g.Body) != string(a.Body) || !reflect.DeepEqual(g.Headers, a.Headers) || g.DeadAt.IsZero() {
			t.Errorf("dead letter = %+v, want message a with its content, attempts, error and reason", g)
		}
		if got, _ := b.store.DeadLetters(ctx, store.DeadFilter{Type: "billing.Charged", Reason: store.ReasonExhausted}, 10); len(got) != 2 {
			t.Errorf("by type and reason: %d, want 2", len(got))
		}
		if got, _ := b.store.DeadLetters(ctx, store.DeadFilter{OlderThan: time.Hour}, 10); len(got) != 0 {
			t.Errorf("older than an hour: %d, want 0", len(got))
		}

		// Requeue by type: back in the outbox with their ids, attempts from zero.
		n, err := b.store.RequeueDead(ctx, store.DeadFilter{Type: "billing.Charged"})
		if err != nil || n != 2 {
			t.Fatalf("RequeueDead = %d, %v; want 2", n, err)
		}
		if n, err := b.store.RequeueDead(ctx, store.DeadFilter{Type: "billing.Charged"}); err != nil || n != 0 {
			t.Errorf("RequeueDead again = %d, %v; want 0", n, err)
		}
		rows, err := b.store.ReadUnordered(ctx, nil, store.ReadOptions{Now: b.t0.Add(time.Hour), Limit: 10})
		if err != nil || len(rows) != 2 {
			t.Fatalf("outbox after requeue: %d rows, %v", len(rows), err)
		}
		for _, r := range rows {
			if (r.ID != c.ID && r.ID != d.ID) || r.Attempts != 0 || r.LastError != "refused billing.Charged" || string(r.Body) != string(c.Body) {
				t.Errorf("requeued row = %+v", r)
			}
		}

		// Purge: an invalid filter is refused; a matching one deletes.
		if _, err := b.store.PurgeDead(ctx, store.DeadFilter{OlderThan: -time.Second}); !errors.Is(err, store.ErrInvalidArgument) {
			t.Errorf("PurgeDead with a negative age: %v", err)
		}
		if n, err := b.store.PurgeDead(ctx, store.DeadFilter{OlderThan: time.Hour}); err != nil || n != 0 {
			t.Errorf("PurgeDead older than an hour = %d, %v; want 0", n, err)
		}
		if n, err := b.store.PurgeDead(ctx, store.DeadFilter{}); err != nil || n != 1 {
			t.Errorf("PurgeDead = %d, %v; want 1", n, err)
		}
		if n, _ := b.store.CountDead(ctx); n != 0 {
			t.Errorf("%d dead letters left", n)
		}
	})
}

// park claims the first row of key's lane head and parks it.
func (b *bundle) park(t *testing.T, m relayer.Message) {
	t.Helper()
	ctx := context.Background()
	now := b.t0.Add(time.Hour)
	c := store.NewClaim(now, time.Minute)
	if rows, err := b.store.ClaimBatch(ctx, nil, []uuid.UUID{m.ID}, c, now); err != nil || len(rows) != 1 {
		t.Fatalf("ClaimBatch = %d rows, %v", len(rows), err)
	}
	if n, err := b.store.Park(ctx, []store.Failure{{ID: m.ID, Error: "schema rejected"}}, c.Token, now); err != nil || n != 1 {
		t.Fatalf("Park = %d, %v", n, err)
	}
}

func TestParkedKeysRetryAndSkip(t *testing.T) {
	t.Parallel()
	eachDriver(t, func(t *testing.T, b *bundle) {
		ctx := context.Background()
		k1, k2, k3 := b.ordered(t, "k", 32), b.ordered(t, "k", 32), b.ordered(t, "k", 32)
		other := b.ordered(t, "other", 32)
		b.insert(t, k1, k2, k3, other)
		b.park(t, k1)
		lane := k1.Lane

		keys, err := b.store.ParkedKeys(ctx, store.ParkedFilter{}, 10)
		if err != nil || len(keys) != 1 {
			t.Fatalf("ParkedKeys = %+v, %v; want key k", keys, err)
		}
		if p := keys[0]; p.Head.ID != k1.ID || p.Head.Key != "k" || p.Waiting != 2 || p.Head.Attempts != 1 || p.Head.LastError != "schema rejected" || p.ParkedAt.IsZero() {
			t.Errorf("parked key = %+v, want k's head with 2 waiting", p)
		}
		heads, err := b.store.ParkedHeads(ctx, store.ParkedFilter{}, 10)
		if err != nil || len(heads) != 1 || heads[0].Head.ID != k1.ID || heads[0].Waiting != -1 || heads[0].ParkedAt.IsZero() {
			t.Errorf("ParkedHeads = %+v, %v; want k's head, waiting not counted", heads, err)
		}
		if keys, _ := b.store.ParkedKeys(ctx, store.ParkedFilter{Key: "other"}, 10); len(keys) != 0 {
			t.Errorf("ParkedKeys for another key: %+v", keys)
		}
		head := func() []uuid.UUID {
			rows, err := readHeads(ctx, b.store, nil, []int{lane}, 10)
			if err != nil {
				t.Fatal(err)
			}
			var ids []uuid.UUID
			for _, r := range rows {
				if r.Key == "k" {
					ids = append(ids, r.ID)
				}
			}
			return ids
		}
		if ids := head(); len(ids) != 0 {
			t.Fatalf("lane head holds %v of the parked key", ids)
		}

		// Retry: the head comes back with its attempts from zero, in order.
		if n, err := b.store.RetryParked(ctx, store.ParkedFilter{Key: "k"}); err != nil || n != 1 {
			t.Fatalf("RetryParked = %d, %v; want 1", n, err)
		}
		if n, err := b.store.RetryParked(ctx, store.ParkedFilter{Key: "k"}); err != nil || n != 0 {
			t.Errorf("RetryParked again = %d, %v; want 0", n, err)
		}
		if ids := head(); !reflect.DeepEqual(ids, []uuid.UUID{k1.ID, k2.ID, k3.ID}) {
			t.Errorf("after retry the key's rows are %v, want all three in order", ids)
		}

		// Skip: the head moves to the dead letters, the rest is released.
		b.park(t, k1)
		if n, err := b.store.SkipParkedHead(ctx, "k"); err != nil || n != 1 {
			t.Fatalf("SkipParkedHead = %d, %v; want 1", n, err)
		}
		if n, err := b.store.SkipParkedHead(ctx, "k"); err != nil || n != 0 {
			t.Errorf("SkipParkedHead again = %d, %v; want 0", n, err)
		}
		if ids := head(); !reflect.DeepEqual(ids, []uuid.UUID{k2.ID, k3.ID}) {
			t.Errorf("after skip the key's rows are %v, want the two later ones", ids)
		}
		dead, err := b.store.DeadLetters(ctx, store.DeadFilter{Key: "k"}, 10)
		if err != nil || len(dead) != 1 || dead[0].ID != k1.ID || dead[0].Reason != store.ReasonSkipped || dead[0].Attempts != 1 || !dead[0].Ordered {
			t.Fatalf("dead letters of k = %+v, %v; want the skipped head", dead, err)
		}
		// Requeued, the skipped head is k's first row again.
		if n, err := b.store.RequeueDead(ctx, store.DeadFilter{IDs: []uuid.UUID{k1.ID}}); err != nil || n != 1 {
			t.Fatalf("RequeueDead = %d, %v", n, err)
		}
		if ids := head(); !reflect.DeepEqual(ids, []uuid.UUID{k1.ID, k2.ID, k3.ID}) {
			t.Errorf("after requeue the key's rows are %v", ids)
		}
		if _, err := b.store.SkipParkedHead(ctx, ""); !errors.Is(err, store.ErrInvalidArgument) {
			t.Errorf("SkipParkedHead with no key: %v", err)
		}
	})
}

func TestPublishedPauses(t *testing.T) {
	t.Parallel()
	b := setup(t, "pgx")
	ctx := context.Background()
	w1, w2 := uuid.New(), uuid.New()
	since := time.Now().Add(-time.Minute).UTC().Truncate(time.Microsecond)
	p := func(dest string) store.Pause {
		return store.Pause{Transport: "nats", Destination: dest, Since: since, NextProbe: since.Add(2 * time.Minute), LastError: "connection refused"}
	}
	if err := b.store.PublishPauses(ctx, w1, "worker-1", []store.Pause{p("a"), p("b")}); err != nil {
		t.Fatal(err)
	}
	if err := b.store.PublishPauses(ctx, w2, "worker-2", []store.Pause{p("a")}); err != nil {
		t.Fatal(err)
	}
	got, err := b.store.Pauses(ctx)
	if err != nil || len(got) != 3 {
		t.Fatalf("Pauses = %+v, %v; want 3", got, err)
	}
	want := p("a")
	want.Owner = "worker-1"
	if got[0] != want {
		t.Errorf("pause = %+v, want %+v", got[0], want)
	}
	// A new publication replaces the worker's rows; clearing removes them.
	if err := b.store.PublishPauses(ctx, w1, "worker-1", []store.Pause{p("b")}); err != nil {
		t.Fatal(err)
	}
	if err := b.store.ClearPauses(ctx, w2); err != nil {
		t.Fatal(err)
	}
	if got, _ := b.store.Pauses(ctx); len(got) != 1 || got[0].Destination != "b" {
		t.Errorf("after republish and clear: %+v", got)
	}
	// A worker that stopped refreshing its rows no longer counts.
	b.exec(t, `UPDATE "`+b.opts.Schema+`"."`+b.opts.TablePrefix+`relayer_pauses" SET updated_at = now() - interval '2 minutes'`)
	if got, _ := b.store.Pauses(ctx); len(got) != 0 {
		t.Errorf("stale pauses listed: %+v", got)
	}
}

// Listing from a cursor walks every dead letter and every parked key once,
// in the listing's order, however many share an instant, and the cursor
// narrows the changes as it narrows the listing.
func TestListingPagesFromACursor(t *testing.T) {
	t.Parallel()
	eachDriver(t, func(t *testing.T, b *bundle) {
		ctx := context.Background()
		var dead []relayer.Message
		for range 7 {
			dead = append(dead, b.unordered(t))
		}
		b.insert(t, dead...)
		b.bury(t, store.ReasonPermanent, dead[:5]...) // one statement: one dead_at for five
		b.bury(t, store.ReasonExhausted, dead[5:]...)
		all, err := b.store.DeadLetters(ctx, store.DeadFilter{}, 100)
		if err != nil || len(all) != 7 {
			t.Fatalf("DeadLetters = %d, %v; want 7", len(all), err)
		}
		var paged []uuid.UUID
		f := store.DeadFilter{}
		for range 10 {
			page, err := b.store.DeadLetters(ctx, f, 2)
			if err != nil {
				t.Fatal(err)
			}
			if len(page) == 0 {
				break
			}
			for _, d := range page {
				paged = append(paged, d.ID)
			}
			f.After = page[len(page)-1].Cursor()
		}
		want := make([]uuid.UUID, len(all))
		for i, d := range all {
			want[i] = d.ID
		}
		if !slices.Equal(paged, want) {
			t.Errorf("dead letters by pages of 2 = %v, want %v", paged, want)
		}
		// Purging after the third one purges the last four only.
		n, err := b.store.PurgeDead(ctx, store.DeadFilter{After: all[2].Cursor()})
		if err != nil || n != 4 {
			t.Errorf("PurgeDead after the third = %d, %v; want 4", n, err)
		}

		var heads []relayer.Message
		for i := range 5 {
			m := b.ordered(t, fmt.Sprintf("key-%d", i), 32)
			heads = append(heads, m)
		}
		b.insert(t, heads...)
		for _, m := range heads {
			b.park(t, m)
		}
		keys, err := b.store.ParkedKeys(ctx, store.ParkedFilter{}, 100)
		if err != nil || len(keys) != 5 {
			t.Fatalf("ParkedKeys = %d, %v; want 5", len(keys), err)
		}
		var pagedKeys []string
		pf := store.ParkedFilter{}
		for range 10 {
			page, err := b.store.ParkedHeads(ctx, pf, 2)
			if err != nil {
				t.Fatal(err)
			}
			if len(page) == 0 {
				break
			}
			for _, p := range page {
				pagedKeys = append(pagedKeys, p.Head.Key)
			}
			pf.After = page[len(page)-1].Cursor()
		}
		var wantKeys []string
		for _, p := range keys {
			wantKeys = append(wantKeys, p.Head.Key)
		}
		if !slices.Equal(pagedKeys, wantKeys) {
			t.Errorf("parked keys by pages of 2 = %v, want %v", pagedKeys, wantKeys)
		}
	})
}

// TestSettlingLaneRowsUnderTheirLeases settles rows read under their lanes'
// leases without claims: sent rows deleted, failures recorded with their
// retry time or parked with their key, the rest left as they were.
func TestSettlingLaneRowsUnderTheirLeases(t *testing.T) {
	t.Parallel()
	eachDriver(t, func(t *testing.T, b *bundle) {
		ctx := context.Background()
		sent, failed, parked, rest := b.ordered(t, "k1", 1), b.ordered(t, "k2", 1), b.ordered(t, "k3", 1), b.ordered(t, "k4", 1)
		b.insert(t, sent, failed, parked, rest)
		tx, st := b.begin(t, nil)
		token, other := uuid.New(), uuid.New()
		held, err := acquireLanes(ctx, st, []int{0}, "settle-test", token, time.Minute)
		if err != nil || !slices.Equal(held, []int{0}) {
			t.Fatalf("AcquireLaneLeases = %v, %v", held, err)
		}
		heads, err := readHeads(ctx, st, nil, held, 10)
		if err != nil || len(heads) != 4 {
			t.Fatalf("ReadLaneHeads = %d rows, %v", len(heads), err)
		}
		// Fenced by the lane owner's token: another token changes nothing.
		if n, err := st.DeleteLaneRows(ctx, []uuid.UUID{sent.ID, rest.ID}, other); err != nil || n != 0 {
			t.Errorf("DeleteLaneRows with another token = %d, %v; want 0", n, err)
		}
		if n, err := st.FailLaneRows(ctx, []store.Failure{{ID: rest.ID, Error: "no"}}, other); err != nil || n != 0 {
			t.Errorf("FailLaneRows with another token = %d, %v; want 0", n, err)
		}
		if n, err := st.ParkLaneRows(ctx, []store.Failure{{ID: rest.ID, Error: "no"}}, other); err != nil || n != 0 {
			t.Errorf("ParkLaneRows with another token = %d, %v; want 0", n, err)
		}
		if n, err := st.DeleteLaneRows(ctx, []uuid.UUID{sent.ID}, token); err != nil || n != 1 {
			t.Fatalf("DeleteLaneRows = %d, %v", n, err)
		}
		retryAt := b.t0.Add(time.Hour)
		if n, err := st.FailLaneRows(ctx, []store.Failure{{ID: failed.ID, Error: "broker said no", RetryAt: retryAt}}, token); err != nil || n != 1 {
			t.Fatalf("FailLaneRows = %d, %v", n, err)
		}
		if n, err := st.ParkLaneRows(ctx, []store.Failure{{ID: parked.ID, Error: "schema rejected"}}, token); err != nil || n != 1 {
			t.Fatalf("ParkLaneRows = %d, %v", n, err)
		}
		for name, f := range map[string]func() (int64, error){
			"DeleteLaneRows": func() (int64, error) { return st.DeleteLaneRows(ctx, nil, token) },
			"FailLaneRows":   func() (int64, error) { return st.FailLaneRows(ctx, nil, token) },
			"ParkLaneRows":   func() (int64, error) { return st.ParkLaneRows(ctx, nil, token) },
		} {
			if n, err := f(); n != 0 || err != nil {
				t.Errorf("%s of nothing = %d, %v", name, n, err)
			}
		}
		if err := tx.Commit(); err != nil {
			t.Fatal(err)
		}

		type state struct {
			attempts      int
			lastError     string
			retry, parked bool
		}
		got := map[uuid.UUID]state{}
		rows, err := b.db.QueryContext(ctx, `SELECT id, attempts, coalesce(last_error, ''), retry_at = $1, parked_at IS NOT NULL
FROM "`+b.opts.Schema+`"."`+b.opts.TablePrefix+`outbox" WHERE claim_token IS NULL AND claimed_until IS NULL`, retryAt)
		if err != nil {
			t.Fatal(err)
		}
		defer rows.Close()
		for rows.Next() {
			var id uuid.UUID
			var s state
			var retry sql.NullBool
			if err := rows.Scan(&id, &s.attempts, &s.lastError, &retry, &s.parked); err != nil {
				t.Fatal(err)
			}
			s.retry = retry.Bool
			got[id] = s
		}
		if err := rows.Err(); err != nil {
			t.Fatal(err)
		}
		want := map[uuid.UUID]state{
			failed.ID: {attempts: 1, lastError: "broker said no", retry: true},
			parked.ID: {attempts: 1, lastError: "schema rejected", parked: true},
			rest.ID:   {},
		}
		if !reflect.DeepEqual(got, want) {
			t.Errorf("rows after settling = %+v, want %+v", got, want)
		}
	})
}
