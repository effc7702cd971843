package relayerbun_test

import (
	"context"
	"database/sql"
	"log"

	"github.com/uptrace/bun"
	"github.com/uptrace/bun/dialect/pgdialect"

	"github.com/relayer-go/relayer"
	"github.com/relayer-go/relayer/consume"
	relayerbun "github.com/relayer-go/relayer/enlist/bun"
	"github.com/relayer-go/relayer/store"
)

// Invoice is the billing service's model.
type Invoice struct {
	bun.BaseModel `bun:"table:invoices"`
	ID            int64
	OrderID       string
}

// A consumer whose handler inserts a model with bun, in the transaction
// that records the message in the inbox.
func ExampleNewConsumer() {
	sqldb, err := sql.Open("pgx", "postgres://localhost/billing")
	if err != nil {
		log.Fatal(err)
	}
	db := bun.NewDB(sqldb, pgdialect.New())
	c, err := relayerbun.NewConsumer(db, func(ctx context.Context, tx bun.Tx, m *relayer.Message) error {
		_, err := tx.NewInsert().Model(&Invoice{OrderID: string(m.Body)}).Exec(ctx)
		return err
	}, consume.Options{Name: "billing", Tables: store.Tables{Schema: "billing"}})
	if err != nil {
		log.Fatal(err)
	}
	_ = c // hand it to a broker's adapter: relayernats.Consume, relayerkafka.Consume, relayeramqp.Consume
}
