package relayerkafka_test

import (
	"bytes"
	"fmt"
	"sync/atomic"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/relayer-go/relayer"
	"github.com/relayer-go/relayer/headers"
	relayerkafka "github.com/relayer-go/relayer/transport/kafka"
	"github.com/relayer-go/relayer/transport/transporttest"
)

// The transport passes the conformance suite on a fake cluster, each
// scenario on a topic of its own with one partition, where a consumer reads
// in the order the transport sent.
func TestConformance(t *testing.T) {
	t.Parallel()
	const topics = 32
	var seeds []kfake.Opt
	for i := range topics {
		seeds = append(seeds, kfake.SeedTopics(1, fmt.Sprintf("conformance-%d", i)))
	}
	b := setup(t, setupOpts{cluster: seeds})
	var seq atomic.Int64
	transporttest.Run(t, transporttest.Broker{
		Transport:  b.tr,
		CarriesKey: true,
		Destination: func(t *testing.T) string {
			n := seq.Add(1)
			if n >= topics {
				t.Fatalf("the suite uses more than the %d topics seeded", topics)
			}
			return fmt.Sprintf("conformance-%d", n)
		},
		Received: func(t *testing.T, destination string, n int) []relayer.Message {
			t.Helper()
			var out []relayer.Message
			for _, r := range consume(t, b, destination, n) {
				id, err := relayerkafka.MessageID(r)
				if err != nil {
					t.Fatal(err)
				}
				got := relayer.Message{ID: id, Key: string(r.Key), Body: r.Value, Destination: r.Topic}
				for _, h := range r.Headers {
					if h.Key == relayer.HeaderMessageType {
						got.Type = string(h.Value)
					}
					got.Headers = append(got.Headers, headers.Header{Name: h.Key, Value: h.Value})
				}
				out = append(out, got)
			}
			return out
		},
		IDHeaders:   []string{relayer.HeaderMessageID},
		TypeHeaders: []string{relayer.HeaderMessageType},
		// A record larger than the client's ProducerBatchMaxBytes (1 MB by
		// default) is refused by the client, alone. The broker's own limit
		// (max.message.bytes) would refuse every record of the partition's
		// produce request with it, so it cannot refuse one message alone;
		// TestSendBatchReportsBrokerRejection covers it on a partition of
		// its own.
		Unsendable: func(t *testing.T, msg *relayer.Message) {
			msg.Body = bytes.Repeat([]byte("x"), 1_100_000)
		},
		Unreachable: downTransport,
	})
}

// downTransport returns a transport on a client whose cluster has closed.
// The client gives up on a record after kgo.RecordDeliveryTimeout; without
// one it would keep trying until the send's context ends, and the transport
// would report the context's error, as it documents.
func downTransport(t *testing.T) relayer.Transport {
	t.Helper()
	cluster, err := kfake.NewCluster(kfake.NumBrokers(1))
	if err != nil {
		t.Fatal(err)
	}
	client := newClient(t, cluster, kgo.RecordDeliveryTimeout(time.Second))
	cluster.Close()
	tr, err := relayerkafka.New(client, relayerkafka.Options{})
	if err != nil {
		t.Fatal(err)
	}
	return tr
}
