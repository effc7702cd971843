package relayersqlx_test

import (
	"context"
	"log"

	_ "github.com/jackc/pgx/v5/stdlib"
	"github.com/jmoiron/sqlx"

	"github.com/relayer-go/relayer"
	"github.com/relayer-go/relayer/enlist"
	relayersqlx "github.com/relayer-go/relayer/enlist/sqlx"
)

// OrderShipped is a message the example publishes.
type OrderShipped struct {
	OrderID string `db:"order_id"`
}

// MessageType names the type on the wire.
func (OrderShipped) MessageType() string { return "orders.OrderShipped" }

// Example publishes inside a sqlx transaction: named statements and the
// message commit together.
func Example() {
	ctx := context.Background()
	db := sqlx.MustOpen("pgx", "postgres://localhost/orders")
	var routes relayer.Routes
	if err := relayer.AddType[OrderShipped](&routes, relayer.Route{Transport: "nats", Destination: "orders.shipped"}); err != nil {
		log.Fatal(err)
	}
	writer, err := enlist.NewWriter(relayer.Outbox{Schema: "messaging", Routes: &routes}, enlist.Options{})
	if err != nil {
		log.Fatal(err)
	}
	w := relayersqlx.NewWriter(writer)
	shipped := OrderShipped{OrderID: "o-42"}
	err = w.RunInTx(ctx, db, nil, func(tx *relayersqlx.Tx) error {
		if _, err := tx.NamedExecContext(ctx, `UPDATE orders SET shipped = true WHERE id = :order_id`, shipped); err != nil {
			return err
		}
		return tx.Publish(ctx, shipped, relayer.Key(shipped.OrderID))
	})
	if err != nil {
		log.Fatal(err)
	}
}
