package relayerkafka_test

import (
	"context"
	"fmt"
	"log"
	"time"

	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/relayer-go/relayer"
	"github.com/relayer-go/relayer/headers"
	relayerkafka "github.com/relayer-go/relayer/transport/kafka"
)

// Example sends a batch through a transport and reads it back the way a
// consumer would. A fake in-process cluster stands in for Kafka.
func Example() {
	cluster, err := kfake.NewCluster(kfake.NumBrokers(1), kfake.SeedTopics(3, "orders"))
	if err != nil {
		log.Fatal(err)
	}
	defer cluster.Close()

	// The application owns the client; the defaults (acks=all, idempotent
	// producer, key-hashing partitioner) are what the transport needs.
	client, err := kgo.NewClient(kgo.SeedBrokers(cluster.ListenAddrs()...))
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

	consumer, err := kgo.NewClient(kgo.SeedBrokers(cluster.ListenAddrs()...),
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
	// Output:
	// order-1 {"line":1} id-matches=true
	//   content-type: application/json
	//   relayer-message-type: orders.Placed
	// order-1 {"line":2} id-matches=true
	//   content-type: application/json
	//   relayer-message-type: orders.Placed
}
