package relayersqlx_test

import (
	"context"
	"log"

	"github.com/google/uuid"
	_ "github.com/jackc/pgx/v5/stdlib"
	"github.com/jmoiron/sqlx"

	"github.com/relayer-go/relayer/inbox"
	"github.com/relayer-go/relayer/store"
)

// Example_inbox deduplicates a consumer's deliveries with the inbox, inside a
// *sqlx.Tx: the invoice and the inbox record commit together.
func Example_inbox() {
	db := sqlx.MustOpen("pgx", "postgres://localhost/billing")
	ib, err := inbox.New(store.Tables{Schema: "billing"})
	if err != nil {
		log.Fatal(err)
	}
	ctx := context.Background()
	messageID := uuid.MustParse("0190a000-0000-7000-8000-000000000001")
	tx, err := db.BeginTxx(ctx, nil)
	if err != nil {
		log.Fatal(err)
	}
	defer tx.Rollback()
	invoice := struct {
		OrderID string `db:"order_id"`
	}{OrderID: "o-42"}
	if _, err := ib.Handle(ctx, tx, "invoicing", messageID, func(ctx context.Context) error {
		_, err := tx.NamedExecContext(ctx, `INSERT INTO invoices (order_id) VALUES (:order_id)`, invoice)
		return err
	}); err != nil {
		log.Fatal(err)
	}
	if err := tx.Commit(); err != nil {
		log.Fatal(err)
	}
}
