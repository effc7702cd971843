package relayergorm_test

import (
	"context"
	"database/sql"
	"testing"

	"gorm.io/driver/postgres"
	"gorm.io/gorm"
	"gorm.io/gorm/logger"

	"github.com/relayer-go/relayer"
	"github.com/relayer-go/relayer/consume"
	"github.com/relayer-go/relayer/enlist"
	relayergorm "github.com/relayer-go/relayer/enlist/gorm"
	"github.com/relayer-go/relayer/enlist/internal/consumelayer"
	"github.com/relayer-go/relayer/store"
)

// consumerTx is a consumer's *gorm.DB transaction as the scenarios use it.
type consumerTx struct{ tx *gorm.DB }

func (c consumerTx) Exec(_ context.Context, query string, args ...any) error {
	return c.tx.Exec(query, args...).Error
}

func (c consumerTx) Publish(_ context.Context, msg any) error { return relayergorm.Publish(c.tx, msg) }

func TestConsumer(t *testing.T) {
	t.Parallel()
	consumelayer.Run(t, consumelayer.Layer{
		Driver: "pgx",
		Consumer: func(t *testing.T, db *sql.DB, tables store.Tables, w *enlist.Writer, h consumelayer.Handler) *consume.Consumer {
			var gdb *gorm.DB
			if w != nil {
				gdb = openGORM(t, db, w, gorm.Config{})
			} else {
				var err error
				if gdb, err = gorm.Open(postgres.New(postgres.Config{Conn: db}), &gorm.Config{Logger: logger.Discard}); err != nil {
					t.Fatal(err)
				}
			}
			c, err := relayergorm.NewConsumer(gdb, func(ctx context.Context, tx *gorm.DB, m *relayer.Message) error {
				return h(ctx, consumerTx{tx: tx}, m)
			}, consume.Options{Name: "billing", Tables: tables})
			if err != nil {
				t.Fatal(err)
			}
			return c
		},
	})
}
