package relayerbun_test

import (
	"context"
	"database/sql"
	"testing"

	"github.com/uptrace/bun"
	"github.com/uptrace/bun/dialect/pgdialect"

	"github.com/relayer-go/relayer"
	"github.com/relayer-go/relayer/enlist"
	relayerbun "github.com/relayer-go/relayer/enlist/bun"
	"github.com/relayer-go/relayer/enlist/enlisttest"
	"github.com/relayer-go/relayer/internal/testkit/testdb"
)

func TestMain(m *testing.M) { testdb.Main(m) }

// bunEntry is bun under the conformance suite.
type bunEntry struct{ db *bun.DB }

type bunTx struct{ tx bun.Tx }

func (e bunEntry) Begin(ctx context.Context) (enlisttest.Tx, error) {
	tx, err := relayerbun.BeginTx(ctx, e.db, nil)
	if err != nil {
		return nil, err
	}
	return bunTx{tx}, nil
}

func (e bunEntry) RunInTx(ctx context.Context, fn func(context.Context, enlisttest.Tx) error) error {
	return e.db.RunInTx(ctx, nil, func(ctx context.Context, tx bun.Tx) error {
		return fn(ctx, bunTx{tx})
	})
}

func (t bunTx) Exec(ctx context.Context, query string) error {
	_, err := t.tx.ExecContext(ctx, query)
	return err
}

func (t bunTx) Publish(ctx context.Context, msgs ...relayer.Outgoing) error {
	if len(msgs) == 1 {
		return relayerbun.Publish(ctx, t.tx, msgs[0].Message, func(o *relayer.Outgoing) { *o = msgs[0] })
	}
	return relayerbun.PublishAll(ctx, t.tx, msgs...)
}

func (t bunTx) Nested(ctx context.Context, fn func(context.Context, enlisttest.Tx) error) error {
	return t.tx.RunInTx(ctx, nil, func(ctx context.Context, sp bun.Tx) error {
		return fn(ctx, bunTx{sp})
	})
}

func (t bunTx) Commit() error   { return t.tx.Commit() }
func (t bunTx) Rollback() error { return t.tx.Rollback() }

func TestConformance(t *testing.T) {
	t.Parallel()
	for _, driver := range testdb.Drivers() {
		t.Run(driver, func(t *testing.T) {
			t.Parallel()
			enlisttest.Run(t, enlisttest.Adapter{
				Driver: driver,
				Open: func(t *testing.T, db *sql.DB, w *enlist.Writer) enlisttest.EntryPoint {
					return bunEntry{db: bun.NewDB(db, pgdialect.New()).WithQueryHook(relayerbun.NewHook(w))}
				},
			})
		})
	}
}

// ctxHook wraps every query's context, as tracing hooks do; the suite must
// pass with such hooks on either side of relayerbun's.
type ctxHook struct{ name string }

type ctxHookKey struct{ name string }

func (h ctxHook) BeforeQuery(ctx context.Context, _ *bun.QueryEvent) context.Context {
	return context.WithValue(ctx, ctxHookKey(h), true)
}

func (h ctxHook) AfterQuery(ctx context.Context, _ *bun.QueryEvent) {
	if ctx.Value(ctxHookKey(h)) == nil {
		panic("AfterQuery got a context that BeforeQuery did not return")
	}
}

func TestConformanceAmongOtherHooks(t *testing.T) {
	t.Parallel()
	enlisttest.Run(t, enlisttest.Adapter{
		Open: func(t *testing.T, db *sql.DB, w *enlist.Writer) enlisttest.EntryPoint {
			bdb := bun.NewDB(db, pgdialect.New()).
				WithQueryHook(ctxHook{"before"}).
				WithQueryHook(relayerbun.NewHook(w)).
				WithQueryHook(ctxHook{"after"})
			return bunEntry{db: bdb}
		},
	})
}
