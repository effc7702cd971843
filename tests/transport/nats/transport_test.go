package relayernats_test

import (
	"bytes"
	"context"
	"errors"
	"net/url"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/relayer-go/relayer"
	"github.com/relayer-go/relayer/headers"
	relayernats "github.com/relayer-go/relayer/transport/nats"
)

func headerOf(name, value string) headers.Header {
	return headers.Header{Name: name, Value: []byte(value)}
}

// binaryValue holds every byte NATS carries in a header value, framed so that
// it neither begins nor ends with a space or tab.
func binaryValue() []byte {
	v := []byte{'['}
	for b := range 256 {
		if b != '\r' && b != '\n' {
			v = append(v, byte(b))
		}
	}
	return append(v, ']', 0xff, 0xfe) // and a tail that is not UTF-8
}

// wantHeader is what a consumer sees for msg: each name's values in order,
// plus the headers the transport adds (the key as is: the tests' keys need
// no escaping).
func wantHeader(msg *relayer.Message) nats.Header {
	h := nats.Header{}
	for _, hd := range msg.Headers {
		h[hd.Name] = append(h[hd.Name], string(hd.Value))
	}
	h[jetstream.MsgIDHeader] = []string{msg.ID.String()}
	h[relayer.HeaderMessageID] = append(h[relayer.HeaderMessageID], msg.ID.String())
	h[relayer.HeaderMessageType] = append(h[relayer.HeaderMessageType], msg.Type)
	if msg.Key != "" {
		h[relayer.HeaderKey] = append(h[relayer.HeaderKey], msg.Key)
	}
	return h
}

func checkDelivered(t *testing.T, got jetstream.Msg, want *relayer.Message) {
	t.Helper()
	if got.Subject() != want.Destination {
		t.Errorf("subject = %q, want %q", got.Subject(), want.Destination)
	}
	if !bytes.Equal(got.Data(), want.Body) {
		t.Errorf("body = %q, want %q", got.Data(), want.Body)
	}
	id, err := relayernats.MessageID(got.Headers())
	if err != nil || id != want.ID {
		t.Errorf("MessageID = %v, %v; want %v", id, err, want.ID)
	}
	if typ := relayernats.MessageType(got.Headers()); typ != want.Type {
		t.Errorf("MessageType = %q, want %q", typ, want.Type)
	}
	wantH := wantHeader(want)
	for name, vs := range got.Headers() {
		if !slices.Equal(vs, wantH[name]) {
			t.Errorf("header %q = %q, want %q", name, vs, wantH[name])
		}
	}
	for name, vs := range wantH {
		if _, ok := got.Headers()[name]; !ok {
			t.Errorf("header %q missing, want %q", name, vs)
		}
	}
}

func TestSendRoundTrip(t *testing.T) {
	t.Parallel()

	servers := map[string]func(t *testing.T) string{
		"server":   serverURL, // the local server when there is one
		"embedded": startEmbedded,
	}
	for name, url := range servers {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			b := setup(t, setupOpts{url: url(t)})
			msg := newMessage(t, b.subject("orders.placed"), "orders.OrderPlaced", []byte(`{"id":42}`),
				"content-type", "application/json",
				"x-dup", "first",
				"X-Other", "between the duplicates",
				"x-dup", "second",
				"x-dup", "first", // an exact duplicate stays
				"x-empty", "",
				"X-Case", "upper",
				"x-case", "lower", // names are case-sensitive
				"x-inner-space", "a  b\tc",
				"x-utf8", "Grüße, 世界",
			)
			msg.Headers = append(msg.Headers, headers.Header{Name: "x-binary", Value: binaryValue()})
			msg.Key = "customer-7"

			if err := b.tr.Send(testContext(t), msg); err != nil {
				t.Fatalf("Send: %v", err)
			}
			got := b.fetch(t, 1)
			checkDelivered(t, got[0], msg)
			if vs := got[0].Headers()["x-dup"]; !slices.Equal(vs, []string{"first", "second", "first"}) {
				t.Errorf("x-dup = %q, want first, second, first", vs)
			}
		})
	}
}

func TestSendReplayIsStoredOnce(t *testing.T) {
	t.Parallel()
	b := setup(t, setupOpts{})
	ctx := testContext(t)
	msg := newMessage(t, b.subject("replay"), "Replayed", []byte("original"))
	for i := range 2 {
		if err := b.tr.Send(ctx, msg); err != nil {
			t.Fatalf("Send %d: %v", i, err)
		}
	}
	// Deduplication goes by id alone: a changed copy is dropped as well, and
	// so is a replay inside a batch.
	changed := *msg
	changed.Body = []byte("changed")
	if err := b.tr.Send(ctx, &changed); err != nil {
		t.Fatalf("Send changed copy: %v", err)
	}
	other := newMessage(t, b.subject("replay"), "Other", []byte("other"))
	if err := b.tr.SendBatch(ctx, []*relayer.Message{msg, other, msg}); err != nil {
		t.Fatalf("SendBatch: %v", err)
	}
	if n := b.stored(t); n != 2 {
		t.Fatalf("stream holds %d messages, want 2", n)
	}
	got := b.fetch(t, 2)
	checkDelivered(t, got[0], msg)
	checkDelivered(t, got[1], other)
}

// recordingJS notes the order of asynchronous publishes and of waits for
// their acknowledgements.
type recordingJS struct {
	jetstream.JetStream
	mu     sync.Mutex
	events []string
}

func (r *recordingJS) note(event string) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.events = append(r.events, event)
}

func (r *recordingJS) PublishMsg(ctx context.Context, m *nats.Msg, opts ...jetstream.PublishOpt) (*jetstream.PubAck, error) {
	r.note("sync")
	return r.JetStream.PublishMsg(ctx, m, opts...)
}

func (r *recordingJS) PublishMsgAsync(m *nats.Msg, opts ...jetstream.PublishOpt) (jetstream.PubAckFuture, error) {
	r.note("publish")
	f, err := r.JetStream.PublishMsgAsync(m, opts...)
	if err != nil {
		return nil, err
	}
	return recordingFuture{f, r}, nil
}

type recordingFuture struct {
	jetstream.PubAckFuture
	r *recordingJS
}

func (f recordingFuture) Ok() <-chan *jetstream.PubAck {
	f.r.note("await")
	return f.PubAckFuture.Ok()
}

func TestSendBatchAwaitsAcksTogether(t *testing.T) {
	t.Parallel()
	b := setup(t, setupOpts{})
	rec := &recordingJS{JetStream: b.js}
	tr, err := relayernats.New(rec, relayernats.Options{})
	if err != nil {
		t.Fatal(err)
	}
	msgs := make([]*relayer.Message, relayernats.MaxBatchSizeDefault)
	for i := range msgs {
		msgs[i] = newMessage(t, b.subject("awaited"), "Awaited", []byte("x"))
	}
	if err := tr.SendBatch(testContext(t), msgs); err != nil {
		t.Fatal(err)
	}
	rec.mu.Lock()
	defer rec.mu.Unlock()
	first := slices.Index(rec.events, "await")
	if first != len(msgs) || slices.Contains(rec.events, "sync") {
		t.Fatalf("first wait for an acknowledgement after %d of %d publishes (events %v)", first, len(msgs), rec.events[:min(len(rec.events), 10)])
	}
	if n := b.stored(t); n != uint64(len(msgs)) {
		t.Fatalf("stream holds %d messages, want %d", n, len(msgs))
	}
}

func TestSendBatchBeyondMaxPending(t *testing.T) {
	t.Parallel()
	b := setup(t, setupOpts{})
	js, err := jetstream.New(b.nc, jetstream.WithPublishAsyncMaxPending(8))
	if err != nil {
		t.Fatal(err)
	}
	tr, err := relayernats.New(js, relayernats.Options{MaxBatchSize: 300})
	if err != nil {
		t.Fatal(err)
	}
	msgs := make([]*relayer.Message, 300)
	for i := range msgs {
		msgs[i] = newMessage(t, b.subject("pending"), "Pending", []byte(strconv.Itoa(i)))
	}
	if err := tr.SendBatch(testContext(t), msgs); err != nil {
		t.Fatalf("SendBatch: %v", err)
	}
	for i, m := range b.fetch(t, len(msgs)) {
		checkDelivered(t, m, msgs[i])
	}
}

func TestSendRefusesHeadersNATSCannotCarry(t *testing.T) {
	t.Parallel()
	b := setup(t, setupOpts{})
	ctx := testContext(t)

	cases := []struct {
		name, value string
		body        string
	}{
		{name: "", value: "v"},
		{name: "x:y", value: "v"},
		{name: "x y", value: "v"},
		{name: "x\ty", value: "v"},
		{name: "x/y", value: "v"},
		{name: "x\x00", value: "v"},
		{name: "x\x7f", value: "v"},
		{name: "grüße", value: "v"},
		{name: "x-cr", value: "a\rb"},
		{name: "x-lf", value: "a\nb"},
		{name: "x-crlf", value: "a\r\nb"},
		{name: "x-lead", value: " a"},
		{name: "x-trail", value: "a "},
		{name: "x-tab", value: "\ta"},
		{name: "x-blank", value: "   "},
		{name: "Nats-Msg-Id", value: "0190c5a4-0000-7000-8000-000000000000"},
		{name: "Nats-Expected-Last-Sequence", value: "3"},
		{name: "nats-ttl", value: "1s"},
		{name: "Status", value: "404"}, // with an empty body only
	}
	for _, c := range cases {
		msg := newMessage(t, b.subject("refused"), "Refused", []byte(c.body), "x-fine", "fine", c.name, c.value)
		err := b.tr.Send(ctx, msg)
		if !errors.Is(err, relayer.ErrPermanent) {
			t.Errorf("header %q: %q: Send = %v, want ErrPermanent", c.name, c.value, err)
			continue
		}
		var he *relayernats.HeaderError
		if !errors.As(err, &he) || he.Name != c.name || he.Index != 1 {
			t.Errorf("header %q: error %v does not name header 1", c.name, err)
		}
		if !strings.Contains(err.Error(), strconv.Quote(c.name)) {
			t.Errorf("header %q: error %q does not name it", c.name, err)
		}
	}

	typed := newMessage(t, b.subject("refused"), "Bad\nType", []byte("x"))
	err := b.tr.Send(ctx, typed)
	var he *relayernats.HeaderError
	if !errors.Is(err, relayer.ErrPermanent) || !errors.As(err, &he) || he.Name != relayer.HeaderMessageType || he.Index != -1 {
		t.Errorf("type with a line break: Send = %v, want a HeaderError for %s", err, relayer.HeaderMessageType)
	}

	if n := b.stored(t); n != 0 {
		t.Fatalf("stream holds %d messages, want none", n)
	}

	// A Status header with a body is an ordinary header.
	ok := newMessage(t, b.subject("status"), "Status", []byte("body"), "Status", "404")
	if err := b.tr.Send(ctx, ok); err != nil {
		t.Fatalf("Status header with a body: %v", err)
	}
	checkDelivered(t, b.fetch(t, 1)[0], ok)
}

// TestHeaderRulesMatchNATS checks the refusals against nats.go itself: a name
// is refused exactly when the client refuses it, and a value exactly when the
// value would not arrive unchanged.
func TestHeaderRulesMatchNATS(t *testing.T) {
	t.Parallel()
	b := setup(t, setupOpts{})
	ctx := testContext(t)
	orphan := "relayer-test-orphan." + uniqueToken(t)
	refused := func(hd headers.Header) bool {
		msg := newMessage(t, b.subject("rules"), "Rules", []byte("x"))
		msg.Headers = []headers.Header{hd}
		msg.Destination = orphan // accepted headers fail fast with no responders
		err := b.tr.Send(ctx, msg)
		var he *relayernats.HeaderError
		return errors.As(err, &he)
	}

	for c := range 256 {
		name := "X-" + string([]byte{byte(c)}) + "-Y"
		err := b.nc.PublishMsg(&nats.Msg{Subject: b.subject("void"), Header: nats.Header{name: {"v"}}})
		if natsRefuses := errors.Is(err, nats.ErrBadHeaderMsg); natsRefuses != refused(headerOf(name, "v")) {
			t.Errorf("name %q: nats.go refuses: %v (%v); relayernats disagrees", name, natsRefuses, err)
		}
	}

	// Values: send each candidate over core NATS and compare what arrives.
	sub, err := b.nc.SubscribeSync(b.subject("values"))
	if err != nil {
		t.Fatal(err)
	}
	var candidates []string
	for c := range 256 {
		ch := string([]byte{byte(c)})
		candidates = append(candidates, ch, "a"+ch+"z", "a"+ch, ch+"z")
	}
	for _, v := range candidates {
		if err := b.nc.PublishMsg(&nats.Msg{Subject: b.subject("values"), Header: nats.Header{"X-V": {v}}}); err != nil {
			t.Fatal(err)
		}
		got, err := sub.NextMsg(5 * time.Second)
		if err != nil {
			t.Fatal(err)
		}
		unchanged := slices.Equal(got.Header["X-V"], []string{v})
		if r := refused(headerOf("X-V", v)); r == unchanged {
			t.Errorf("value %q arrives as %q, yet relayernats refuses it: %v", v, got.Header["X-V"], r)
		}
	}
}

func TestSendBatchReportsFailedIndexes(t *testing.T) {
	t.Parallel()
	const streamLimit = 1024
	b := setup(t, setupOpts{stream: func(c *jetstream.StreamConfig) { c.MaxMsgSize = streamLimit }})
	ctx := testContext(t)

	msgs := make([]*relayer.Message, 10)
	for i := range msgs {
		msgs[i] = newMessage(t, b.subject("partial"), "Partial", []byte("ok-"+strconv.Itoa(i)))
	}
	msgs[2].Body = bytes.Repeat([]byte("s"), 2*streamLimit)                                // the stream refuses it
	msgs[5].Body = bytes.Repeat([]byte("p"), int(b.nc.MaxPayload())+1)                     // the client refuses it
	msgs[7].Headers = []headers.Header{headerOf("x-fine", "1"), headerOf("bad:name", "v")} // never published

	err := b.tr.SendBatch(ctx, msgs)
	var be *relayer.BatchError
	if !errors.As(err, &be) {
		t.Fatalf("SendBatch = %v, want a *relayer.BatchError", err)
	}
	if len(be.Errs) != len(msgs) {
		t.Fatalf("BatchError has %d entries, want %d", len(be.Errs), len(msgs))
	}
	for i, e := range be.Errs {
		wantFail := i == 2 || i == 5 || i == 7
		if be.Failed(i) != wantFail {
			t.Errorf("message %d: failed = %v (%v), want %v", i, be.Failed(i), e, wantFail)
		}
		if wantFail && !errors.Is(e, relayer.ErrPermanent) {
			t.Errorf("message %d: %v, want ErrPermanent", i, e)
		}
	}
	var he *relayernats.HeaderError
	if !errors.As(be.Errs[7], &he) || he.Name != "bad:name" {
		t.Errorf("message 7: %v, want a HeaderError naming bad:name", be.Errs[7])
	}
	if !errors.Is(be.Errs[2], jetstream.ErrStreamMessageExceedsMaximum) || !errors.Is(be.Errs[5], nats.ErrMaxPayload) {
		t.Errorf("causes lost: %v; %v", be.Errs[2], be.Errs[5])
	}

	got := b.fetch(t, 7)
	var want []*relayer.Message
	for i, m := range msgs {
		if !be.Failed(i) {
			want = append(want, m)
		}
	}
	for i := range got {
		checkDelivered(t, got[i], want[i])
	}
	if n := b.stored(t); n != 7 {
		t.Fatalf("stream holds %d messages, want 7", n)
	}
}

func TestSendBatchLargerThanMaxBatchSize(t *testing.T) {
	t.Parallel()
	b := setup(t, setupOpts{transport: relayernats.Options{MaxBatchSize: 3}})
	msgs := make([]*relayer.Message, 4)
	for i := range msgs {
		msgs[i] = newMessage(t, b.subject("big"), "Big", []byte("x"))
	}
	err := b.tr.SendBatch(testContext(t), msgs)
	var be *relayer.BatchError
	if err == nil || errors.As(err, &be) || !strings.Contains(err.Error(), "MaxBatchSize") {
		t.Fatalf("SendBatch = %v, want a whole-batch error naming MaxBatchSize", err)
	}
	if err := b.tr.SendBatch(testContext(t), nil); err != nil {
		t.Fatalf("empty batch: %v", err)
	}
	if n := b.stored(t); n != 0 {
		t.Fatalf("stream holds %d messages, want none", n)
	}
}

func TestSendWithoutStreamIsUnavailable(t *testing.T) {
	t.Parallel()
	b := setup(t, setupOpts{})
	ctx := testContext(t)
	orphan := "relayer-test-orphan." + uniqueToken(t) // no stream, no subscriber

	start := time.Now()
	err := b.tr.Send(ctx, newMessage(t, orphan, "Orphan", []byte("x")))
	if !errors.Is(err, relayer.ErrUnavailable) || !errors.Is(err, jetstream.ErrNoStreamResponse) {
		t.Fatalf("Send = %v, want ErrUnavailable after no responders", err)
	}
	if took := time.Since(start); took > 2*time.Second {
		t.Errorf("Send took %v; no responders should fail at once", took)
	}

	err = b.tr.SendBatch(ctx, []*relayer.Message{
		newMessage(t, orphan, "Orphan", []byte("x")),
		newMessage(t, b.subject("kept"), "Kept", []byte("y")),
	})
	var be *relayer.BatchError
	if !errors.As(err, &be) || !be.Failed(0) || be.Failed(1) || !errors.Is(be.Errs[0], relayer.ErrUnavailable) {
		t.Fatalf("SendBatch = %v, want only message 0 failed with ErrUnavailable", err)
	}
}

func TestSendObservesContext(t *testing.T) {
	t.Parallel()
	b := setup(t, setupOpts{})
	// A subscriber that never answers: publishes reach a responder, and no
	// acknowledgement ever comes back.
	silent := "relayer-test-silent." + uniqueToken(t)
	sub, err := b.nc.SubscribeSync(silent)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = sub.Unsubscribe() })

	t.Run("deadline", func(t *testing.T) {
		ctx, cancel := context.WithTimeout(t.Context(), 200*time.Millisecond)
		defer cancel()
		start := time.Now()
		var err error
		within(t, 5*time.Second, func() { err = b.tr.Send(ctx, newMessage(t, silent, "Silent", []byte("x"))) })
		took := time.Since(start)
		if !errors.Is(err, context.DeadlineExceeded) || !errors.Is(err, relayer.ErrUnavailable) {
			t.Errorf("Send = %v, want DeadlineExceeded marked ErrUnavailable", err)
		}
		if took > 2*time.Second {
			t.Errorf("Send returned after %v, deadline was 200ms", took)
		}
	})
	t.Run("cancel", func(t *testing.T) {
		ctx, cancel := context.WithCancel(t.Context())
		time.AfterFunc(100*time.Millisecond, cancel)
		start := time.Now()
		var err error
		within(t, 5*time.Second, func() { err = b.tr.Send(ctx, newMessage(t, silent, "Silent", []byte("x"))) })
		if !errors.Is(err, context.Canceled) || errors.Is(err, relayer.ErrUnavailable) {
			t.Errorf("Send = %v, want Canceled without a mark", err)
		}
		if took := time.Since(start); took > 2*time.Second {
			t.Errorf("Send returned %v after cancellation", took)
		}
	})
	t.Run("batch", func(t *testing.T) {
		msgs := make([]*relayer.Message, 50)
		for i := range msgs {
			msgs[i] = newMessage(t, silent, "Silent", []byte("x"))
		}
		msgs[10].Destination = b.subject("acked") // this one is acknowledged
		ctx, cancel := context.WithCancel(t.Context())
		time.AfterFunc(200*time.Millisecond, cancel)
		start := time.Now()
		var err error
		within(t, 5*time.Second, func() { err = b.tr.SendBatch(ctx, msgs) })
		if took := time.Since(start); took > 2*time.Second {
			t.Errorf("SendBatch returned %v after cancellation", took)
		}
		var be *relayer.BatchError
		if !errors.As(err, &be) || !errors.Is(err, context.Canceled) {
			t.Fatalf("SendBatch = %v, want a BatchError with Canceled", err)
		}
		for i := range msgs {
			if be.Failed(i) != (i != 10) {
				t.Errorf("message %d: failed = %v", i, be.Failed(i))
			}
		}
	})
	t.Run("stalled", func(t *testing.T) {
		// Two acknowledgements pending fill the JetStream context; the third
		// publish waits for a free slot until the context ends.
		js, err := jetstream.New(b.nc, jetstream.WithPublishAsyncMaxPending(2))
		if err != nil {
			t.Fatal(err)
		}
		tr, err := relayernats.New(js, relayernats.Options{})
		if err != nil {
			t.Fatal(err)
		}
		msgs := make([]*relayer.Message, 5)
		for i := range msgs {
			msgs[i] = newMessage(t, silent, "Silent", []byte("x"))
		}
		ctx, cancel := context.WithCancel(t.Context())
		time.AfterFunc(200*time.Millisecond, cancel)
		start := time.Now()
		within(t, 5*time.Second, func() { err = tr.SendBatch(ctx, msgs) })
		if took := time.Since(start); took > 2*time.Second {
			t.Errorf("SendBatch returned %v after cancellation", took)
		}
		var be *relayer.BatchError
		if !errors.As(err, &be) || !errors.Is(err, context.Canceled) || !errors.Is(be.Errs[2], jetstream.ErrTooManyStalledMsgs) {
			t.Fatalf("SendBatch = %v, want a BatchError with Canceled, message 2 stalled", err)
		}
		for i := range msgs {
			if !be.Failed(i) {
				t.Errorf("message %d did not fail", i)
			}
		}
	})
	t.Run("done before", func(t *testing.T) {
		ctx, cancel := context.WithCancel(t.Context())
		cancel()
		msgs := []*relayer.Message{newMessage(t, silent, "Silent", []byte("x"))}
		if err := b.tr.SendBatch(ctx, msgs); !errors.Is(err, context.Canceled) {
			t.Errorf("SendBatch = %v, want Canceled", err)
		}
		if err := b.tr.Send(ctx, msgs[0]); !errors.Is(err, context.Canceled) {
			t.Errorf("Send = %v, want Canceled", err)
		}
	})
	// Nothing of "done before" was published; the other subtests' messages
	// were: 2 sends, 49 of the batch and the 2 before the stall.
	if err := b.nc.Flush(); err != nil {
		t.Fatal(err)
	}
	if n, _, err := sub.Pending(); err != nil || n != 53 {
		t.Errorf("silent subscriber got %d messages (%v), want 53", n, err)
	}
}

// within runs f and fails the test if it has not returned after d.
func within(t *testing.T, d time.Duration, f func()) {
	t.Helper()
	done := make(chan struct{})
	go func() {
		defer close(done)
		f()
	}()
	select {
	case <-done:
	case <-time.After(d):
		t.Fatalf("still running after %v", d)
	}
}

func TestStreamOption(t *testing.T) {
	t.Parallel()
	b := setup(t, setupOpts{transport: relayernats.Options{Stream: "-"}})
	other := setup(t, setupOpts{url: b.url})
	ctx := testContext(t)

	caps, err := b.tr.Capabilities(ctx, b.subject("mine"))
	if err != nil || caps != (relayer.Capabilities{OrderedByKey: true, MaxBatchSize: relayernats.MaxBatchSizeDefault}) {
		t.Fatalf("Capabilities = %+v, %v", caps, err)
	}
	for subject, why := range map[string]string{
		other.subject("theirs"):                 "captured by stream",
		"relayer-test-orphan." + uniqueToken(t): "no stream captures it",
	} {
		_, err := b.tr.Capabilities(ctx, subject)
		if !errors.Is(err, relayer.ErrUnavailable) || !strings.Contains(err.Error(), why) {
			t.Errorf("Capabilities(%q) = %v, want ErrUnavailable: %s", subject, err, why)
		}
	}

	// The server refuses a subject of another stream instead of storing it
	// there.
	err = b.tr.Send(ctx, newMessage(t, other.subject("theirs"), "Misrouted", []byte("x")))
	var apiErr *jetstream.APIError
	if !errors.Is(err, relayer.ErrUnavailable) || !errors.As(err, &apiErr) || apiErr.ErrorCode != 10060 {
		t.Fatalf("Send to another stream's subject = %v, want ErrUnavailable after error 10060", err)
	}
	if n := other.stored(t); n != 0 {
		t.Fatalf("other stream holds %d messages, want none", n)
	}
	mine := newMessage(t, b.subject("mine"), "Mine", []byte("x"))
	if err := b.tr.Send(ctx, mine); err != nil {
		t.Fatalf("Send: %v", err)
	}
	got := b.fetch(t, 1)[0]
	if s := got.Headers()[jetstream.ExpectedStreamHeader]; len(s) > 0 && s[0] != b.tr.Options().Stream {
		t.Errorf("%s = %q", jetstream.ExpectedStreamHeader, s)
	}
	if id, err := relayernats.MessageID(got.Headers()); err != nil || id != mine.ID {
		t.Errorf("MessageID = %v, %v", id, err)
	}
}

func TestCapabilitiesAndSubjects(t *testing.T) {
	t.Parallel()
	b := setup(t, setupOpts{transport: relayernats.Options{MaxBatchSize: 42}})
	ctx := testContext(t)
	caps, err := b.tr.Capabilities(ctx, "any.subject")
	if err != nil || caps != (relayer.Capabilities{OrderedByKey: true, MaxBatchSize: 42}) {
		t.Fatalf("Capabilities = %+v, %v", caps, err)
	}
	for _, subject := range []string{"", "a..b", ".a", "a.", "a.*", "a.>", "a b", "a\tb"} {
		if _, err := b.tr.Capabilities(ctx, subject); !errors.Is(err, relayer.ErrPermanent) {
			t.Errorf("Capabilities(%q) = %v, want ErrPermanent", subject, err)
		}
		if err := b.tr.Send(ctx, newMessage(t, subject, "Bad", nil)); !errors.Is(err, relayer.ErrPermanent) {
			t.Errorf("Send to %q = %v, want ErrPermanent", subject, err)
		}
	}
	nilID := newMessage(t, b.subject("nil"), "Nil", []byte("x"))
	nilID.ID = [16]byte{}
	if err := b.tr.Send(ctx, nilID); !errors.Is(err, relayer.ErrPermanent) {
		t.Errorf("Send with the nil id = %v, want ErrPermanent", err)
	}
	if n := b.stored(t); n != 0 {
		t.Fatalf("stream holds %d messages, want none", n)
	}
}

func TestNewValidatesOptions(t *testing.T) {
	t.Parallel()
	nc, err := nats.Connect(serverURL(t))
	if err != nil {
		t.Fatal(err)
	}
	defer nc.Close()
	js, err := jetstream.New(nc)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := relayernats.New(nil, relayernats.Options{}); !errors.Is(err, relayernats.ErrInvalidOptions) {
		t.Errorf("New(nil) = %v", err)
	}
	for _, o := range []relayernats.Options{
		{MaxBatchSize: -1}, {MaxBatchSize: relayernats.MaxBatchSizeMax + 1},
		{Stream: "a.b"}, {Stream: "a b"}, {Stream: "a*"}, {Stream: "a/b"},
	} {
		_, err := relayernats.New(js, o)
		if !errors.Is(err, relayernats.ErrInvalidOptions) {
			t.Errorf("New(%+v) = %v, want ErrInvalidOptions", o, err)
			continue
		}
		field := "MaxBatchSize"
		if o.Stream != "" {
			field = "Stream"
		}
		if !strings.Contains(err.Error(), field) {
			t.Errorf("New(%+v) = %v, does not name %s", o, err, field)
		}
	}
	tr, err := relayernats.New(js, relayernats.Options{MaxBatchSize: relayernats.MaxBatchSizeMax})
	if err != nil || tr.Options().MaxBatchSize != relayernats.MaxBatchSizeMax {
		t.Errorf("New(max) = %v", err)
	}
	tr, err = relayernats.New(js, relayernats.Options{})
	if err != nil || tr.Options().MaxBatchSize != relayernats.MaxBatchSizeDefault {
		t.Errorf("New(zero) = %+v, %v", tr.Options(), err)
	}
}

func TestMessageID(t *testing.T) {
	t.Parallel()
	id, err := relayer.NewID()
	if err != nil {
		t.Fatal(err)
	}
	got, err := relayernats.MessageID(nats.Header{relayer.HeaderMessageID: {id.String()}})
	if err != nil || got != id {
		t.Errorf("MessageID = %v, %v; want %v", got, err, id)
	}
	got, err = relayernats.MessageID(nats.Header{relayer.HeaderMessageID: {"forwarded", id.String()}})
	if err != nil || got != id {
		t.Errorf("MessageID of two values = %v, %v; want the last, %v", got, err, id)
	}
	for _, h := range []nats.Header{
		nil,
		{jetstream.MsgIDHeader: {id.String()}},
		{relayer.HeaderMessageID: {}},
	} {
		if _, err := relayernats.MessageID(h); !errors.Is(err, relayernats.ErrNoMessageID) {
			t.Errorf("MessageID(%v) = %v, want ErrNoMessageID", h, err)
		}
	}
	if _, err := relayernats.MessageID(nats.Header{relayer.HeaderMessageID: {"not-a-uuid"}}); err == nil {
		t.Error("MessageID accepted a malformed id")
	}
	if typ := relayernats.MessageType(nil); typ != "" {
		t.Errorf("MessageType(nil) = %q", typ)
	}
	if typ := relayernats.MessageType(nats.Header{relayer.HeaderMessageType: {"Forwarded", "Mine"}}); typ != "Mine" {
		t.Errorf("MessageType = %q, want the last value", typ)
	}
}

// The transport names its broker and the server it is connected to, for
// instrumentation.
func TestTransportDescribesItsServer(t *testing.T) {
	t.Parallel()
	b := setup(t, setupOpts{})
	if got := b.tr.MessagingSystem(); got != "nats" {
		t.Errorf("MessagingSystem = %q, want nats", got)
	}
	u, err := url.Parse(b.nc.ConnectedUrl())
	if err != nil {
		t.Fatal(err)
	}
	host, port := b.tr.ServerAddress()
	if host != u.Hostname() || strconv.Itoa(port) != u.Port() {
		t.Errorf("ServerAddress = %s, %d; want the connected server %s", host, port, u.Host)
	}
}
