package relayerotel_test

import (
	"context"
	"fmt"
	"strings"

	"github.com/google/uuid"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"
	"go.opentelemetry.io/otel/trace"

	"github.com/relayer-go/relayer"
	"github.com/relayer-go/relayer/headers"
	relayerotel "github.com/relayer-go/relayer/otel"
	"github.com/relayer-go/relayer/transport/memory"
)

// A message's trace, from the request that wrote it to the consumer that
// handles it.
func ExampleWrapTransport() {
	rec := tracetest.NewSpanRecorder()
	tp := sdktrace.NewTracerProvider(sdktrace.WithSpanProcessor(rec))
	broker := memory.New()
	tr := relayerotel.WrapTransport(broker, relayerotel.WithTracerProvider(tp), relayerotel.WithMessagingSystem("nats"))

	// The writer, configured with Outbox.TraceContext = relayerotel.TraceContext,
	// stores the request's context with the row.
	ctx, request := tp.Tracer("orders").Start(context.Background(), "POST /orders")
	msg := &relayer.Message{
		ID:          uuid.MustParse("0190a1b2-c3d4-7e5f-8a9b-0c1d2e3f4a5b"),
		Type:        "orders.Placed",
		Body:        []byte(`{"id":42}`),
		Transport:   "nats",
		Destination: "orders.placed",
	}
	msg.TraceParent, msg.TraceState = relayerotel.TraceContext(ctx)
	request.End()

	// Later, perhaps in another process, a dispatcher sends the row.
	if err := tr.Send(context.Background(), msg); err != nil {
		panic(err)
	}
	send := rec.Ended()[1]
	fmt.Println(send.Name(), "-", send.SpanKind())
	fmt.Println("child of the request:", send.Parent().SpanID() == request.SpanContext().SpanID())

	// The broker got the send span's context in the headers...
	received := broker.All()[0]
	tp0, _ := headers.Get(received.Headers, "traceparent")
	fmt.Println("traceparent names the send:", strings.Contains(string(tp0), send.SpanContext().SpanID().String()))

	// ...from which a consumer continues the trace.
	consumer := relayerotel.ConsumerContext(context.Background(), received.Headers)
	fmt.Println("consumer continues the send:", trace.SpanContextFromContext(consumer).SpanID() == send.SpanContext().SpanID())
	// Output:
	// send orders.placed - producer
	// child of the request: true
	// traceparent names the send: true
	// consumer continues the send: true
}
