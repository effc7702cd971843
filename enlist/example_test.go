package enlist_test

import (
	"context"
	"database/sql"
	"log"

	_ "github.com/jackc/pgx/v5/stdlib"

	"github.com/relayer-go/relayer"
	"github.com/relayer-go/relayer/enlist"
)

// InvoiceIssued is a message the examples publish.
type InvoiceIssued struct{ InvoiceID string }

// MessageType names the type on the wire.
func (InvoiceIssued) MessageType() string { return "billing.InvoiceIssued" }

// exampleWriter is the writer of an outbox with one route; a service also
// gives it its runner as listener (dispatch.NewRunner), so that commits reach
// direct dispatch.
func exampleWriter() *enlist.Writer {
	var routes relayer.Routes
	if err := relayer.AddType[InvoiceIssued](&routes, relayer.Route{Transport: "nats", Destination: "billing.invoices"}); err != nil {
		log.Fatal(err)
	}
	w, err := enlist.NewWriter(relayer.Outbox{Schema: "messaging", Routes: &routes}, enlist.Options{})
	if err != nil {
		log.Fatal(err)
	}
	return w
}

// RunInTx owns the transaction: the business row and the message commit
// together, and the listener hears of the message after the commit.
func ExampleWriter_RunInTx() {
	ctx := context.Background()
	db, err := sql.Open("pgx", "postgres://localhost/billing")
	if err != nil {
		log.Fatal(err)
	}
	w := exampleWriter()
	err = w.RunInTx(ctx, db, nil, func(tx *enlist.Tx) error {
		if _, err := tx.ExecContext(ctx, `INSERT INTO invoices (id) VALUES ($1)`, "inv-1"); err != nil {
			return err
		}
		return tx.Publish(ctx, InvoiceIssued{InvoiceID: "inv-1"}, relayer.Key("customer-7"))
	})
	if err != nil {
		log.Fatal(err)
	}
}

// Wrap adopts a transaction begun elsewhere; commit it through the wrapper,
// not the *sql.Tx, so that the listener is told.
func ExampleWriter_Wrap() {
	ctx := context.Background()
	db, err := sql.Open("pgx", "postgres://localhost/billing")
	if err != nil {
		log.Fatal(err)
	}
	sqlTx, err := db.BeginTx(ctx, nil)
	if err != nil {
		log.Fatal(err)
	}
	tx := exampleWriter().Wrap(sqlTx)
	defer tx.Rollback() // after Commit, a no-op
	if err := tx.Publish(ctx, InvoiceIssued{InvoiceID: "inv-2"}); err != nil {
		log.Fatal(err)
	}
	if err := tx.Commit(); err != nil {
		log.Fatal(err)
	}
}
