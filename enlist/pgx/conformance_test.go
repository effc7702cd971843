package relayerpgx_test

import (
	"context"
	"database/sql"
	"sync"
	"testing"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/relayer-go/relayer"
	"github.com/relayer-go/relayer/enlist"
	"github.com/relayer-go/relayer/enlist/enlisttest"
	relayerpgx "github.com/relayer-go/relayer/enlist/pgx"
	"github.com/relayer-go/relayer/internal/testkit/testdb"
)

func TestMain(m *testing.M) { testdb.Main(m) }

// newPool opens a pool on the test database, closed when the test ends.
func newPool(t testing.TB) *pgxpool.Pool {
	t.Helper()
	cfg, err := pgxpool.ParseConfig(testdb.URL(t))
	if err != nil {
		t.Fatal(err)
	}
	cfg.MaxConns = 10
	pool, err := pgxpool.NewWithConfig(context.Background(), cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(pool.Close)
	return pool
}

// pgxEntry is pgx under the conformance suite, beginning on a pool or on
// one connection.
type pgxEntry struct {
	w  *relayerpgx.Writer
	db relayerpgx.TxBeginner
}

// pgxTx remembers the context its transaction began with: with pgx, the
// commit takes a context of its own, and a service passes the request's.
type pgxTx struct {
	ctx context.Context
	tx  *relayerpgx.Tx
}

func (e pgxEntry) Begin(ctx context.Context) (enlisttest.Tx, error) {
	tx, err := e.w.Begin(ctx, e.db, pgx.TxOptions{})
	if err != nil {
		return nil, err
	}
	return pgxTx{ctx, tx}, nil
}

func (e pgxEntry) RunInTx(ctx context.Context, fn func(context.Context, enlisttest.Tx) error) error {
	return e.w.RunInTx(ctx, e.db, pgx.TxOptions{}, func(tx *relayerpgx.Tx) error {
		return fn(ctx, pgxTx{ctx, tx})
	})
}

func (t pgxTx) Exec(ctx context.Context, query string) error {
	_, err := t.tx.Exec(ctx, query)
	return err
}

func (t pgxTx) Publish(ctx context.Context, msgs ...relayer.Outgoing) error {
	if len(msgs) == 1 {
		return t.tx.Publish(ctx, msgs[0].Message, func(o *relayer.Outgoing) { *o = msgs[0] })
	}
	return t.tx.PublishAll(ctx, msgs...)
}

// Nested goes through pgx.BeginFunc and the package-level PublishAll, as
// code that takes a pgx.Tx does.
func (t pgxTx) Nested(ctx context.Context, fn func(context.Context, enlisttest.Tx) error) error {
	return pgx.BeginFunc(ctx, t.tx, func(sp pgx.Tx) error {
		return fn(ctx, pgxTx{ctx, sp.(*relayerpgx.Tx)})
	})
}

func (t pgxTx) Commit() error   { return t.tx.Commit(t.ctx) }
func (t pgxTx) Rollback() error { return t.tx.Rollback(context.Background()) }

func TestConformance(t *testing.T) {
	t.Parallel()
	t.Run("pool", func(t *testing.T) {
		t.Parallel()
		enlisttest.Run(t, enlisttest.Adapter{
			Open: func(t *testing.T, _ *sql.DB, w *enlist.Writer) enlisttest.EntryPoint {
				return pgxEntry{w: relayerpgx.NewWriter(w), db: newPool(t)}
			},
		})
	})
	t.Run("conn", func(t *testing.T) {
		t.Parallel()
		enlisttest.Run(t, enlisttest.Adapter{
			Open: func(t *testing.T, _ *sql.DB, w *enlist.Writer) enlisttest.EntryPoint {
				conn, err := pgx.Connect(context.Background(), testdb.URL(t))
				if err != nil {
					t.Fatal(err)
				}
				t.Cleanup(func() { conn.Close(context.Background()) })
				return pgxEntry{w: relayerpgx.NewWriter(w), db: &lockedConn{conn: conn}}
			},
		})
	})
}

// lockedConn runs one transaction at a time on a *pgx.Conn, which is not
// safe for concurrent use, so that the suite's concurrent scenario can share
// it.
type lockedConn struct {
	mu   sync.Mutex
	conn *pgx.Conn
}

func (c *lockedConn) BeginTx(ctx context.Context, opts pgx.TxOptions) (pgx.Tx, error) {
	c.mu.Lock()
	tx, err := c.conn.BeginTx(ctx, opts)
	if err != nil {
		c.mu.Unlock()
		return nil, err
	}
	return &unlockingTx{Tx: tx, unlock: sync.OnceFunc(c.mu.Unlock)}, nil
}

type unlockingTx struct {
	pgx.Tx
	unlock func()
}

func (t *unlockingTx) Commit(ctx context.Context) error {
	defer t.unlock()
	return t.Tx.Commit(ctx)
}

func (t *unlockingTx) Rollback(ctx context.Context) error {
	defer t.unlock()
	return t.Tx.Rollback(ctx)
}
