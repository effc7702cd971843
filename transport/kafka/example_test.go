package relayerkafka_test

import (
	"context"
	"database/sql"
	"fmt"
	"log"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/relayer-go/relayer"
	"github.com/relayer-go/relayer/consume"
	"github.com/relayer-go/relayer/headers"
	"github.com/relayer-go/relayer/store"
	relayerkafka "github.com/relayer-go/relayer/transport/kafka"
)

// Example sends a batch through a transport and reads it back the way a
// consumer would. Each message is printed with its key, its value and its
// headers; the id travels in the relayer-message-id header.
func Example() {
	seeds := []string{"localhost:9092"}
	// The application owns the client; the defaults (acks=all, idempotent
	// producer, key-hashing partitioner) are what the transport needs.
	client, err := kgo.NewClient(kgo.SeedBrokers(seeds...))
	if err != nil {
		log.Fatal(err)
	}
	defer client.Close()
	tr, err := relayerkafka.New(client, relayerkafka.Options{})
	if err != nil {
		log.Fatal(err)
	}

	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	var sent []*relayer.Message
	for i, key := range []string{"order-1", "order-1"} {
		id, err := relayer.NewID()
		if err != nil {
			log.Fatal(err)
		}
		sent = append(sent, &relayer.Message{
			ID:          id,
			Type:        "orders.Placed",
			Body:        fmt.Appendf(nil, `{"line":%d}`, i+1),
			Headers:     []headers.Header{{Name: "content-type", Value: []byte("application/json")}},
			Destination: "orders",
			Key:         key,
		})
	}
	if err := tr.SendBatch(ctx, sent); err != nil {
		log.Fatal(err)
	}

	consumer, err := kgo.NewClient(kgo.SeedBrokers(seeds...),
		kgo.ConsumeTopics("orders"), kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()))
	if err != nil {
		log.Fatal(err)
	}
	defer consumer.Close()
	for read := 0; read < len(sent); {
		consumer.PollFetches(ctx).EachRecord(func(r *kgo.Record) {
			id, err := relayerkafka.MessageID(r)
			if err != nil {
				log.Fatal(err)
			}
			fmt.Printf("%s %s id-matches=%t\n", r.Key, r.Value, id == sent[read].ID)
			for _, h := range r.Headers {
				if h.Key != relayer.HeaderMessageID {
					fmt.Printf("  %s: %s\n", h.Key, h.Value)
				}
			}
			read++
		})
	}
}

// OrderPlaced is the message the orders service's outbox publishes.
type OrderPlaced struct {
	Order string `json:"order"`
}

// MessageType names the message as the producer routes it.
func (OrderPlaced) MessageType() string { return "orders.OrderPlaced" }

// A service consumes the orders another service's outbox produced, each
// once in effect and each key's in order: the handler's writes and the
// inbox record commit together, before the record's offset is committed.
func ExampleConsume() {
	ctx := context.Background()
	db, err := sql.Open("pgx", "postgres://billing@db:5432/billing") // with pgx's stdlib driver imported
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
	// Until ctx ends; then the records being handled commit, their offsets
	// are committed and the consumer leaves the group.
	err = relayerkafka.Consume(ctx, c, []kgo.Opt{kgo.SeedBrokers("localhost:9092")}, relayerkafka.ConsumeOptions{
		Group:           "billing",
		Topics:          []string{"orders"},
		DeadLetterTopic: "orders.dead",
	})
	if err != nil {
		log.Fatal(err)
	}
}

// A consumer reads a record back as the message the producer's outbox
// stored.
func ExampleReceivedMessage() {
	r := &kgo.Record{
		Topic: "orders",
		Key:   []byte("customer-42"),
		Value: []byte(`{"order":"o-1"}`),
		Headers: []kgo.RecordHeader{
			{Key: "tag", Value: []byte("a")},
			{Key: relayer.HeaderMessageID, Value: []byte("0190a5d2-6a4b-7c3e-9f10-2b3c4d5e6f70")},
			{Key: relayer.HeaderMessageType, Value: []byte("orders.Placed")},
		},
	}
	m, err := relayerkafka.ReceivedMessage(r)
	if err != nil {
		log.Fatal(err)
	}
	fmt.Println(m.ID, m.Type, m.Destination, m.Key, string(m.Body))
	for _, h := range m.Headers {
		fmt.Printf("%s=%q\n", h.Name, h.Value)
	}
	// Output:
	// 0190a5d2-6a4b-7c3e-9f10-2b3c4d5e6f70 orders.Placed orders customer-42 {"order":"o-1"}
	// tag="a"
}
