package relayerbun_test

import (
	"bytes"
	"context"
	"database/sql"
	"errors"
	"runtime"
	"slices"
	"testing"
	"time"
	"weak"

	"github.com/google/uuid"
	"github.com/uptrace/bun"
	"github.com/uptrace/bun/dialect/pgdialect"

	"github.com/relayer-go/relayer"
	"github.com/relayer-go/relayer/enlist"
	relayerbun "github.com/relayer-go/relayer/enlist/bun"
	"github.com/relayer-go/relayer/enlist/enlisttest"
	"github.com/relayer-go/relayer/internal/testkit"
	"github.com/relayer-go/relayer/internal/testkit/testdb"
	"github.com/relayer-go/relayer/store"
)

// bundle is one test's outbox, writer and hooked bun.DB.
type bundle struct {
	t      *testing.T
	sqldb  *sql.DB
	db     *bun.DB
	schema string
	store  *store.Store
	rec    *enlisttest.Recorder
	writer *enlist.Writer
}

func setup(t *testing.T) *bundle {
	t.Helper()
	sqldb := testdb.Open(t, "pgx")
	schema := testdb.NewSchema(t)
	opts := store.Tables{Schema: schema}
	ctx := context.Background()
	if _, err := store.Migrate(ctx, sqldb, opts); err != nil {
		t.Fatal(err)
	}
	st, err := store.New(sqldb, opts)
	if err != nil {
		t.Fatal(err)
	}
	rec := &enlisttest.Recorder{Opts: st.Tables()}
	w, err := enlist.NewWriter(relayer.Outbox{Schema: schema, Routes: mustRoutes(t)}, enlist.Options{Listener: rec})
	if err != nil {
		t.Fatal(err)
	}
	db := bun.NewDB(sqldb, pgdialect.New()).WithQueryHook(relayerbun.NewHook(w))
	return &bundle{t: t, sqldb: sqldb, db: db, schema: schema, store: st, rec: rec, writer: w}
}

func mustRoutes(t *testing.T) *relayer.Routes {
	var routes relayer.Routes
	if err := relayer.AddType[enlisttest.Placed](&routes, relayer.Route{Transport: "mem", Destination: "placed"}); err != nil {
		t.Fatal(err)
	}
	return &routes
}

func (b *bundle) storedIDs() []uuid.UUID {
	b.t.Helper()
	rows, err := b.store.ReadUnordered(context.Background(), nil, store.ReadOptions{Limit: 1000})
	if err != nil {
		b.t.Fatal(err)
	}
	ids := make([]uuid.UUID, len(rows))
	for i, r := range rows {
		ids[i] = r.ID
	}
	return sortIDs(ids)
}

func (b *bundle) stored() int { return len(b.storedIDs()) }

func (b *bundle) notified() int {
	n := 0
	for _, batch := range b.rec.Batches() {
		n += len(batch)
	}
	return n
}

// batches returns the ids of each notification, sorted within each.
func (b *bundle) batches() [][]uuid.UUID {
	var out [][]uuid.UUID
	for _, batch := range b.rec.Batches() {
		ids := make([]uuid.UUID, len(batch))
		for i, m := range batch {
			ids[i] = m.ID
		}
		out = append(out, sortIDs(ids))
	}
	return out
}

func sortIDs(ids []uuid.UUID) []uuid.UUID {
	slices.SortFunc(ids, func(a, b uuid.UUID) int { return bytes.Compare(a[:], b[:]) })
	return ids
}

func placed(n int) any { return enlisttest.Placed{N: n} }

// msgs returns n messages with fresh ids, and the ids sorted.
func msgs(n int) ([]relayer.Outgoing, []uuid.UUID) {
	out := make([]relayer.Outgoing, n)
	ids := make([]uuid.UUID, n)
	for i := range out {
		ids[i] = uuid.Must(relayer.NewID())
		out[i] = relayer.NewOutgoing(placed(i), relayer.WithID(ids[i]))
	}
	return out, sortIDs(slices.Clone(ids))
}

func TestNewHookNilWriterPanics(t *testing.T) {
	t.Parallel()
	defer func() {
		if recover() == nil {
			t.Error("NewHook(nil) did not panic")
		}
	}()
	relayerbun.NewHook(nil)
}

func TestZeroTx(t *testing.T) {
	t.Parallel()
	err := relayerbun.Publish(context.Background(), bun.Tx{}, placed(1))
	if !errors.Is(err, relayer.ErrNotInTransaction) {
		t.Errorf("Publish on a zero bun.Tx = %v, want ErrNotInTransaction", err)
	}
}

// TestStateReleased checks that every way a transaction ends releases its
// state and refuses later publishes.
func TestStateReleased(t *testing.T) {
	t.Parallel()
	b := setup(t)
	ctx := context.Background()
	if _, err := b.sqldb.ExecContext(ctx, `CREATE TABLE "`+b.schema+`".uniq (x int UNIQUE DEFERRABLE INITIALLY DEFERRED)`); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name     string
		end      func(tx bun.Tx) error
		notified int
	}{
		{"commit", func(tx bun.Tx) error { return tx.Commit() }, 1},
		{"rollback", func(tx bun.Tx) error { return tx.Rollback() }, 0},
		{"failed commit", func(tx bun.Tx) error {
			if _, err := tx.ExecContext(ctx, `INSERT INTO "`+b.schema+`".uniq VALUES (1), (1)`); err != nil {
				return err
			}
			if err := tx.Commit(); err == nil {
				return errors.New("commit with a deferred unique violation succeeded")
			}
			return nil
		}, 0},
	} {
		t.Run(tc.name, func(t *testing.T) {
			before := b.notified()
			tx, err := relayerbun.BeginTx(ctx, b.db, nil)
			if err != nil {
				t.Fatal(err)
			}
			if !relayerbun.Bound(tx.Tx) {
				t.Error("BeginTx did not register the transaction")
			}
			// Any context will do for a transaction of BeginTx.
			other, cancel := context.WithTimeout(context.Background(), time.Minute)
			defer cancel()
			if err := relayerbun.Publish(other, tx, placed(1)); err != nil {
				t.Fatal(err)
			}
			if err := tc.end(tx); err != nil {
				t.Fatal(err)
			}
			if relayerbun.Bound(tx.Tx) {
				t.Error("state still registered after the transaction ended")
			}
			if got := b.notified() - before; got != tc.notified {
				t.Errorf("notified %d rows, want %d", got, tc.notified)
			}
			if err := relayerbun.Publish(ctx, tx, placed(2)); !errors.Is(err, relayer.ErrNotInTransaction) {
				t.Errorf("Publish after the end = %v, want ErrNotInTransaction", err)
			}
			_ = tx.Rollback()
			if got := b.notified() - before; got != tc.notified {
				t.Errorf("notified %d rows after a late rollback, want %d", got, tc.notified)
			}
		})
	}
	if n := b.stored(); n != 1 {
		t.Errorf("stored %d rows, want the committed one", n)
	}

	t.Run("RunInTx", func(t *testing.T) {
		var (
			sqlTx *sql.Tx
			txCtx context.Context
			txBun bun.Tx
		)
		err := b.db.RunInTx(ctx, nil, func(ctx context.Context, tx bun.Tx) error {
			sqlTx, txCtx, txBun = tx.Tx, ctx, tx
			if relayerbun.Bound(tx.Tx) {
				t.Error("bound before the first publish")
			}
			if err := relayerbun.Publish(ctx, tx, placed(3)); err != nil {
				return err
			}
			if !relayerbun.Bound(tx.Tx) {
				t.Error("not bound after publishing")
			}
			return nil
		})
		if err != nil {
			t.Fatal(err)
		}
		if relayerbun.Bound(sqlTx) {
			t.Error("state still registered after the commit")
		}
		if err := relayerbun.Publish(txCtx, txBun, placed(4)); !errors.Is(err, relayer.ErrNotInTransaction) {
			t.Errorf("Publish with the callback's context after the commit = %v, want ErrNotInTransaction", err)
		}
		if n := b.stored(); n != 2 {
			t.Errorf("stored %d rows, want 2", n)
		}
	})
}

func TestFailedCommitNotifiesNothing(t *testing.T) {
	t.Parallel()
	b := setup(t)
	ctx := context.Background()
	if _, err := b.sqldb.ExecContext(ctx, `CREATE TABLE "`+b.schema+`".uniq (x int UNIQUE DEFERRABLE INITIALLY DEFERRED)`); err != nil {
		t.Fatal(err)
	}
	err := b.db.RunInTx(ctx, nil, func(ctx context.Context, tx bun.Tx) error {
		if _, err := tx.ExecContext(ctx, `INSERT INTO "`+b.schema+`".uniq VALUES (7), (7)`); err != nil {
			return err
		}
		return relayerbun.Publish(ctx, tx, placed(1))
	})
	if err == nil {
		t.Fatal("RunInTx with a deferred unique violation succeeded")
	}
	if n, s := b.notified(), b.stored(); n != 0 || s != 0 {
		t.Errorf("failed commit: %d rows notified, %d stored; want none", n, s)
	}
}

func TestSavepoints(t *testing.T) {
	t.Parallel()
	b := setup(t)
	ctx := context.Background()

	t.Run("savepoints of BeginTx publish with any context", func(t *testing.T) {
		before := b.notified()
		tx, err := relayerbun.BeginTx(ctx, b.db, nil)
		if err != nil {
			t.Fatal(err)
		}
		defer tx.Rollback()
		err = tx.RunInTx(context.Background(), nil, func(_ context.Context, sp bun.Tx) error {
			return relayerbun.Publish(context.Background(), sp, placed(1))
		})
		if err != nil {
			t.Fatal(err)
		}
		sp, err := tx.BeginTx(context.Background(), nil)
		if err != nil {
			t.Fatal(err)
		}
		if err := relayerbun.Publish(context.Background(), sp, placed(2)); err != nil {
			t.Fatal(err)
		}
		if err := sp.Commit(); err != nil {
			t.Fatal(err)
		}
		if n := b.notified() - before; n != 0 {
			t.Errorf("releasing savepoints notified %d rows", n)
		}
		if err := tx.Commit(); err != nil {
			t.Fatal(err)
		}
		if n := b.notified() - before; n != 2 {
			t.Errorf("commit notified %d rows, want 2", n)
		}
		if err := relayerbun.Publish(context.Background(), sp, placed(3)); !errors.Is(err, relayer.ErrNotInTransaction) {
			t.Errorf("Publish on a savepoint of a committed transaction = %v, want ErrNotInTransaction", err)
		}
	})

	t.Run("first publish in a savepoint of RunInTx", func(t *testing.T) {
		before := b.notified()
		err := b.db.RunInTx(ctx, nil, func(txctx context.Context, tx bun.Tx) error {
			// The savepoint's callback gets the transaction's context.
			err := tx.RunInTx(context.Background(), nil, func(ctx context.Context, sp bun.Tx) error {
				return relayerbun.Publish(ctx, sp, placed(1))
			})
			if err != nil {
				return err
			}
			// Now bound: a savepoint finds it with any context.
			sp, err := tx.BeginTx(context.Background(), nil)
			if err != nil {
				return err
			}
			if err := relayerbun.Publish(context.Background(), sp, placed(2)); err != nil {
				return err
			}
			return sp.Commit()
		})
		if err != nil {
			t.Fatal(err)
		}
		if n := b.notified() - before; n != 2 {
			t.Errorf("commit notified %d rows, want 2", n)
		}
	})

	t.Run("savepoint of a plain BeginTx", func(t *testing.T) {
		tx, err := b.db.BeginTx(ctx, nil)
		if err != nil {
			t.Fatal(err)
		}
		defer tx.Rollback()
		sp, err := tx.BeginTx(ctx, nil)
		if err != nil {
			t.Fatal(err)
		}
		if err := relayerbun.Publish(ctx, sp, placed(1)); !errors.Is(err, relayer.ErrNotInTransaction) {
			t.Errorf("Publish on a savepoint nothing leads from = %v, want ErrNotInTransaction", err)
		}
	})

	t.Run("released savepoint notifies nothing", func(t *testing.T) {
		before := b.notified()
		batches := len(b.rec.Batches())
		err := b.db.RunInTx(ctx, nil, func(ctx context.Context, tx bun.Tx) error {
			// Both levels of savepoint carry the transaction's context, so
			// their RELEASE is reported to the hook with the state in it.
			err := tx.RunInTx(ctx, nil, func(ctx context.Context, sp bun.Tx) error {
				if err := relayerbun.Publish(ctx, sp, placed(1)); err != nil {
					return err
				}
				return sp.RunInTx(ctx, nil, func(ctx context.Context, sp2 bun.Tx) error {
					return relayerbun.Publish(ctx, sp2, placed(2))
				})
			})
			if err != nil {
				return err
			}
			if n := b.notified() - before; n != 0 {
				t.Errorf("released savepoints notified %d rows before the commit", n)
			}
			return relayerbun.Publish(ctx, tx, placed(3))
		})
		if err != nil {
			t.Fatal(err)
		}
		if n, got := b.notified()-before, len(b.rec.Batches())-batches; n != 3 || got != 1 {
			t.Errorf("commit notified %d rows in %d batches, want 3 in 1", n, got)
		}
	})

	t.Run("rolled back savepoint", func(t *testing.T) {
		before, storedBefore := b.notified(), b.stored()
		err := b.db.RunInTx(ctx, nil, func(ctx context.Context, tx bun.Tx) error {
			err := tx.RunInTx(ctx, nil, func(ctx context.Context, sp bun.Tx) error {
				if err := relayerbun.Publish(ctx, sp, placed(1)); err != nil {
					return err
				}
				return errors.New("undo")
			})
			if err == nil {
				return errors.New("nested RunInTx lost its error")
			}
			return relayerbun.Publish(ctx, tx, placed(2))
		})
		if err != nil {
			t.Fatal(err)
		}
		if s := b.stored() - storedBefore; s != 1 {
			t.Errorf("stored %d rows, want the one outside the rolled-back savepoint", s)
		}
		if n := b.notified() - before; n < 1 || n > 2 {
			t.Errorf("notified %d rows, want the committed one and at most the rolled-back one", n)
		}
	})
}

func TestTwoWritersOnOneDB(t *testing.T) {
	t.Parallel()
	b := setup(t)
	ctx := context.Background()
	other, err := enlist.NewWriter(relayer.Outbox{Schema: b.schema, Routes: mustRoutes(t)}, enlist.Options{})
	if err != nil {
		t.Fatal(err)
	}
	db := b.db.WithQueryHook(relayerbun.NewHook(other))
	err = db.RunInTx(ctx, nil, func(ctx context.Context, tx bun.Tx) error {
		return relayerbun.Publish(ctx, tx, placed(1))
	})
	if !errors.Is(err, relayer.ErrNotInTransaction) {
		t.Errorf("Publish with two writers' hooks = %v, want ErrNotInTransaction", err)
	}
	if _, err := relayerbun.BeginTx(ctx, db, nil); !errors.Is(err, relayer.ErrNotInTransaction) {
		t.Errorf("BeginTx with two writers' hooks = %v, want ErrNotInTransaction", err)
	}
	if in := b.sqldb.Stats().InUse; in != 0 {
		t.Errorf("%d connections in use: the refused transaction was not rolled back", in)
	}

	// The same writer's hook twice is harmless: one notification.
	db = b.db.WithQueryHook(relayerbun.NewHook(b.writer))
	err = db.RunInTx(ctx, nil, func(ctx context.Context, tx bun.Tx) error {
		return relayerbun.Publish(ctx, tx, placed(2))
	})
	if err != nil {
		t.Fatal(err)
	}
	tx, err := relayerbun.BeginTx(ctx, db, nil)
	if err != nil {
		t.Fatal(err)
	}
	if err := relayerbun.Publish(ctx, tx, placed(3)); err != nil {
		t.Fatal(err)
	}
	if err := tx.Commit(); err != nil {
		t.Fatal(err)
	}
	if got, s := len(b.rec.Batches()), b.stored(); got != 2 || s != 2 {
		t.Errorf("%d notifications, %d rows; want 2 and 2", got, s)
	}
}

// TestAbandonedTransactionForgotten drops a transaction that published and
// never ended through bun: its registry entry goes with its *sql.Tx.
func TestAbandonedTransactionForgotten(t *testing.T) {
	t.Parallel()
	b := setup(t)
	ptr := func() weak.Pointer[sql.Tx] {
		ctx, cancel := context.WithCancel(context.Background())
		defer cancel() // database/sql rolls the transaction back
		tx, err := relayerbun.BeginTx(ctx, b.db, nil)
		if err != nil {
			t.Fatal(err)
		}
		if err := relayerbun.Publish(ctx, tx, placed(1)); err != nil {
			t.Fatal(err)
		}
		if !relayerbun.Bound(tx.Tx) {
			t.Fatal("not bound after publishing")
		}
		return weak.Make(tx.Tx)
	}()
	testkit.Eventually(t, 10*time.Second, func() bool { runtime.GC(); return !relayerbun.BoundWeak(ptr) },
		"the state of an abandoned transaction to be unregistered")
	if n := b.notified(); n != 0 {
		t.Errorf("abandoned transaction notified %d rows", n)
	}
}

// TestConcurrentPublishInOneTx publishes from several goroutines into one
// transaction: one begun by BeginTx, and one of RunInTx whose first publishes
// race to bind its state.
func TestConcurrentPublishInOneTx(t *testing.T) {
	t.Parallel()
	b := setup(t)
	ctx := context.Background()
	publish := func(ctx context.Context, tx bun.Tx) {
		errs := make(chan error, 8)
		for i := range 8 {
			go func() { errs <- relayerbun.Publish(ctx, tx, placed(i)) }()
		}
		for range 8 {
			if err := <-errs; err != nil {
				t.Error(err)
			}
		}
	}
	tx, err := relayerbun.BeginTx(ctx, b.db, nil)
	if err != nil {
		t.Fatal(err)
	}
	publish(ctx, tx)
	if err := tx.Commit(); err != nil {
		t.Fatal(err)
	}
	err = b.db.RunInTx(ctx, nil, func(ctx context.Context, tx bun.Tx) error {
		publish(ctx, tx)
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	batches := b.rec.Batches()
	if s := b.stored(); len(batches) != 2 || len(batches[0]) != 8 || len(batches[1]) != 8 || s != 16 {
		t.Errorf("%d notifications, %d rows stored; want 2 of 8 rows each, 16", len(batches), s)
	}
}

func TestInvalidMessage(t *testing.T) {
	t.Parallel()
	b := setup(t)
	err := b.db.RunInTx(context.Background(), nil, func(ctx context.Context, tx bun.Tx) error {
		return relayerbun.Publish(ctx, tx, enlisttest.Unrouted{})
	})
	if !errors.Is(err, relayer.ErrInvalidMessage) {
		t.Errorf("Publish of an unrouted type = %v, want ErrInvalidMessage", err)
	}
}

func TestConnTransaction(t *testing.T) {
	t.Parallel()
	b := setup(t)
	ctx := context.Background()
	conn, err := b.db.Conn(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	tx, err := relayerbun.BeginTx(ctx, conn, nil)
	if err != nil {
		t.Fatal(err)
	}
	if err := relayerbun.Publish(ctx, tx, placed(1)); err != nil {
		t.Fatal(err)
	}
	if err := tx.Commit(); err != nil {
		t.Fatal(err)
	}
	err = conn.RunInTx(ctx, nil, func(ctx context.Context, tx bun.Tx) error {
		return relayerbun.Publish(ctx, tx, placed(2))
	})
	if err != nil {
		t.Fatal(err)
	}
	if n, s, batches := b.notified(), b.stored(), len(b.rec.Batches()); n != 2 || s != 2 || batches != 2 {
		t.Errorf("%d rows notified in %d batches, %d stored; want 2 in 2, 2", n, batches, s)
	}
}
