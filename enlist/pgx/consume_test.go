package relayerpgx_test

import (
	"context"
	"database/sql"
	"errors"
	"strings"
	"testing"

	"github.com/jackc/pgx/v5"

	"github.com/relayer-go/relayer"
	"github.com/relayer-go/relayer/consume"
	"github.com/relayer-go/relayer/enlist"
	"github.com/relayer-go/relayer/enlist/internal/consumelayer"
	relayerpgx "github.com/relayer-go/relayer/enlist/pgx"
	"github.com/relayer-go/relayer/store"
)

// consumerTx is a consumer's pgx.Tx, or Writer's *Tx, as the scenarios use
// it.
type consumerTx struct {
	tx  pgx.Tx
	out *relayerpgx.Tx
}

func (c consumerTx) Exec(ctx context.Context, query string, args ...any) error {
	_, err := c.tx.Exec(ctx, query, args...)
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
		Consumer: func(t *testing.T, _ *sql.DB, tables store.Tables, w *enlist.Writer, h consumelayer.Handler) *consume.Consumer {
			pool := newPool(t)
			opts := consume.Options{Name: "billing", Tables: tables, TxOptions: &sql.TxOptions{Isolation: sql.LevelReadCommitted}}
			var c *consume.Consumer
			var err error
			if w == nil {
				c, err = relayerpgx.NewConsumer(pool, func(ctx context.Context, tx pgx.Tx, m *relayer.Message) error {
					return h(ctx, consumerTx{tx: tx}, m)
				}, opts)
			} else {
				c, err = relayerpgx.NewWriter(w).NewConsumer(pool, func(ctx context.Context, tx *relayerpgx.Tx, m *relayer.Message) error {
					return h(ctx, consumerTx{tx: tx, out: tx}, m)
				}, opts)
			}
			if err != nil {
				t.Fatal(err)
			}
			return c
		},
	})
}

// Isolation levels PostgreSQL lacks are refused when the consumer is made,
// naming the level.
func TestConsumerRefusesIsolationPostgreSQLLacks(t *testing.T) {
	t.Parallel()
	_, err := relayerpgx.NewConsumer(newPool(t), func(context.Context, pgx.Tx, *relayer.Message) error { return nil },
		consume.Options{Name: "billing", TxOptions: &sql.TxOptions{Isolation: sql.LevelSnapshot}})
	if !errors.Is(err, consume.ErrInvalidOptions) || !strings.Contains(err.Error(), "Snapshot") {
		t.Errorf("NewConsumer = %v, want ErrInvalidOptions naming the level", err)
	}
}
