package store_test

import (
	"context"
	"slices"
	"testing"
	"time"

	"github.com/google/uuid"

	"github.com/relayer-go/relayer"

	"github.com/relayer-go/relayer/internal/testkit"
	"github.com/relayer-go/relayer/internal/workerstore"
	"github.com/relayer-go/relayer/store"
)

// laneRound runs one ordered batch on lane 0 under token's lease, as a
// worker does: it reads from cur, lets settle write the outcome and say how
// many rows from the first are gone and the earliest retry it recorded,
// commits, and returns the rows read and the advanced cursor.
func (b *bundle) laneRound(t *testing.T, token uuid.UUID, cur workerstore.LaneCursor,
	settle func(st *workerstore.Store, rows []store.Row) (gone int, retryAt time.Time)) ([]store.Row, workerstore.LaneCursor) {
	t.Helper()
	ctx := context.Background()
	tx, st := b.begin(t, nil)
	defer func() { _ = tx.Rollback() }()
	if held, err := acquireLanes(ctx, st, []int{0}, "cursor-test", token, time.Minute); err != nil || !slices.Equal(held, []int{0}) {
		t.Fatalf("AcquireLaneLeases = %v, %v", held, err)
	}
	rows, reads, err := st.ReadLanes(ctx, nil, []workerstore.LaneCursor{cur}, 10)
	if err != nil {
		t.Fatalf("ReadLanes: %v", err)
	}
	if len(rows) > 0 && (len(reads) != 1 || reads[0].Lane != 0 || reads[0].Rows != len(rows)) {
		t.Fatalf("ReadLanes = %d rows and %+v, want one read of lane 0 with them all", len(rows), reads)
	}
	gone, retryAt := 0, time.Time{}
	if settle != nil {
		gone, retryAt = settle(st, rows)
	}
	if err := tx.Commit(); err != nil {
		t.Fatal(err)
	}
	if len(reads) == 0 {
		return rows, cur.Advance(workerstore.LaneRead{}, nil, 0, time.Time{})
	}
	held := b.heldKeys
	b.heldKeys = nil
	return rows, cur.Advance(reads[0], rows, gone, retryAt, held...)
}

// deleteAll settles a round by delivering every row it read.
func deleteAll(t *testing.T, token uuid.UUID) func(*workerstore.Store, []store.Row) (int, time.Time) {
	return func(st *workerstore.Store, rows []store.Row) (int, time.Time) {
		if n, err := st.DeleteLaneRows(context.Background(), ids(rows), token); err != nil || n != int64(len(rows)) {
			t.Fatalf("DeleteLaneRows = %d, %v", n, err)
		}
		return len(rows), time.Time{}
	}
}

func wantIDs(t *testing.T, what string, rows []store.Row, want ...relayer.Message) {
	t.Helper()
	var w []uuid.UUID
	for _, m := range want {
		w = append(w, m.ID)
	}
	if got := ids(rows); !slices.Equal(got, w) {
		t.Errorf("%s read %v, want %v", what, got, w)
	}
}

// TestLaneCursorReadsLateRowsInIDOrder reads a lane from a cursor past the
// rows a round delivered: rows that commit later with lower ids, from a
// transaction in progress at the cursor's snapshot or begun after it, are
// read with the rest of their key in id order, and a row the snapshot saw
// below the cursor is not read again.
func TestLaneCursorReadsLateRowsInIDOrder(t *testing.T) {
	t.Parallel()
	eachDriver(t, func(t *testing.T, b *bundle) {
		ctx := context.Background()
		token := uuid.New()
		early := b.ordered(t, "a", 1) // lowest id, inserted last
		late := b.ordered(t, "a", 1)  // committed after the first round
		first, second, kept := b.ordered(t, "a", 1), b.ordered(t, "b", 1), b.ordered(t, "b", 1)
		b.insert(t, first, second, kept)
		open, st := b.begin(t, nil)
		defer func() { _ = open.Rollback() }()
		if err := st.Insert(ctx, []relayer.Message{late}); err != nil {
			t.Fatal(err)
		}

		// The round says all three are gone but leaves kept in place: a
		// cursor read must not come back for it.
		rows, cur := b.laneRound(t, token, workerstore.NewLaneCursor(0), func(st *workerstore.Store, rows []store.Row) (int, time.Time) {
			deleteAll(t, token)(st, rows[:2])
			return len(rows), time.Time{}
		})
		wantIDs(t, "the first round", rows, first, second, kept)

		if err := open.Commit(); err != nil {
			t.Fatal(err)
		}
		b.insert(t, early)
		after := b.ordered(t, "a", 1)
		b.insert(t, after)
		rows, cur = b.laneRound(t, token, cur, nil)
		wantIDs(t, "a read from the cursor", rows, early, late, after)
		rows, _ = b.laneRound(t, token, workerstore.NewLaneCursor(0), nil)
		wantIDs(t, "a read from the lane's start", rows, early, late, kept, after)

		// Once the lease changes hands the cursor reads from the start.
		if err := b.store.ReleaseLeases(ctx, token); err != nil {
			t.Fatal(err)
		}
		rows, _ = b.laneRound(t, token, cur, nil)
		wantIDs(t, "a cursor read under a new lease", rows, early, late, kept, after)
	})
}

// TestLaneCursorRereadsKeysReleasedBelowIt checks the rows a cursor passed
// while their key was held: a key waiting for its retry (recorded by the
// round, or found by the read) comes back in order once the retry time
// passes, and a parked key once an operator retries it or skips its head.
func TestLaneCursorRereadsKeysReleasedBelowIt(t *testing.T) {
	t.Parallel()
	eachDriver(t, func(t *testing.T, b *bundle) {
		ctx := context.Background()
		token := uuid.New()
		now, err := b.store.ServerTime(ctx)
		if err != nil {
			t.Fatal(err)
		}
		retryAt := now.Add(1500 * time.Millisecond)

		// A key that failed before the round, so that only the read knows.
		waited := b.ordered(t, "w", 1)
		b.insert(t, waited)
		b.laneRound(t, token, workerstore.NewLaneCursor(0), func(st *workerstore.Store, rows []store.Row) (int, time.Time) {
			if n, err := st.FailLaneRows(ctx, []store.Failure{{ID: waited.ID, Error: "no", RetryAt: retryAt}}, token); err != nil || n != 1 {
				t.Fatalf("FailLaneRows = %d, %v", n, err)
			}
			return 0, time.Time{}
		})
		failing, behind, parked, parkedBehind, sent := b.ordered(t, "f", 1), b.ordered(t, "f", 1),
			b.ordered(t, "p", 1), b.ordered(t, "p", 1), b.ordered(t, "s", 1)
		b.insert(t, failing, behind, parked, parkedBehind, sent)

		rows, cur := b.laneRound(t, token, workerstore.NewLaneCursor(0), func(st *workerstore.Store, rows []store.Row) (int, time.Time) {
			if n, err := st.FailLaneRows(ctx, []store.Failure{{ID: failing.ID, Error: "no", RetryAt: retryAt}}, token); err != nil || n != 1 {
				t.Fatalf("FailLaneRows = %d, %v", n, err)
			}
			if n, err := st.ParkLaneRows(ctx, []store.Failure{{ID: parked.ID, Error: "rejected"}}, token); err != nil || n != 1 {
				t.Fatalf("ParkLaneRows = %d, %v", n, err)
			}
			deleteAll(t, token)(st, rows[4:])
			return len(rows), retryAt
		})
		wantIDs(t, "the first round", rows, failing, behind, parked, parkedBehind, sent)
		rows, cur = b.laneRound(t, token, cur, nil)
		wantIDs(t, "a read while the keys are held", rows)

		if n, err := b.store.RetryParked(ctx, store.ParkedFilter{Key: "p"}); err != nil || n != 1 {
			t.Fatalf("RetryParked = %d, %v", n, err)
		}
		rows, cur = b.laneRound(t, token, cur, func(st *workerstore.Store, rows []store.Row) (int, time.Time) {
			if n, err := st.ParkLaneRows(ctx, []store.Failure{{ID: parked.ID, Error: "rejected again"}}, token); err != nil || n != 1 {
				t.Fatalf("ParkLaneRows = %d, %v", n, err)
			}
			return len(rows), time.Time{}
		})
		wantIDs(t, "a read after the parked key was retried", rows, parked, parkedBehind)
		if n, err := b.store.SkipParkedHead(ctx, "p"); err != nil || n != 1 {
			t.Fatalf("SkipParkedHead = %d, %v", n, err)
		}
		rows, cur = b.laneRound(t, token, cur, deleteAll(t, token))
		wantIDs(t, "a read after the parked head was skipped", rows, parkedBehind)

		testkit.Eventually(t, 10*time.Second, func() bool {
			now, err := b.store.ServerTime(ctx)
			return err == nil && now.After(retryAt)
		}, "the database's clock past the retry time")
		rows, _ = b.laneRound(t, token, cur, nil)
		wantIDs(t, "a read once the retry time passed", rows, waited, failing, behind)
	})
}

// TestLaneCursorRereadsKeysReleasedByAnyProgram checks the rows a cursor
// passed behind a parked key when the key is released by a program that
// does not stamp them: an older release's redrive, or an operator's UPDATE
// or DELETE by hand. The read must find the key's rows again, in order,
// and before any later row of the key.
func TestLaneCursorRereadsKeysReleasedByAnyProgram(t *testing.T) {
	t.Parallel()
	eachDriver(t, func(t *testing.T, b *bundle) {
		ctx := context.Background()
		token := uuid.New()
		table := `"` + b.opts.Schema + `"."` + b.opts.TablePrefix + `outbox"`
		parked, behind, other := b.ordered(t, "p", 1), b.ordered(t, "p", 1), b.ordered(t, "o", 1)
		b.insert(t, parked, behind, other)
		park := func(st *workerstore.Store, rows []store.Row) (int, time.Time) {
			if n, err := st.ParkLaneRows(ctx, []store.Failure{{ID: parked.ID, Error: "rejected"}}, token); err != nil || n != 1 {
				t.Fatalf("ParkLaneRows = %d, %v", n, err)
			}
			b.heldKeys = append(b.heldKeys, "p")
			var sent []store.Row
			for _, r := range rows {
				if r.Key != "p" {
					sent = append(sent, r)
				}
			}
			deleteAll(t, token)(st, sent)
			return len(rows), time.Time{}
		}
		rows, cur := b.laneRound(t, token, workerstore.NewLaneCursor(0), park)
		wantIDs(t, "the first round", rows, parked, behind, other)
		later := b.ordered(t, "p", 1)
		b.insert(t, later)

		// The previous release's `parked retry`, as an operator would type
		// it, right after the worker's transaction that parked the key.
		if _, err := b.db.ExecContext(ctx, `UPDATE `+table+` SET parked_at = NULL, attempts = 0, retry_at = NULL WHERE parked_at IS NOT NULL`); err != nil {
			t.Fatal(err)
		}
		rows, cur = b.laneRound(t, token, cur, park)
		wantIDs(t, "a read after an UPDATE by hand released the key", rows, parked, behind, later)

		rows, cur = b.laneRound(t, token, cur, nil)
		wantIDs(t, "a read while the key is parked again", rows)

		// A parked head deleted by hand releases its key as well.
		if _, err := b.db.ExecContext(ctx, `DELETE FROM `+table+` WHERE id = $1`, parked.ID); err != nil {
			t.Fatal(err)
		}
		rows, _ = b.laneRound(t, token, cur, nil)
		wantIDs(t, "a read after the parked head was deleted by hand", rows, behind, later)
	})
}

// TestLaneCursorFindsRowsOfALongOpenWriter reads past a transaction that
// wrote a lane row and stayed open while many others ran: the cursor then
// probes that transaction's id rather than walk the xact index from it, and
// its row, with a lower id than the rows delivered meanwhile, is read once
// it commits.
func TestLaneCursorFindsRowsOfALongOpenWriter(t *testing.T) {
	t.Parallel()
	eachDriver(t, func(t *testing.T, b *bundle) {
		ctx := context.Background()
		token := uuid.New()
		late := b.ordered(t, "a", 1)
		open, st := b.begin(t, nil)
		defer func() { _ = open.Rollback() }()
		if err := st.Insert(ctx, []relayer.Message{late}); err != nil {
			t.Fatal(err)
		}
		first := b.ordered(t, "b", 1)
		b.insert(t, first)
		rows, cur := b.laneRound(t, token, workerstore.NewLaneCursor(0), deleteAll(t, token))
		wantIDs(t, "the first round", rows, first)
		// Over 10,000 transaction ids go by while the writer stays open.
		b.exec(t, `DO $$ BEGIN FOR i IN 1..10050 LOOP PERFORM pg_current_xact_id(); COMMIT; END LOOP; END $$`)
		second := b.ordered(t, "b", 1)
		b.insert(t, second)
		rows, cur = b.laneRound(t, token, cur, deleteAll(t, token))
		wantIDs(t, "the second round", rows, second)
		if err := open.Commit(); err != nil {
			t.Fatal(err)
		}
		rows, _ = b.laneRound(t, token, cur, nil)
		wantIDs(t, "a read once the writer committed", rows, late)
	})
}

// TestLaneProbeFromACursor probes a lane from the cursor a round left: a row
// the cursor's snapshot saw at or below it counts as gone, as it does for a
// read, and a row that commits later with a lower id makes the lane ready.
func TestLaneProbeFromACursor(t *testing.T) {
	t.Parallel()
	eachDriver(t, func(t *testing.T, b *bundle) {
		ctx := context.Background()
		token := uuid.New()
		late := b.ordered(t, "a", 1) // a lower id than first's, committed after the round
		first, kept := b.ordered(t, "a", 1), b.ordered(t, "b", 1)
		b.insert(t, first, kept)
		open, st := b.begin(t, nil)
		defer func() { _ = open.Rollback() }()
		if err := st.Insert(ctx, []relayer.Message{late}); err != nil {
			t.Fatal(err)
		}
		// The round says both rows are gone but leaves kept in place.
		rows, cur := b.laneRound(t, token, workerstore.NewLaneCursor(0), func(st *workerstore.Store, rows []store.Row) (int, time.Time) {
			deleteAll(t, token)(st, rows[:1])
			return len(rows), time.Time{}
		})
		wantIDs(t, "the round", rows, first, kept)
		probe := func(what string, from workerstore.LaneCursor, want ...int) {
			t.Helper()
			got, err := b.store.ProbeLanes(ctx, []workerstore.LaneCursor{from}, token)
			if err != nil {
				t.Fatalf("%s: %v", what, err)
			}
			if !slices.Equal(got, want) {
				t.Errorf("%s found lanes %v ready, want %v", what, got, want)
			}
		}
		probe("a probe from the cursor", cur)
		probe("a probe from the lane's start", workerstore.NewLaneCursor(0), 0)
		if err := open.Commit(); err != nil {
			t.Fatal(err)
		}
		probe("a probe from the cursor once a lower id committed", cur, 0)
	})
}
