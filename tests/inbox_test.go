package tests

import (
	"context"
	"database/sql"
	"errors"
	"strings"
	"testing"

	"github.com/jmoiron/sqlx"
	"github.com/uptrace/bun"
	"github.com/uptrace/bun/dialect/pgdialect"
	"gorm.io/driver/postgres"
	"gorm.io/gorm"
	"gorm.io/gorm/logger"

	"github.com/relayer-go/relayer/internal/testkit/inboxtest"
	"github.com/relayer-go/relayer/store"
)

// The inbox with each data layer's transaction. These tests live here rather
// than beside the inbox so that the core module does not depend on sqlx, bun
// or GORM.

// The data layers' values that are not a transaction are refused by name.
func TestInboxRefusesDataLayerValuesOutsideTransactions(t *testing.T) {
	t.Parallel()
	b := inboxtest.Setup(t, "pgx")
	ctx := context.Background()
	bunDB := bun.NewDB(b.DB, pgdialect.New())
	bunTx, err := bunDB.BeginTx(ctx, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer bunTx.Rollback()
	gormDB := openGORM(t, b.DB, false)
	handler := func(context.Context) error { t.Error("a handler ran for an invalid call"); return nil }
	id := inboxtest.NewID(t)
	for _, c := range []struct {
		name    string
		q       store.DBTX
		mention string
	}{
		{"*sqlx.DB", sqlx.NewDb(b.DB, "pgx"), "*sqlx.DB"},
		{"bun.Tx", bunTx, "tx.Tx"},
		{"*bun.DB", bunDB, "bun.DB"},
		{"GORM pool outside a transaction", gormDB.Statement.ConnPool, "begins transactions"},
	} {
		handled, err := b.Inbox.Handle(ctx, c.q, "billing", id, handler)
		if handled || !errors.Is(err, store.ErrInvalidArgument) || !strings.Contains(err.Error(), c.mention) {
			t.Errorf("%s: Handle = %v, %v; want an error wrapping ErrInvalidArgument and mentioning %q", c.name, handled, err, c.mention)
		}
	}
}

func TestSQLXTransaction(t *testing.T) {
	t.Parallel()
	inboxtest.EachDriver(t, func(t *testing.T, b *inboxtest.Bundle) {
		ctx := context.Background()
		db := sqlx.NewDb(b.DB, b.Driver)
		id := inboxtest.NewID(t)
		for i, want := range []bool{true, false} {
			tx, err := db.BeginTxx(ctx, nil)
			if err != nil {
				t.Fatal(err)
			}
			handled, err := b.Inbox.Handle(ctx, tx, "billing", id, func(ctx context.Context) error {
				return b.Increment(ctx, tx, "billing")
			})
			if err != nil || handled != want {
				t.Errorf("delivery %d = %v, %v; want handled %v", i, handled, err, want)
			}
			if err := tx.Commit(); err != nil {
				t.Fatal(err)
			}
		}
		if n := b.Count(t, "billing"); n != 1 {
			t.Errorf("counter = %d, want 1", n)
		}
	})
}

func openGORM(t *testing.T, db *sql.DB, prepareStmt bool) *gorm.DB {
	t.Helper()
	g, err := gorm.Open(postgres.New(postgres.Config{Conn: db}), &gorm.Config{
		PrepareStmt: prepareStmt,
		Logger:      logger.Discard,
	})
	if err != nil {
		t.Fatal(err)
	}
	return g
}

// TestGORMTransaction passes the transaction's ConnPool, with and without
// GORM's prepared-statement mode, where it is a *gorm.PreparedStmtTX.
func TestGORMTransaction(t *testing.T) {
	t.Parallel()
	for _, prepare := range []bool{false, true} {
		name := "default"
		if prepare {
			name = "PrepareStmt"
		}
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			inboxtest.EachDriver(t, func(t *testing.T, b *inboxtest.Bundle) {
				ctx := context.Background()
				db := openGORM(t, b.DB, prepare)
				id := inboxtest.NewID(t)
				boom := errors.New("boom")
				deliver := func(fail error) (handled bool, err error) {
					err = db.WithContext(ctx).Transaction(func(tx *gorm.DB) error {
						var herr error
						handled, herr = b.Inbox.Handle(ctx, tx.Statement.ConnPool, "billing", id, func(ctx context.Context) error {
							if err := tx.Exec(`INSERT INTO `+b.Counters+` (id, n) VALUES (?, 1)
ON CONFLICT (id) DO UPDATE SET n = counters.n + 1`, "billing").Error; err != nil {
								return err
							}
							return fail
						})
						return herr
					})
					return handled, err
				}
				if handled, err := deliver(boom); !errors.Is(err, boom) || !handled {
					t.Fatalf("failing delivery = %v, %v", handled, err)
				}
				for i, want := range []bool{true, false} {
					if handled, err := deliver(nil); err != nil || handled != want {
						t.Errorf("delivery %d = %v, %v; want handled %v", i, handled, err, want)
					}
				}
				if n := b.Count(t, "billing"); n != 1 {
					t.Errorf("counter = %d, want 1", n)
				}
			})
		})
	}
}

// TestBunTransaction passes the bun.Tx's embedded *sql.Tx; the handler writes
// through the bun.Tx itself, with bun's placeholders.
func TestBunTransaction(t *testing.T) {
	t.Parallel()
	inboxtest.EachDriver(t, func(t *testing.T, b *inboxtest.Bundle) {
		ctx := context.Background()
		db := bun.NewDB(b.DB, pgdialect.New())
		id := inboxtest.NewID(t)
		boom := errors.New("boom")
		deliver := func(fail error) (handled bool, err error) {
			err = db.RunInTx(ctx, nil, func(ctx context.Context, tx bun.Tx) error {
				var herr error
				handled, herr = b.Inbox.Handle(ctx, tx.Tx, "billing", id, func(ctx context.Context) error {
					if _, err := tx.ExecContext(ctx, `INSERT INTO `+b.Counters+` (id, n) VALUES (?, 1)
ON CONFLICT (id) DO UPDATE SET n = counters.n + 1`, "billing"); err != nil {
						return err
					}
					return fail
				})
				return herr
			})
			return handled, err
		}
		if handled, err := deliver(boom); !errors.Is(err, boom) || !handled {
			t.Fatalf("failing delivery = %v, %v", handled, err)
		}
		for i, want := range []bool{true, false} {
			if handled, err := deliver(nil); err != nil || handled != want {
				t.Errorf("delivery %d = %v, %v; want handled %v", i, handled, err, want)
			}
		}
		if n := b.Count(t, "billing"); n != 1 {
			t.Errorf("counter = %d, want 1", n)
		}
	})
}
