package relayernats_test

import (
	"bytes"
	"fmt"
	"sync/atomic"
	"testing"
	"time"

	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/relayer-go/relayer"
	"github.com/relayer-go/relayer/headers"
	relayernats "github.com/relayer-go/relayer/transport/nats"
	"github.com/relayer-go/relayer/transport/transporttest"
)

// conformanceMaxMsgSize is the conformance stream's max_msg_size: the
// suite's messages fit, and a body of twice as much is one the server
// refuses for good, alone.
const conformanceMaxMsgSize = 64 << 10

// The transport passes the conformance suite on a stream that captures
// every destination the suite uses.
func TestConformance(t *testing.T) {
	t.Parallel()
	b := setup(t, setupOpts{stream: func(c *jetstream.StreamConfig) { c.MaxMsgSize = conformanceMaxMsgSize }})
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
				received, err := relayernats.ReceivedMessage(m)
				if err != nil {
					t.Fatal(err)
				}
				got := relayer.Message{ID: id, Type: relayernats.MessageType(m.Headers()), Key: received.Key, Body: m.Data(), Destination: m.Subject()}
				for name, values := range m.Headers() {
					for _, v := range values {
						got.Headers = append(got.Headers, headers.Header{Name: name, Value: []byte(v)})
					}
				}
				out = append(out, got)
			}
			return out
		},
		CarriesKey:  true, // in the relayer-key header
		IDHeaders:   []string{jetstream.MsgIDHeader, relayer.HeaderMessageID},
		TypeHeaders: []string{relayer.HeaderMessageType},
		// The server refuses a message over the stream's max_msg_size with
		// an error acknowledgement of its own; the client publishes it,
		// since it is within the connection's max_payload.
		Unsendable: func(t *testing.T, msg *relayer.Message) {
			msg.Body = bytes.Repeat([]byte("s"), 2*conformanceMaxMsgSize)
		},
		Unreachable: downTransport,
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

// downTransport returns a transport whose server has shut down: it runs an
// embedded server of its own, connects without reconnecting, and stops the
// server once the transport is made; the connection is closed when it
// returns.
func downTransport(t *testing.T) relayer.Transport {
	t.Helper()
	s, err := server.NewServer(&server.Options{Host: "127.0.0.1", Port: server.RANDOM_PORT, NoLog: true, NoSigs: true})
	if err != nil {
		t.Fatalf("embedded nats-server: %v", err)
	}
	s.Start()
	if !s.ReadyForConnections(10 * time.Second) {
		s.Shutdown()
		t.Fatal("embedded nats-server did not get ready")
	}
	closed := make(chan struct{})
	nc, err := nats.Connect(s.ClientURL(), nats.MaxReconnects(0), nats.ClosedHandler(func(*nats.Conn) { close(closed) }))
	if err != nil {
		s.Shutdown()
		t.Fatalf("connect %s: %v", s.ClientURL(), err)
	}
	t.Cleanup(nc.Close)
	js, err := jetstream.New(nc)
	if err != nil {
		t.Fatal(err)
	}
	tr, err := relayernats.New(js, relayernats.Options{})
	if err != nil {
		t.Fatal(err)
	}
	s.Shutdown()
	s.WaitForShutdown()
	select {
	case <-closed:
	case <-time.After(10 * time.Second):
		t.Fatal("the connection did not close after its server shut down")
	}
	return tr
}
