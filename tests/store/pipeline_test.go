package store_test

import (
	"bytes"
	"context"
	"database/sql"
	"errors"
	"fmt"
	"reflect"
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/google/uuid"

	"github.com/relayer-go/relayer"
	"github.com/relayer-go/relayer/headers"
	"github.com/relayer-go/relayer/internal/testkit"
	"github.com/relayer-go/relayer/internal/testkit/testdb"
	"github.com/relayer-go/relayer/internal/workerstore"
	"github.com/relayer-go/relayer/store"
)

// pipelineLanes is the lane count of the pipeline tests' messages.
const pipelineLanes = 4

// keysOnLanes returns a key on each of lanes.
func keysOnLanes(t *testing.T, lanes ...int) []string {
	t.Helper()
	keys := make([]string, len(lanes))
	for i, want := range lanes {
		for n := 0; keys[i] == ""; n++ {
			k := fmt.Sprintf("k%d", n)
			if l, err := relayer.Lane(k, pipelineLanes); err != nil {
				t.Fatal(err)
			} else if l == want {
				keys[i] = k
			}
		}
	}
	return keys
}

// leasedLanes writes n ordered messages, one on each of lanes in turn,
// and takes the lanes' leases under a new token.
func (b *bundle) leasedLanes(t *testing.T, lanes []int, n int) ([]relayer.Message, uuid.UUID) {
	t.Helper()
	keys := keysOnLanes(t, lanes...)
	var msgs []relayer.Message
	for i := range n {
		msgs = append(msgs, b.ordered(t, keys[i%len(keys)], pipelineLanes))
	}
	b.insert(t, msgs...)
	token := uuid.New()
	if held, err := acquireLanes(context.Background(), b.store, lanes, "me", token, time.Minute); err != nil || !slices.Equal(held, lanes) {
		t.Fatalf("AcquireLaneLeases = %v, %v", held, err)
	}
	return msgs, token
}

// pinned returns a connection of db with an open transaction, and the store
// bound to it: a worker's session, whose batches BEGIN and COMMIT on it.
func (b *bundle) pinned(t *testing.T, db *sql.DB) (*sql.Conn, *workerstore.Store) {
	t.Helper()
	ctx := context.Background()
	conn, err := db.Conn(ctx)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close() })
	st, err := b.store.With(conn)
	if err != nil {
		t.Fatal(err)
	}
	return conn, st
}

func mustExecOn(t *testing.T, conn *sql.Conn, stmt string) {
	t.Helper()
	if _, err := conn.ExecContext(context.Background(), stmt); err != nil {
		t.Fatalf("%s: %v", stmt, err)
	}
}

// A lock and read sent together (in one round trip on pgx, one by one on
// other drivers) read after the lock is held: a batch that waited for the
// previous holder's transaction sees what that transaction deleted as gone,
// as if it had waited before reading. And a delete sent with its commit
// commits only when it deleted every row it was given.
func TestLockAndReadLanesReadsAfterTheLock(t *testing.T) {
	t.Parallel()
	eachDriver(t, func(t *testing.T, b *bundle) {
		ctx := context.Background()
		lanes := []int{1, 2}
		msgs, token := b.leasedLanes(t, lanes, 6)
		cursors := []workerstore.LaneCursor{workerstore.NewLaneCursor(1), workerstore.NewLaneCursor(2)}

		// The previous holder's batch: it holds the lanes' locks and
		// delivers the first row of lane 1 (msgs[0]).
		prev, prevStore := b.begin(t, nil)
		if held, err := prevStore.LockLaneLeases(ctx, lanes, token, 0); err != nil || !slices.Equal(held, lanes) {
			t.Fatalf("previous holder's lock = %v, %v", held, err)
		}
		if n, err := prevStore.DeleteLaneRows(ctx, []uuid.UUID{msgs[0].ID}, token); err != nil || n != 1 {
			t.Fatalf("previous holder's delete = %d, %v", n, err)
		}

		conn, st := b.pinned(t, b.db)
		var pid int
		if err := conn.QueryRowContext(ctx, `SELECT pg_backend_pid()`).Scan(&pid); err != nil {
			t.Fatal(err)
		}
		mustExecOn(t, conn, "BEGIN")
		type result struct {
			held []int
			rows []store.Row
			err  error
		}
		done := make(chan result, 1)
		go func() {
			held, rows, _, err := st.LockAndReadLanes(ctx, lanes, token, 0, nil, cursors, 10)
			done <- result{held, rows, err}
		}()
		waitForLockWait(t, b.db, pid)
		if err := prev.Commit(); err != nil {
			t.Fatal(err)
		}
		r := <-done
		if r.err != nil || !slices.Equal(r.held, lanes) {
			t.Fatalf("LockAndReadLanes = %v, %v", r.held, r.err)
		}
		if want := msgs[1:]; !slices.Equal(ids(r.rows), sortedByLane(want)) {
			t.Fatalf("read %v after the previous holder committed, want %v (not the row it delivered)", ids(r.rows), sortedByLane(want))
		}

		// One row more than the lanes hold: nothing is committed.
		err := st.CommitLaneDeletes(ctx, append(ids(r.rows), uuid.New()), token, true)
		if !errors.Is(err, workerstore.ErrLaneRowsGone) {
			t.Fatalf("CommitLaneDeletes with a row gone = %v, want ErrLaneRowsGone", err)
		}
		mustExecOn(t, conn, "ROLLBACK")
		if got := b.laneRows(t, cursors); len(got) != len(msgs)-1 {
			t.Fatalf("%d rows left after a failed CommitLaneDeletes, want %d", len(got), len(msgs)-1)
		}

		// Every row: committed, and a new transaction chained.
		mustExecOn(t, conn, "BEGIN")
		held, rows, _, err := st.LockAndReadLanes(ctx, lanes, token, 0, nil, cursors, 10)
		if err != nil || !slices.Equal(held, lanes) || len(rows) != len(msgs)-1 {
			t.Fatalf("LockAndReadLanes = %v, %d rows, %v", held, len(rows), err)
		}
		if err := st.CommitLaneDeletes(ctx, ids(rows), token, true); err != nil {
			t.Fatalf("CommitLaneDeletes: %v", err)
		}
		if got := b.laneRows(t, cursors); len(got) != 0 {
			t.Fatalf("%d rows left after CommitLaneDeletes, want none", len(got))
		}
		// In a transaction begun earlier, now() falls behind the statement's
		// time as soon as the clock moves; in a new one, never.
		var chained bool
		testkit.Within(5*time.Second, func() bool {
			err = conn.QueryRowContext(ctx, `SELECT now() < statement_timestamp()`).Scan(&chained)
			return err != nil || chained
		})
		if err != nil || !chained {
			t.Fatalf("after CommitLaneDeletes with chain: in a transaction begun earlier = %v, %v", chained, err)
		}
		mustExecOn(t, conn, "ROLLBACK")
	})
}

// A lane read returns its rows lane after lane in ascending order, each
// lane's in id order, whatever the order of its cursors: the read, which
// does not sort, checks the order its rows came in and reads again, sorted,
// when they came in another (here, cursors in descending lane order).
func TestLaneReadsComeInLaneAndIDOrder(t *testing.T) {
	t.Parallel()
	eachDriver(t, func(t *testing.T, b *bundle) {
		ctx := context.Background()
		msgs, token := b.leasedLanes(t, []int{1, 3}, 6)
		want := sortedByLane(msgs)
		for _, from := range [][]workerstore.LaneCursor{
			{workerstore.NewLaneCursor(1), workerstore.NewLaneCursor(3)},
			{workerstore.NewLaneCursor(3), workerstore.NewLaneCursor(1)},
		} {
			rows, reads, err := b.store.ReadLanes(ctx, nil, from, 10)
			if err != nil || !slices.Equal(ids(rows), want) || len(reads) != 2 || reads[0].Lane != 1 || reads[1].Lane != 3 {
				t.Errorf("ReadLanes from lanes %d, %d = %v, %v, %v; want %v", from[0].Lane, from[1].Lane, ids(rows), reads, err, want)
			}
			conn, st := b.pinned(t, b.db)
			mustExecOn(t, conn, "BEGIN")
			held, rows, _, err := st.LockAndReadLanes(ctx, []int{from[0].Lane, from[1].Lane}, token, 0, nil, from, 10)
			if err != nil || len(held) != 2 || !slices.Equal(ids(rows), want) {
				t.Errorf("LockAndReadLanes from lanes %d, %d = %v, %v; want %v", from[0].Lane, from[1].Lane, ids(rows), err, want)
			}
			mustExecOn(t, conn, "ROLLBACK")
		}
	})
}

// On a pinned pgx connection the lock and the read take one round trip, and
// so do the delete and the commit.
func TestPipelinedLaneStatementsTakeOneRoundTripEach(t *testing.T) {
	t.Parallel()
	b := setup(t, "pgx")
	ctx := context.Background()
	lanes := []int{0, 3}
	keys := keysOnLanes(t, lanes...)
	token := uuid.New()
	if _, err := acquireLanes(ctx, b.store, lanes, "me", token, time.Minute); err != nil {
		t.Fatal(err)
	}
	db, writes := testdb.OpenCounting(t)
	conn, st := b.pinned(t, db)
	cursors := []workerstore.LaneCursor{workerstore.NewLaneCursor(0), workerstore.NewLaneCursor(3)}
	for round := range 3 { // the first round prepares the statements
		b.insert(t, b.ordered(t, keys[0], pipelineLanes), b.ordered(t, keys[1], pipelineLanes))
		mustExecOn(t, conn, "BEGIN")
		before := writes.Load()
		held, rows, _, err := st.LockAndReadLanes(ctx, lanes, token, 0, nil, cursors, 10)
		if err != nil || !slices.Equal(held, lanes) || len(rows) != 2 {
			t.Fatalf("LockAndReadLanes = %v, %d rows, %v", held, len(rows), err)
		}
		read := writes.Load()
		if err := st.CommitLaneDeletes(ctx, ids(rows), token, false); err != nil {
			t.Fatal(err)
		}
		if round > 0 && (read-before != 1 || writes.Load()-read != 1) {
			t.Errorf("round trips: %d for the lock and read, %d for the delete and commit; want 1 each", read-before, writes.Load()-read)
		}
	}
}

// waitForLockWait waits until the session pid waits for a lock.
func waitForLockWait(t *testing.T, db *sql.DB, pid int) {
	t.Helper()
	testkit.Eventually(t, 10*time.Second, func() bool {
		var waiting bool
		err := db.QueryRow(`SELECT EXISTS (SELECT 1 FROM pg_locks WHERE pid = $1 AND NOT granted)`, pid).Scan(&waiting)
		if err != nil {
			t.Fatal(err)
		}
		return waiting
	}, "the lock and read to wait for the previous holder's lock")
}

// laneRows reads the lanes of from, from their start, outside any batch.
func (b *bundle) laneRows(t *testing.T, from []workerstore.LaneCursor) []store.Row {
	t.Helper()
	rows, _, err := b.store.ReadLanes(context.Background(), nil, from, 100)
	if err != nil {
		t.Fatal(err)
	}
	return rows
}

// sortedByLane returns the ids of msgs in the order a lane read returns
// them: by lane, then by id.
func sortedByLane(msgs []relayer.Message) []uuid.UUID {
	ms := slices.Clone(msgs)
	slices.SortStableFunc(ms, func(x, y relayer.Message) int {
		if x.Lane != y.Lane {
			return x.Lane - y.Lane
		}
		return slices.Compare(x.ID[:], y.ID[:])
	})
	out := make([]uuid.UUID, len(ms))
	for i, m := range ms {
		out[i] = m.ID
	}
	return out
}

// Bad arguments fail before anything is sent, naming what is wrong.
func TestLockAndReadLanesAndCommitLaneDeletesCheckTheirArguments(t *testing.T) {
	t.Parallel()
	b := setup(t, "pgx")
	ctx := context.Background()
	_, st := b.pinned(t, b.db)
	cursors := []workerstore.LaneCursor{workerstore.NewLaneCursor(0)}
	for name, call := range map[string]func() error{
		"no token": func() error {
			_, _, _, err := st.LockAndReadLanes(ctx, []int{0}, uuid.Nil, 0, nil, cursors, 10)
			return err
		},
		"negative time left": func() error {
			_, _, _, err := st.LockAndReadLanes(ctx, []int{0}, uuid.New(), -time.Second, nil, cursors, 10)
			return err
		},
		"no limit": func() error {
			_, _, _, err := st.LockAndReadLanes(ctx, []int{0}, uuid.New(), 0, nil, cursors, 0)
			return err
		},
		"no rows to delete":   func() error { return st.CommitLaneDeletes(ctx, nil, uuid.New(), false) },
		"a store on the pool": func() error { return b.store.CommitLaneDeletes(ctx, []uuid.UUID{uuid.New()}, uuid.New(), false) },
	} {
		if err := call(); !errors.Is(err, store.ErrInvalidArgument) {
			t.Errorf("%s: %v, want ErrInvalidArgument", name, err)
		}
	}
}

// Rows read with the lock keep bodies and headers of their own, small and
// large, however the driver hands them out (pgx lends a row's bytes until
// the next row).
func TestLockAndReadLanesKeepsEachRowsBytes(t *testing.T) {
	t.Parallel()
	eachDriver(t, func(t *testing.T, b *bundle) {
		ctx := context.Background()
		key := keysOnLanes(t, 2)[0]
		var msgs []relayer.Message
		for i, size := range []int{100 << 10, 300, 40 << 10, 7} {
			m := b.ordered(t, key, pipelineLanes)
			m.Body = bytes.Repeat([]byte{byte('a' + i)}, size)
			m.Headers = []headers.Header{{Name: "n", Value: []byte(strings.Repeat("v", i+1))}}
			msgs = append(msgs, m)
		}
		b.insert(t, msgs...)
		token := uuid.New()
		if _, err := acquireLanes(ctx, b.store, []int{2}, "me", token, time.Minute); err != nil {
			t.Fatal(err)
		}
		conn, st := b.pinned(t, b.db)
		mustExecOn(t, conn, "BEGIN")
		defer mustExecOn(t, conn, "ROLLBACK")
		_, rows, _, err := st.LockAndReadLanes(ctx, []int{2}, token, 0, nil, []workerstore.LaneCursor{workerstore.NewLaneCursor(2)}, 10)
		if err != nil || len(rows) != len(msgs) {
			t.Fatalf("LockAndReadLanes = %d rows, %v", len(rows), err)
		}
		// What the connection reads next must not show through them.
		if _, _, _, err := st.LockAndReadLanes(ctx, []int{2}, token, 0, nil, []workerstore.LaneCursor{workerstore.NewLaneCursor(2)}, 10); err != nil {
			t.Fatal(err)
		}
		var filler string
		if err := conn.QueryRowContext(ctx, `SELECT repeat('z', 300000)`).Scan(&filler); err != nil {
			t.Fatal(err)
		}
		for i, r := range rows {
			if !bytes.Equal(r.Body, msgs[i].Body) || len(r.Headers) != 1 || string(r.Headers[0].Value) != string(msgs[i].Headers[0].Value) {
				t.Errorf("row %d: body of %d bytes (want %d of %q), headers %v", i, len(r.Body), len(msgs[i].Body), msgs[i].Body[:1], r.Headers)
			}
		}
	})
}

// A row read with the lock (pgx's own rows on a pinned connection, decoded
// into pgx's types) is the row a read through database/sql returns, every
// nullable column null and set; and a timestamp no time.Time can hold fails
// the read, naming its column, on both, rather than reading as zero (a row
// due at once).
func TestLockAndReadLanesReadsWhatReadLanesReads(t *testing.T) {
	t.Parallel()
	eachDriver(t, func(t *testing.T, b *bundle) {
		ctx := context.Background()
		key := keysOnLanes(t, 3)[0]
		plain, traced, failed := b.ordered(t, key, pipelineLanes), b.ordered(t, key, pipelineLanes), b.ordered(t, key, pipelineLanes)
		traced.DeliverAt = time.Now().Add(-time.Hour).Truncate(time.Microsecond).UTC()
		traced.TraceParent, traced.TraceState = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01", "k=v"
		traced.Headers = append(traced.Headers, headers.Header{Name: "x", Value: []byte("y")})
		b.insert(t, plain, traced, failed)
		table := b.opts.Schema + ".orders_outbox"
		if _, err := b.db.ExecContext(ctx, `UPDATE `+table+` SET attempts = 2, last_error = 'refused',
			retry_at = now() - interval '1 minute', claimed_until = now() - interval '2 minutes' WHERE id = $1`, failed.ID.String()); err != nil {
			t.Fatal(err)
		}
		token := uuid.New()
		if _, err := acquireLanes(ctx, b.store, []int{3}, "me", token, time.Minute); err != nil {
			t.Fatal(err)
		}
		from := []workerstore.LaneCursor{workerstore.NewLaneCursor(3)}
		conn, st := b.pinned(t, b.db)
		read := func() ([]store.Row, []workerstore.LaneRead, error) {
			t.Helper()
			mustExecOn(t, conn, "BEGIN")
			defer mustExecOn(t, conn, "ROLLBACK")
			_, rows, reads, err := st.LockAndReadLanes(ctx, []int{3}, token, 0, nil, from, 10)
			return rows, reads, err
		}
		rows, reads, err := read()
		if err != nil || len(rows) != 3 {
			t.Fatalf("LockAndReadLanes = %d rows, %v", len(rows), err)
		}
		want, wantReads, err := b.store.ReadLanes(ctx, nil, from, 10)
		if err != nil {
			t.Fatal(err)
		}
		for i := range want {
			if !reflect.DeepEqual(rows[i], want[i]) {
				t.Errorf("row %d read with the lock:\n%+v\nread through database/sql:\n%+v", i, rows[i], want[i])
			}
		}
		// The reads' snapshots differ (two transactions); what they read of
		// the lane must not.
		snapshot := regexp.MustCompile(`xmax:\S* xip:\{[^}]*\} lowest:\S* probes:\{[^}]*\} `)
		if got, want := snapshot.ReplaceAllString(fmt.Sprintf("%+v", reads), ""), snapshot.ReplaceAllString(fmt.Sprintf("%+v", wantReads), ""); got != want {
			t.Errorf("lane reads with the lock %s, through database/sql %s", got, want)
		}
		if rows[2].Attempts != 2 || rows[2].LastError != "refused" || rows[2].RetryAt.IsZero() || rows[2].ClaimedUntil.IsZero() ||
			!rows[1].DeliverAt.Equal(traced.DeliverAt) || rows[1].TraceState != "k=v" || len(rows[1].Headers) != 2 {
			t.Errorf("rows read with the lock lost columns: %+v", rows)
		}

		if _, err := b.db.ExecContext(ctx, `UPDATE `+table+` SET deliver_at = 'infinity' WHERE id = $1`, plain.ID.String()); err != nil {
			t.Fatal(err)
		}
		if _, _, err := read(); err == nil || b.driver == "pgx" && !strings.Contains(err.Error(), "deliver_at") {
			t.Errorf("LockAndReadLanes of a row due at infinity = %v, want an error naming deliver_at", err)
		}
		if _, _, err := b.store.ReadLanes(ctx, nil, from, 10); err == nil {
			t.Error("ReadLanes of a row due at infinity succeeded, want an error")
		}
	})
}
