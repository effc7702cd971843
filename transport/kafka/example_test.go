package relayerkafka_test

import (
	"context"
	"fmt"
	"log"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/relayer-go/relayer"
	"github.com/relayer-go/relayer/headers"
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
