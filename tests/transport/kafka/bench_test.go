package relayerkafka_test

import (
	"context"
	"testing"

	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/relayer-go/relayer"
	"github.com/relayer-go/relayer/headers"
	relayerkafka "github.com/relayer-go/relayer/transport/kafka"
)

// benchTransport returns a transport on a cluster that acknowledges produce
// requests without storing them, so that the numbers are the client's and the
// transport's.
func benchTransport(b *testing.B) *relayerkafka.Transport {
	cluster, err := kfake.NewCluster(kfake.NumBrokers(1), kfake.SeedTopics(6, testTopic), kfake.BlackholeProduce())
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(cluster.Close)
	client, err := kgo.NewClient(kgo.SeedBrokers(cluster.ListenAddrs()...))
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(client.Close)
	tr, err := relayerkafka.New(client, relayerkafka.Options{})
	if err != nil {
		b.Fatal(err)
	}
	return tr
}

func benchMessages(n int) []*relayer.Message {
	msgs := make([]*relayer.Message, n)
	for i := range msgs {
		id, _ := relayer.NewID()
		msgs[i] = &relayer.Message{
			ID:          id,
			Type:        "orders.Placed",
			Body:        make([]byte, 256),
			Headers:     []headers.Header{{Name: "content-type", Value: []byte("application/json")}, {Name: "traceparent", Value: make([]byte, 55)}},
			Destination: testTopic,
			Key:         "order-" + string(rune('a'+i%26)),
		}
	}
	return msgs
}

// BenchmarkSend is the cost of one message sent on its own: a round trip.
func BenchmarkSend(b *testing.B) {
	tr := benchTransport(b)
	msg := benchMessages(1)[0]
	ctx := context.Background()
	b.ReportAllocs()
	for b.Loop() {
		if err := tr.Send(ctx, msg); err != nil {
			b.Fatal(err)
		}
	}
}

// BenchmarkSendBatch is the cost of a batch of 1000; compare the time per
// message with BenchmarkSend.
func BenchmarkSendBatch(b *testing.B) {
	tr := benchTransport(b)
	msgs := benchMessages(1000)
	ctx := context.Background()
	b.ReportAllocs()
	for b.Loop() {
		if err := tr.SendBatch(ctx, msgs); err != nil {
			b.Fatal(err)
		}
	}
	b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N*len(msgs)), "ns/msg")
}
