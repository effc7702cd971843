package relayersqlx_test

import (
	"context"
	"log"

	"github.com/jmoiron/sqlx"

	"github.com/relayer-go/relayer"
	"github.com/relayer-go/relayer/consume"
	relayersqlx "github.com/relayer-go/relayer/enlist/sqlx"
	"github.com/relayer-go/relayer/store"
)

// A consumer whose handler writes through sqlx's named statements, in the
// transaction that records the message in the inbox.
func ExampleNewConsumer() {
	db := sqlx.MustOpen("pgx", "postgres://localhost/billing")
	c, err := relayersqlx.NewConsumer(db, func(ctx context.Context, tx *sqlx.Tx, m *relayer.Message) error {
		_, err := tx.NamedExecContext(ctx, `INSERT INTO invoices (order_id) VALUES (:order_id)`,
			map[string]any{"order_id": string(m.Body)})
		return err
	}, consume.Options{Name: "billing", Tables: store.Tables{Schema: "billing"}})
	if err != nil {
		log.Fatal(err)
	}
	_ = c // hand it to a broker's adapter: relayernats.Consume, relayerkafka.Consume, relayeramqp.Consume
}
