package relayernats_test

import (
	"fmt"
	"sync/atomic"
	"testing"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/relayer-go/relayer"
	"github.com/relayer-go/relayer/headers"
	relayernats "github.com/relayer-go/relayer/transport/nats"
	"github.com/relayer-go/relayer/transport/transporttest"
)

// The transport passes the conformance suite on a stream that captures
// every destination the suite uses.
func TestConformance(t *testing.T) {
	t.Parallel()
	b := setup(t, setupOpts{})
	var seq atomic.Int64
	transporttest.Run(t, transporttest.Broker{
		Transport:   b.tr,
		Destination: func(t *testing.T) string { return b.subject(fmt.Sprintf("conformance.%d", seq.Add(1))) },
		Received: func(t *testing.T, destination string, n int) []relayer.Message {
			t.Helper()
			var out []relayer.Message
			for _, m := range b.fetchSubject(t, destination, n) {
				id, err := relayernats.MessageID(m.Headers())
				if err != nil {
					t.Fatal(err)
				}
				got := relayer.Message{ID: id, Type: relayernats.MessageType(m.Headers()), Body: m.Data(), Destination: m.Subject()}
				for name, values := range m.Headers() {
					for _, v := range values {
						got.Headers = append(got.Headers, headers.Header{Name: name, Value: []byte(v)})
					}
				}
				out = append(out, got)
			}
			return out
		},
	})
}

// fetchSubject consumes n messages of one subject from the start of the
// test's stream, in stream order, and fails the test if fewer arrive.
func (b *testBundle) fetchSubject(t *testing.T, subject string, n int) []jetstream.Msg {
	t.Helper()
	cons, err := b.stream.OrderedConsumer(testContext(t), jetstream.OrderedConsumerConfig{FilterSubjects: []string{subject}})
	if err != nil {
		t.Fatal(err)
	}
	return drain(t, cons, n)
}
