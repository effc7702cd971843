package tests

import (
	"context"
	"database/sql"
	"errors"
	"strings"
	"testing"

	"github.com/google/uuid"
	"github.com/jmoiron/sqlx"
	"github.com/uptrace/bun"
	"github.com/uptrace/bun/dialect/pgdialect"
	"gorm.io/driver/postgres"
	"gorm.io/gorm"
	"gorm.io/gorm/logger"

	"github.com/relayer-go/relayer"
	"github.com/relayer-go/relayer/inbox"
	"github.com/relayer-go/relayer/internal/testdb"
	"github.com/relayer-go/relayer/store"
)

// The inbox with each data layer's transaction. These tests live here rather
// than beside the inbox so that the core module does not depend on sqlx, bun
// or GORM.

// bundle is one test's consumer database: the inbox and a counters table the
// handlers write to, in a schema of its own.
type bundle struct {
	db       *sql.DB
	driver   string
	inbox    *inbox.Inbox
	counters string
}

func setup(t *testing.T, driver string) *bundle {
	t.Helper()
	db := testdb.Open(t, driver)
	opts := store.Options{Schema: testdb.NewSchema(t), TablePrefix: "ib_"}
	if _, err := store.Migrate(context.Background(), db, opts); err != nil {
		t.Fatal(err)
	}
	ib, err := inbox.New(opts)
	if err != nil {
		t.Fatal(err)
	}
	b := &bundle{db: db, driver: driver, inbox: ib, counters: `"` + opts.Schema + `".counters`}
	if _, err := db.Exec(`CREATE TABLE ` + b.counters + ` (id text PRIMARY KEY, n integer NOT NULL)`); err != nil {
		t.Fatal(err)
	}
	return b
}

// eachDriver runs f per database/sql driver in parallel subtests.
func eachDriver(t *testing.T, f func(t *testing.T, b *bundle)) {
	t.Helper()
	for _, driver := range testdb.Drivers {
		t.Run(driver, func(t *testing.T) {
			t.Parallel()
			f(t, setup(t, driver))
		})
	}
}

func newID(t *testing.T) uuid.UUID {
	t.Helper()
	id, err := relayer.NewID()
	if err != nil {
		t.Fatal(err)
	}
	return id
}

// increment is the handlers' business write: one more on counter key, in q.
func (b *bundle) increment(ctx context.Context, q store.DBTX, key string) error {
	_, err := q.ExecContext(ctx, `INSERT INTO `+b.counters+` (id, n) VALUES ($1, 1)
ON CONFLICT (id) DO UPDATE SET n = counters.n + 1`, key)
	return err
}

func (b *bundle) count(t *testing.T, key string) int {
	t.Helper()
	var n int
	err := b.db.QueryRow(`SELECT n FROM `+b.counters+` WHERE id = $1`, key).Scan(&n)
	if err != nil && !errors.Is(err, sql.ErrNoRows) {
		t.Fatal(err)
	}
	return n
}

// The data layers' values that are not a transaction are refused by name.
func TestInboxRefusesDataLayerValuesOutsideTransactions(t *testing.T) {
	t.Parallel()
	b := setup(t, "pgx")
	ctx := context.Background()
	bunDB := bun.NewDB(b.db, pgdialect.New())
	bunTx, err := bunDB.BeginTx(ctx, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer bunTx.Rollback()
	gormDB := openGORM(t, b.db, false)
	handler := func(context.Context) error { t.Error("a handler ran for an invalid call"); return nil }
	id := newID(t)
	for _, c := range []struct {
		name    string
		q       store.DBTX
		mention string
	}{
		{"*sqlx.DB", sqlx.NewDb(b.db, "pgx"), "*sqlx.DB"},
		{"bun.Tx", bunTx, "tx.Tx"},
		{"*bun.DB", bunDB, "bun.DB"},
		{"GORM pool outside a transaction", gormDB.Statement.ConnPool, "begins transactions"},
	} {
		handled, err := b.inbox.Handle(ctx, c.q, "billing", id, handler)
		if handled || !errors.Is(err, store.ErrInvalidArgument) || !strings.Contains(err.Error(), c.mention) {
			t.Errorf("%s: Handle = %v, %v; want an error wrapping ErrInvalidArgument and mentioning %q", c.name, handled, err, c.mention)
		}
	}
}

func TestSQLXTransaction(t *testing.T) {
	t.Parallel()
	eachDriver(t, func(t *testing.T, b *bundle) {
		ctx := context.Background()
		db := sqlx.NewDb(b.db, b.driver)
		id := newID(t)
		for i, want := range []bool{true, false} {
			tx, err := db.BeginTxx(ctx, nil)
			if err != nil {
				t.Fatal(err)
			}
			handled, err := b.inbox.Handle(ctx, tx, "billing", id, func(ctx context.Context) error {
				return b.increment(ctx, tx, "billing")
			})
			if err != nil || handled != want {
				t.Errorf("delivery %d = %v, %v; want handled %v", i, handled, err, want)
			}
			if err := tx.Commit(); err != nil {
				t.Fatal(err)
			}
		}
		if n := b.count(t, "billing"); n != 1 {
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
			eachDriver(t, func(t *testing.T, b *bundle) {
				ctx := context.Background()
				db := openGORM(t, b.db, prepare)
				id := newID(t)
				boom := errors.New("boom")
				deliver := func(fail error) (handled bool, err error) {
					err = db.WithContext(ctx).Transaction(func(tx *gorm.DB) error {
						var herr error
						handled, herr = b.inbox.Handle(ctx, tx.Statement.ConnPool, "billing", id, func(ctx context.Context) error {
							if err := tx.Exec(`INSERT INTO `+b.counters+` (id, n) VALUES (?, 1)
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
				if n := b.count(t, "billing"); n != 1 {
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
	eachDriver(t, func(t *testing.T, b *bundle) {
		ctx := context.Background()
		db := bun.NewDB(b.db, pgdialect.New())
		id := newID(t)
		boom := errors.New("boom")
		deliver := func(fail error) (handled bool, err error) {
			err = db.RunInTx(ctx, nil, func(ctx context.Context, tx bun.Tx) error {
				var herr error
				handled, herr = b.inbox.Handle(ctx, tx.Tx, "billing", id, func(ctx context.Context) error {
					if _, err := tx.ExecContext(ctx, `INSERT INTO `+b.counters+` (id, n) VALUES (?, 1)
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
		if n := b.count(t, "billing"); n != 1 {
			t.Errorf("counter = %d, want 1", n)
		}
	})
}
