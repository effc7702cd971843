package relayerotel_test

import (
	"context"
	"errors"
	"fmt"
	"reflect"
	"slices"
	"strings"
	"testing"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"
	"go.opentelemetry.io/otel/trace"
	"go.opentelemetry.io/otel/trace/noop"

	"github.com/relayer-go/relayer"
	"github.com/relayer-go/relayer/headers"
	relayerotel "github.com/relayer-go/relayer/otel"
	"github.com/relayer-go/relayer/transport/memory"
)

// traceBundle is a tracer provider recording into memory and a memory
// transport wrapped with it.
type traceBundle struct {
	rec *tracetest.SpanRecorder
	tp  *sdktrace.TracerProvider
	app trace.Tracer // the application's own tracer, for creation spans
	mem *memory.Transport
	tr  relayer.Transport
}

func setupTrace(t *testing.T, opts ...sdktrace.TracerProviderOption) *traceBundle {
	t.Helper()
	rec := tracetest.NewSpanRecorder()
	tp := sdktrace.NewTracerProvider(append(opts, sdktrace.WithSpanProcessor(rec))...)
	t.Cleanup(func() { _ = tp.Shutdown(context.Background()) })
	mem := memory.New()
	return &traceBundle{
		rec: rec, tp: tp, app: tp.Tracer("app"), mem: mem,
		tr: relayerotel.WrapTransport(mem, relayerotel.WithTracerProvider(tp),
			relayerotel.WithMessagingSystem("memory"), relayerotel.WithTransportName("mem")),
	}
}

// enlist returns a message carrying the trace context of ctx, as the writer
// stores it when relayer.Outbox.TraceContext is relayerotel.TraceContext.
func enlist(t *testing.T, ctx context.Context, destination string, hs ...headers.Header) *relayer.Message {
	t.Helper()
	id, err := relayer.NewID()
	if err != nil {
		t.Fatal(err)
	}
	m := &relayer.Message{ID: id, Type: "orders.Placed", Body: []byte(`{"n":1}`), Headers: hs,
		Transport: "mem", Destination: destination}
	m.TraceParent, m.TraceState = relayerotel.TraceContext(ctx)
	return m
}

// sendSpans returns the ended send spans (PRODUCER or CLIENT), in end
// order.
func (b *traceBundle) sendSpans() []sdktrace.ReadOnlySpan {
	var out []sdktrace.ReadOnlySpan
	for _, s := range b.rec.Ended() {
		if k := s.SpanKind(); k == trace.SpanKindProducer || k == trace.SpanKindClient {
			out = append(out, s)
		}
	}
	return out
}

func attrs(s sdktrace.ReadOnlySpan) map[attribute.Key]attribute.Value {
	m := make(map[attribute.Key]attribute.Value)
	for _, kv := range s.Attributes() {
		m[kv.Key] = kv.Value
	}
	return m
}

// traceParentOf is the traceparent header that names sc.
func traceParentOf(sc trace.SpanContext) string {
	return fmt.Sprintf("00-%s-%s-%s", sc.TraceID(), sc.SpanID(), sc.TraceFlags())
}

func header(t *testing.T, hs []headers.Header, name string) string {
	t.Helper()
	vs := headers.Values(hs, name)
	if len(vs) != 1 {
		t.Fatalf("headers %q: %d values named %q, want 1", hs, len(vs), name)
	}
	return string(vs[0])
}

// deepCopy copies a message down to its header values, to compare the
// caller's message before and after a send.
func deepCopy(m *relayer.Message) relayer.Message {
	c := *m
	c.Body = slices.Clone(m.Body)
	c.Headers = nil
	for _, h := range m.Headers {
		c.Headers = append(c.Headers, headers.Header{Name: h.Name, Value: slices.Clone(h.Value)})
	}
	return c
}

func TestTraceContext(t *testing.T) {
	t.Parallel()
	if p, s := relayerotel.TraceContext(context.Background()); p != "" || s != "" {
		t.Fatalf("TraceContext without a span = %q, %q; want empty", p, s)
	}
	b := setupTrace(t)
	ctx, span := b.app.Start(context.Background(), "place order")
	defer span.End()
	p, s := relayerotel.TraceContext(ctx)
	if want := traceParentOf(span.SpanContext()); p != want || s != "" {
		t.Fatalf("TraceContext = %q, %q; want %q, \"\"", p, s, want)
	}

	state, err := trace.ParseTraceState("vendor=abc,other=x")
	if err != nil {
		t.Fatal(err)
	}
	unsampled := trace.NewSpanContext(trace.SpanContextConfig{
		TraceID: trace.TraceID{1, 2, 3}, SpanID: trace.SpanID{4, 5, 6}, TraceState: state, Remote: true,
	})
	p, s = relayerotel.TraceContext(trace.ContextWithRemoteSpanContext(context.Background(), unsampled))
	if p != "00-01020300000000000000000000000000-0405060000000000-00" || s != "vendor=abc,other=x" {
		t.Fatalf("TraceContext of an unsampled remote context = %q, %q", p, s)
	}
}

func TestSendParentedToCreationContext(t *testing.T) {
	t.Parallel()
	b := setupTrace(t)
	state, _ := trace.ParseTraceState("vendor=abc")
	appCtx, create := b.app.Start(context.Background(), "place order")
	appCtx = trace.ContextWithSpanContext(appCtx, create.SpanContext().WithTraceState(state))
	// The caller's header slice has spare capacity, to catch an append into
	// its backing array.
	backing := make([]headers.Header, 3, 5)
	backing[0] = headers.Header{Name: "content-type", Value: []byte("application/json")}
	backing[1] = headers.Header{Name: "Traceparent", Value: []byte("00-11111111111111111111111111111111-2222222222222222-01")}
	backing[2] = headers.Header{Name: "x-tenant", Value: []byte("acme")}
	msg := enlist(t, appCtx, "orders.placed", backing...)
	msg.Headers = backing
	create.End()
	before := deepCopy(msg)

	// The dispatcher's context carries no span: the parent comes from the row.
	if err := b.tr.Send(context.Background(), msg); err != nil {
		t.Fatal(err)
	}

	spans := b.sendSpans()
	if len(spans) != 1 {
		t.Fatalf("%d send spans, want 1", len(spans))
	}
	send := spans[0]
	if send.SpanKind() != trace.SpanKindClient {
		t.Errorf("send span kind %s, want client: the message carries the stored creation context, not the send span's", send.SpanKind())
	}
	if send.Name() != "send orders.placed" {
		t.Errorf("span name %q", send.Name())
	}
	if got, want := send.Parent(), create.SpanContext(); got.TraceID() != want.TraceID() || got.SpanID() != want.SpanID() || !got.IsRemote() {
		t.Errorf("parent = %v/%v remote %v, want the creation span %v/%v", got.TraceID(), got.SpanID(), got.IsRemote(), want.TraceID(), want.SpanID())
	}
	if send.SpanContext().TraceID() != create.SpanContext().TraceID() {
		t.Errorf("send span in trace %v, creation in %v", send.SpanContext().TraceID(), create.SpanContext().TraceID())
	}
	if send.Status().Code != codes.Unset {
		t.Errorf("status %v, want unset", send.Status())
	}
	a := attrs(send)
	want := map[attribute.Key]string{
		"messaging.system":           "memory",
		"messaging.destination.name": "orders.placed",
		"messaging.operation.type":   "send",
		"messaging.operation.name":   "send",
		"messaging.message.id":       msg.ID.String(),
		"relayer.transport":          "mem",
	}
	for k, v := range want {
		if a[k].AsString() != v {
			t.Errorf("attribute %s = %q, want %q", k, a[k].AsString(), v)
		}
	}
	if _, ok := a["messaging.batch.message_count"]; ok {
		t.Error("a single send carries messaging.batch.message_count")
	}
	if links := send.Links(); len(links) != 1 || links[0].SpanContext.SpanID() != create.SpanContext().SpanID() {
		t.Errorf("links %+v, want one to the creation span", links)
	}

	got := b.mem.Messages("orders.placed")
	if len(got) != 1 {
		t.Fatalf("transport received %d messages", len(got))
	}
	hs := got[0].Headers
	if tp := header(t, hs, "traceparent"); tp != msg.TraceParent || tp != traceParentOf(create.SpanContext()) {
		t.Errorf("traceparent header %q, want the creation context %q, unmodified", tp, msg.TraceParent)
	}
	if ts := header(t, hs, "tracestate"); ts != "vendor=abc" {
		t.Errorf("tracestate header %q, want the creation context's", ts)
	}
	for _, h := range hs {
		if h.Name == "Traceparent" {
			t.Errorf("the stale Traceparent header was kept: %q", hs)
		}
	}
	if header(t, hs, "content-type") != "application/json" || header(t, hs, "x-tenant") != "acme" {
		t.Errorf("other headers lost: %q", hs)
	}
	if got[0].ID != msg.ID || string(got[0].Body) != `{"n":1}` || got[0].TraceParent != msg.TraceParent {
		t.Errorf("received %+v, want the message as stored", got[0])
	}

	if !reflect.DeepEqual(deepCopy(msg), before) {
		t.Errorf("the caller's message changed:\n got %+v\nwant %+v", deepCopy(msg), before)
	}
	if spare := backing[3:5]; spare[0].Name != "" || spare[1].Name != "" {
		t.Errorf("the caller's header array was written past its length: %q", spare)
	}
}

func TestSendWithoutStoredContext(t *testing.T) {
	t.Parallel()
	b := setupTrace(t)
	msg := enlist(t, context.Background(), "billing")
	if msg.TraceParent != "" {
		t.Fatalf("stored %q without a span", msg.TraceParent)
	}

	// With a span in ctx, the send is its child and links nothing.
	ctx, worker := b.app.Start(context.Background(), "recovery pass")
	if err := b.tr.Send(ctx, msg); err != nil {
		t.Fatal(err)
	}
	worker.End()
	// Without one, the send span is a root.
	if err := b.tr.Send(context.Background(), msg); err != nil {
		t.Fatal(err)
	}

	spans := b.sendSpans()
	if len(spans) != 2 {
		t.Fatalf("%d send spans, want 2", len(spans))
	}
	if spans[0].Parent().SpanID() != worker.SpanContext().SpanID() || len(spans[0].Links()) != 0 {
		t.Errorf("first send: parent %v, links %v; want the worker span %v and no links",
			spans[0].Parent().SpanID(), spans[0].Links(), worker.SpanContext().SpanID())
	}
	if spans[1].Parent().IsValid() {
		t.Errorf("second send has parent %v, want none", spans[1].Parent())
	}
	for i, sp := range spans {
		if sp.SpanKind() != trace.SpanKindProducer {
			t.Errorf("send %d: kind %s, want producer: the message carries its context", i, sp.SpanKind())
		}
	}
	got := b.mem.Messages("billing")
	for i, m := range got {
		if tp := header(t, m.Headers, "traceparent"); tp != traceParentOf(spans[i].SpanContext()) {
			t.Errorf("message %d: traceparent %q, want %q", i, tp, traceParentOf(spans[i].SpanContext()))
		}
		if len(headers.Values(m.Headers, "tracestate")) != 0 {
			t.Errorf("message %d: tracestate header without a trace state", i)
		}
	}
}

func TestSendLinksWorkerSpan(t *testing.T) {
	t.Parallel()
	b := setupTrace(t)
	appCtx, create := b.app.Start(context.Background(), "place order")
	msg := enlist(t, appCtx, "orders.placed")
	create.End()

	ctx, worker := b.app.Start(context.Background(), "direct dispatch")
	if err := b.tr.Send(ctx, msg); err != nil {
		t.Fatal(err)
	}
	worker.End()
	send := b.sendSpans()[0]
	if send.Parent().SpanID() != create.SpanContext().SpanID() {
		t.Fatalf("parent %v, want the creation span, not the worker's", send.Parent().SpanID())
	}
	var linked []trace.SpanID
	for _, l := range send.Links() {
		linked = append(linked, l.SpanContext.SpanID())
	}
	if want := []trace.SpanID{create.SpanContext().SpanID(), worker.SpanContext().SpanID()}; !slices.Equal(linked, want) {
		t.Fatalf("links %v, want the creation span and the worker span %v", linked, want)
	}
}

// TestRetryIsNewSpan checks that two attempts of one message are two sibling
// spans under its creation span, each propagated on its own.
func TestRetryIsNewSpan(t *testing.T) {
	t.Parallel()
	b := setupTrace(t)
	appCtx, create := b.app.Start(context.Background(), "place order")
	msg := enlist(t, appCtx, "orders.placed")
	create.End()
	boom := errors.New("broker hung up")
	b.mem.FailWith(func(*relayer.Message) error { return boom })
	if err := b.tr.Send(context.Background(), msg); err != boom {
		t.Fatalf("first attempt: %v, want the transport's error unchanged", err)
	}
	b.mem.FailWith(nil)
	if err := b.tr.Send(context.Background(), msg); err != nil {
		t.Fatal(err)
	}
	spans := b.sendSpans()
	if len(spans) != 2 || spans[0].SpanContext().SpanID() == spans[1].SpanContext().SpanID() {
		t.Fatalf("%d spans, want two distinct attempts", len(spans))
	}
	for i, s := range spans {
		if s.Parent().SpanID() != create.SpanContext().SpanID() {
			t.Errorf("attempt %d: parent %v, want the creation span", i, s.Parent().SpanID())
		}
	}
	if spans[0].Status().Code != codes.Error || spans[1].Status().Code != codes.Unset {
		t.Errorf("statuses %v, %v; want Error then Unset", spans[0].Status(), spans[1].Status())
	}
}

func TestSendErrorRecorded(t *testing.T) {
	t.Parallel()
	b := setupTrace(t)
	msg := enlist(t, context.Background(), "orders.placed")
	tooBig := fmt.Errorf("message too large: %w", relayer.ErrPermanent)
	b.mem.FailWith(func(*relayer.Message) error { return tooBig })
	if err := b.tr.Send(context.Background(), msg); err != tooBig {
		t.Fatalf("Send = %v, want the transport's error unchanged", err)
	}
	s := b.sendSpans()[0]
	if s.Status().Code != codes.Error || s.Status().Description != tooBig.Error() {
		t.Errorf("status %+v, want Error with the message", s.Status())
	}
	if got := attrs(s)["error.type"].AsString(); got != "permanent" {
		t.Errorf("error.type %q, want permanent", got)
	}
	if ev := s.Events(); len(ev) != 1 || ev[0].Name != "exception" {
		t.Errorf("events %+v, want one exception", ev)
	}
}

func TestSendBatch(t *testing.T) {
	t.Parallel()
	b := setupTrace(t)
	var msgs []*relayer.Message
	var creates []trace.Span
	for i := range 2 {
		ctx, create := b.app.Start(context.Background(), fmt.Sprintf("request %d", i))
		msgs = append(msgs, enlist(t, ctx, "orders.placed", headers.Header{Name: "n", Value: []byte{byte(i)}}))
		create.End()
		creates = append(creates, create)
	}
	// A third message was written outside any trace.
	msgs = append(msgs, enlist(t, context.Background(), "orders.placed"))
	before := make([]relayer.Message, len(msgs))
	for i, m := range msgs {
		before[i] = deepCopy(m)
	}
	unavailable := fmt.Errorf("partition leader gone: %w", relayer.ErrUnavailable)
	b.mem.FailWith(func(m *relayer.Message) error {
		if m.ID == msgs[1].ID {
			return unavailable
		}
		return nil
	})

	ctx, worker := b.app.Start(context.Background(), "recovery pass")
	err := b.tr.SendBatch(ctx, msgs)
	worker.End()
	var batchErr *relayer.BatchError
	if !errors.As(err, &batchErr) || len(batchErr.Errs) != 3 || batchErr.Errs[1] != unavailable || batchErr.Failed(0) || batchErr.Failed(2) {
		t.Fatalf("SendBatch = %v, want the transport's BatchError failing message 1", err)
	}

	spans := b.sendSpans()
	if len(spans) != 3 {
		t.Fatalf("%d send spans, want one per message", len(spans))
	}
	byID := make(map[string]sdktrace.ReadOnlySpan)
	for _, s := range spans {
		byID[attrs(s)["messaging.message.id"].AsString()] = s
		if _, ok := attrs(s)["messaging.batch.message_count"]; ok {
			t.Errorf("span %s, of one message, carries messaging.batch.message_count", s.Name())
		}
		if !s.StartTime().Equal(spans[0].StartTime()) || !s.EndTime().Equal(spans[0].EndTime()) {
			t.Errorf("span times differ within one batch")
		}
	}
	for i, create := range creates {
		s := byID[msgs[i].ID.String()]
		if s.Parent().SpanID() != create.SpanContext().SpanID() || s.SpanContext().TraceID() != create.SpanContext().TraceID() {
			t.Errorf("message %d: parent %v in trace %v, want its creation span", i, s.Parent().SpanID(), s.SpanContext().TraceID())
		}
	}
	if s := byID[msgs[2].ID.String()]; s.Parent().SpanID() != worker.SpanContext().SpanID() {
		t.Errorf("message without a stored context: parent %v, want the worker span", s.Parent().SpanID())
	}
	for i, m := range msgs {
		s := byID[m.ID.String()]
		wantCode := codes.Unset
		if i == 1 {
			wantCode = codes.Error
		}
		if s.Status().Code != wantCode {
			t.Errorf("message %d: status %v, want %v", i, s.Status().Code, wantCode)
		}
		if i == 1 && attrs(s)["error.type"].AsString() != "unavailable" {
			t.Errorf("message 1: error.type %q, want unavailable", attrs(s)["error.type"].AsString())
		}
	}

	got := b.mem.Messages("orders.placed")
	if len(got) != 2 {
		t.Fatalf("transport accepted %d messages, want 2", len(got))
	}
	for _, m := range got {
		// The creation context, unmodified; the send span's only for the
		// message stored without one.
		want := traceParentOf(byID[m.ID.String()].SpanContext())
		for i := range msgs {
			if msgs[i].ID == m.ID && msgs[i].TraceParent != "" {
				want = msgs[i].TraceParent
			}
		}
		if tp := header(t, m.Headers, "traceparent"); tp != want {
			t.Errorf("message %s: traceparent %q, want %q", m.ID, tp, want)
		}
	}
	for i, m := range msgs {
		if !reflect.DeepEqual(deepCopy(m), before[i]) {
			t.Errorf("the caller's message %d changed", i)
		}
	}
}

// TestSendBatchWholeFailure checks that an error that names no message
// fails every span of the batch.
func TestSendBatchWholeFailure(t *testing.T) {
	t.Parallel()
	b := setupTrace(t)
	// The memory transport refuses a batch that mixes destinations.
	msgs := []*relayer.Message{enlist(t, context.Background(), "a"), enlist(t, context.Background(), "b")}
	err := b.tr.SendBatch(context.Background(), msgs)
	if err == nil || errors.As(err, new(*relayer.BatchError)) {
		t.Fatalf("SendBatch = %v, want a plain error", err)
	}
	for _, s := range b.sendSpans() {
		if s.Status().Code != codes.Error {
			t.Errorf("span %s: status %v, want Error", s.Name(), s.Status())
		}
	}
	if n := len(b.sendSpans()); n != 2 {
		t.Fatalf("%d spans, want 2", n)
	}
}

func TestUnsampledCreationContext(t *testing.T) {
	t.Parallel()
	b := setupTrace(t, sdktrace.WithSampler(sdktrace.ParentBased(sdktrace.AlwaysSample())))
	unsampled := trace.NewSpanContext(trace.SpanContextConfig{TraceID: trace.TraceID{9}, SpanID: trace.SpanID{8}, Remote: true})
	msg := enlist(t, trace.ContextWithRemoteSpanContext(context.Background(), unsampled), "orders.placed")
	if err := b.tr.Send(context.Background(), msg); err != nil {
		t.Fatal(err)
	}
	if n := len(b.rec.Ended()); n != 0 {
		t.Fatalf("%d spans recorded under an unsampled parent", n)
	}
	if tp := header(t, b.mem.All()[0].Headers, "traceparent"); tp != msg.TraceParent || !strings.HasSuffix(tp, "-00") {
		t.Fatalf("traceparent %q, want the unsampled creation context %q, unmodified", tp, msg.TraceParent)
	}
}

// TestNoProvider checks the wrapper without an SDK: the global provider, by
// default a no-op, and an explicit no-op provider.
func TestNoProvider(t *testing.T) {
	t.Parallel()
	for name, opts := range map[string][]relayerotel.Option{
		"global": nil,
		"noop":   {relayerotel.WithTracerProvider(noop.NewTracerProvider())},
	} {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			mem := memory.New()
			tr := relayerotel.WrapTransport(mem, opts...)
			plain := enlist(t, context.Background(), "d", headers.Header{Name: "content-type", Value: []byte("text/plain")})
			if err := tr.Send(context.Background(), plain); err != nil {
				t.Fatal(err)
			}
			if got := mem.All()[0].Headers; !reflect.DeepEqual(got, plain.Headers) {
				t.Fatalf("headers %q, want them untouched: there is no context to propagate", got)
			}

			// A stored context passes through, as the API prescribes without an SDK.
			sc := trace.NewSpanContext(trace.SpanContextConfig{TraceID: trace.TraceID{1}, SpanID: trace.SpanID{2},
				TraceFlags: trace.FlagsSampled, Remote: true})
			stored := enlist(t, trace.ContextWithRemoteSpanContext(context.Background(), sc), "d")
			if err := tr.SendBatch(context.Background(), []*relayer.Message{stored, plain}); err != nil {
				t.Fatal(err)
			}
			all := mem.All()
			if tp := header(t, all[1].Headers, "traceparent"); tp != stored.TraceParent {
				t.Fatalf("traceparent %q, want the stored %q", tp, stored.TraceParent)
			}
			if !reflect.DeepEqual(all[2].Headers, plain.Headers) {
				t.Fatalf("headers %q in a batch, want them untouched", all[2].Headers)
			}
		})
	}
}

func TestConsumerContext(t *testing.T) {
	t.Parallel()
	b := setupTrace(t)
	msg := enlist(t, context.Background(), "orders.placed")
	if err := b.tr.Send(context.Background(), msg); err != nil {
		t.Fatal(err)
	}
	send := b.sendSpans()[0]
	received := b.mem.All()[0]

	ctx := relayerotel.ConsumerContext(context.Background(), received.Headers)
	_, consume := b.app.Start(ctx, "handle", trace.WithSpanKind(trace.SpanKindConsumer))
	consume.End()
	if sc := trace.SpanContextFromContext(ctx); !sc.IsRemote() || sc.SpanID() != send.SpanContext().SpanID() {
		t.Fatalf("consumer context %v, want the remote send span %v", sc.SpanID(), send.SpanContext().SpanID())
	}
	if got := b.rec.Ended()[1].Parent().SpanID(); got != send.SpanContext().SpanID() {
		t.Fatalf("consumer span parent %v, want the send span", got)
	}

	// Header names whose case a broker changed are still found.
	folded := []headers.Header{{Name: "TRACEPARENT", Value: []byte(traceParentOf(send.SpanContext()))}}
	if sc := trace.SpanContextFromContext(relayerotel.ConsumerContext(context.Background(), folded)); sc.SpanID() != send.SpanContext().SpanID() {
		t.Fatalf("upper-case header: span %v, want %v", sc.SpanID(), send.SpanContext().SpanID())
	}

	// Without a valid context, ctx comes back as it was.
	own, span := b.app.Start(context.Background(), "own")
	defer span.End()
	for _, hs := range [][]headers.Header{nil, {{Name: "traceparent", Value: []byte("garbage")}}} {
		if got := relayerotel.ConsumerContext(own, hs); got != own {
			t.Errorf("ConsumerContext(%q) replaced the context", hs)
		}
	}
}

func TestPassThrough(t *testing.T) {
	t.Parallel()
	mem := memory.New()
	mem.SetCapabilities("d", relayer.Capabilities{MaxBatchSize: 7})
	tr := relayerotel.WrapTransport(mem)
	caps, err := tr.Capabilities(context.Background(), "d")
	if err != nil || caps.MaxBatchSize != 7 {
		t.Fatalf("Capabilities = %+v, %v", caps, err)
	}
	u, ok := tr.(interface{ Unwrap() relayer.Transport })
	if !ok || u.Unwrap() != relayer.Transport(mem) {
		t.Fatal("the wrapper does not unwrap to the memory transport")
	}
	if err := tr.SendBatch(context.Background(), nil); err != nil {
		t.Fatal(err)
	}
}

// described is a transport that names its broker and server, as the NATS,
// Kafka and RabbitMQ transports do.
type described struct{ relayer.Transport }

func (described) MessagingSystem() string                { return "nats" }
func (described) ServerAddress() (host string, port int) { return "broker.internal", 4222 }

// messaging.system is required by the conventions: it comes from the
// transport when it names its broker, else from the relayer transport name;
// server.address and server.port come from the transport when it tells them.
func TestSystemAndServerFromTheTransport(t *testing.T) {
	t.Parallel()
	for name, c := range map[string]struct {
		tr           relayer.Transport
		system, host string
		port         int64
	}{
		"described": {described{memory.New()}, "nats", "broker.internal", 4222},
		"plain":     {memory.New(), "mem", "", 0},
	} {
		t.Run(name, func(t *testing.T) {
			rec := tracetest.NewSpanRecorder()
			tp := sdktrace.NewTracerProvider(sdktrace.WithSpanProcessor(rec))
			tr := relayerotel.WrapTransport(c.tr, relayerotel.WithTracerProvider(tp))
			if err := tr.Send(context.Background(), enlist(t, context.Background(), "orders.placed")); err != nil {
				t.Fatal(err)
			}
			spans := rec.Ended()
			if len(spans) != 1 {
				t.Fatalf("%d spans", len(spans))
			}
			a := attrs(spans[0])
			if got := a["messaging.system"].AsString(); got != c.system {
				t.Errorf("messaging.system = %q, want %q", got, c.system)
			}
			if got := a["server.address"].AsString(); got != c.host {
				t.Errorf("server.address = %q, want %q", got, c.host)
			}
			if got := a["server.port"].AsInt64(); got != c.port {
				t.Errorf("server.port = %d, want %d", got, c.port)
			}
		})
	}
}
