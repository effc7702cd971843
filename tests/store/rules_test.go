package store_test

import (
	"bytes"
	"context"
	"encoding/hex"
	"errors"
	"fmt"
	"slices"
	"testing"
	"time"

	"github.com/google/uuid"

	"github.com/relayer-go/relayer"
	"github.com/relayer-go/relayer/headers"
	"github.com/relayer-go/relayer/internal/testkit"
	"github.com/relayer-go/relayer/store"
)

const us = time.Microsecond

// TestInsertPreservesEveryField covers both insert statements: one row, and
// several rows in one statement.
// Every field survives each way Insert writes: one row, a VALUES list
// (2 to 128 rows) and unnested arrays (more).
func TestInsertPreservesEveryField(t *testing.T) {
	t.Parallel()
	for _, mode := range []string{"one", "values", "unnest"} {
		t.Run(mode, func(t *testing.T) {
			t.Parallel()
			testInsertPreservesEveryField(t, mode)
		})
	}
}

func testInsertPreservesEveryField(t *testing.T, mode string) {
	eachDriver(t, func(t *testing.T, b *bundle) {
		m := b.unordered(t)
		m.Body = []byte{0, 1, 2, 0xff, '"', '\\', '{', '}', ','}
		m.Headers = []headers.Header{
			{Name: "dup", Value: []byte("first")},
			{Name: "bin", Value: []byte{0xff, 0xfe, 0, '\\', '"'}},
			{Name: "empty", Value: []byte{}},
			{Name: "dup", Value: []byte("second")},
			{Name: "ünïcødé \"quoted\" {a,b}", Value: []byte("x")},
		}
		m.Key = `customer "7", {x}\`                  // a key on an unordered route is kept
		m.CreatedAt = b.t0.Add(999 * time.Nanosecond) // sub-microsecond part is dropped
		m.DeliverAt = b.t0.Add(-time.Second)
		m.TraceParent = "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01"
		m.TraceState = "vendor=a,other=b"
		empty := b.unordered(t)
		empty.Body = nil
		empty.Headers = nil
		switch mode {
		case "one":
			b.insert(t, m)
			b.insert(t, empty)
		case "values":
			b.insert(t, m, empty)
		default: // ordered fillers past the VALUES limit, which the unordered read leaves out
			msgs := []relayer.Message{m, empty}
			for i := range 150 {
				msgs = append(msgs, b.ordered(t, fmt.Sprintf("filler-%d", i), 8))
			}
			b.insert(t, msgs...)
		}

		rows := b.readUnordered(t, b.t0)
		if len(rows) != 2 {
			t.Fatalf("read %d rows, want 2", len(rows))
		}
		byID := map[uuid.UUID]store.Row{rows[0].ID: rows[0], rows[1].ID: rows[1]}
		got := byID[m.ID]
		want := m
		want.CreatedAt = b.t0
		if diff := compareMessages(got.Message, want); diff != "" {
			t.Errorf("row differs from what was inserted: %s", diff)
		}
		if got.Attempts != 0 || got.LastError != "" {
			t.Errorf("new row has attempts %d, last error %q", got.Attempts, got.LastError)
		}
		e := byID[empty.ID]
		if e.Body == nil || len(e.Body) != 0 || len(e.Headers) != 0 {
			t.Errorf("empty message read back as body %v, headers %v", e.Body, e.Headers)
		}
		var raw []byte
		if err := b.db.QueryRow(fmt.Sprintf(`SELECT headers FROM "%s"."%soutbox" WHERE id = $1`, b.opts.Schema, b.opts.TablePrefix), empty.ID).Scan(&raw); err != nil {
			t.Fatal(err)
		}
		if !bytes.Equal(raw, []byte{1, 0, 0, 0, 0, 0, 0, 0}) {
			t.Errorf("zero headers stored as %x, want the 8-byte prefix", raw)
		}
	})
}

// TestInsertOfRowsSharingColumns checks the VALUES insert that sends the
// columns its rows share once: every field survives when rows share every
// column they may, when ordered rows share a lane and a key, and when rows
// share some columns and not others.
func TestInsertOfRowsSharingColumns(t *testing.T) {
	t.Parallel()
	eachDriver(t, func(t *testing.T, b *bundle) {
		full := func() relayer.Message {
			m := b.unordered(t)
			m.Key = "customer-7"
			m.DeliverAt = b.t0.Add(-time.Second)
			m.TraceParent = "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01"
			m.TraceState = "vendor=a"
			return m
		}
		alike := []relayer.Message{full(), full(), full()}
		lane := []relayer.Message{b.ordered(t, "k", 8), b.ordered(t, "k", 8)}
		lane[1].CreatedAt = time.Time{} // stamped at insert: the rows' creation times differ
		mixed := []relayer.Message{full(), b.unordered(t), full(), b.ordered(t, "other", 8)}
		mixed[1].Destination, mixed[1].Type = "orders.shipped", "orders.OrderShipped"
		mixed[2].TraceState = "vendor=b"
		mixed[3].CreatedAt = b.t0.Add(time.Hour)
		for name, msgs := range map[string][]relayer.Message{"alike": alike, "one lane": lane, "mixed": mixed} {
			for i := range msgs {
				msgs[i].Body = fmt.Appendf(nil, `{"row":%d}`, i)
			}
			b.insert(t, msgs...)
			for i, want := range msgs {
				got, _, found, err := b.store.Message(context.Background(), want.ID)
				if err != nil || !found {
					t.Fatalf("%s, row %d: Message = found %v, %v", name, i, found, err)
				}
				if want.CreatedAt.IsZero() {
					want.CreatedAt = got.CreatedAt
				}
				if diff := compareMessages(got.Message, want); diff != "" {
					t.Errorf("%s, row %d differs from what was inserted: %s", name, i, diff)
				}
			}
		}
	})
}

func compareMessages(got, want relayer.Message) string {
	switch {
	case got.ID != want.ID:
		return fmt.Sprintf("ID %s, want %s", got.ID, want.ID)
	case got.Type != want.Type || got.Transport != want.Transport || got.Destination != want.Destination:
		return fmt.Sprintf("route %s/%s/%s, want %s/%s/%s", got.Type, got.Transport, got.Destination, want.Type, want.Transport, want.Destination)
	case !bytes.Equal(got.Body, want.Body):
		return fmt.Sprintf("body %x, want %x", got.Body, want.Body)
	case !slices.EqualFunc(got.Headers, want.Headers, func(a, b headers.Header) bool { return a.Name == b.Name && bytes.Equal(a.Value, b.Value) }):
		return fmt.Sprintf("headers %q, want %q", got.Headers, want.Headers)
	case got.Key != want.Key || got.Ordered != want.Ordered || got.Lane != want.Lane:
		return fmt.Sprintf("key %q ordered %v lane %d, want %q %v %d", got.Key, got.Ordered, got.Lane, want.Key, want.Ordered, want.Lane)
	case !got.CreatedAt.Equal(want.CreatedAt) || got.CreatedAt.Location() != time.UTC:
		return fmt.Sprintf("created %v, want %v in UTC", got.CreatedAt, want.CreatedAt)
	case !got.DeliverAt.Equal(want.DeliverAt):
		return fmt.Sprintf("deliver at %v, want %v", got.DeliverAt, want.DeliverAt)
	case got.TraceParent != want.TraceParent || got.TraceState != want.TraceState:
		return fmt.Sprintf("trace %q %q, want %q %q", got.TraceParent, got.TraceState, want.TraceParent, want.TraceState)
	}
	return ""
}

func TestInsertRejectsInvalidMessagesAndWritesNothing(t *testing.T) {
	t.Parallel()
	b := setup(t, "pgx")
	for name, mutate := range map[string]func(*relayer.Message){
		"ID":          func(m *relayer.Message) { m.ID = uuid.Nil },
		"Type":        func(m *relayer.Message) { m.Type = "" },
		"Transport":   func(m *relayer.Message) { m.Transport = "" },
		"Destination": func(m *relayer.Message) { m.Destination = "\xff" },
		"Key":         func(m *relayer.Message) { m.Key = "a\x00b" },
		"ordered":     func(m *relayer.Message) { m.Ordered, m.Key = true, "" },
		"Lane":        func(m *relayer.Message) { m.Ordered, m.Key, m.Lane = true, "k", 70000 },
		"headers":     func(m *relayer.Message) { m.Headers = []headers.Header{{Name: "\xc3"}} },
	} {
		good := b.unordered(t)
		bad := b.unordered(t)
		mutate(&bad)
		err := b.store.Insert(context.Background(), []relayer.Message{good, bad})
		if !errors.Is(err, store.ErrInvalidMessage) {
			t.Errorf("%s: Insert = %v, want ErrInvalidMessage", name, err)
		}
	}
	if n := b.count(t, b.t0); n != 0 {
		t.Errorf("%d rows written by rejected batches, want 0", n)
	}
}

func TestInsertManyInOneCall(t *testing.T) {
	t.Parallel()
	eachDriver(t, func(t *testing.T, b *bundle) {
		msgs := make([]relayer.Message, 2500)
		for i := range msgs {
			msgs[i] = b.ordered(t, fmt.Sprintf("customer-%d", i%50), 8)
		}
		b.insert(t, msgs...)
		if n := b.count(t, b.t0); n != int64(len(msgs)) {
			t.Errorf("count = %d, want %d", n, len(msgs))
		}
	})
}

func TestReadLaneOrderLimitAndCursor(t *testing.T) {
	t.Parallel()
	eachDriver(t, func(t *testing.T, b *bundle) {
		const lanes = 4
		var inLane []relayer.Message
		var others []relayer.Message
		target := -1
		for i := range 40 {
			m := b.ordered(t, fmt.Sprintf("key-%d", i), lanes)
			if target < 0 {
				target = m.Lane
			}
			if m.Lane == target {
				inLane = append(inLane, m)
			} else {
				others = append(others, m)
			}
		}
		// Insert in reverse id order: the read order must come from the ids.
		all := append(slices.Clone(inLane), others...)
		all = append(all, b.unordered(t))
		slices.Reverse(all)
		b.insert(t, all...)
		want := sortedIDs(inLane...)

		ctx := context.Background()
		var got []uuid.UUID
		var buf []store.Row
		cursor := uuid.Nil
		for {
			var err error
			buf, err = b.store.ReadLane(ctx, buf, target, store.ReadOptions{Now: b.t0, After: cursor, Limit: 3})
			if err != nil {
				t.Fatal(err)
			}
			if len(buf) > 3 {
				t.Fatalf("read %d rows with limit 3", len(buf))
			}
			if len(buf) == 0 {
				break
			}
			for _, r := range buf {
				if !r.Ordered || r.Lane != target {
					t.Fatalf("row %s of lane %d (ordered %v) returned for lane %d", r.ID, r.Lane, r.Ordered, target)
				}
			}
			got = append(got, ids(buf)...)
			cursor = buf[len(buf)-1].ID
		}
		if !slices.Equal(got, want) {
			t.Errorf("paged lane read = %v, want %v", got, want)
		}
		unordered := b.readUnordered(t, b.t0)
		if len(unordered) != 1 || unordered[0].Ordered {
			t.Errorf("unordered read returned %d rows, want the one unordered row", len(unordered))
		}
	})
}

// TestEligibilityAtTheInstant checks the boundaries: due and expired at exactly
// now are visible, one microsecond later they are not; parked rows never are;
// counts span every lane and leave dead letters out.
func TestEligibilityAtTheInstant(t *testing.T) {
	t.Parallel()
	eachDriver(t, func(t *testing.T, b *bundle) {
		ctx := context.Background()
		now := b.t0
		dueNow := b.unordered(t)
		dueNow.DeliverAt = now
		future := b.unordered(t)
		future.DeliverAt = now.Add(us)
		claimedExpiring := b.unordered(t)
		claimedLive := b.unordered(t)
		parked := b.unordered(t)
		laneA := b.ordered(t, "a", 2)
		laneB := b.ordered(t, "b", 2)
		b.insert(t, dueNow, future, claimedExpiring, claimedLive, parked, laneA, laneB)

		for _, c := range []struct {
			id    uuid.UUID
			until time.Time
		}{{claimedExpiring.ID, now}, {claimedLive.ID, now.Add(us)}} {
			ok, err := b.store.Claim(ctx, c.id, store.Claim{Token: uuid.New(), Until: c.until}, now.Add(-time.Second))
			if err != nil || !ok {
				t.Fatalf("Claim = %v, %v", ok, err)
			}
		}
		b.exec(t, `UPDATE $outbox SET parked_at = now() WHERE id = $1`, parked.ID)
		b.exec(t, `INSERT INTO $dead (id, message_type, transport, destination, body, headers, created_at, attempts, reason)
			VALUES ($1, 't', 'x', 'd', '', '\x0100000000000000', now(), 3, 'test')`, newID(t))

		got := ids(b.readUnordered(t, now))
		want := sortedIDs(dueNow, claimedExpiring)
		if !slices.Equal(got, want) {
			t.Errorf("unordered read at now = %v, want due-now and expired-now rows %v", got, want)
		}
		if n := b.count(t, now); n != 4 {
			t.Errorf("count at now = %d, want 4 (two unordered, one per lane)", n)
		}
		later := now.Add(us)
		if got := ids(b.readUnordered(t, later)); !slices.Equal(got, sortedIDs(dueNow, future, claimedExpiring, claimedLive)) {
			t.Errorf("unordered read one microsecond later = %v, want every unparked row", got)
		}
		if n := b.count(t, later); n != 6 {
			t.Errorf("count one microsecond later = %d, want 6", n)
		}
		if n := b.count(t, now.Add(-time.Hour)); n != 2 {
			t.Errorf("count an hour earlier = %d, want 2 (only the lane rows: the others are not yet due or still claimed)", n)
		}
		dead, err := b.store.CountDead(ctx)
		if err != nil || dead != 1 {
			t.Errorf("CountDead = %d, %v; want 1", dead, err)
		}
	})
}

func TestClaimCompetesUntilExpiry(t *testing.T) {
	t.Parallel()
	eachDriver(t, func(t *testing.T, b *bundle) {
		ctx := context.Background()
		m := b.unordered(t)
		b.insert(t, m)
		first := store.Claim{Token: uuid.New(), Until: b.t0.Add(time.Minute)}
		second := store.Claim{Token: uuid.New(), Until: b.t0.Add(2 * time.Minute)}
		claim := func(c store.Claim, now time.Time) bool {
			t.Helper()
			ok, err := b.store.Claim(ctx, m.ID, c, now)
			if err != nil {
				t.Fatal(err)
			}
			return ok
		}
		if !claim(first, b.t0) {
			t.Fatal("first claim failed")
		}
		if claim(second, b.t0.Add(time.Minute-us)) {
			t.Error("competing claim succeeded before expiry")
		}
		if !claim(second, b.t0.Add(time.Minute)) {
			t.Error("competing claim failed at expiry")
		}
		// The first owner lost the row: none of its writes land.
		if ok, _ := b.store.Complete(ctx, m.ID, first.Token, b.t0.Add(time.Minute)); ok {
			t.Error("Complete by the replaced owner succeeded")
		}
		missing, _ := b.store.Claim(ctx, newID(t), first, b.t0)
		if missing {
			t.Error("claim of a missing row succeeded")
		}
		future := b.unordered(t)
		future.DeliverAt = b.t0.Add(time.Hour)
		b.insert(t, future)
		if ok, _ := b.store.Claim(ctx, future.ID, first, b.t0); ok {
			t.Error("claim of a row not yet due succeeded")
		}
		if _, err := b.store.Claim(ctx, m.ID, store.Claim{Token: uuid.New(), Until: b.t0}, b.t0); !errors.Is(err, store.ErrInvalidArgument) {
			t.Errorf("claim expiring at now: %v, want ErrInvalidArgument", err)
		}
		if _, err := b.store.Claim(ctx, m.ID, store.Claim{Until: b.t0.Add(time.Hour)}, b.t0); !errors.Is(err, store.ErrInvalidArgument) {
			t.Errorf("claim with zero token: %v, want ErrInvalidArgument", err)
		}
	})
}

func TestRenewKeepsTheLaterExpiry(t *testing.T) {
	t.Parallel()
	eachDriver(t, func(t *testing.T, b *bundle) {
		ctx := context.Background()
		m := b.unordered(t)
		b.insert(t, m)
		c := store.Claim{Token: uuid.New(), Until: b.t0.Add(time.Minute)}
		if ok, err := b.store.Claim(ctx, m.ID, c, b.t0); !ok || err != nil {
			t.Fatalf("Claim = %v, %v", ok, err)
		}
		renew := func(token uuid.UUID, until, now time.Time) bool {
			t.Helper()
			ok, err := b.store.Renew(ctx, m.ID, token, until, now)
			if err != nil {
				t.Fatal(err)
			}
			return ok
		}
		if !renew(c.Token, b.t0.Add(10*time.Minute), b.t0) {
			t.Fatal("renew by the owner failed")
		}
		if !renew(c.Token, b.t0.Add(2*time.Minute), b.t0) {
			t.Fatal("renew to an earlier expiry failed")
		}
		// The expiry is still ten minutes: a competitor fails at minute 9.
		if ok, _ := b.store.Claim(ctx, m.ID, store.Claim{Token: uuid.New(), Until: b.t0.Add(time.Hour)}, b.t0.Add(9*time.Minute)); ok {
			t.Error("renewal to an earlier expiry shortened the claim")
		}
		if renew(uuid.New(), b.t0.Add(time.Hour), b.t0) {
			t.Error("renew with a foreign token succeeded")
		}
		if renew(c.Token, b.t0.Add(time.Hour), b.t0.Add(10*time.Minute)) {
			t.Error("renew of an expired claim succeeded")
		}
		if n := b.count(t, b.t0.Add(10*time.Minute)); n != 1 {
			t.Errorf("failed renewals changed the row: count at expiry = %d, want 1", n)
		}
	})
}

func TestCompleteNeedsTheLiveClaim(t *testing.T) {
	t.Parallel()
	eachDriver(t, func(t *testing.T, b *bundle) {
		ctx := context.Background()
		m := b.unordered(t)
		b.insert(t, m)
		c := store.Claim{Token: uuid.New(), Until: b.t0.Add(time.Minute)}
		if ok, _ := b.store.Claim(ctx, m.ID, c, b.t0); !ok {
			t.Fatal("claim failed")
		}
		if ok, _ := b.store.Complete(ctx, m.ID, uuid.New(), b.t0); ok {
			t.Error("Complete with a foreign token succeeded")
		}
		if ok, _ := b.store.Complete(ctx, m.ID, c.Token, b.t0.Add(time.Minute)); ok {
			t.Error("Complete at expiry succeeded")
		}
		if ok, err := b.store.Complete(ctx, m.ID, c.Token, b.t0.Add(time.Minute-us)); !ok || err != nil {
			t.Errorf("Complete by the owner = %v, %v", ok, err)
		}
		if n := b.count(t, b.t0.Add(time.Hour)); n != 0 {
			t.Errorf("row still there after Complete (count %d)", n)
		}
	})
}

func TestFailRecordsAndReleases(t *testing.T) {
	t.Parallel()
	eachDriver(t, func(t *testing.T, b *bundle) {
		ctx := context.Background()
		m := b.unordered(t)
		b.insert(t, m)
		c := store.Claim{Token: uuid.New(), Until: b.t0.Add(time.Minute)}
		if ok, _ := b.store.Claim(ctx, m.ID, c, b.t0); !ok {
			t.Fatal("claim failed")
		}
		if ok, _ := b.store.Fail(ctx, m.ID, uuid.New(), "foreign", b.t0); ok {
			t.Error("Fail with a foreign token succeeded")
		}
		msg := "broker said \"no\": \x00\xff and more"
		if ok, err := b.store.Fail(ctx, m.ID, c.Token, msg, b.t0); !ok || err != nil {
			t.Fatalf("Fail = %v, %v", ok, err)
		}
		if ok, _ := b.store.Fail(ctx, m.ID, c.Token, "again", b.t0); ok {
			t.Error("second Fail with the released token succeeded")
		}
		rows := b.readUnordered(t, b.t0) // released: eligible again at once
		if len(rows) != 1 {
			t.Fatalf("read %d rows after Fail, want the released row", len(rows))
		}
		if rows[0].Attempts != 1 || rows[0].LastError != "broker said \"no\": \uFFFD\uFFFD and more" {
			t.Errorf("after Fail: attempts %d, last error %q", rows[0].Attempts, rows[0].LastError)
		}
		// An expired claim cannot record a failure either.
		c2 := store.Claim{Token: uuid.New(), Until: b.t0.Add(time.Minute)}
		if ok, _ := b.store.Claim(ctx, m.ID, c2, b.t0); !ok {
			t.Fatal("reclaim failed")
		}
		if ok, _ := b.store.Fail(ctx, m.ID, c2.Token, "late", b.t0.Add(time.Minute)); ok {
			t.Error("Fail after expiry succeeded")
		}
		rows = b.readUnordered(t, b.t0.Add(time.Minute))
		if len(rows) != 1 || rows[0].Attempts != 1 {
			t.Errorf("late Fail changed the row: %+v", rows)
		}
	})
}

func TestClaimBatchCompleteBatchFailBatch(t *testing.T) {
	t.Parallel()
	eachDriver(t, func(t *testing.T, b *bundle) {
		ctx := context.Background()
		var msgs []relayer.Message
		for range 6 {
			msgs = append(msgs, b.unordered(t))
		}
		future := b.unordered(t)
		future.DeliverAt = b.t0.Add(time.Hour)
		parked := b.unordered(t)
		slices.Reverse(msgs)
		b.insert(t, append(slices.Clone(msgs), future, parked)...)
		b.exec(t, `UPDATE $outbox SET parked_at = now() WHERE id = $1`, parked.ID)
		// Someone else holds msgs[0].
		other := store.Claim{Token: uuid.New(), Until: b.t0.Add(time.Minute)}
		if ok, _ := b.store.Claim(ctx, msgs[0].ID, other, b.t0); !ok {
			t.Fatal("claim failed")
		}

		c := store.Claim{Token: uuid.New(), Until: b.t0.Add(time.Minute)}
		all := append(ids(nil), msgs[0].ID, msgs[1].ID, msgs[2].ID, msgs[3].ID, msgs[4].ID, msgs[5].ID, future.ID, parked.ID, newID(t))
		claimed, err := b.store.ClaimBatch(ctx, nil, all, c, b.t0)
		if err != nil {
			t.Fatal(err)
		}
		want := sortedIDs(msgs[1:]...)
		if !slices.Equal(ids(claimed), want) {
			t.Fatalf("ClaimBatch = %v, want the five free due rows in id order %v", ids(claimed), want)
		}
		if !bytes.Equal(claimed[0].Body, msgs[1].Body) || len(claimed[0].Headers) != 1 {
			t.Errorf("claimed rows lack their content: %+v", claimed[0])
		}
		again, err := b.store.ClaimBatch(ctx, nil, all, store.Claim{Token: uuid.New(), Until: b.t0.Add(time.Hour)}, b.t0.Add(time.Second))
		if err != nil || len(again) != 0 {
			t.Errorf("second ClaimBatch while claims are live = %d rows, %v; want none", len(again), err)
		}

		// Fail two with their own errors, complete the rest plus one we do not hold.
		failed := []store.Failure{{ID: want[0], Error: "e0"}, {ID: want[1], Error: "e1"}}
		n, err := b.store.FailBatch(ctx, failed, c.Token, b.t0)
		if err != nil || n != 2 {
			t.Fatalf("FailBatch = %d, %v; want 2", n, err)
		}
		n, err = b.store.CompleteBatch(ctx, append(slices.Clone(want[2:]), msgs[0].ID, want[0]), c.Token, b.t0)
		if err != nil || n != 3 {
			t.Fatalf("CompleteBatch = %d, %v; want 3 (rows held by others or released are kept)", n, err)
		}
		rows := b.readUnordered(t, b.t0.Add(time.Minute))
		if !slices.Equal(ids(rows), sortedIDs(msgs[0], msgs[len(msgs)-1], msgs[len(msgs)-2])) {
			t.Errorf("left after batch operations: %v", ids(rows))
		}
		for _, r := range rows {
			if r.ID == want[0] && (r.Attempts != 1 || r.LastError != "e0") ||
				r.ID == want[1] && (r.Attempts != 1 || r.LastError != "e1") {
				t.Errorf("failed row %s: attempts %d, error %q", r.ID, r.Attempts, r.LastError)
			}
		}
		// Completion after expiry deletes nothing.
		c2 := store.Claim{Token: uuid.New(), Until: b.t0.Add(2 * time.Minute)}
		claimed, _ = b.store.ClaimBatch(ctx, claimed, want[:2], c2, b.t0.Add(time.Minute))
		if len(claimed) != 2 {
			t.Fatalf("reclaim = %d rows", len(claimed))
		}
		if n, _ := b.store.CompleteBatch(ctx, want[:2], c2.Token, b.t0.Add(2*time.Minute)); n != 0 {
			t.Errorf("CompleteBatch at expiry deleted %d rows", n)
		}
	})
}

func TestErrorsNeverReadAsEmpty(t *testing.T) {
	t.Parallel()
	eachDriver(t, func(t *testing.T, b *bundle) {
		b.insert(t, b.unordered(t))
		ctx, cancel := context.WithCancel(context.Background())
		cancel()
		if rows, err := b.store.ReadUnordered(ctx, nil, store.ReadOptions{Limit: 10}); !errors.Is(err, context.Canceled) || len(rows) != 0 {
			t.Errorf("ReadUnordered on a cancelled context = %d rows, %v", len(rows), err)
		}
		if _, err := b.store.CountEligible(ctx, b.t0); !errors.Is(err, context.Canceled) {
			t.Errorf("CountEligible on a cancelled context = %v", err)
		}
		if _, err := b.store.Claim(ctx, newID(t), store.NewClaim(b.t0, time.Minute), b.t0); !errors.Is(err, context.Canceled) {
			t.Errorf("Claim on a cancelled context = %v", err)
		}
		// A statement interrupted while it runs. The context is cancelled only
		// once the statement is seen waiting for the lock: a cancel request that
		// reaches the server before the statement starts is ignored by
		// PostgreSQL, and lib/pq relies on it alone.
		tx, err := b.db.BeginTx(context.Background(), nil)
		if err != nil {
			t.Fatal(err)
		}
		defer tx.Rollback()
		if _, err := tx.Exec(fmt.Sprintf(`LOCK TABLE "%s"."%soutbox" IN ACCESS EXCLUSIVE MODE`, b.opts.Schema, b.opts.TablePrefix)); err != nil {
			t.Fatal(err)
		}
		// Whatever happens, the lock goes after a while, so a lost cancel fails
		// the test below instead of hanging the suite.
		release := time.AfterFunc(time.Minute, func() { tx.Rollback() })
		defer release.Stop()
		slow, cancelSlow := context.WithCancel(context.Background())
		defer cancelSlow()
		go func() {
			defer cancelSlow()
			testkit.Within(5*time.Second, func() bool {
				var waiting bool
				err := b.db.QueryRow(`SELECT EXISTS (SELECT FROM pg_stat_activity
					WHERE wait_event_type = 'Lock' AND query LIKE '%' || $1 || '%')`, b.opts.Schema).Scan(&waiting)
				return err != nil || waiting
			})
		}()
		if _, err := b.store.ReadUnordered(slow, nil, store.ReadOptions{Limit: 10}); !errors.Is(err, context.Canceled) {
			t.Errorf("ReadUnordered cancelled while blocked = %v, want context.Canceled", err)
		}
		if _, err := b.store.ReadUnordered(context.Background(), nil, store.ReadOptions{Limit: 0}); !errors.Is(err, store.ErrInvalidArgument) {
			t.Errorf("Limit 0: %v, want ErrInvalidArgument", err)
		}
		if _, err := b.store.ReadLane(context.Background(), nil, -1, store.ReadOptions{Limit: 1}); !errors.Is(err, store.ErrInvalidArgument) {
			t.Errorf("lane -1: %v, want ErrInvalidArgument", err)
		}
	})
}

func TestCorruptHeadersFailExplicitly(t *testing.T) {
	t.Parallel()
	eachDriver(t, func(t *testing.T, b *bundle) {
		m := b.unordered(t)
		b.insert(t, m)
		for _, c := range []struct {
			raw  string
			want error
		}{
			{"", headers.ErrTruncated},
			{"010000", headers.ErrTruncated},
			{"0200000000000000", headers.ErrUnsupportedVersion},
			{"01000000010000002000000000000000", headers.ErrTruncated},
			{"010000000000000000", headers.ErrTrailingBytes},
			{"010000000100000002000000c32800000000", headers.ErrInvalidName},
		} {
			raw, _ := hex.DecodeString(c.raw)
			b.exec(t, `UPDATE $outbox SET headers = $1 WHERE id = $2`, raw, m.ID)
			rows, err := b.store.ReadUnordered(context.Background(), nil, store.ReadOptions{Now: b.t0, Limit: 10})
			var rowErr *store.RowError
			if !errors.Is(err, c.want) || !errors.Is(err, store.ErrCorruptRow) || !errors.As(err, &rowErr) || rowErr.ID != m.ID || len(rows) != 0 {
				t.Errorf("headers %s: read = %d rows, %v; want a RowError for %s matching %v", c.raw, len(rows), err, m.ID, c.want)
			}
		}
	})
}

func TestClaimBatchReturnsOnlyWhatItClaimed(t *testing.T) {
	t.Parallel()
	eachDriver(t, func(t *testing.T, b *bundle) {
		ctx := context.Background()
		m1, m2, m3 := b.unordered(t), b.unordered(t), b.unordered(t)
		b.insert(t, m3, m2, m1)
		other := store.Claim{Token: uuid.New(), Until: b.t0.Add(time.Minute)}
		if ok, _ := b.store.Claim(ctx, m2.ID, other, b.t0); !ok {
			t.Fatal("claim failed")
		}
		c := store.Claim{Token: uuid.New(), Until: b.t0.Add(time.Minute)}
		rows, err := b.store.ClaimBatch(ctx, nil, []uuid.UUID{m3.ID, m2.ID, m1.ID, newID(t)}, c, b.t0)
		got := ids(rows)
		if want := sortedIDs(m1, m3); err != nil || !slices.Equal(got, want) {
			t.Errorf("ClaimBatch = %v, %v; want %v", got, err, want)
		}
		if n, _ := b.store.CompleteBatch(ctx, got, c.Token, b.t0); n != 2 {
			t.Errorf("the claimed ids were not held by the claim: deleted %d", n)
		}
	})
}
