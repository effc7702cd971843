package dispatch

import (
	"context"
	"testing"
	"time"

	"github.com/relayer-go/relayer/internal/testkit/testdb"
	"github.com/relayer-go/relayer/internal/workerstore"
	"github.com/relayer-go/relayer/store"
)

// A taking worker's session ends transactions left idle a little past its send
// deadline, and the connection goes back to the pool with the setting reset.
func TestTakingConnBoundsIdleTransactions(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	db := testdb.Open(t, "pgx")
	db.SetMaxOpenConns(1) // the pool hands the same connection back
	st, err := workerstore.New(db, store.Tables{Schema: testdb.NewSchema(t)})
	if err != nil {
		t.Fatal(err)
	}
	w := newTakingConn(db, st, 2*time.Second)
	if _, err := w.store(ctx); err != nil {
		t.Fatal(err)
	}
	var setting string
	if err := w.conn.QueryRowContext(ctx, `SHOW idle_in_transaction_session_timeout`).Scan(&setting); err != nil {
		t.Fatal(err)
	}
	if want := "7s"; setting != want {
		t.Errorf("worker session: idle_in_transaction_session_timeout = %s, want %s (send deadline + %s)", setting, want, idleTxMargin)
	}
	w.release(ctx)
	if err := db.QueryRowContext(ctx, `SHOW idle_in_transaction_session_timeout`).Scan(&setting); err != nil {
		t.Fatal(err)
	}
	if setting != "0" {
		t.Errorf("after release: idle_in_transaction_session_timeout = %s, want the default 0", setting)
	}
}

// A server on this machine shares its clock: the measured offset, within the
// round trip's uncertainty and clockTolerance, is taken as none.
func TestClockOfALocalServerHasNoOffset(t *testing.T) {
	t.Parallel()
	db := testdb.Open(t, "pgx")
	st, err := workerstore.New(db, store.Tables{Schema: testdb.NewSchema(t)})
	if err != nil {
		t.Fatal(err)
	}
	var c dbClock
	if !c.stale() {
		t.Error("a clock never measured is not stale")
	}
	for range 20 {
		if err := c.sync(context.Background(), st); err != nil {
			t.Fatal(err)
		}
		if off := time.Duration(c.offset.Load()); off != 0 {
			t.Fatalf("offset to a local server = %s, want 0", off)
		}
	}
	if c.stale() {
		t.Error("a clock just measured is stale")
	}
}

// An offset beyond the round trip's uncertainty and clockTolerance is kept,
// measured from the round trip's midpoint; a smaller one is none.
func TestClockOffsetOf(t *testing.T) {
	before := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	after := before.Add(4 * time.Millisecond) // midpoint at 2ms, half a trip 2ms
	for _, c := range []struct {
		server time.Duration // after before
		want   time.Duration
	}{
		{2 * time.Millisecond, 0},
		{0, 0},                    // at the start of the trip
		{5 * time.Millisecond, 0}, // 3ms from the midpoint: within 2ms + 1ms
		{6 * time.Millisecond, 4 * time.Millisecond},
		{-time.Second, -time.Second - 2*time.Millisecond},
	} {
		if got := offsetOf(before, before.Add(c.server), after); got != c.want {
			t.Errorf("server at +%s: offset %s, want %s", c.server, got, c.want)
		}
	}
}

// An ordered batch chains the next one's transaction, which the next batch
// takes up without a BEGIN; a slot left unused for chainIdle ends it, so that
// no session stays idle in a transaction once batches stop.
func TestBatchTransactionsChainUntilIdle(t *testing.T) {
	t.Parallel()
	for _, driver := range testdb.Drivers() {
		t.Run(driver, func(t *testing.T) {
			t.Parallel()
			testBatchTransactionsChain(t, driver)
		})
	}
}

func testBatchTransactionsChain(t *testing.T, driver string) {
	ctx := context.Background()
	db := testdb.Open(t, driver)
	st, err := workerstore.New(db, store.Tables{Schema: testdb.NewSchema(t)})
	if err != nil {
		t.Fatal(err)
	}
	w := newWorkerConn(db, st)
	t.Cleanup(func() { w.release(ctx) })
	if _, err := w.store(ctx); err != nil {
		t.Fatal(err)
	}
	var pid int
	if err := w.conn.QueryRowContext(ctx, `SELECT pg_backend_pid()`).Scan(&pid); err != nil {
		t.Fatal(err)
	}
	session := func(wantState, wantQuery string) {
		t.Helper()
		var state, query string
		if err := db.QueryRowContext(ctx, `SELECT state, query FROM pg_stat_activity WHERE pid = $1`, pid).Scan(&state, &query); err != nil {
			t.Fatal(err)
		}
		if state != wantState || query != wantQuery {
			t.Errorf("session: %s after %q, want %s after %q", state, query, wantState, wantQuery)
		}
	}
	if err := w.openBatch(ctx); err != nil {
		t.Fatal(err)
	}
	session("idle in transaction", "BEGIN")
	if err := w.endBatch(ctx, "COMMIT"); err != nil {
		t.Fatal(err)
	}
	session("idle in transaction", "COMMIT AND CHAIN")
	if err := w.openBatch(ctx); err != nil {
		t.Fatal(err)
	}
	session("idle in transaction", "COMMIT AND CHAIN") // no BEGIN sent
	if err := w.endBatch(ctx, "ROLLBACK"); err != nil {
		t.Fatal(err)
	}
	session("idle in transaction", "ROLLBACK AND CHAIN")

	s := &groupLoop{free: []*laneSlot{{conn: w}}}
	if at := s.unchainIdle(ctx); at.IsZero() || !w.chained() {
		t.Fatal("a chain just made was ended")
	} else if wait := time.Until(at); wait <= 0 || wait > chainIdle {
		t.Errorf("the chain ends in %s, want within %s", wait, chainIdle)
	}
	session("idle in transaction", "ROLLBACK AND CHAIN")
	w.chainedAt = time.Now().Add(-chainIdle)
	if at := s.unchainIdle(ctx); !at.IsZero() || w.chained() {
		t.Fatal("a chain unused for chainIdle was kept")
	}
	session("idle", "ROLLBACK")
}
