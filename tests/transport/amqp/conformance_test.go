package relayeramqp_test

import (
	"net"
	"strconv"
	"strings"
	"testing"
	"time"

	amqp "github.com/rabbitmq/amqp091-go"

	"github.com/relayer-go/relayer"
	"github.com/relayer-go/relayer/headers"
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
		// IDHeaders and TypeHeaders stay empty: the id and type travel in
		// the message-id and type properties, and relayer-message-id and
		// relayer-message-type headers a message carries arrive as any
		// other header.
		//
		// RabbitMQ refuses a message over its max_message_size by closing
		// the channel, which fails every unconfirmed message of a batch
		// with it; a header name longer than AMQP's 255 bytes is refused
		// by the transport alone, before anything is published.
		Unsendable: func(t *testing.T, msg *relayer.Message) {
			msg.Headers = append(msg.Headers, headers.Header{Name: strings.Repeat("n", 256), Value: []byte("v")})
		},
		Unreachable: downTransport,
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

// downTransport returns a transport whose connection to the broker was cut
// under it, as when the broker goes down: the connection goes through a
// relay, which is cut once the transport has its first channel.
func downTransport(t *testing.T) relayer.Transport {
	t.Helper()
	uri, err := amqp.ParseURI(brokerURL())
	if err != nil {
		t.Fatal(err)
	}
	r := startRelay(t, net.JoinHostPort(uri.Host, strconv.Itoa(uri.Port)))
	host, port, err := net.SplitHostPort(r.Addr())
	if err != nil {
		t.Fatal(err)
	}
	uri.Host = host
	if uri.Port, err = strconv.Atoi(port); err != nil {
		t.Fatal(err)
	}
	conn, err := dial(t, uri.String())
	if err != nil {
		t.Fatalf("dialling the broker through a relay: %v", err)
	}
	t.Cleanup(func() { _ = conn.Close() })
	closed := conn.NotifyClose(make(chan *amqp.Error, 1))
	tr, err := relayeramqp.New(conn, relayeramqp.Options{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := tr.Close(); err != nil {
			t.Errorf("Close: %v", err)
		}
	})
	r.Cut()
	select {
	case <-closed:
	case <-time.After(10 * time.Second):
		t.Fatal("the connection did not close when the relay was cut")
	}
	return tr
}
