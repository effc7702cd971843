package relayerpgx_test

import (
	"context"
	"log"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/relayer-go/relayer"
	"github.com/relayer-go/relayer/consume"
	relayerpgx "github.com/relayer-go/relayer/enlist/pgx"
	"github.com/relayer-go/relayer/store"
)

// A consumer whose handler writes through pgx's native interface (or sqlc's
// queries on it), in the transaction that records the message in the
// inbox.
func ExampleNewConsumer() {
	pool, err := pgxpool.New(context.Background(), "postgres://localhost/billing")
	if err != nil {
		log.Fatal(err)
	}
	c, err := relayerpgx.NewConsumer(pool, func(ctx context.Context, tx pgx.Tx, m *relayer.Message) error {
		_, err := tx.Exec(ctx, `INSERT INTO invoices (order_id) VALUES ($1)`, string(m.Body))
		return err
	}, consume.Options{Name: "billing", Tables: store.Tables{Schema: "billing"}})
	if err != nil {
		log.Fatal(err)
	}
	_ = c // hand it to a broker's adapter: relayernats.Consume, relayerkafka.Consume, relayeramqp.Consume
}
