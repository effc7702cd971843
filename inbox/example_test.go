package inbox_test

import (
	"context"
	"database/sql"
	"log"

	_ "github.com/jackc/pgx/v5/stdlib"

	"github.com/relayer-go/relayer"
	"github.com/relayer-go/relayer/inbox"
	"github.com/relayer-go/relayer/store"
)

// consume stands for a broker client's subscription: a nil error from handle
// acknowledges the message, an error asks for redelivery.
func consume(handle func(ctx context.Context, msg *relayer.Message) error) {}

// Example handles each message once per consumer with a plain *sql.Tx: the
// invoice and the inbox record commit together.
func Example() {
	db, err := sql.Open("pgx", "postgres://localhost/billing")
	if err != nil {
		log.Fatal(err)
	}
	ib, err := inbox.New(store.Tables{Schema: "billing"})
	if err != nil {
		log.Fatal(err)
	}
	consume(func(ctx context.Context, msg *relayer.Message) error {
		tx, err := db.BeginTx(ctx, nil)
		if err != nil {
			return err
		}
		defer tx.Rollback()
		handled, err := ib.HandleMessage(ctx, tx, "invoicing", msg, func(ctx context.Context) error {
			_, err := tx.ExecContext(ctx, `INSERT INTO invoices (order_id) VALUES ($1)`, string(msg.Body))
			return err
		})
		if err != nil {
			return err // rolled back, record included; the broker redelivers
		}
		if err := tx.Commit(); err != nil {
			return err
		}
		if !handled {
			log.Printf("duplicate delivery of %s skipped", msg.ID)
		}
		return nil // acknowledge
	})
}

// The inbox with sqlx, bun and GORM: see the Example_inbox of relayersqlx,
// relayerbun and relayergorm.
