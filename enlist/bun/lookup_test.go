package relayerbun_test

import (
	"context"
	"errors"
	"slices"
	"strings"
	"testing"

	"github.com/google/uuid"
	"github.com/uptrace/bun"
	"github.com/uptrace/bun/dialect/pgdialect"

	"github.com/relayer-go/relayer"
	relayerbun "github.com/relayer-go/relayer/enlist/bun"
)

// hint is how the error of a transaction Publish cannot find says to fix it.
const hint = "begin with relayerbun.BeginTx, or publish inside db.RunInTx with the context it passes"

// wantRefused checks that err is ErrNotInTransaction, and, if withHint, that
// it says how to fix it.
func wantRefused(t *testing.T, what string, err error, withHint bool) {
	t.Helper()
	if !errors.Is(err, relayer.ErrNotInTransaction) {
		t.Errorf("%s = %v, want ErrNotInTransaction", what, err)
		return
	}
	if withHint && !strings.Contains(err.Error(), hint) {
		t.Errorf("%s = %q, want the hint %q", what, err, hint)
	}
}

// TestPlainBeginTxRefused: a transaction begun by db.BeginTx, not through
// relayerbun, cannot be found from the caller's own context.
func TestPlainBeginTxRefused(t *testing.T) {
	t.Parallel()
	b := setup(t)
	ctx := context.Background()
	tx, err := b.db.BeginTx(ctx, nil)
	if err != nil {
		t.Fatal(err)
	}
	wantRefused(t, "Publish on a plain db.BeginTx", relayerbun.Publish(ctx, tx, placed(1)), true)
	wantRefused(t, "PublishAll on a plain db.BeginTx", relayerbun.PublishAll(ctx, tx, relayer.NewOutgoing(placed(2))), true)
	sp, err := tx.BeginTx(ctx, nil)
	if err != nil {
		t.Fatal(err)
	}
	wantRefused(t, "Publish on its savepoint", relayerbun.Publish(ctx, sp, placed(3)), true)
	if err := sp.Commit(); err != nil {
		t.Fatal(err)
	}
	if err := tx.Commit(); err != nil {
		t.Fatal(err)
	}
	if n, s := b.notified(), b.stored(); n != 0 || s != 0 {
		t.Errorf("%d rows notified, %d stored; want none", n, s)
	}
}

// TestRunInTxContext: the context db.RunInTx passes to its callback, and any
// context derived from it, leads to the transaction; once the transaction has
// published, any context does.
func TestRunInTxContext(t *testing.T) {
	t.Parallel()
	b := setup(t)
	out, ids := msgs(3)
	err := b.db.RunInTx(context.Background(), nil, func(ctx context.Context, tx bun.Tx) error {
		derived, cancel := context.WithCancel(ctx)
		defer cancel()
		if err := relayerbun.Publish(derived, tx, out[0].Message, relayer.WithID(out[0].ID)); err != nil {
			return err
		}
		if err := relayerbun.PublishAll(ctx, tx, out[1]); err != nil {
			return err
		}
		return relayerbun.PublishAll(context.Background(), tx, out[2])
	})
	if err != nil {
		t.Fatal(err)
	}
	if got := b.batches(); len(got) != 1 || !slices.Equal(got[0], ids) {
		t.Errorf("notified %v, want one batch of %v", got, ids)
	}
	if got := b.storedIDs(); !slices.Equal(got, ids) {
		t.Errorf("stored %v, want %v", got, ids)
	}
}

// TestBeginTxWithoutHook: BeginTx on a DB without the hook refuses, rolls its
// transaction back and leaves nothing behind.
func TestBeginTxWithoutHook(t *testing.T) {
	t.Parallel()
	b := setup(t)
	ctx := context.Background()
	conn, err := bun.NewDB(b.sqldb, pgdialect.New()).Conn(ctx)
	if err != nil {
		t.Fatal(err)
	}
	// Closed at the end only if its refused transaction has ended: Close
	// would wait for it forever.
	for _, tc := range []struct {
		name string
		db   bun.IDB
	}{
		{"no hooks", bun.NewDB(b.sqldb, pgdialect.New())},
		{"other hooks only", bun.NewDB(b.sqldb, pgdialect.New()).WithQueryHook(ctxHook{"other"})},
		{"conn without hooks", conn},
	} {
		t.Run(tc.name, func(t *testing.T) {
			tx, err := relayerbun.BeginTx(ctx, tc.db, nil)
			if !errors.Is(err, relayer.ErrNotInTransaction) || !strings.Contains(err.Error(), "relayerbun.NewHook") {
				t.Errorf("BeginTx without the hook = %v, want ErrNotInTransaction saying how to install the hook", err)
			}
			if tx.Tx != nil {
				t.Error("BeginTx returned a transaction with its error")
			}
		})
	}
	if in := b.sqldb.Stats().InUse; in != 1 { // the conn
		t.Errorf("%d connections in use, want the conn's: refused transactions were not rolled back", in)
	}
	// The conn's refused transaction has ended: two statements on it run in
	// two transactions.
	var xid [2]int64
	for i := range xid {
		if err := conn.QueryRowContext(ctx, "SELECT txid_current()").Scan(&xid[i]); err != nil {
			t.Fatal(err)
		}
	}
	if xid[0] == xid[1] {
		t.Error("the conn is still in the transaction BeginTx refused")
	} else {
		conn.Close()
	}

	t.Run("savepoint", func(t *testing.T) {
		tx, err := relayerbun.BeginTx(ctx, b.db, nil)
		if err != nil {
			t.Fatal(err)
		}
		defer tx.Rollback()
		if _, err := relayerbun.BeginTx(ctx, tx, nil); err == nil {
			t.Error("BeginTx on a bun.Tx succeeded")
		}
		if _, err := relayerbun.BeginTx(ctx, &tx, nil); err == nil {
			t.Error("BeginTx on a *bun.Tx succeeded")
		}
	})
	t.Run("nil", func(t *testing.T) {
		if _, err := relayerbun.BeginTx(ctx, nil, nil); err == nil {
			t.Error("BeginTx on nil succeeded")
		}
		if _, err := relayerbun.BeginTx(ctx, (*bun.DB)(nil), nil); err == nil {
			t.Error("BeginTx on a nil *bun.DB succeeded")
		}
	})
	t.Run("failed BEGIN", func(t *testing.T) {
		cancelled, cancel := context.WithCancel(ctx)
		cancel()
		if _, err := relayerbun.BeginTx(cancelled, b.db, nil); !errors.Is(err, context.Canceled) {
			t.Errorf("BeginTx with a cancelled context = %v, want context.Canceled", err)
		}
	})
	if n, s := b.notified(), b.stored(); n != 0 || s != 0 {
		t.Errorf("%d rows notified, %d stored; want none", n, s)
	}
}

// TestNoHook: a transaction of a DB without the hook is not taken for one of
// a DB with it.
func TestNoHook(t *testing.T) {
	t.Parallel()
	b := setup(t)
	ctx := context.Background()
	plain := bun.NewDB(b.sqldb, pgdialect.New())

	tx, err := plain.BeginTx(ctx, nil)
	if err != nil {
		t.Fatal(err)
	}
	wantRefused(t, "Publish on a DB without the hook", relayerbun.Publish(ctx, tx, placed(1)), true)
	_ = tx.Rollback()

	// A transaction of a DB without the hook, begun inside the callback of a
	// transaction of a DB with it, gets the outer context in its own callback.
	// Its DB has another dialect value, which tells the two apart.
	err = b.db.RunInTx(ctx, nil, func(ctx context.Context, outer bun.Tx) error {
		return plain.RunInTx(ctx, nil, func(ctx context.Context, inner bun.Tx) error {
			wantRefused(t, "Publish on an unhooked transaction inside a hooked one", relayerbun.Publish(ctx, inner, placed(2)), true)
			return nil
		})
	})
	if err != nil {
		t.Fatal(err)
	}
	if n, s := b.notified(), b.stored(); n != 0 || s != 0 {
		t.Errorf("%d rows notified, %d stored; want none", n, s)
	}
}

// TestIndependentInnerTransaction begins a second transaction inside the
// callback of a first one, with its context: each transaction's notification
// must hold exactly its own rows.
func TestIndependentInnerTransaction(t *testing.T) {
	t.Parallel()
	ctx := context.Background()

	// check runs an outer transaction that publishes outer and commits, with
	// inner(ctx, outerTx) run inside; it must publish the inner rows in a
	// transaction of its own that commits first.
	check := func(t *testing.T, b *bundle, inner func(ctx context.Context, outer bun.Tx, out []relayer.Outgoing) error) {
		t.Helper()
		outerMsgs, outerIDs := msgs(2)
		innerMsgs, innerIDs := msgs(3)
		err := b.db.RunInTx(ctx, nil, func(ctx context.Context, outer bun.Tx) error {
			if err := inner(ctx, outer, innerMsgs); err != nil {
				return err
			}
			if got := b.batches(); len(got) != 1 || !slices.Equal(got[0], innerIDs) {
				t.Errorf("inner commit notified %v, want exactly %v", got, innerIDs)
			}
			// The outer context still leads to the outer transaction.
			return relayerbun.PublishAll(ctx, outer, outerMsgs...)
		})
		if err != nil {
			t.Fatal(err)
		}
		want := [][]uuid.UUID{innerIDs, outerIDs}
		if got := b.batches(); !slices.EqualFunc(got, want, slices.Equal) {
			t.Errorf("notified %v, want %v", got, want)
		}
		if got, all := b.storedIDs(), sortIDs(append(slices.Clone(innerIDs), outerIDs...)); !slices.Equal(got, all) {
			t.Errorf("stored %v, want %v", got, all)
		}
	}

	t.Run("outer published first", func(t *testing.T) {
		t.Parallel()
		b := setup(t)
		outerMsgs, _ := msgs(1)
		innerMsgs, innerIDs := msgs(2)
		boom := errors.New("roll the outer transaction back")
		err := b.db.RunInTx(ctx, nil, func(ctx context.Context, outer bun.Tx) error {
			if err := relayerbun.PublishAll(ctx, outer, outerMsgs...); err != nil {
				return err
			}
			err := b.db.RunInTx(ctx, nil, func(ctx context.Context, inner bun.Tx) error {
				return relayerbun.PublishAll(ctx, inner, innerMsgs...)
			})
			if err != nil {
				return err
			}
			// The outer context is bound to the outer transaction: a plain
			// transaction begun with it is not taken for it.
			plain, err := b.db.BeginTx(ctx, nil)
			if err != nil {
				return err
			}
			wantRefused(t, "Publish on a plain transaction with a bound outer context", relayerbun.Publish(ctx, plain, placed(9)), true)
			if err := plain.Rollback(); err != nil {
				return err
			}
			if err := relayerbun.Publish(ctx, outer, placed(4)); err != nil {
				return err
			}
			return boom
		})
		if !errors.Is(err, boom) {
			t.Fatal(err)
		}
		if got := b.batches(); len(got) != 1 || !slices.Equal(got[0], innerIDs) {
			t.Errorf("notified %v, want only the inner transaction's %v", got, innerIDs)
		}
		if got := b.storedIDs(); !slices.Equal(got, innerIDs) {
			t.Errorf("stored %v, want the inner transaction's %v", got, innerIDs)
		}
	})

	t.Run("inner RunInTx published first", func(t *testing.T) {
		t.Parallel()
		b := setup(t)
		check(t, b, func(ctx context.Context, _ bun.Tx, out []relayer.Outgoing) error {
			return b.db.RunInTx(ctx, nil, func(ctx context.Context, inner bun.Tx) error {
				return relayerbun.PublishAll(ctx, inner, out...)
			})
		})
	})

	t.Run("inner BeginTx with the outer context", func(t *testing.T) {
		t.Parallel()
		b := setup(t)
		check(t, b, func(ctx context.Context, _ bun.Tx, out []relayer.Outgoing) error {
			inner, err := relayerbun.BeginTx(ctx, b.db, nil)
			if err != nil {
				return err
			}
			defer inner.Rollback()
			if err := relayerbun.PublishAll(ctx, inner, out...); err != nil {
				return err
			}
			return inner.Commit()
		})
	})

	t.Run("inner plain BeginTx with the outer context", func(t *testing.T) {
		t.Parallel()
		b := setup(t)
		check(t, b, func(ctx context.Context, outer bun.Tx, out []relayer.Outgoing) error {
			plain, err := b.db.BeginTx(ctx, nil)
			if err != nil {
				return err
			}
			defer plain.Rollback()
			// ctx leads to the outer transaction, which has not published
			// yet; plain was begun with ctx, and nothing tells the two
			// transactions apart: both are refused until plain ends.
			wantRefused(t, "Publish on a plain inner transaction", relayerbun.Publish(ctx, plain, placed(9)), false)
			wantRefused(t, "Publish on the outer transaction while a plain inner one is open", relayerbun.Publish(ctx, outer, placed(9)), false)
			if err := plain.Commit(); err != nil {
				return err
			}
			// The refused publishes wrote nothing; the inner rows go in a
			// transaction that can be found.
			return b.db.RunInTx(ctx, nil, func(ctx context.Context, inner bun.Tx) error {
				return relayerbun.PublishAll(ctx, inner, out...)
			})
		})
	})

	t.Run("failed inner BEGIN", func(t *testing.T) {
		t.Parallel()
		b := setup(t)
		check(t, b, func(ctx context.Context, _ bun.Tx, out []relayer.Outgoing) error {
			cancelled, cancel := context.WithCancel(ctx)
			cancel()
			if _, err := b.db.BeginTx(cancelled, nil); err == nil {
				return errors.New("BeginTx with a cancelled context succeeded")
			}
			return b.db.RunInTx(ctx, nil, func(ctx context.Context, inner bun.Tx) error {
				return relayerbun.PublishAll(ctx, inner, out...)
			})
		})
	})
}
