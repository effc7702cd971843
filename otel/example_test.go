package relayerotel_test

import (
	"context"
	"log"

	"github.com/google/uuid"
	"go.opentelemetry.io/otel"

	"github.com/relayer-go/relayer"
	relayerotel "github.com/relayer-go/relayer/otel"
	"github.com/relayer-go/relayer/transport/memory"
)

// A message's trace, from the request that wrote it to the consumer that
// handles it. The providers are the application's: here the global ones,
// which its OpenTelemetry SDK set up at start-up.
func ExampleWrapTransport() {
	broker := memory.New()
	tr := relayerotel.WrapTransport(broker,
		relayerotel.WithTracerProvider(otel.GetTracerProvider()),
		relayerotel.WithMeterProvider(otel.GetMeterProvider()),
		relayerotel.WithMessagingSystem("nats"))

	// The writer, configured with Outbox.TraceContext = relayerotel.TraceContext,
	// stores the request's context with the row.
	ctx, request := otel.Tracer("orders").Start(context.Background(), "POST /orders")
	msg := &relayer.Message{
		ID:          uuid.MustParse("0190a1b2-c3d4-7e5f-8a9b-0c1d2e3f4a5b"),
		Type:        "orders.Placed",
		Body:        []byte(`{"id":42}`),
		Transport:   "nats",
		Destination: "orders.placed",
	}
	msg.TraceParent, msg.TraceState = relayerotel.TraceContext(ctx)
	request.End()

	// Later, perhaps in another process, a dispatcher sends the row: the
	// send span is a child of the request, and its context travels in the
	// message's traceparent header...
	if err := tr.Send(context.Background(), msg); err != nil {
		log.Fatal(err)
	}

	// ...from which a consumer continues the trace.
	received := broker.All()[0]
	consumer := relayerotel.ConsumerContext(context.Background(), received.Headers)
	_, handle := otel.Tracer("billing").Start(consumer, "handle orders.Placed")
	handle.End()
}
