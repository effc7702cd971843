package store_test

import (
	"bytes"
	"context"
	"encoding/hex"
	"errors"
	"fmt"
	"maps"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/google/uuid"

	"github.com/relayer-go/relayer"
	"github.com/relayer-go/relayer/headers"
	"github.com/relayer-go/relayer/internal/workerstore"
	"github.com/relayer-go/relayer/store"
)

// outboxRows returns every row of the outbox, committed as seen from outside
// any transaction, as its id and every column in text form, so that a test can
// tell whether a row came back exactly as it was, claim and park columns
// included. xact_id is left out: a row put back is written anew, by the
// restoring transaction.
func (b *bundle) outboxRows(t *testing.T) map[uuid.UUID]string {
	t.Helper()
	rows, err := b.db.Query(fmt.Sprintf(`SELECT id, (to_jsonb(o) - 'xact_id')::text FROM "%s"."%soutbox" AS o`,
		b.opts.Schema, b.opts.TablePrefix))
	if err != nil {
		t.Fatal(err)
	}
	defer rows.Close()
	out := map[uuid.UUID]string{}
	for rows.Next() {
		var id uuid.UUID
		var row string
		if err := rows.Scan(&id, &row); err != nil {
			t.Fatal(err)
		}
		out[id] = row
	}
	if err := rows.Err(); err != nil {
		t.Fatal(err)
	}
	return out
}

// bookkeeping reads the columns of one row that no Row field shows: the claim
// and the park.
func (b *bundle) bookkeeping(t *testing.T, id uuid.UUID) (claimed, parked bool) {
	t.Helper()
	err := b.db.QueryRow(fmt.Sprintf(`SELECT claim_token IS NOT NULL OR claimed_until IS NOT NULL, parked_at IS NOT NULL
		FROM "%s"."%soutbox" WHERE id = $1`, b.opts.Schema, b.opts.TablePrefix), id).Scan(&claimed, &parked)
	if err != nil {
		t.Fatalf("bookkeeping of %s: %v", id, err)
	}
	return claimed, parked
}

func takenIDs(ts []workerstore.Taken) []uuid.UUID {
	out := make([]uuid.UUID, len(ts))
	for i, x := range ts {
		out[i] = x.ID
	}
	return out
}

func without(rows map[uuid.UUID]string, gone ...uuid.UUID) map[uuid.UUID]string {
	out := maps.Clone(rows)
	for _, id := range gone {
		delete(out, id)
	}
	return out
}

func TestTakeIDsTakesOnlyEligibleUnorderedRows(t *testing.T) {
	t.Parallel()
	eachDriver(t, func(t *testing.T, b *bundle) {
		ctx := context.Background()
		now := b.t0
		free1, free2, free3 := b.unordered(t), b.unordered(t), b.unordered(t)
		dueNow := b.unordered(t)
		dueNow.DeliverAt = now
		future := b.unordered(t)
		future.DeliverAt = now.Add(us)
		parked := b.unordered(t)
		held := b.unordered(t)
		expired := b.unordered(t)
		ordered := b.ordered(t, "customer-1", 4)
		all := []relayer.Message{free1, free2, free3, dueNow, future, parked, held, expired, ordered}
		inserted := slices.Clone(all)
		slices.Reverse(inserted)
		b.insert(t, inserted...)

		b.exec(t, `UPDATE $outbox SET attempts = 3, last_error = 'earlier' WHERE id = $1`, free2.ID)
		b.exec(t, `UPDATE $outbox SET attempts = 2 WHERE id = $1`, expired.ID)
		b.exec(t, `UPDATE $outbox SET parked_at = now() WHERE id = $1`, parked.ID)
		if ok, err := b.store.Claim(ctx, held.ID, store.Claim{Token: uuid.New(), Until: now.Add(us)}, now.Add(-time.Second)); !ok || err != nil {
			t.Fatalf("Claim(held) = %v, %v", ok, err)
		}
		if ok, err := b.store.Claim(ctx, expired.ID, store.Claim{Token: uuid.New(), Until: now}, now.Add(-time.Second)); !ok || err != nil {
			t.Fatalf("Claim(expired) = %v, %v", ok, err)
		}
		before := b.outboxRows(t)
		if len(before) != len(all) {
			t.Fatalf("outbox holds %d rows, want %d", len(before), len(all))
		}

		// Every id, in no particular order, one twice, plus one not in the table.
		var request []uuid.UUID
		for _, m := range all {
			request = append(request, m.ID)
		}
		slices.Reverse(request)
		request = append(request, free1.ID, newID(t))
		takenSet := sortedIDs(free1, free2, free3, dueNow, expired)
		attempts := map[uuid.UUID]int{free2.ID: 3, expired.ID: 2}
		lastErrors := map[uuid.UUID]string{free2.ID: "earlier"}
		var want []workerstore.Taken
		for _, id := range takenSet {
			want = append(want, workerstore.Taken{ID: id, Attempts: attempts[id], LastError: lastErrors[id]})
		}

		for _, commit := range []bool{false, true} {
			tx, st := b.begin(t, nil)
			// A stale entry in dst must not survive: the result is dst[:0] extended.
			dst := append(make([]workerstore.Taken, 0, 16), workerstore.Taken{ID: newID(t), Attempts: 99})
			got, err := st.TakeIDs(ctx, dst, request, now)
			if err != nil {
				t.Fatalf("TakeIDs: %v", err)
			}
			if !slices.Equal(got, want) {
				t.Fatalf("TakeIDs = %v, want the due, unparked, unclaimed or expired unordered rows in id order %v", got, want)
			}
			// Inside the transaction the rows are gone; outside they are still there.
			inTx, err := st.ReadUnordered(ctx, nil, store.ReadOptions{Now: now.Add(time.Hour), Limit: 100})
			if err != nil {
				t.Fatal(err)
			}
			if left := ids(inTx); !slices.Equal(left, sortedIDs(future, held)) {
				t.Errorf("read inside the take = %v, want only the rows it left (future, held) %v", left, sortedIDs(future, held))
			}
			if outside := b.outboxRows(t); !maps.Equal(outside, before) {
				t.Errorf("an uncommitted take changed what others see: %d rows, want %d", len(outside), len(before))
			}
			if !commit {
				if err := tx.Rollback(); err != nil {
					t.Fatal(err)
				}
				if after := b.outboxRows(t); !maps.Equal(after, before) {
					t.Errorf("after rollback the outbox differs:\n got %v\nwant %v", after, before)
				}
				continue
			}
			if err := tx.Commit(); err != nil {
				t.Fatal(err)
			}
			if after, wantLeft := b.outboxRows(t), without(before, takenSet...); !maps.Equal(after, wantLeft) {
				t.Errorf("after commit the outbox differs:\n got %v\nwant %v", after, wantLeft)
			}
		}

		// Nothing eligible is left among the ids; an empty request takes nothing.
		_, st := b.begin(t, nil)
		if got, err := st.TakeIDs(ctx, nil, request, now); err != nil || len(got) != 0 {
			t.Errorf("second TakeIDs = %v, %v; want nothing", got, err)
		}
		if got, err := st.TakeIDs(ctx, nil, nil, now); err != nil || len(got) != 0 {
			t.Errorf("TakeIDs of no ids = %v, %v; want nothing", got, err)
		}
		// The claim and the delivery time still decide: later, they are eligible.
		got, err := st.TakeIDs(ctx, nil, request, now.Add(us))
		if err != nil || !slices.Equal(takenIDs(got), sortedIDs(future, held)) {
			t.Errorf("TakeIDs one microsecond later = %v, %v; want future and held %v", takenIDs(got), err, sortedIDs(future, held))
		}
	})
}

func TestTakeIDsSkipsRowsAnotherTransactionHolds(t *testing.T) {
	t.Parallel()
	eachDriver(t, func(t *testing.T, b *bundle) {
		now := b.t0
		m1, m2, m3, m4 := b.unordered(t), b.unordered(t), b.unordered(t), b.unordered(t)
		b.insert(t, m1, m2, m3, m4)
		// Blocking on a locked row would run into this deadline and fail the
		// statement; skipping it returns at once.
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()

		tx1, st1 := b.begin(t, nil)
		got, err := st1.TakeIDs(ctx, nil, []uuid.UUID{m1.ID, m2.ID}, now)
		if err != nil || !slices.Equal(takenIDs(got), sortedIDs(m1, m2)) {
			t.Fatalf("tx1 TakeIDs = %v, %v; want %v", takenIDs(got), err, sortedIDs(m1, m2))
		}

		tx2, st2 := b.begin(t, nil)
		start := time.Now()
		got, err = st2.TakeIDs(ctx, nil, []uuid.UUID{m1.ID, m2.ID, m3.ID}, now)
		if err != nil || !slices.Equal(takenIDs(got), sortedIDs(m3)) {
			t.Fatalf("tx2 TakeIDs while tx1 holds m1, m2 = %v, %v; want only m3 %v", takenIDs(got), err, m3.ID)
		}
		rows, err := st2.TakeNextUnordered(ctx, nil, uuid.Nil, 10, now, time.Time{}, nil)
		if err != nil || !slices.Equal(ids(rows), sortedIDs(m4)) {
			t.Fatalf("tx2 TakeNextUnordered = %v, %v; want only m4 %v", ids(rows), err, m4.ID)
		}
		if d := time.Since(start); d > 5*time.Second {
			t.Errorf("takes next to a concurrent take took %v; they must skip locked rows, not wait", d)
		}

		// A claim in autocommit skips the rows both takes hold.
		c := store.Claim{Token: uuid.New(), Until: now.Add(time.Minute)}
		all := []uuid.UUID{m1.ID, m2.ID, m3.ID, m4.ID}
		claimedRows, err := b.store.ClaimBatch(ctx, nil, all, c, now)
		if err != nil || len(claimedRows) != 0 {
			t.Fatalf("ClaimBatch while takes hold every row = %v, %v; want none", ids(claimedRows), err)
		}

		// tx1 gives its rows back, tx2 keeps its own.
		if err := tx1.Rollback(); err != nil {
			t.Fatal(err)
		}
		if err := tx2.Commit(); err != nil {
			t.Fatal(err)
		}
		claimedRows, err = b.store.ClaimBatch(ctx, nil, all, c, now)
		if want := sortedIDs(m1, m2); err != nil || !slices.Equal(ids(claimedRows), want) {
			t.Errorf("ClaimBatch after tx1 rolled back and tx2 committed = %v, %v; want %v", ids(claimedRows), err, want)
		}
		if left := b.outboxRows(t); len(left) != 2 {
			t.Errorf("%d rows left, want the 2 tx1 gave back", len(left))
		}
	})
}

func TestTakeNeedsATransaction(t *testing.T) {
	t.Parallel()
	eachDriver(t, func(t *testing.T, b *bundle) {
		ctx := context.Background()
		m1, m2 := b.unordered(t), b.unordered(t)
		b.insert(t, m1, m2)
		before := b.outboxRows(t)
		conn, err := b.db.Conn(ctx)
		if err != nil {
			t.Fatal(err)
		}
		defer conn.Close()
		onConn, err := b.store.With(conn)
		if err != nil {
			t.Fatal(err)
		}
		for name, st := range map[string]*workerstore.Store{"*sql.DB": b.store, "*sql.Conn": onConn} {
			got, err := st.TakeIDs(ctx, make([]workerstore.Taken, 1), []uuid.UUID{m1.ID, m2.ID}, b.t0)
			if !errors.Is(err, workerstore.ErrNeedsTransaction) || len(got) != 0 {
				t.Errorf("%s: TakeIDs = %v, %v; want nothing and ErrNeedsTransaction", name, got, err)
			}
			if _, err := st.TakeIDs(ctx, nil, nil, b.t0); !errors.Is(err, workerstore.ErrNeedsTransaction) {
				t.Errorf("%s: TakeIDs of no ids = %v; want ErrNeedsTransaction", name, err)
			}
			rows, err := st.TakeNextUnordered(ctx, make([]store.Row, 1), uuid.Nil, 10, b.t0, time.Time{}, nil)
			if !errors.Is(err, workerstore.ErrNeedsTransaction) || len(rows) != 0 {
				t.Errorf("%s: TakeNextUnordered = %d rows, %v; want nothing and ErrNeedsTransaction", name, len(rows), err)
			}
		}
		if after := b.outboxRows(t); !maps.Equal(after, before) {
			t.Errorf("takes refused outside a transaction changed the outbox: %d rows, want %d", len(after), len(before))
		}
	})
}

func TestTakeNextUnorderedPagesInIDOrder(t *testing.T) {
	t.Parallel()
	eachDriver(t, func(t *testing.T, b *bundle) {
		ctx := context.Background()
		now := b.t0
		var msgs []relayer.Message
		for range 7 {
			msgs = append(msgs, b.unordered(t))
		}
		full := &msgs[3]
		full.Body = []byte{0, 1, 2, 0xff, '"', '\\', '{', '}', ','}
		full.Headers = []headers.Header{
			{Name: "dup", Value: []byte("first")},
			{Name: "bin", Value: []byte{0xff, 0xfe, 0, '\\', '"'}},
			{Name: "empty", Value: []byte{}},
			{Name: "dup", Value: []byte("second")},
		}
		full.Key = `customer "7", {x}\`
		full.DeliverAt = now.Add(-time.Second)
		full.TraceParent = "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01"
		full.TraceState = "vendor=a,other=b"
		future := b.unordered(t)
		future.DeliverAt = now.Add(time.Hour)
		parked := b.unordered(t)
		ordered := b.ordered(t, "k", 4)
		inserted := append(slices.Clone(msgs), future, parked, ordered)
		slices.Reverse(inserted)
		b.insert(t, inserted...)
		b.exec(t, `UPDATE $outbox SET parked_at = now() WHERE id = $1`, parked.ID)
		want := sortedIDs(msgs...)
		b.exec(t, `UPDATE $outbox SET attempts = 4, last_error = 'broker down' WHERE id = $1`, want[5])
		byID := map[uuid.UUID]relayer.Message{}
		for _, m := range msgs {
			byID[m.ID] = m
		}
		before := b.outboxRows(t)

		tx, st := b.begin(t, nil)
		take := func(dst []store.Row, after uuid.UUID, limit int) []store.Row {
			t.Helper()
			rows, err := st.TakeNextUnordered(ctx, dst, after, limit, now, time.Time{}, nil)
			if err != nil {
				t.Fatalf("TakeNextUnordered(after %s, limit %d): %v", after, limit, err)
			}
			return rows
		}
		// The cursor is exclusive: want[1] is not taken though it is eligible.
		page := take(nil, want[1], 2)
		if got := ids(page); !slices.Equal(got, want[2:4]) {
			t.Fatalf("after want[1], limit 2 = %v, want %v", got, want[2:4])
		}
		var got []store.Row
		got = append(got, page...)
		page = take(page, uuid.Nil, 2)
		if p := ids(page); !slices.Equal(p, want[0:2]) {
			t.Fatalf("from the start, limit 2 = %v, want %v", p, want[0:2])
		}
		got = append(got, page...)
		page = take(page, want[3], 100)
		if p := ids(page); !slices.Equal(p, want[4:]) {
			t.Fatalf("after want[3] = %v, want %v (no future, parked or ordered rows)", p, want[4:])
		}
		got = append(got, page...)
		if page = take(page, uuid.Nil, 100); len(page) != 0 {
			t.Fatalf("once everything is taken = %v, want nothing", ids(page))
		}

		for _, r := range got {
			m := byID[r.ID]
			if diff := compareMessages(r.Message, m); diff != "" {
				t.Errorf("taken row %s differs from what was inserted: %s", r.ID, diff)
			}
			wantAttempts, wantErr := 0, ""
			if r.ID == want[5] {
				wantAttempts, wantErr = 4, "broker down"
			}
			if r.Attempts != wantAttempts || r.LastError != wantErr || !r.ClaimedUntil.IsZero() {
				t.Errorf("taken row %s: attempts %d, last error %q, claimed until %v; want %d, %q, unclaimed",
					r.ID, r.Attempts, r.LastError, r.ClaimedUntil, wantAttempts, wantErr)
			}
		}
		if err := tx.Commit(); err != nil {
			t.Fatal(err)
		}
		if after, wantLeft := b.outboxRows(t), without(before, want...); !maps.Equal(after, wantLeft) {
			t.Errorf("after commit %d rows left, want the future, parked and ordered rows", len(after))
		}
	})
}

func TestTakeNextUnorderedCreatedBefore(t *testing.T) {
	t.Parallel()
	eachDriver(t, func(t *testing.T, b *bundle) {
		ctx := context.Background()
		now := b.t0
		cutoff := now.Add(-time.Minute)
		at := func(created, deliver time.Time) relayer.Message {
			m := b.unordered(t)
			m.CreatedAt, m.DeliverAt = created, deliver
			return m
		}
		old := at(now.Add(-time.Hour), time.Time{})
		atCutoff := at(cutoff, time.Time{})
		fresh := at(now.Add(-30*time.Second), time.Time{})
		freshNow := at(now, time.Time{})
		scheduled := at(now.Add(-30*time.Second), now.Add(-10*time.Second))
		scheduledAtCreation := at(now.Add(-30*time.Second), now.Add(-30*time.Second))
		scheduledLater := at(now.Add(-30*time.Second), now.Add(time.Hour))
		b.insert(t, old, atCutoff, fresh, freshNow, scheduled, scheduledAtCreation, scheduledLater)

		for _, c := range []struct {
			name          string
			createdBefore time.Time
			want          []uuid.UUID
		}{
			{"cutoff", cutoff, sortedIDs(old, atCutoff, scheduled)},
			{"zero", time.Time{}, sortedIDs(old, atCutoff, fresh, freshNow, scheduled, scheduledAtCreation)},
		} {
			tx, st := b.begin(t, nil)
			rows, err := st.TakeNextUnordered(ctx, nil, uuid.Nil, 100, now, c.createdBefore, nil)
			if err != nil || !slices.Equal(ids(rows), c.want) {
				t.Errorf("%s: TakeNextUnordered = %v, %v; want %v", c.name, ids(rows), err, c.want)
			}
			if err := tx.Rollback(); err != nil {
				t.Fatal(err)
			}
		}
		if n := len(b.outboxRows(t)); n != 7 {
			t.Errorf("%d rows after the rolled-back takes, want 7", n)
		}
	})
}

func TestTakeNextUnorderedRejectsNonpositiveLimit(t *testing.T) {
	t.Parallel()
	eachDriver(t, func(t *testing.T, b *bundle) {
		ctx := context.Background()
		b.insert(t, b.unordered(t))
		tx, st := b.begin(t, nil)
		for _, limit := range []int{0, -1} {
			rows, err := st.TakeNextUnordered(ctx, make([]store.Row, 1), uuid.Nil, limit, b.t0, time.Time{}, nil)
			if !errors.Is(err, store.ErrInvalidArgument) || len(rows) != 0 {
				t.Errorf("limit %d: %d rows, %v; want ErrInvalidArgument", limit, len(rows), err)
			}
		}
		// The transaction is still usable and nothing was taken.
		rows, err := st.TakeNextUnordered(ctx, nil, uuid.Nil, 10, b.t0, time.Time{}, nil)
		if err != nil || len(rows) != 1 {
			t.Errorf("valid take after the rejected ones = %d rows, %v; want 1", len(rows), err)
		}
		if err := tx.Rollback(); err != nil {
			t.Fatal(err)
		}
	})
}

func TestRestoreWritesTakenRowsBack(t *testing.T) {
	t.Parallel()
	eachDriver(t, func(t *testing.T, b *bundle) {
		ctx := context.Background()
		now := b.t0
		failed, unsent, sent, long := b.unordered(t), b.unordered(t), b.unordered(t), b.unordered(t)
		failed.Body = []byte{0, '"', '\\', 0xff}
		failed.Headers = append(failed.Headers, headers.Header{Name: "bin", Value: []byte{0, 0xff, '{', ','}})
		failed.Key = `k "1", {x}`
		failed.DeliverAt = now.Add(-time.Second)
		failed.TraceParent = "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01"
		failed.TraceState = "vendor=a"
		b.insert(t, failed, unsent, sent, long)
		b.exec(t, `UPDATE $outbox SET attempts = 2, last_error = 'old' WHERE id = $1`, unsent.ID)
		// unsent was claimed once by a worker whose claim expired.
		if ok, err := b.store.Claim(ctx, unsent.ID, store.Claim{Token: uuid.New(), Until: now.Add(-time.Minute)}, now.Add(-2*time.Minute)); !ok || err != nil {
			t.Fatalf("Claim = %v, %v", ok, err)
		}
		byID := map[uuid.UUID]relayer.Message{failed.ID: failed, unsent.ID: unsent, sent.ID: sent, long.ID: long}

		tx, st := b.begin(t, nil)
		taken, err := st.TakeNextUnordered(ctx, nil, uuid.Nil, 10, now, time.Time{}, nil)
		if err != nil || len(taken) != 4 {
			t.Fatalf("TakeNextUnordered = %d rows, %v; want 4", len(taken), err)
		}
		var restore []store.Row
		wantBack := map[uuid.UUID]store.Row{}
		for _, r := range taken {
			switch r.ID {
			case failed.ID:
				r.Attempts++
				r.LastError = "broker said \"no\": \x00\xff {a,b}\\"
				restore = append(restore, r)
				r.LastError = "broker said \"no\": \uFFFD\uFFFD {a,b}\\"
			case unsent.ID:
				if r.Attempts != 2 || r.LastError != "old" || r.ClaimedUntil.IsZero() {
					t.Errorf("taken row with history: attempts %d, last error %q, claimed until %v", r.Attempts, r.LastError, r.ClaimedUntil)
				}
				restore = append(restore, r) // never sent: written back unchanged
			case long.ID:
				r.Attempts = 7
				r.LastError = strings.Repeat("é", 3000) // 6000 bytes
				restore = append(restore, r)
				r.LastError = strings.Repeat("é", 2048) // cut to 4096 bytes on a rune boundary
			default:
				continue // sent
			}
			r.ClaimedUntil = time.Time{}
			wantBack[r.ID] = r
		}
		if err := st.Restore(ctx, restore); err != nil {
			t.Fatalf("Restore: %v", err)
		}
		// Inside the take the restored rows are eligible again; outside they
		// stay held by the transaction until it ends.
		inTx, err := st.ReadUnordered(ctx, nil, store.ReadOptions{Now: now, Limit: 100})
		if err != nil {
			t.Fatal(err)
		}
		if got, want := ids(inTx), sortedIDs(failed, unsent, long); !slices.Equal(got, want) {
			t.Errorf("read inside the take after Restore = %v, want %v", got, want)
		}
		claimed, err := b.store.ClaimBatch(ctx, nil, []uuid.UUID{failed.ID, unsent.ID, sent.ID, long.ID}, store.NewClaim(now, time.Minute), now)
		if err != nil || len(claimed) != 0 {
			t.Errorf("ClaimBatch during the take = %v, %v; want none", ids(claimed), err)
		}
		if err := tx.Commit(); err != nil {
			t.Fatal(err)
		}

		rows := b.readUnordered(t, now)
		if got, want := ids(rows), sortedIDs(failed, unsent, long); !slices.Equal(got, want) {
			t.Fatalf("after commit = %v, want the restored rows %v", got, want)
		}
		for _, r := range rows {
			w := wantBack[r.ID]
			if diff := compareMessages(r.Message, byID[r.ID]); diff != "" {
				t.Errorf("restored row %s differs from what was inserted: %s", r.ID, diff)
			}
			if r.Attempts != w.Attempts || r.LastError != w.LastError || !r.ClaimedUntil.IsZero() {
				t.Errorf("restored row %s: attempts %d, last error %q, claimed until %v; want %d, %q, unclaimed",
					r.ID, r.Attempts, r.LastError, r.ClaimedUntil, w.Attempts, w.LastError)
			}
			if claimed, parked := b.bookkeeping(t, r.ID); claimed || parked {
				t.Errorf("restored row %s: claimed %v, parked %v; want neither", r.ID, claimed, parked)
			}
		}
	})
}

func TestRestoreWritesRowsAsGiven(t *testing.T) {
	t.Parallel()
	eachDriver(t, func(t *testing.T, b *bundle) {
		ctx := context.Background()
		existing := b.unordered(t)
		b.insert(t, existing)
		before := b.outboxRows(t)

		if err := b.store.Restore(ctx, nil); err != nil {
			t.Errorf("Restore(nil) = %v", err)
		}
		if err := b.store.Restore(ctx, []store.Row{}); err != nil {
			t.Errorf("Restore(empty) = %v", err)
		}
		row := func(m relayer.Message, attempts int) store.Row { return store.Row{Message: m, Attempts: attempts} }
		// A row that breaks the primary key fails the one statement, which
		// writes nothing.
		if err := b.store.Restore(ctx, []store.Row{row(b.unordered(t), 0), row(existing, 0)}); err == nil {
			t.Errorf("Restore with an id still in the table succeeded")
		}
		if after := b.outboxRows(t); !maps.Equal(after, before) {
			t.Errorf("a rejected restore changed the outbox: %d rows, want %d", len(after), len(before))
		}

		// Content Insert refuses, as another writer may have stored it, is
		// written back: a take must always be able to return what it took.
		foreign := b.unordered(t)
		foreign.Transport = ""
		noKey := b.unordered(t)
		noKey.Ordered = true
		for name, r := range map[string]store.Row{"an empty transport": row(foreign, 3), "ordered, no key": row(noKey, 1)} {
			if err := b.store.Restore(ctx, []store.Row{r}); err != nil {
				t.Errorf("Restore of a row with %s = %v, want it written back", name, err)
			}
		}
		if got := b.outboxRows(t); len(got) != len(before)+2 {
			t.Errorf("after restoring the foreign rows: %d rows, want %d", len(got), len(before)+2)
		}
		b.exec(t, `DELETE FROM $outbox WHERE id IN ($1, $2)`, foreign.ID, noKey.ID)

		// Outside a take, Restore writes rows as given, ordered ones included.
		ordered := b.ordered(t, "customer-9", 8)
		ordered.DeliverAt = b.t0.Add(time.Hour)
		ordered.Body, ordered.Headers = nil, nil
		if err := b.store.Restore(ctx, []store.Row{row(ordered, 5)}); err != nil {
			t.Fatalf("Restore(ordered) = %v", err)
		}
		rows, err := b.store.ReadLane(ctx, nil, ordered.Lane, store.ReadOptions{Now: b.t0.Add(time.Hour), Limit: 10})
		if err != nil || len(rows) != 1 {
			t.Fatalf("ReadLane = %d rows, %v; want the restored row", len(rows), err)
		}
		want := ordered
		want.Body = []byte{}
		if diff := compareMessages(rows[0].Message, want); diff != "" || rows[0].Attempts != 5 || rows[0].LastError != "" {
			t.Errorf("restored ordered row: %s; attempts %d, last error %q", diff, rows[0].Attempts, rows[0].LastError)
		}
	})
}

// A take returns every row it deleted: one whose headers do not decode comes
// back marked Corrupt, not as an error, and Restore writes its stored bytes
// back exactly.
func TestTakeReturnsCorruptRowsForRestore(t *testing.T) {
	t.Parallel()
	eachDriver(t, func(t *testing.T, b *bundle) {
		ctx := context.Background()
		good, bad := b.unordered(t), b.unordered(t)
		b.insert(t, good, bad)
		raw, _ := hex.DecodeString("0200000000000000") // an unsupported version
		b.exec(t, `UPDATE $outbox SET headers = $1 WHERE id = $2`, raw, bad.ID)
		before := b.outboxRows(t)

		tx, st := b.begin(t, nil)
		rows, err := st.TakeNextUnordered(ctx, nil, uuid.Nil, 10, b.t0, time.Time{}, nil)
		if err != nil || len(rows) != 2 {
			t.Fatalf("TakeNextUnordered = %d rows, %v; want both", len(rows), err)
		}
		var restore []store.Row
		for _, r := range rows {
			switch r.ID {
			case good.ID:
				if r.Corrupt != nil {
					t.Errorf("good row marked corrupt: %v", r.Corrupt)
				}
			case bad.ID:
				var rowErr *store.RowError
				if !errors.Is(r.Corrupt, headers.ErrUnsupportedVersion) || !errors.As(r.Corrupt, &rowErr) || rowErr.ID != bad.ID {
					t.Errorf("corrupt row: Corrupt = %v, want a RowError for it", r.Corrupt)
				}
				restore = append(restore, r)
			}
		}
		if err := st.Restore(ctx, restore); err != nil {
			t.Fatalf("Restore of the corrupt row: %v", err)
		}
		if err := tx.Commit(); err != nil {
			t.Fatal(err)
		}
		if after, want := b.outboxRows(t), without(before, good.ID); !maps.Equal(after, want) {
			t.Errorf("after the take: %v, want the corrupt row back byte for byte", after)
		}
		// Other reads still fail on it.
		if _, err := b.store.ReadUnordered(ctx, nil, store.ReadOptions{Now: b.t0, Limit: 10}); !errors.Is(err, store.ErrCorruptRow) {
			t.Errorf("ReadUnordered over the corrupt row = %v, want ErrCorruptRow", err)
		}
	})
}

// Every body a take returns is its row's own, whatever the driver: large
// bodies (which a store on a driver known to hand out fresh memory keeps as
// the driver returned them) and small ones (packed together) stay intact
// after the later rows of the take are read, and after the transaction ends.
func TestTakeReturnsEveryBodyIntact(t *testing.T) {
	eachDriver(t, func(t *testing.T, b *bundle) {
		ctx := context.Background()
		var msgs []relayer.Message
		for i, size := range []int{200 << 10, 10, 64 << 10, 0, 1 << 20, 17 << 10} {
			m := b.unordered(t)
			m.Body = make([]byte, size)
			for j := range m.Body {
				m.Body[j] = byte(i*31 + j*7)
			}
			msgs = append(msgs, m)
		}
		b.insert(t, msgs...)
		want := map[uuid.UUID][]byte{}
		for _, m := range msgs {
			want[m.ID] = m.Body
		}
		tx, st := b.begin(t, nil)
		rows, err := st.TakeNextUnordered(ctx, nil, uuid.Nil, 100, b.t0.Add(time.Hour), time.Time{}, nil)
		if err != nil || len(rows) != len(msgs) {
			t.Fatalf("TakeNextUnordered = %d rows, %v; want %d", len(rows), err, len(msgs))
		}
		if err := tx.Commit(); err != nil {
			t.Fatal(err)
		}
		for _, r := range rows {
			if !bytes.Equal(r.Body, want[r.ID]) {
				t.Errorf("row %s: body of %d bytes differs from the %d published", r.ID, len(r.Body), len(want[r.ID]))
			}
		}
	})
}
