// Package transporttest is the conformance suite every transport passes:
// the in-memory one, NATS JetStream, Kafka and AMQP. A transport's tests
// describe how to get a fresh destination and how a consumer reads back what
// was delivered there, and [Run] checks the promises of [relayer.Transport]
// that the dispatchers rely on, on the real broker: what a consumer receives
// is what was sent (id, type, key, body, headers), with the id and type in
// the headers the transport documents and never taken from the message's own
// headers; a batch arrives in slice order, one of exactly the destination's
// MaxBatchSize included, and a larger one meets the transport's documented
// answer; sends from many goroutines at once all arrive once; a send does not
// keep the Message it was given after it returns; a cancelled send reports
// the cancellation; a message the broker refuses for good fails marked
// [relayer.ErrPermanent], alone, and a batch it is in fails with a
// [*relayer.BatchError] whose failures line up with the batch; and a send to
// a broker that is down fails marked [relayer.ErrUnavailable]. What only one
// broker does (its header rules, its deduplication, its own errors) stays in
// that transport's own tests.
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
	// CarriesKey: consumers see Message.Key (Kafka's record key, the
	// relayer-key header of AMQP and NATS). When false, the key is not
	// checked.
	CarriesKey bool
	// IDHeaders names the headers in which the transport gives consumers
	// Message.ID, in its canonical text form (uuid.UUID.String), after any
	// values of the same name the message carries itself, so that a reader
	// of the last value gets the message's own id: Nats-Msg-Id and
	// relayer-message-id on NATS, relayer-message-id on Kafka. The suite
	// checks on every message delivered that each holds exactly the
	// message's own values followed by its id. Empty when the id travels in
	// a field of the broker's own (AMQP's message-id property) or only in
	// the Message (the memory transport); a relayer-message-id header a
	// message carries then arrives as any other header.
	IDHeaders []string
	// TypeHeaders names the headers that carry Message.Type the same way
	// (relayer-message-type on NATS and Kafka).
	TypeHeaders []string
	// OverMaxBatch is what SendBatch does with more messages than the
	// destination's MaxBatchSize. The zero value, [RefusesOverMaxBatch], is
	// what a transport to a real broker promises.
	OverMaxBatch OverMaxBatch
	// Unsendable changes msg, a message to a destination Destination
	// returned, so that the transport or its broker refuses it for good, and
	// alone: a body over the broker's largest message, a header the broker
	// cannot carry. Sent, it must fail marked [relayer.ErrPermanent]; in a
	// batch, only it may fail and the others must be delivered. Nil when the
	// transport cannot refuse one message of a batch alone; the scenarios
	// that need it are then skipped, saying so.
	Unsendable func(t *testing.T, msg *relayer.Message)
	// Unreachable returns a transport of the kind under test whose broker
	// is down or cannot be reached (a server shut down under its connection,
	// a cluster closed, a connection cut), for the destinations Destination
	// returns. Nil when there is no broker to lose (the memory transport);
	// the scenario that needs it is then skipped, saying so.
	Unreachable func(t *testing.T) relayer.Transport
}

// OverMaxBatch is what a transport does with a batch of more messages than
// its destination's MaxBatchSize. Dispatchers never send one; the suite
// checks that the transport does what it documents.
type OverMaxBatch int

const (
	// RefusesOverMaxBatch: SendBatch fails the whole batch before sending
	// any of it, with an error that is not a *[relayer.BatchError] (NATS,
	// Kafka and AMQP document this).
	RefusesOverMaxBatch OverMaxBatch = iota
	// DeliversOverMaxBatch: SendBatch delivers the whole batch in slice
	// order, as the memory transport does: it records whatever it is given,
	// whatever it reports.
	DeliversOverMaxBatch
)

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
	{"IdentityHeadersAreTheTransports", identityHeadersAreTheTransports},
	{"BatchOfMaxBatchSize", batchOfMaxBatchSize},
	{"RefusedMessageIsPermanent", refusedMessageIsPermanent},
	{"BatchErrorLinesUpWithTheBatch", batchErrorLinesUpWithTheBatch},
	{"UnreachableBrokerIsUnavailable", unreachableBrokerIsUnavailable},
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
// the suite sets, and, for each header name sent and each of the broker's
// IDHeaders and TypeHeaders, the values in order.
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
	names := map[string]bool{}
	for _, h := range want.Headers {
		names[h.Name] = true
	}
	for _, name := range slices.Concat(b.IDHeaders, b.TypeHeaders) {
		names[name] = true
	}
	for name := range names {
		w := values(want.Headers, name)
		if slices.Contains(b.IDHeaders, name) {
			w = append(w, want.ID.String())
		}
		if slices.Contains(b.TypeHeaders, name) {
			w = append(w, want.Type)
		}
		if g := values(got.Headers, name); !slices.Equal(g, w) {
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

// identityHeadersAreTheTransports: consumers read a message's own id and
// type, in the headers the transport documents (IDHeaders, TypeHeaders),
// even when the message carries headers of those names itself, as one
// forwarded with its original headers does; those arrive as they were sent,
// before the transport's values, and never take their place.
func identityHeadersAreTheTransports(t *testing.T, b Broker) {
	dest := b.Destination(t)
	ctx := sendContext(t)
	upstream := message(t, dest, "", nil)
	plain := message(t, dest, "k", []byte("plain"))
	// A valid id in a header of the id's name, alone (sent with Send and
	// with SendBatch), then among others.
	forwarded := func(body string) *relayer.Message {
		return message(t, dest, "k", []byte(body),
			header(relayer.HeaderMessageID, upstream.ID.String()),
			header(relayer.HeaderMessageType, "transporttest.Upstream"))
	}
	sent, batched := forwarded("forwarded, sent"), forwarded("forwarded, batched")
	twice := message(t, dest, "k", []byte("forwarded twice"),
		header(relayer.HeaderMessageID, upstream.ID.String()),
		header(relayer.HeaderMessageType, "transporttest.Upstream"),
		header(relayer.HeaderMessageID, "not-a-uuid"))
	for _, m := range []*relayer.Message{plain, sent} {
		if err := b.Transport.Send(ctx, m); err != nil {
			t.Fatalf("Send: %v", err)
		}
	}
	if err := b.Transport.SendBatch(ctx, []*relayer.Message{batched, twice}); err != nil {
		t.Fatalf("SendBatch: %v", err)
	}
	got := b.Received(t, dest, 4)
	for i, want := range []*relayer.Message{plain, sent, batched, twice} {
		if got[i].ID == upstream.ID {
			t.Errorf("message %d: consumers read the id the message carried in its headers, %s, not its own, %s", i, upstream.ID, want.ID)
		}
		check(t, b, got[i], want)
	}
}

// maxBatchSent bounds the batches the suite sends; a transport configured
// with a larger MaxBatchSize makes batchOfMaxBatchSize fail and say so.
const maxBatchSent = 10_000

// batchOfMaxBatchSize: SendBatch accepts a batch of exactly the
// destination's MaxBatchSize and delivers it in slice order. A batch of one
// more meets what the transport documents (OverMaxBatch): refused whole and
// not delivered at all, or delivered whole, in order.
func batchOfMaxBatchSize(t *testing.T, b Broker) {
	dest := b.Destination(t)
	ctx := sendContext(t)
	caps, err := b.Transport.Capabilities(ctx, dest)
	if err != nil {
		t.Fatalf("Capabilities: %v", err)
	}
	n := caps.MaxBatchSize
	if n < 1 || n > maxBatchSent {
		t.Fatalf("MaxBatchSize = %d; the suite sends batches of 1 to %d messages: configure the transport under test with a smaller one", n, maxBatchSent)
	}
	batch := func(size int, tag string) []*relayer.Message {
		msgs := make([]*relayer.Message, size)
		for i := range msgs {
			msgs[i] = message(t, dest, fmt.Sprintf("key-%d", i%3), fmt.Appendf(nil, "%s %d", tag, i))
		}
		return msgs
	}
	full, over := batch(n, "full"), batch(n+1, "over")
	if err := b.Transport.SendBatch(ctx, full); err != nil {
		t.Fatalf("SendBatch of MaxBatchSize (%d) messages: %v", n, err)
	}
	want := full
	err = b.Transport.SendBatch(ctx, over)
	switch b.OverMaxBatch {
	case RefusesOverMaxBatch:
		var be *relayer.BatchError
		if err == nil || errors.As(err, &be) {
			t.Fatalf("SendBatch of MaxBatchSize+1 (%d) messages = %v, want the whole batch refused with an error that is not a *relayer.BatchError", n+1, err)
		}
	case DeliversOverMaxBatch:
		if err != nil {
			t.Fatalf("SendBatch of MaxBatchSize+1 (%d) messages: %v", n+1, err)
		}
		want = append(want, over...)
	default:
		t.Fatalf("Broker.OverMaxBatch = %d, which the suite does not know", b.OverMaxBatch)
	}
	// A message sent last shows where anything of the batches went.
	receivedThenLast(t, b, ctx, dest, "key-0", want)
}

// refusedMessageIsPermanent: a message the transport or its broker refuses
// for good fails marked relayer.ErrPermanent (and not ErrUnavailable, which
// would have the dispatcher send it again), sent alone or in a batch, and
// is not delivered.
func refusedMessageIsPermanent(t *testing.T, b Broker) {
	if b.Unsendable == nil {
		t.Skip("Broker.Unsendable is nil: the transport has no way to refuse one message alone")
	}
	dest := b.Destination(t)
	ctx := sendContext(t)
	alone, inBatch := message(t, dest, "k", []byte("refused alone")), message(t, dest, "k", []byte("refused in a batch"))
	b.Unsendable(t, alone)
	b.Unsendable(t, inBatch)
	checkMark(t, "Send of a refused message", b.Transport.Send(ctx, alone), relayer.ErrPermanent)
	err := b.Transport.SendBatch(ctx, []*relayer.Message{inBatch})
	checkMark(t, "SendBatch of a refused message", err, relayer.ErrPermanent)
	if be := (*relayer.BatchError)(nil); errors.As(err, &be) && (len(be.Errs) != 1 || !be.Failed(0)) {
		t.Errorf("SendBatch of one refused message = %#v, want its one entry failed", be.Errs)
	}
	last := message(t, dest, "k", []byte("last"))
	if err := b.Transport.Send(ctx, last); err != nil {
		t.Fatalf("Send: %v", err)
	}
	if got := b.Received(t, dest, 1)[0]; got.ID != last.ID {
		t.Fatalf("received %s (body %q) before the message sent after the refused ones: a refused message was delivered", got.ID, got.Body)
	}
}

// batchErrorLinesUpWithTheBatch: when some messages of a batch are refused,
// SendBatch returns a *relayer.BatchError with one entry per message of the
// batch, in its order: an error marked relayer.ErrPermanent exactly where a
// refused message stands, nil elsewhere. The others, one key for all, are
// delivered in slice order; the refused ones are not.
func batchErrorLinesUpWithTheBatch(t *testing.T, b Broker) {
	if b.Unsendable == nil {
		t.Skip("Broker.Unsendable is nil: the transport has no way to refuse one message of a batch alone")
	}
	dest := b.Destination(t)
	ctx := sendContext(t)
	// Refused at 1 and 4 of 7: reversed, or shifted by one, the entries
	// would stand at other places.
	refused := map[int]bool{1: true, 4: true}
	msgs := make([]*relayer.Message, 7)
	var want []*relayer.Message
	for i := range msgs {
		msgs[i] = message(t, dest, "one-key", fmt.Appendf(nil, "%d", i))
		if refused[i] {
			b.Unsendable(t, msgs[i])
		} else {
			want = append(want, msgs[i])
		}
	}
	err := b.Transport.SendBatch(ctx, msgs)
	var be *relayer.BatchError
	if !errors.As(err, &be) {
		t.Fatalf("SendBatch with messages 1 and 4 refused = %v, want a *relayer.BatchError", err)
	}
	if len(be.Errs) != len(msgs) {
		t.Fatalf("BatchError has %d entries for a batch of %d: %v", len(be.Errs), len(msgs), err)
	}
	for i, e := range be.Errs {
		if refused[i] {
			checkMark(t, fmt.Sprintf("BatchError entry %d, a refused message", i), e, relayer.ErrPermanent)
		} else if e != nil || be.Failed(i) {
			t.Errorf("BatchError entry %d = %v, want nil: message %d was not refused", i, e, i)
		}
	}
	receivedThenLast(t, b, ctx, dest, "one-key", want)
}

// receivedThenLast sends one more message to dest, with key, and checks that
// dest received exactly want and then that message, in order, each as it was
// sent: a message sent last shows that nothing else arrived before it.
func receivedThenLast(t *testing.T, b Broker, ctx context.Context, dest, key string, want []*relayer.Message) {
	t.Helper()
	last := message(t, dest, key, []byte("last"))
	if err := b.Transport.Send(ctx, last); err != nil {
		t.Fatalf("Send: %v", err)
	}
	want = append(want, last)
	got := b.Received(t, dest, len(want))
	for i := range want {
		if got[i].ID != want[i].ID {
			t.Fatalf("message %d received is %s (body %q), want %s (body %q)", i, got[i].ID, got[i].Body, want[i].ID, want[i].Body)
		}
		check(t, b, got[i], want[i])
	}
}

// unreachableBrokerIsUnavailable: a send to a broker that is down fails
// marked relayer.ErrUnavailable, not ErrPermanent: the messages are fine and
// the dispatcher pauses the destination instead of giving up on them. A
// batch fails as a whole or message by message, each marked.
func unreachableBrokerIsUnavailable(t *testing.T, b Broker) {
	if b.Unreachable == nil {
		t.Skip("Broker.Unreachable is nil: the transport has no broker that can be down")
	}
	tr := b.Unreachable(t)
	dest := b.Destination(t)
	ctx := sendContext(t)
	checkMark(t, "Send to a broker that is down", tr.Send(ctx, message(t, dest, "k", []byte("x"))), relayer.ErrUnavailable)
	msgs := []*relayer.Message{message(t, dest, "k", []byte("0")), message(t, dest, "k", []byte("1")), message(t, dest, "k", []byte("2"))}
	err := tr.SendBatch(ctx, msgs)
	checkMark(t, "SendBatch to a broker that is down", err, relayer.ErrUnavailable)
	if be := (*relayer.BatchError)(nil); errors.As(err, &be) {
		if len(be.Errs) != len(msgs) {
			t.Fatalf("BatchError has %d entries for a batch of %d: %v", len(be.Errs), len(msgs), err)
		}
		for i, e := range be.Errs {
			checkMark(t, fmt.Sprintf("BatchError entry %d", i), e, relayer.ErrUnavailable)
		}
	}
}

// checkMark fails t unless err is marked with mark and not with the other
// of relayer.ErrPermanent and relayer.ErrUnavailable, which contradict each
// other.
func checkMark(t *testing.T, what string, err, mark error) {
	t.Helper()
	other := relayer.ErrUnavailable
	if mark == relayer.ErrUnavailable {
		other = relayer.ErrPermanent
	}
	if !errors.Is(err, mark) || errors.Is(err, other) {
		t.Errorf("%s = %v, want an error matching %v and not %v", what, err, mark, other)
	}
}
