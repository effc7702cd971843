package relayersqlx_test

import (
	"context"
	"database/sql"
	"fmt"
	"testing"

	"github.com/jmoiron/sqlx"

	"github.com/relayer-go/relayer"
	"github.com/relayer-go/relayer/enlist"
	"github.com/relayer-go/relayer/enlist/enlisttest"
	relayersqlx "github.com/relayer-go/relayer/enlist/sqlx"
	"github.com/relayer-go/relayer/internal/testkit/testdb"
	"github.com/relayer-go/relayer/store"
)

func TestMain(m *testing.M) { testdb.Main(m) }

type entry struct {
	db *sqlx.DB
	w  *relayersqlx.Writer
}

type tx struct {
	tx *relayersqlx.Tx
}

func (e entry) Begin(ctx context.Context) (enlisttest.Tx, error) {
	t, err := e.w.Beginx(ctx, e.db, nil)
	return tx{tx: t}, err
}

func (e entry) RunInTx(ctx context.Context, fn func(context.Context, enlisttest.Tx) error) error {
	return e.w.RunInTx(ctx, e.db, nil, func(t *relayersqlx.Tx) error {
		return fn(ctx, tx{tx: t})
	})
}

func (t tx) Exec(ctx context.Context, query string) error {
	// Through sqlx's own API, to show it keeps working on the wrapper.
	_, err := t.tx.NamedExecContext(ctx, query, map[string]any{})
	return err
}

func (t tx) Publish(ctx context.Context, msgs ...relayer.Outgoing) error {
	return t.tx.PublishAll(ctx, msgs...)
}

func (t tx) Nested(ctx context.Context, fn func(context.Context, enlisttest.Tx) error) error {
	return enlisttest.Savepoint(ctx, t.tx, func(ctx context.Context) error { return fn(ctx, t) })
}

func (t tx) Commit() error   { return t.tx.Commit() }
func (t tx) Rollback() error { return t.tx.Rollback() }

func TestConformance(t *testing.T) {
	t.Parallel()
	for _, driver := range testdb.Drivers() {
		t.Run(driver, func(t *testing.T) {
			t.Parallel()
			enlisttest.Run(t, enlisttest.Adapter{
				Driver: driver,
				Open: func(t *testing.T, db *sql.DB, w *enlist.Writer) enlisttest.EntryPoint {
					return entry{db: sqlx.NewDb(db, driver), w: relayersqlx.NewWriter(w)}
				},
			})
		})
	}
}

// TestSqlxMethodsKeepTheirMeaning uses sqlx's struct scanning and named queries
// on the wrapper inside a publishing transaction.
func TestSqlxMethodsKeepTheirMeaning(t *testing.T) {
	t.Parallel()
	db := sqlx.NewDb(testdb.Open(t, "pgx"), "pgx")
	schema := testdb.NewSchema(t)
	ctx := context.Background()
	db.MustExec(`CREATE TABLE "` + schema + `".customers (id bigint PRIMARY KEY, name text NOT NULL)`)
	var routes relayer.Routes
	_ = relayer.AddType[enlisttest.Placed](&routes, relayer.Route{Transport: "mem", Destination: "d"})
	ew, err := enlist.NewWriter(relayer.Outbox{Schema: schema, Routes: &routes}, enlist.Options{})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := store.Migrate(ctx, db.DB, store.Tables{Schema: schema}); err != nil {
		t.Fatal(err)
	}
	type customer struct {
		ID   int64  `db:"id"`
		Name string `db:"name"`
	}
	w := relayersqlx.NewWriter(ew)
	err = w.RunInTx(ctx, db, nil, func(tx *relayersqlx.Tx) error {
		if _, err := tx.NamedExecContext(ctx, `INSERT INTO "`+schema+`".customers (id, name) VALUES (:id, :name)`, customer{1, "Ada"}); err != nil {
			return err
		}
		var got customer
		if err := tx.GetContext(ctx, &got, tx.Rebind(`SELECT id, name FROM "`+schema+`".customers WHERE id = ?`), 1); err != nil {
			return err
		}
		if got.Name != "Ada" {
			return fmt.Errorf("read back %+v", got)
		}
		return tx.Publish(ctx, enlisttest.Placed{N: 1})
	})
	if err != nil {
		t.Fatal(err)
	}
	var n int
	if err := db.GetContext(ctx, &n, `SELECT count(*) FROM "`+schema+`".outbox`); err != nil || n != 1 {
		t.Errorf("outbox rows = %d, %v; want 1", n, err)
	}
}
