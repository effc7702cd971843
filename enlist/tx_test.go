package enlist_test

import (
	"context"
	"database/sql"
	"testing"

	"github.com/relayer-go/relayer"
	"github.com/relayer-go/relayer/enlist"
	"github.com/relayer-go/relayer/enlist/enlisttest"
	"github.com/relayer-go/relayer/internal/testdb"
)

func TestMain(m *testing.M) { testdb.Main(m) }

// sqlEntry is the raw *sql.Tx entry point under the conformance suite.
type sqlEntry struct {
	db *sql.DB
	w  *enlist.Writer
}

type sqlTx struct {
	tx *enlist.Tx
}

func (e sqlEntry) Begin(ctx context.Context) (enlisttest.Tx, error) {
	tx, err := e.w.Begin(ctx, e.db, nil)
	if err != nil {
		return nil, err
	}
	return sqlTx{tx: tx}, nil
}

func (e sqlEntry) RunInTx(ctx context.Context, fn func(context.Context, enlisttest.Tx) error) error {
	return e.w.RunInTx(ctx, e.db, nil, func(tx *enlist.Tx) error {
		return fn(ctx, sqlTx{tx: tx})
	})
}

func (t sqlTx) Exec(ctx context.Context, query string) error {
	_, err := t.tx.ExecContext(ctx, query)
	return err
}

func (t sqlTx) Publish(ctx context.Context, msgs ...relayer.Outgoing) error {
	if len(msgs) == 1 {
		return t.tx.Publish(ctx, msgs[0].Message, func(o *relayer.Outgoing) { *o = msgs[0] })
	}
	return t.tx.PublishAll(ctx, msgs...)
}

func (t sqlTx) Nested(ctx context.Context, fn func(context.Context, enlisttest.Tx) error) error {
	return enlisttest.Savepoint(ctx, t.tx, func(ctx context.Context) error { return fn(ctx, t) })
}

func (t sqlTx) Commit() error   { return t.tx.Commit() }
func (t sqlTx) Rollback() error { return t.tx.Rollback() }

func TestConformance(t *testing.T) {
	t.Parallel()
	for _, driver := range testdb.Drivers {
		t.Run(driver, func(t *testing.T) {
			t.Parallel()
			enlisttest.Run(t, enlisttest.Adapter{
				Driver: driver,
				Open: func(t *testing.T, db *sql.DB, w *enlist.Writer) enlisttest.EntryPoint {
					return sqlEntry{db: db, w: w}
				},
			})
		})
	}
}
