// Package transporttest is the conformance suite every transport passes:
// the in-memory one, NATS JetStream, Kafka and AMQP. A transport's tests
// describe how to get a fresh destination and how a consumer reads back what
// was delivered there, and [Run] checks the promises of [relayer.Transport]
// that the dispatchers rely on, on the real broker: what a consumer receives
// is what was sent (id, type, key, body, headers), a batch arrives in slice
// order, sends from many goroutines at once all arrive once, a send does not
// keep the Message it was given after it returns, and a cancelled send
// reports the cancellation. What only one broker does (its header rules, its
// deduplication, its own errors) stays in that transport's own tests.
package transporttest

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/relayer-go/relayer"
	"github.com/relayer-go/relayer/headers"
)

// Broker is a transport under test and the means to read back what it
// delivered.
type Broker struct {
	// Transport is the transport under test. The suite calls it from several
	// goroutines at once.
	Transport relayer.Transport
	// Destination returns a destination that no other scenario uses, ready to
	// receive: a subject a stream captures, a topic, a routing key a queue is
	// bound to.
	Destination func(t *testing.T) string
	// Received waits until n messages were delivered to destination (a few
	// seconds at most, failing t otherwise) and returns them as a consumer
	// reads them, in the order the broker keeps: ID, Type, Key (see
	// CarriesKey), Body, and the headers the message was sent with (the
	// transport's own may be left out or kept; the suite ignores names it did
	// not send).
	Received func(t *testing.T, destination string, n int) []relayer.Message
	// CarriesKey: consumers see Message.Key (Kafka's record key, an AMQP
	// header). Where the broker keeps order by destination alone (NATS
	// JetStream subjects), the key does not travel and is not checked.
	CarriesKey bool
}

// Run runs every scenario against b, each as a parallel subtest.
func Run(t *testing.T, b Broker) {
	for _, sc := range scenarios {
		t.Run(sc.name, func(t *testing.T) {
			t.Parallel()
			sc.run(t, b)
		})
	}
}

var scenarios = []struct {
	name string
	run  func(t *testing.T, b Broker)
}{
	{"DeliversWhatWasSent", deliversWhatWasSent},
	{"EmptyBodyAndNoHeaders", emptyBodyAndNoHeaders},
	{"BatchArrivesInSliceOrder", batchArrivesInSliceOrder},
	{"ConcurrentSendsArriveOnce", concurrentSendsArriveOnce},
	{"MessageIsNotKeptAfterSend", messageIsNotKeptAfterSend},
	{"CancelledSendReportsCancellation", cancelledSendReportsCancellation},
}

// timeout bounds each send of the suite.
const timeout = 30 * time.Second

func sendContext(t *testing.T) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	t.Cleanup(cancel)
	return ctx
}

// message returns a new message to destination.
func message(t *testing.T, destination, key string, body []byte, hs ...headers.Header) *relayer.Message {
	t.Helper()
	id, err := relayer.NewID()
	if err != nil {
		t.Fatal(err)
	}
	return &relayer.Message{ID: id, Type: "transporttest.Sent", Destination: destination, Key: key, Body: body, Headers: hs}
}

func header(name, value string) headers.Header {
	return headers.Header{Name: name, Value: []byte(value)}
}

// check compares what a consumer received with what was sent: every field
// the suite sets, and, for each header name sent, the values in order.
func check(t *testing.T, b Broker, got relayer.Message, want *relayer.Message) {
	t.Helper()
	if got.ID != want.ID {
		t.Errorf("ID = %v, want %v", got.ID, want.ID)
	}
	if got.Type != want.Type {
		t.Errorf("Type = %q, want %q", got.Type, want.Type)
	}
	if b.CarriesKey && got.Key != want.Key {
		t.Errorf("Key = %q, want %q", got.Key, want.Key)
	}
	if !bytes.Equal(got.Body, want.Body) {
		t.Errorf("Body = %q, want %q", got.Body, want.Body)
	}
	sent := map[string]bool{}
	for _, h := range want.Headers {
		sent[h.Name] = true
	}
	for name := range sent {
		if g, w := values(got.Headers, name), values(want.Headers, name); !slices.Equal(g, w) {
			t.Errorf("header %q = %q, want %q", name, g, w)
		}
	}
}

func values(hs []headers.Header, name string) []string {
	var out []string
	for _, h := range hs {
		if h.Name == name {
			out = append(out, string(h.Value))
		}
	}
	return out
}

// deliversWhatWasSent: one message, with a key, a body and headers (a name
// given twice included), reaches its consumer unchanged.
func deliversWhatWasSent(t *testing.T, b Broker) {
	dest := b.Destination(t)
	msg := message(t, dest, "customer-7", []byte(`{"order":42}`),
		header("content-type", "application/json"),
		header("x-tag", "first"),
		header("x-other", "between"),
		header("x-tag", "second"),
		header("x-utf8", "Grüße, 世界"))
	if err := b.Transport.Send(sendContext(t), msg); err != nil {
		t.Fatalf("Send: %v", err)
	}
	got := b.Received(t, dest, 1)
	check(t, b, got[0], msg)
}

// emptyBodyAndNoHeaders: a message with nothing but its identity is a
// message too.
func emptyBodyAndNoHeaders(t *testing.T, b Broker) {
	dest := b.Destination(t)
	msg := message(t, dest, "", []byte{})
	if err := b.Transport.Send(sendContext(t), msg); err != nil {
		t.Fatalf("Send: %v", err)
	}
	check(t, b, b.Received(t, dest, 1)[0], msg)
}

// batchArrivesInSliceOrder: SendBatch delivers in slice order, keys
// interleaved, up to the destination's MaxBatchSize at once.
func batchArrivesInSliceOrder(t *testing.T, b Broker) {
	dest := b.Destination(t)
	ctx := sendContext(t)
	caps, err := b.Transport.Capabilities(ctx, dest)
	if err != nil {
		t.Fatalf("Capabilities: %v", err)
	}
	if caps.MaxBatchSize < 1 {
		t.Fatalf("MaxBatchSize = %d, want at least 1", caps.MaxBatchSize)
	}
	var msgs []*relayer.Message
	for i := range 30 {
		msgs = append(msgs, message(t, dest, fmt.Sprintf("key-%d", i%3), fmt.Appendf(nil, "%d", i)))
	}
	for rest := msgs; len(rest) > 0; {
		n := min(len(rest), caps.MaxBatchSize)
		if err := b.Transport.SendBatch(ctx, rest[:n]); err != nil {
			t.Fatalf("SendBatch: %v", err)
		}
		rest = rest[n:]
	}
	got := b.Received(t, dest, len(msgs))
	for i := range msgs {
		if got[i].ID != msgs[i].ID {
			t.Fatalf("message %d received is %s (body %q), want %s: the batch arrived out of slice order", i, got[i].ID, got[i].Body, msgs[i].ID)
		}
		check(t, b, got[i], msgs[i])
	}
}

// concurrentSendsArriveOnce: sends from many goroutines at once all arrive,
// each once.
func concurrentSendsArriveOnce(t *testing.T, b Broker) {
	dest := b.Destination(t)
	ctx := sendContext(t)
	const senders, each = 8, 10
	sent := make([][]*relayer.Message, senders)
	for s := range senders {
		for i := range each {
			sent[s] = append(sent[s], message(t, dest, fmt.Sprintf("sender-%d", s), fmt.Appendf(nil, "%d/%d", s, i)))
		}
	}
	var wg sync.WaitGroup
	errs := make(chan error, senders*each)
	for s := range senders {
		wg.Go(func() {
			for _, m := range sent[s] {
				if err := b.Transport.Send(ctx, m); err != nil {
					errs <- err
					return
				}
			}
		})
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Fatalf("Send: %v", err)
	}
	got := b.Received(t, dest, senders*each)
	seen := map[string]int{}
	for _, m := range got {
		seen[m.ID.String()]++
	}
	for s := range senders {
		for _, m := range sent[s] {
			if n := seen[m.ID.String()]; n != 1 {
				t.Errorf("message %s arrived %d times, want once", m.ID, n)
			}
		}
	}
}

// messageIsNotKeptAfterSend: once Send or SendBatch returns, the caller may
// reuse the Message values it passed (the dispatchers read their next rows
// into them): what arrives is what was sent.
func messageIsNotKeptAfterSend(t *testing.T, b Broker) {
	dest := b.Destination(t)
	ctx := sendContext(t)
	msgs := []*relayer.Message{
		message(t, dest, "reused", []byte("first"), header("x-value", "1")),
		message(t, dest, "reused", []byte("second"), header("x-value", "2")),
	}
	want := []relayer.Message{*msgs[0], *msgs[1]}
	if err := b.Transport.Send(ctx, msgs[0]); err != nil {
		t.Fatalf("Send: %v", err)
	}
	if err := b.Transport.SendBatch(ctx, msgs[1:]); err != nil {
		t.Fatalf("SendBatch: %v", err)
	}
	for _, m := range msgs {
		*m = *message(t, "elsewhere", "changed", []byte("a later row"), header("x-value", "later"))
	}
	got := b.Received(t, dest, 2)
	for i := range want {
		check(t, b, got[i], &want[i])
	}
}

// cancelledSendReportsCancellation: a send whose context is already
// cancelled returns an error that says so.
func cancelledSendReportsCancellation(t *testing.T, b Broker) {
	dest := b.Destination(t)
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	err := b.Transport.Send(ctx, message(t, dest, "k", []byte("x")))
	if !errors.Is(err, context.Canceled) {
		t.Errorf("Send on a cancelled context = %v, want an error matching context.Canceled", err)
	}
	if err := b.Transport.SendBatch(ctx, []*relayer.Message{message(t, dest, "k", []byte("y"))}); !errors.Is(err, context.Canceled) {
		t.Errorf("SendBatch on a cancelled context = %v, want an error matching context.Canceled", err)
	}
}
