package relayerkafka_test

import (
	"fmt"
	"sync/atomic"
	"testing"

	"github.com/twmb/franz-go/pkg/kfake"

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
	const topics = 16
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
	})
}
