package relayeramqp_test

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"net"
	"runtime"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	amqp "github.com/rabbitmq/amqp091-go"
	"go.uber.org/goleak"

	"github.com/relayer-go/relayer"
	"github.com/relayer-go/relayer/headers"
	"github.com/relayer-go/relayer/internal/testkit"
	relayeramqp "github.com/relayer-go/relayer/transport/amqp"
)

var _ relayer.Transport = (*relayeramqp.Transport)(nil)

func TestSendRoundTrip(t *testing.T) {
	t.Parallel()
	b := setup(t, relayeramqp.Options{})
	msg := newMessage(t, b.queue)
	msg.Key = "customer-42"
	msg.Headers = []headers.Header{
		{Name: "content-type", Value: []byte("application/json")},
		{Name: "tag", Value: []byte("a")},
		{Name: "signature", Value: []byte{0xff, 0x00, 0x01}},
		{Name: "tag", Value: []byte("b")},
		{Name: "empty", Value: nil},
		{Name: "tag", Value: []byte{}},
		{Name: "traceparent", Value: []byte("00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01")},
	}
	if err := b.tr.Send(context.Background(), msg); err != nil {
		t.Fatalf("Send: %v", err)
	}

	d := b.receive(t, b.queue, 1)[0]
	if d.MessageId != msg.ID.String() {
		t.Errorf("message-id property = %q, want %q", d.MessageId, msg.ID)
	}
	if id, err := relayeramqp.MessageID(d); err != nil || id != msg.ID {
		t.Errorf("MessageID = %v, %v; want %v", id, err, msg.ID)
	}
	if d.Type != msg.Type {
		t.Errorf("type property = %q, want %q", d.Type, msg.Type)
	}
	if string(d.Body) != string(msg.Body) {
		t.Errorf("body = %q, want %q", d.Body, msg.Body)
	}
	if d.ContentType != "application/json" {
		t.Errorf("content-type property = %q", d.ContentType)
	}
	if d.DeliveryMode != amqp.Persistent {
		t.Errorf("delivery mode = %d, want persistent", d.DeliveryMode)
	}
	if d.Timestamp.Unix() != msg.CreatedAt.Unix() {
		t.Errorf("timestamp = %v, want %v to the second", d.Timestamp, msg.CreatedAt)
	}

	// The raw table: text as strings, other bytes as byte arrays, repeated
	// names as arrays in order.
	if v, ok := d.Headers["signature"].([]byte); !ok || string(v) != "\xff\x00\x01" {
		t.Errorf("signature = %#v, want the bytes as a byte array", d.Headers["signature"])
	}
	if v, ok := d.Headers["tag"].([]any); !ok || len(v) != 3 || v[0] != "a" || v[1] != "b" || v[2] != "" {
		t.Errorf("tag = %#v, want [a b \"\"]", d.Headers["tag"])
	}
	if v := d.Headers[relayeramqp.HeaderKey]; v != "customer-42" {
		t.Errorf("%s = %#v", relayeramqp.HeaderKey, v)
	}

	got, err := relayeramqp.Headers(d.Headers)
	if err != nil {
		t.Fatalf("Headers: %v", err)
	}
	want := []headers.Header{
		{Name: "content-type", Value: []byte("application/json")},
		{Name: "empty", Value: []byte{}},
		{Name: relayeramqp.HeaderKey, Value: []byte("customer-42")},
		{Name: "signature", Value: []byte{0xff, 0x00, 0x01}},
		{Name: "tag", Value: []byte("a")},
		{Name: "tag", Value: []byte("b")},
		{Name: "tag", Value: []byte{}},
		{Name: "traceparent", Value: []byte("00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01")},
	}
	if !equalHeaders(got, want) {
		t.Errorf("headers\n got %s\nwant %s", formatHeaders(got), formatHeaders(want))
	}
}

func TestKeyJoinsAHeaderOfTheSameName(t *testing.T) {
	t.Parallel()
	b := setup(t, relayeramqp.Options{Transient: true})
	msg := newMessage(t, b.queue)
	msg.Key = "k"
	msg.Headers = []headers.Header{{Name: relayeramqp.HeaderKey, Value: []byte("mine")}}
	if err := b.tr.Send(context.Background(), msg); err != nil {
		t.Fatal(err)
	}
	d := b.receive(t, b.queue, 1)[0]
	if v, ok := d.Headers[relayeramqp.HeaderKey].([]any); !ok || len(v) != 2 || v[0] != "mine" || v[1] != "k" {
		t.Errorf("%s = %#v, want [mine k]", relayeramqp.HeaderKey, d.Headers[relayeramqp.HeaderKey])
	}
	if d.DeliveryMode != amqp.Transient {
		t.Errorf("delivery mode = %d, want transient", d.DeliveryMode)
	}
	if d.ContentType != "" {
		t.Errorf("content-type property = %q without a content-type header", d.ContentType)
	}
}

func TestSendBatchKeepsOrder(t *testing.T) {
	t.Parallel()
	b := setup(t, relayeramqp.Options{})
	caps, err := b.tr.Capabilities(context.Background(), b.queue)
	if err != nil {
		t.Fatal(err)
	}
	if want := (relayer.Capabilities{OrderedByKey: true, MaxBatchSize: relayeramqp.MaxBatchSizeDefault}); caps != want {
		t.Fatalf("Capabilities = %+v, want %+v", caps, want)
	}

	const n, keys = relayeramqp.MaxBatchSizeDefault, 7
	msgs := make([]*relayer.Message, n)
	for i := range msgs {
		msgs[i] = newMessage(t, b.queue)
		msgs[i].Key = fmt.Sprintf("key-%d", i%keys)
		msgs[i].Body = []byte(fmt.Sprintf("%d", i/keys)) // sequence within the key
	}
	if err := b.tr.SendBatch(context.Background(), msgs); err != nil {
		t.Fatalf("SendBatch: %v", err)
	}
	if got := b.count(t, b.queue); got != n {
		t.Fatalf("queue holds %d messages after the confirms, want %d", got, n)
	}

	next := make(map[string]int)
	for i, d := range b.receive(t, b.queue, n) {
		if d.MessageId != msgs[i].ID.String() {
			t.Fatalf("delivery %d is %s, want %s: publish order lost", i, d.MessageId, msgs[i].ID)
		}
		key, _ := d.Headers[relayeramqp.HeaderKey].(string)
		if want := fmt.Sprint(next[key]); string(d.Body) != want {
			t.Fatalf("key %s: got sequence %s, want %s", key, d.Body, want)
		}
		next[key]++
	}
	if len(next) != keys {
		t.Errorf("saw %d keys, want %d", len(next), keys)
	}
}

func TestSendBatchRefusesMoreThanMaxBatchSize(t *testing.T) {
	t.Parallel()
	b := setup(t, relayeramqp.Options{MaxBatchSize: 3})
	msgs := []*relayer.Message{newMessage(t, b.queue), newMessage(t, b.queue), newMessage(t, b.queue), newMessage(t, b.queue)}
	if err := b.tr.SendBatch(context.Background(), msgs); err == nil || !strings.Contains(err.Error(), "MaxBatchSize") {
		t.Errorf("SendBatch of 4 with MaxBatchSize 3 = %v", err)
	}
	if err := b.tr.SendBatch(context.Background(), msgs[:3]); err != nil {
		t.Errorf("SendBatch of 3: %v", err)
	}
	if got := b.count(t, b.queue); got != 3 {
		t.Errorf("queue holds %d messages, want 3", got)
	}
	if err := b.tr.SendBatch(context.Background(), nil); err != nil {
		t.Errorf("empty SendBatch: %v", err)
	}
}

func TestUnroutableMessagesFail(t *testing.T) {
	t.Parallel()
	b := setup(t, relayeramqp.Options{})
	nowhere := uniqueName(t, "nowhere")

	err := b.tr.Send(context.Background(), newMessage(t, nowhere))
	var ret *relayeramqp.ReturnError
	if !errors.Is(err, relayer.ErrUnavailable) || !errors.As(err, &ret) {
		t.Fatalf("Send to an unbound routing key = %v, want a ReturnError wrapping ErrUnavailable", err)
	}
	if ret.RoutingKey != nowhere || ret.Code != amqp.NoRoute {
		t.Errorf("ReturnError = %+v", ret)
	}

	msgs := []*relayer.Message{newMessage(t, b.queue), newMessage(t, nowhere), newMessage(t, b.queue), newMessage(t, nowhere)}
	err = b.tr.SendBatch(context.Background(), msgs)
	var batchErr *relayer.BatchError
	if !errors.As(err, &batchErr) || len(batchErr.Errs) != len(msgs) {
		t.Fatalf("SendBatch = %v, want a BatchError for %d messages", err, len(msgs))
	}
	for i, err := range batchErr.Errs {
		if wantFailed := i%2 == 1; wantFailed != (err != nil) || wantFailed && !errors.As(err, &ret) {
			t.Errorf("Errs[%d] = %v", i, err)
		}
	}
	if got := b.count(t, b.queue); got != 2 {
		t.Errorf("queue holds %d messages, want the 2 routable ones", got)
	}

	// The channel stays usable after returns.
	if err := b.tr.Send(context.Background(), newMessage(t, b.queue)); err != nil {
		t.Errorf("Send after returns: %v", err)
	}
}

func TestAllowUnroutable(t *testing.T) {
	t.Parallel()
	b := setup(t, relayeramqp.Options{AllowUnroutable: true})
	if err := b.tr.Send(context.Background(), newMessage(t, uniqueName(t, "nowhere"))); err != nil {
		t.Errorf("Send of a non-mandatory unroutable message = %v, want nil", err)
	}
}

func TestNacksFail(t *testing.T) {
	t.Parallel()
	b := setup(t, relayeramqp.Options{})
	full := b.declareQueue(t, amqp.Table{"x-max-length": int32(1), "x-overflow": "reject-publish"})
	if err := b.tr.Send(context.Background(), newMessage(t, full)); err != nil {
		t.Fatalf("first Send: %v", err)
	}
	err := b.tr.Send(context.Background(), newMessage(t, full))
	if !errors.Is(err, relayeramqp.ErrNacked) || !errors.Is(err, relayer.ErrUnavailable) {
		t.Fatalf("Send to a full reject-publish queue = %v, want ErrNacked and ErrUnavailable", err)
	}
	msgs := []*relayer.Message{newMessage(t, b.queue), newMessage(t, full), newMessage(t, b.queue)}
	err = b.tr.SendBatch(context.Background(), msgs)
	var batchErr *relayer.BatchError
	if !errors.As(err, &batchErr) || batchErr.Failed(0) || !batchErr.Failed(1) || batchErr.Failed(2) {
		t.Fatalf("SendBatch = %#v, want only message 1 failed", err)
	}
	if !errors.Is(batchErr.Errs[1], relayeramqp.ErrNacked) {
		t.Errorf("Errs[1] = %v", batchErr.Errs[1])
	}
}

func TestMessagesAMQPCannotCarryFailPermanently(t *testing.T) {
	t.Parallel()
	b := setup(t, relayeramqp.Options{})
	long := strings.Repeat("n", 256)

	badHeader := newMessage(t, b.queue)
	badHeader.Headers = []headers.Header{{Name: "ok", Value: []byte("1")}, {Name: long, Value: []byte("v")}}
	badType := newMessage(t, b.queue)
	badType.Type = long
	badDestination := newMessage(t, long)
	for name, msg := range map[string]*relayer.Message{"header": badHeader, "type": badType, "destination": badDestination, "nil": nil} {
		err := b.tr.Send(context.Background(), msg)
		if !errors.Is(err, relayer.ErrPermanent) {
			t.Errorf("%s: Send = %v, want ErrPermanent", name, err)
		}
		if name == "header" && (err == nil || !strings.Contains(err.Error(), `header "nnnn`)) {
			t.Errorf("the error does not name the header: %v", err)
		}
	}

	msgs := []*relayer.Message{newMessage(t, b.queue), badHeader, newMessage(t, b.queue)}
	err := b.tr.SendBatch(context.Background(), msgs)
	var batchErr *relayer.BatchError
	if !errors.As(err, &batchErr) || batchErr.Failed(0) || !batchErr.Failed(1) || batchErr.Failed(2) {
		t.Fatalf("SendBatch = %v, want only message 1 failed", err)
	}
	if got := b.count(t, b.queue); got != 2 {
		t.Errorf("queue holds %d messages, want the 2 valid ones", got)
	}
}

func TestDestinationIsTheRoutingKeyVerbatim(t *testing.T) {
	t.Parallel()
	b := setup(t, relayeramqp.Options{})
	q, err := b.ch.QueueDeclare(b.queue+"/orders", false, true, true, false, nil)
	if err != nil {
		t.Fatal(err)
	}
	if err := b.tr.Send(context.Background(), newMessage(t, q.Name)); err != nil {
		t.Fatalf("Send to %q: %v", q.Name, err)
	}
	if d := b.receive(t, q.Name, 1)[0]; d.RoutingKey != q.Name || d.Exchange != "" {
		t.Errorf("delivered with exchange %q routing key %q", d.Exchange, d.RoutingKey)
	}
}

func TestContextCancellation(t *testing.T) {
	t.Parallel()
	b := setup(t, relayeramqp.Options{})

	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if err := b.tr.Send(ctx, newMessage(t, b.queue)); !errors.Is(err, context.Canceled) {
		t.Errorf("Send with a cancelled context = %v", err)
	}
	if err := b.tr.SendBatch(ctx, []*relayer.Message{newMessage(t, b.queue), newMessage(t, b.queue)}); !errors.Is(err, context.Canceled) {
		t.Errorf("SendBatch with a cancelled context = %v", err)
	}
	if got := b.count(t, b.queue); got != 0 {
		t.Fatalf("queue holds %d messages after cancelled sends", got)
	}

	// A context cancelled while a batch is being published: the call returns
	// promptly, confirmed messages succeed and the rest fail with the
	// context's error.
	msgs := make([]*relayer.Message, relayeramqp.MaxBatchSizeDefault)
	for i := range msgs {
		msgs[i] = newMessage(t, b.queue)
		msgs[i].Body = make([]byte, 16<<10)
	}
	const publishes = 100
	start := time.Now()
	err := b.tr.SendBatch(cancelAfter(publishes), msgs)
	if elapsed := time.Since(start); elapsed > 5*time.Second {
		t.Errorf("SendBatch took %v", elapsed)
	}
	var batchErr *relayer.BatchError
	if !errors.As(err, &batchErr) || len(batchErr.Errs) != len(msgs) {
		t.Fatalf("SendBatch cancelled while publishing = %v, want a BatchError", err)
	}
	confirmed := 0
	for i, err := range batchErr.Errs {
		switch {
		case err == nil && i >= publishes:
			t.Errorf("message %d succeeded, but only %d were published", i, publishes)
		case err == nil:
			confirmed++
		case !errors.Is(err, context.Canceled):
			t.Errorf("Errs[%d] = %v, want the cancellation", i, err)
		}
	}
	if got := b.count(t, b.queue); got < confirmed || got > publishes {
		t.Errorf("queue holds %d messages; %d were confirmed of %d published", got, confirmed, publishes)
	}
	t.Logf("%d of %d published messages confirmed before the cancellation", confirmed, publishes)

	// The next send gets a channel without the abandoned confirms.
	if err := b.tr.Send(context.Background(), newMessage(t, b.queue)); err != nil {
		t.Errorf("Send after an abandoned batch: %v", err)
	}
}

// cancelAfter returns a context that cancels itself on its n+1st Err call.
// The transport checks its context once when a send starts and before each
// publish, so the context ends after n publishes.
func cancelAfter(n int) context.Context {
	ctx, cancel := context.WithCancel(context.Background())
	c := &countdownContext{Context: ctx, cancel: cancel}
	c.left.Store(int64(n) + 1)
	return c
}

type countdownContext struct {
	context.Context
	cancel context.CancelFunc
	left   atomic.Int64
}

func (c *countdownContext) Err() error {
	if c.left.Add(-1) < 0 {
		c.cancel()
	}
	return c.Context.Err()
}

func TestClosedChannelIsReplaced(t *testing.T) {
	t.Parallel()
	conn := connect(t)
	ch, err := conn.Channel()
	if err != nil {
		t.Fatal(err)
	}
	b := &testBundle{conn: conn, ch: ch}
	b.queue = b.declareQueue(t, nil)
	// Auto-deleted with its last binding, which goes with the test's queue.
	exchange := uniqueName(t, "exchange")
	declare := func() {
		t.Helper()
		if err := ch.ExchangeDeclare(exchange, amqp.ExchangeDirect, false, true, false, false, nil); err != nil {
			t.Fatal(err)
		}
		if err := ch.QueueBind(b.queue, "orders", exchange, false, nil); err != nil {
			t.Fatal(err)
		}
	}
	declare()
	tr, err := relayeramqp.New(conn, relayeramqp.Options{Exchange: exchange, Channels: 1})
	if err != nil {
		t.Fatal(err)
	}
	defer tr.Close()
	if err := tr.Send(context.Background(), newMessage(t, "orders")); err != nil {
		t.Fatalf("Send: %v", err)
	}

	// Publishing to a missing exchange makes the broker close the channel.
	if err := ch.ExchangeDelete(exchange, false, false); err != nil {
		t.Fatal(err)
	}
	err = tr.Send(context.Background(), newMessage(t, "orders"))
	if !errors.Is(err, relayer.ErrUnavailable) || !strings.Contains(err.Error(), "NOT_FOUND") {
		t.Fatalf("Send to a deleted exchange = %v, want ErrUnavailable with NOT_FOUND", err)
	}
	err = tr.SendBatch(context.Background(), []*relayer.Message{newMessage(t, "orders"), newMessage(t, "orders")})
	var batchErr *relayer.BatchError
	if !errors.As(err, &batchErr) || !batchErr.Failed(0) || !batchErr.Failed(1) || !errors.Is(err, relayer.ErrUnavailable) {
		t.Fatalf("SendBatch to a deleted exchange = %v, want both failed as unavailable", err)
	}

	declare()
	if err := tr.Send(context.Background(), newMessage(t, "orders")); err != nil {
		t.Fatalf("Send after the exchange is back: %v", err)
	}
	if err := tr.SendBatch(context.Background(), []*relayer.Message{newMessage(t, "orders"), newMessage(t, "orders")}); err != nil {
		t.Fatalf("SendBatch after the exchange is back: %v", err)
	}
	if got := b.count(t, b.queue); got != 4 {
		t.Errorf("queue holds %d messages, want 4", got)
	}
}

func TestClosedConnectionIsUnavailable(t *testing.T) {
	t.Parallel()
	conn := connect(t)
	tr, err := relayeramqp.New(conn, relayeramqp.Options{})
	if err != nil {
		t.Fatal(err)
	}
	if err := conn.Close(); err != nil {
		t.Fatal(err)
	}
	if err := tr.Send(context.Background(), newMessage(t, "anywhere")); !errors.Is(err, relayer.ErrUnavailable) {
		t.Errorf("Send on a closed connection = %v, want ErrUnavailable", err)
	}
	if err := tr.Close(); err != nil {
		t.Errorf("Close after the connection closed: %v", err)
	}
	if _, err := relayeramqp.New(conn, relayeramqp.Options{}); !errors.Is(err, relayer.ErrUnavailable) {
		t.Errorf("New on a closed connection = %v, want ErrUnavailable", err)
	}
}

func TestConcurrentSends(t *testing.T) {
	t.Parallel()
	b := setup(t, relayeramqp.Options{Channels: 2})
	const workers, sends = 8, 20
	var wg sync.WaitGroup
	errs := make(chan error, workers*sends)
	for w := range workers {
		wg.Go(func() {
			for i := range sends {
				var err error
				if i%4 == 0 {
					err = b.tr.SendBatch(context.Background(), []*relayer.Message{newMessage(t, b.queue), newMessage(t, b.queue)})
				} else {
					err = b.tr.Send(context.Background(), newMessage(t, b.queue))
				}
				if err != nil {
					errs <- fmt.Errorf("worker %d send %d: %w", w, i, err)
				}
			}
		})
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Error(err)
	}
	if got, want := b.count(t, b.queue), workers*sends*5/4; got != want {
		t.Errorf("queue holds %d messages, want %d", got, want)
	}
}

func TestClose(t *testing.T) {
	t.Parallel()
	b := setup(t, relayeramqp.Options{})
	if err := b.tr.Send(context.Background(), newMessage(t, b.queue)); err != nil {
		t.Fatal(err)
	}
	if err := b.tr.Close(); err != nil {
		t.Fatalf("Close: %v", err)
	}
	if err := b.tr.Close(); err != nil {
		t.Errorf("second Close: %v", err)
	}
	if err := b.tr.Send(context.Background(), newMessage(t, b.queue)); !errors.Is(err, relayeramqp.ErrClosed) {
		t.Errorf("Send after Close = %v, want ErrClosed", err)
	}
	if b.conn.IsClosed() {
		t.Error("Close closed the caller's connection")
	}
	if err := b.tr.Send(context.Background(), nil); !errors.Is(err, relayer.ErrPermanent) {
		t.Errorf("Send of nil after Close = %v", err)
	}
}

// TestNoGoroutineOutlivesClose runs alone (not in parallel), so that only the
// transport's goroutines can differ before and after. The connection's own
// goroutines exist before the snapshot.
func TestNoGoroutineOutlivesClose(t *testing.T) {
	conn := connect(t)
	ch, err := conn.Channel()
	if err != nil {
		t.Fatal(err)
	}
	b := &testBundle{conn: conn, ch: ch}
	b.queue = b.declareQueue(t, nil)
	defer goleak.VerifyNone(t, goleak.IgnoreCurrent())

	tr, err := relayeramqp.New(conn, relayeramqp.Options{})
	if err != nil {
		t.Fatal(err)
	}
	if err := tr.Send(context.Background(), newMessage(t, b.queue)); err != nil {
		t.Fatal(err)
	}
	// An abandoned batch makes the transport close its channel in the
	// background.
	msgs := make([]*relayer.Message, 100)
	for i := range msgs {
		msgs[i] = newMessage(t, b.queue)
		msgs[i].Body = make([]byte, 64<<10)
	}
	if err := tr.SendBatch(cancelAfter(10), msgs); err == nil {
		t.Fatal("SendBatch cancelled after 10 publishes succeeded")
	}
	if err := tr.Close(); err != nil {
		t.Fatal(err)
	}
	// Close waited for the background closes; a goroutine may still be
	// returning from its last deferred call, so allow it a moment to exit,
	// far less than any close of a channel takes.
	var left []byte
	testkit.Within(time.Second, func() bool {
		left = nil
		stacks := make([]byte, 1<<20)
		stacks = stacks[:runtime.Stack(stacks, true)]
		for g := range bytes.SplitSeq(stacks, []byte("\n\n")) {
			if bytes.Contains(g, []byte("/transport/amqp.(")) {
				left = g
			}
		}
		return left == nil
	})
	if left != nil {
		t.Errorf("a goroutine of the transport runs after Close:\n%s", left)
	}
}

// The transport names its broker and the server its connection is open to,
// for instrumentation.
func TestTransportDescribesItsServer(t *testing.T) {
	t.Parallel()
	b := setup(t, relayeramqp.Options{})
	if got := b.tr.MessagingSystem(); got != "rabbitmq" {
		t.Errorf("MessagingSystem = %q, want rabbitmq", got)
	}
	host, port := b.tr.ServerAddress()
	addr := b.conn.RemoteAddr().(*net.TCPAddr)
	if host != addr.IP.String() || port != addr.Port || port == 0 {
		t.Errorf("ServerAddress = %s, %d; want the connection's %s", host, port, addr)
	}
}
