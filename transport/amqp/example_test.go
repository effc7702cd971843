package relayeramqp_test

import (
	"context"
	"database/sql"
	"fmt"
	"log"

	amqp "github.com/rabbitmq/amqp091-go"

	"github.com/relayer-go/relayer"
	"github.com/relayer-go/relayer/consume"
	"github.com/relayer-go/relayer/store"
	relayeramqp "github.com/relayer-go/relayer/transport/amqp"
)

// Orders are published to the "orders" exchange with the routing key
// "orders.placed"; a consumer binds its queue to that key.
func Example() {
	conn, err := amqp.Dial("amqp://guest:guest@localhost:5672/")
	if err != nil {
		log.Fatal(err)
	}
	defer conn.Close() // the connection is the application's

	rabbit, err := relayeramqp.New(conn, relayeramqp.Options{Exchange: "orders"})
	if err != nil {
		log.Fatal(err)
	}
	defer rabbit.Close() // closes the transport's channels only

	var routes relayer.Routes
	if err := routes.Add("orders.Placed", relayer.Route{
		Transport:   "rabbitmq",
		Destination: "orders.placed", // the routing key
		Ordered:     true,
	}); err != nil {
		log.Fatal(err)
	}
	outbox := relayer.Outbox{
		Routes:     &routes,
		Transports: map[string]relayer.Transport{"rabbitmq": rabbit},
	}
	_ = outbox // hand it to the writer and the dispatchers
}

// A consumer reads the relayer id and headers back from a delivery.
func ExampleHeaders() {
	d := amqp.Delivery{
		MessageId: "0190a5d2-6a4b-7c3e-9f10-2b3c4d5e6f70",
		Headers: amqp.Table{
			"content-type":        "application/json",
			"tag":                 []any{"a", "b"},
			"signature":           []byte{0xff, 0x00},
			relayeramqp.HeaderKey: "customer-42",
		},
	}
	id, err := relayeramqp.MessageID(d)
	fmt.Println(id, err)
	hs, err := relayeramqp.Headers(d.Headers)
	for _, h := range hs {
		fmt.Printf("%s=%q\n", h.Name, h.Value)
	}
	fmt.Println(err)
	// Output:
	// 0190a5d2-6a4b-7c3e-9f10-2b3c4d5e6f70 <nil>
	// content-type="application/json"
	// relayer-key="customer-42"
	// signature="\xff\x00"
	// tag="a"
	// tag="b"
	// <nil>
}

// A consumer reads a delivery back as the message the producer's outbox
// stored, also after it went through a retry queue.
func ExampleReceivedMessage() {
	d := amqp.Delivery{
		MessageId:  "0190a5d2-6a4b-7c3e-9f10-2b3c4d5e6f70",
		Type:       "orders.Placed",
		RoutingKey: "billing", // the queue's name, on the way back from a retry queue
		Headers: amqp.Table{
			"tag":                         "a",
			relayeramqp.HeaderKey:         "customer-42",
			relayeramqp.HeaderAttempts:    int64(1),
			relayeramqp.HeaderDestination: "orders.placed",
			"x-death":                     []any{amqp.Table{"reason": "expired"}},
		},
		Body: []byte(`{"order":"o-1"}`),
	}
	m, err := relayeramqp.ReceivedMessage(d)
	if err != nil {
		log.Fatal(err)
	}
	fmt.Println(m.ID, m.Type, m.Destination, m.Key, string(m.Body))
	for _, h := range m.Headers {
		fmt.Printf("%s=%q\n", h.Name, h.Value)
	}
	// Output:
	// 0190a5d2-6a4b-7c3e-9f10-2b3c4d5e6f70 orders.Placed orders.placed customer-42 {"order":"o-1"}
	// tag="a"
}

// OrderPlaced is the message the orders service's outbox publishes.
type OrderPlaced struct {
	Order string `json:"order"`
}

// MessageType names the message as the producer routes it.
func (OrderPlaced) MessageType() string { return "orders.OrderPlaced" }

// A service consumes the orders another service's outbox published, each
// once in effect: the handler's writes and the inbox record commit
// together, before RabbitMQ is acknowledged.
func ExampleConsume() {
	ctx := context.Background()
	db, err := sql.Open("pgx", "postgres://billing@db:5432/billing") // with pgx's stdlib driver imported
	if err != nil {
		log.Fatal(err)
	}
	conn, err := amqp.Dial("amqp://guest:guest@localhost:5672/")
	if err != nil {
		log.Fatal(err)
	}
	defer conn.Close()
	// The handler gets the body decoded; a message of another type, or whose
	// body does not decode, goes to the dead letters at once.
	c, err := consume.New(db, consume.Typed(func(ctx context.Context, tx *consume.Tx, _ *relayer.Message, o OrderPlaced) error {
		_, err := tx.ExecContext(ctx, `INSERT INTO invoices (order_id) VALUES ($1)`, o.Order)
		return err
	}), consume.Options{Name: "billing", Tables: store.Tables{Schema: "billing"}})
	if err != nil {
		log.Fatal(err)
	}
	// The queue "billing" is bound to the orders; dead letters go to the
	// queue "billing.dead" through the default exchange. Consume returns
	// when ctx ends, once the messages being handled committed and were
	// acknowledged, or when the connection closes: dial again and call it
	// again.
	if err := relayeramqp.Consume(ctx, c, conn, "billing", relayeramqp.ConsumeOptions{DeadLetterRoutingKey: "billing.dead"}); err != nil {
		log.Fatal(err)
	}
}
