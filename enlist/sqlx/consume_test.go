package relayersqlx_test

import (
	"context"
	"database/sql"
	"testing"

	"github.com/jmoiron/sqlx"

	"github.com/relayer-go/relayer"
	"github.com/relayer-go/relayer/consume"
	"github.com/relayer-go/relayer/enlist"
	"github.com/relayer-go/relayer/enlist/internal/consumelayer"
	relayersqlx "github.com/relayer-go/relayer/enlist/sqlx"
	"github.com/relayer-go/relayer/store"
)

// consumerTx is a consumer's *sqlx.Tx, or Writer's *Tx, as the scenarios
// use it.
type consumerTx struct {
	tx  *sqlx.Tx
	out *relayersqlx.Tx
}

func (c consumerTx) Exec(ctx context.Context, query string, args ...any) error {
	_, err := c.tx.ExecContext(ctx, query, args...)
	return err
}

func (c consumerTx) Publish(ctx context.Context, msg any) error {
	if c.out == nil {
		return consume.ErrNoWriter
	}
	return c.out.Publish(ctx, msg)
}

func TestConsumer(t *testing.T) {
	t.Parallel()
	consumelayer.Run(t, consumelayer.Layer{
		Driver: "pgx",
		Consumer: func(t *testing.T, db *sql.DB, tables store.Tables, w *enlist.Writer, h consumelayer.Handler) *consume.Consumer {
			xdb := sqlx.NewDb(db, "pgx")
			opts := consume.Options{Name: "billing", Tables: tables}
			var c *consume.Consumer
			var err error
			if w == nil {
				c, err = relayersqlx.NewConsumer(xdb, func(ctx context.Context, tx *sqlx.Tx, m *relayer.Message) error {
					return h(ctx, consumerTx{tx: tx}, m)
				}, opts)
			} else {
				c, err = relayersqlx.NewWriter(w).NewConsumer(xdb, func(ctx context.Context, tx *relayersqlx.Tx, m *relayer.Message) error {
					return h(ctx, consumerTx{tx: tx.Tx, out: tx}, m)
				}, opts)
			}
			if err != nil {
				t.Fatal(err)
			}
			return c
		},
	})
}
