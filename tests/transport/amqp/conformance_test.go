package relayeramqp_test

import (
	"testing"

	"github.com/relayer-go/relayer"
	relayeramqp "github.com/relayer-go/relayer/transport/amqp"
	"github.com/relayer-go/relayer/transport/transporttest"
)

// The transport passes the conformance suite through the default exchange:
// each scenario's destination is the routing key of a queue of its own,
// read on a channel of its own.
func TestConformance(t *testing.T) {
	t.Parallel()
	b := setup(t, relayeramqp.Options{})
	transporttest.Run(t, transporttest.Broker{
		Transport:  b.tr,
		CarriesKey: true,
		Destination: func(t *testing.T) string {
			return b.scenario(t).declareQueue(t, nil)
		},
		Received: func(t *testing.T, destination string, n int) []relayer.Message {
			t.Helper()
			var out []relayer.Message
			for _, d := range b.scenario(t).receive(t, destination, n) {
				id, err := relayeramqp.MessageID(d)
				if err != nil {
					t.Fatal(err)
				}
				hs, err := relayeramqp.Headers(d.Headers)
				if err != nil {
					t.Fatal(err)
				}
				key, _ := d.Headers[relayeramqp.HeaderKey].(string)
				out = append(out, relayer.Message{ID: id, Type: d.Type, Key: key, Body: d.Body, Headers: hs, Destination: d.RoutingKey})
			}
			return out
		},
	})
}

// scenario returns b on a channel of the calling (sub)test's own, closed
// when it ends, for the AMQP work a parallel scenario does.
func (b *testBundle) scenario(t *testing.T) *testBundle {
	t.Helper()
	ch, err := b.conn.Channel()
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ch.Close() })
	return &testBundle{conn: b.conn, tr: b.tr, ch: ch, queue: b.queue}
}
