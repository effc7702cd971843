package relayernats_test

import (
	"context"
	"database/sql"
	"fmt"
	"log"
	"time"

	"github.com/google/uuid"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/relayer-go/relayer"
	"github.com/relayer-go/relayer/consume"
	"github.com/relayer-go/relayer/store"
	relayernats "github.com/relayer-go/relayer/transport/nats"
)

// A service connects, makes sure a stream with a deduplication window
// captures its subjects, and registers the transport with its outbox.
func Example() {
	ctx := context.Background()
	nc, err := nats.Connect(nats.DefaultURL)
	if err != nil {
		log.Fatal(err)
	}
	defer nc.Drain() // the application owns the connection

	// The async publish timeout drops acknowledgements that never come.
	js, err := jetstream.New(nc, jetstream.WithPublishAsyncTimeout(30*time.Second))
	if err != nil {
		log.Fatal(err)
	}
	if _, err := js.CreateOrUpdateStream(ctx, jetstream.StreamConfig{
		Name:       "ORDERS",
		Subjects:   []string{"orders.>"},
		Duplicates: 2 * time.Minute,
	}); err != nil {
		log.Fatal(err)
	}

	natsTransport, err := relayernats.New(js, relayernats.Options{Stream: "ORDERS"})
	if err != nil {
		log.Fatal(err)
	}
	var routes relayer.Routes
	outbox := relayer.Outbox{
		Routes:     &routes,
		Transports: map[string]relayer.Transport{"nats": natsTransport},
	}
	_ = outbox // hand it to the writer and the dispatchers
}

// A consumer reads the relayer id back, for example to deduplicate with the
// inbox package. Replays of an accepted message are dropped by the stream.
func ExampleMessageID() {
	ctx := context.Background()
	nc, err := nats.Connect(nats.DefaultURL)
	if err != nil {
		log.Fatal(err)
	}
	defer nc.Close()
	js, err := jetstream.New(nc)
	if err != nil {
		log.Fatal(err)
	}
	stream, err := js.CreateStream(ctx, jetstream.StreamConfig{Name: "ORDERS", Subjects: []string{"orders.>"}})
	if err != nil {
		log.Fatal(err)
	}
	tr, err := relayernats.New(js, relayernats.Options{})
	if err != nil {
		log.Fatal(err)
	}

	msg := &relayer.Message{
		ID:          uuid.MustParse("0190c5a4-5b6e-7c3d-8e9f-a0b1c2d3e4f5"),
		Type:        "orders.OrderPlaced",
		Body:        []byte(`{"order":42}`),
		Destination: "orders.placed",
	}
	for range 2 { // the second send is a replay and is stored no second time
		if err := tr.Send(ctx, msg); err != nil {
			log.Fatal(err)
		}
	}

	cons, err := stream.OrderedConsumer(ctx, jetstream.OrderedConsumerConfig{})
	if err != nil {
		log.Fatal(err)
	}
	got, err := cons.Next()
	if err != nil {
		log.Fatal(err)
	}
	id, err := relayernats.MessageID(got.Headers())
	if err != nil {
		log.Fatal(err)
	}
	info, err := stream.Info(ctx)
	if err != nil {
		log.Fatal(err)
	}
	fmt.Println(id, relayernats.MessageType(got.Headers()), string(got.Data()))
	fmt.Println("stored:", info.State.Msgs)
}

// OrderPlaced is the message the orders service's outbox publishes.
type OrderPlaced struct {
	Order string `json:"order"`
}

// MessageType names the message as the producer routes it.
func (OrderPlaced) MessageType() string { return "orders.OrderPlaced" }

// A service consumes the orders another service's outbox published, each
// once in effect: the handler's writes and the inbox record commit
// together, before JetStream is acknowledged.
func ExampleConsume() {
	ctx := context.Background()
	db, err := sql.Open("pgx", "postgres://billing@db:5432/billing") // with pgx's stdlib driver imported
	if err != nil {
		log.Fatal(err)
	}
	nc, err := nats.Connect(nats.DefaultURL)
	if err != nil {
		log.Fatal(err)
	}
	defer nc.Drain()
	js, err := jetstream.New(nc)
	if err != nil {
		log.Fatal(err)
	}
	// A durable consumer with explicit acknowledgements; a stream must
	// capture the dead-letter subject too.
	cons, err := js.CreateOrUpdateConsumer(ctx, "ORDERS", jetstream.ConsumerConfig{
		Durable:       "billing",
		AckPolicy:     jetstream.AckExplicitPolicy,
		FilterSubject: "orders.placed",
	})
	if err != nil {
		log.Fatal(err)
	}
	// The handler gets the body decoded; a message of another type, or whose
	// body does not decode, goes to the dead letters at once.
	c, err := consume.New(db, consume.Typed(func(ctx context.Context, tx *consume.Tx, _ *relayer.Message, o OrderPlaced) error {
		_, err := tx.ExecContext(ctx, `INSERT INTO invoices (order_id) VALUES ($1)`, o.Order)
		return err
	}), consume.Options{Name: "billing", Tables: store.Tables{Schema: "billing"}})
	if err != nil {
		log.Fatal(err)
	}
	// Until ctx ends; then the messages being handled commit and are
	// acknowledged before Consume returns.
	if err := relayernats.Consume(ctx, c, js, cons, relayernats.ConsumeOptions{DeadLetterSubject: "orders.dead"}); err != nil {
		log.Fatal(err)
	}
}
