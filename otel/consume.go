package relayerotel

import (
	"context"
	"time"

	"go.opentelemetry.io/otel"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/metric"
	semconv "go.opentelemetry.io/otel/semconv/v1.30.0"
	"go.opentelemetry.io/otel/trace"

	"github.com/relayer-go/relayer"
)

// MetricProcessDuration is the histogram of handler runs [WrapHandler]
// records, as the messaging conventions name it.
const MetricProcessDuration = "messaging.process.duration"

// processName is the verb of a consumer span's name and of
// messaging.operation.name.
const processName = "process"

// WrapHandler returns h running inside a span of its own for each message:
// "process <destination>", of kind CONSUMER, with the messaging
// conventions' attributes (messaging.system when [WithMessagingSystem] sets
// it, the operation, the destination, the message id) and a link to the
// message's creation context, the trace context the producer's outbox
// stored with it (Message.TraceParent: a transport wrapped by
// [WrapTransport] sends it as headers, and package consume reads it back).
// The span's parent is ctx's span, when there is one; the link, not the
// parent, ties the message's processing to the operation that wrote it,
// as the conventions ask of consumers. h's error marks the span.
//
// Each run is also measured: messaging.process.duration, in seconds, with
// the span's messaging.system, operation and destination, and error.type
// when h fails, as the messaging conventions name it.
//
// It fits consume.New's handlers (T is *consume.Tx) and consume.NewTx's,
// whatever the data layer's transaction T; a duplicate, whose handler does
// not run, makes no span and no measure. [WithTracerProvider],
// [WithMeterProvider] and [WithMessagingSystem] apply.
func WrapHandler[T any](h func(ctx context.Context, tx T, m *relayer.Message) error, opts ...Option) func(ctx context.Context, tx T, m *relayer.Message) error {
	c := newConfig(opts)
	tp := c.tracerProvider
	if tp == nil {
		tp = otel.GetTracerProvider()
	}
	tracer := tp.Tracer(ScopeName)
	mp := c.meterProvider
	if mp == nil {
		mp = otel.GetMeterProvider()
	}
	duration, err := mp.Meter(ScopeName, metric.WithSchemaURL(semconv.SchemaURL)).Float64Histogram(MetricProcessDuration,
		metric.WithUnit("s"), metric.WithDescription("Duration of each handler run, in the consumer's transaction."),
		metric.WithExplicitBucketBoundaries(durationBuckets...))
	if err != nil {
		otel.Handle(err) // the API still returns a usable no-op instrument
	}
	var system []attribute.KeyValue
	if c.system != "" {
		system = []attribute.KeyValue{semconv.MessagingSystemKey.String(c.system)}
	}
	return func(ctx context.Context, tx T, m *relayer.Message) error {
		attrs := append(system[:len(system):len(system)],
			semconv.MessagingOperationName(processName), semconv.MessagingOperationTypeProcess,
			semconv.MessagingDestinationName(m.Destination), semconv.MessagingMessageID(m.ID.String()))
		start := time.Now()
		spanOpts := []trace.SpanStartOption{trace.WithSpanKind(trace.SpanKindConsumer), trace.WithTimestamp(start), trace.WithAttributes(attrs...)}
		if creation := creationContext(m); creation.IsValid() {
			spanOpts = append(spanOpts, trace.WithLinks(trace.Link{SpanContext: creation}))
		}
		ctx, span := tracer.Start(ctx, processName+" "+m.Destination, spanOpts...)
		err := h(ctx, tx, m)
		end := time.Now()
		endSpan(span, err, end)
		measured := append(system[:len(system):len(system)], semconv.MessagingOperationName(processName),
			semconv.MessagingDestinationName(m.Destination))
		if err != nil {
			measured = append(measured, semconv.ErrorTypeKey.String(errorType(err)))
		}
		duration.Record(ctx, end.Sub(start).Seconds(), metric.WithAttributeSet(attribute.NewSet(measured...)))
		return err
	}
}
