package relayerbun_test

import (
	"context"
	"database/sql"
	"testing"

	"github.com/uptrace/bun"
	"github.com/uptrace/bun/dialect/pgdialect"

	"github.com/relayer-go/relayer"
	"github.com/relayer-go/relayer/consume"
	"github.com/relayer-go/relayer/enlist"
	relayerbun "github.com/relayer-go/relayer/enlist/bun"
	"github.com/relayer-go/relayer/enlist/internal/consumelayer"
	"github.com/relayer-go/relayer/store"
)

// consumerTx is a consumer's bun.Tx as the scenarios use it.
type consumerTx struct{ tx bun.Tx }

func (c consumerTx) Exec(ctx context.Context, query string, args ...any) error {
	_, err := c.tx.Tx.ExecContext(ctx, query, args...) // $n placeholders: the *sql.Tx's
	return err
}

func (c consumerTx) Publish(ctx context.Context, msg any) error {
	return relayerbun.Publish(ctx, c.tx, msg)
}

func TestConsumer(t *testing.T) {
	t.Parallel()
	consumelayer.Run(t, consumelayer.Layer{
		Driver: "pgx",
		Consumer: func(t *testing.T, db *sql.DB, tables store.Tables, w *enlist.Writer, h consumelayer.Handler) *consume.Consumer {
			bdb := bun.NewDB(db, pgdialect.New())
			if w != nil {
				bdb = bdb.WithQueryHook(relayerbun.NewHook(w))
			}
			c, err := relayerbun.NewConsumer(bdb, func(ctx context.Context, tx bun.Tx, m *relayer.Message) error {
				return h(ctx, consumerTx{tx: tx}, m)
			}, consume.Options{Name: "billing", Tables: tables})
			if err != nil {
				t.Fatal(err)
			}
			return c
		},
	})
}
