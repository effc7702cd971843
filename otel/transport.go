package relayerotel

import (
	"context"
	"errors"
	"time"

	"go.opentelemetry.io/otel"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/metric"
	semconv "go.opentelemetry.io/otel/semconv/v1.30.0"
	"go.opentelemetry.io/otel/trace"

	"github.com/relayer-go/relayer"
)

// Attribute keys this package adds to the semantic conventions' own.
const (
	// TransportKey names the relayer transport a message went through.
	TransportKey = attribute.Key("relayer.transport")
)

// Metric names of a wrapped transport, those of the OpenTelemetry messaging
// semantic conventions.
const (
	// MetricSent counts the messages sent to the broker; those that failed
	// carry error.type.
	MetricSent = "messaging.client.sent.messages"
	// MetricOperationDuration is the duration of each Send or SendBatch call.
	MetricOperationDuration = "messaging.client.operation.duration"
)

// durationBuckets suit broker round trips, from a local broker's millisecond
// to a send that runs into its claim's deadline. The SDK's default buckets
// assume milliseconds and would put every send in the first one.
var durationBuckets = []float64{0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30}

// operationName is the verb of the span name and of messaging.operation.name.
const operationName = "send"

// WrapTransport returns a [relayer.Transport] that traces and measures every
// send of tr and otherwise behaves exactly like tr: it passes every message
// on, returns tr's errors unchanged (a *relayer.BatchError keeps its
// indexes), and answers Capabilities without a span. The package
// documentation's sections "Send spans", "Trace headers" and "Metrics" say
// what it records and what it adds to the messages. It panics if tr is nil.
func WrapTransport(tr relayer.Transport, opts ...Option) relayer.Transport {
	if tr == nil {
		panic("relayerotel: WrapTransport of a nil transport")
	}
	c := newConfig(opts)
	t := &transport{
		next:          tr,
		tracer:        c.tracerProvider.Tracer(ScopeName, trace.WithSchemaURL(semconv.SchemaURL)),
		transportName: c.transportName,
	}
	switch sys, ok := tr.(interface{ MessagingSystem() string }); {
	case c.system != "":
		t.system = semconv.MessagingSystemKey.String(c.system)
		t.hasSystem = true
	case ok && sys.MessagingSystem() != "":
		t.system = semconv.MessagingSystemKey.String(sys.MessagingSystem())
		t.hasSystem = true
	}
	if sa, ok := tr.(interface{ ServerAddress() (string, int) }); ok {
		t.server = sa.ServerAddress
	}
	meter := c.meterProvider.Meter(ScopeName, metric.WithSchemaURL(semconv.SchemaURL))
	var err, errs error
	// An instrument that cannot be made is reported to the global error
	// handler; the API still returns a usable no-op instrument with the error.
	t.sent, err = meter.Int64Counter(MetricSent, metric.WithUnit("{message}"),
		metric.WithDescription("Number of messages sent to the broker, by outcome."))
	errs = errors.Join(errs, err)
	t.duration, err = meter.Float64Histogram(MetricOperationDuration, metric.WithUnit("s"),
		metric.WithDescription("Duration of each Send or SendBatch call to the broker."),
		metric.WithExplicitBucketBoundaries(durationBuckets...))
	errs = errors.Join(errs, err)
	if errs != nil {
		otel.Handle(errs)
	}
	return t
}

type transport struct {
	next          relayer.Transport
	tracer        trace.Tracer
	system        attribute.KeyValue
	hasSystem     bool
	server        func() (host string, port int) // nil: the transport cannot tell
	transportName string
	sent          metric.Int64Counter
	duration      metric.Float64Histogram
}

// Unwrap returns the wrapped transport, for code that looks for optional
// capabilities of a transport by type assertion.
func (t *transport) Unwrap() relayer.Transport { return t.next }

// Capabilities implements relayer.Transport; it is neither traced nor
// measured.
func (t *transport) Capabilities(ctx context.Context, destination string) (relayer.Capabilities, error) {
	return t.next.Capabilities(ctx, destination)
}

// Send implements relayer.Transport.
func (t *transport) Send(ctx context.Context, msg *relayer.Message) error {
	if msg == nil {
		return t.next.Send(ctx, msg)
	}
	start := time.Now()
	sctx, span := t.startSpan(ctx, msg, start)
	err := t.next.Send(sctx, t.outgoing(sctx, msg, new(relayer.Message)))
	end := time.Now()
	endSpan(span, err, end)

	set := t.metricAttrs(msg)
	if err == nil {
		t.sent.Add(sctx, 1, metric.WithAttributeSet(set))
	} else {
		t.sent.Add(sctx, 1, metric.WithAttributeSet(withErrorType(set, errorType(err))))
	}
	t.recordDuration(sctx, set, err, end.Sub(start))
	return err
}

// SendBatch implements relayer.Transport.
func (t *transport) SendBatch(ctx context.Context, msgs []*relayer.Message) error {
	if len(msgs) == 0 {
		return t.next.SendBatch(ctx, msgs)
	}
	start := time.Now()
	spans := make([]trace.Span, len(msgs))
	out := make([]*relayer.Message, len(msgs))
	copies := make([]relayer.Message, len(msgs))
	for i, m := range msgs {
		if m == nil {
			continue
		}
		var sctx context.Context
		sctx, spans[i] = t.startSpan(ctx, m, start)
		out[i] = t.outgoing(sctx, m, &copies[i])
	}
	err := t.next.SendBatch(ctx, out)
	end := time.Now()

	// The dispatcher's reading of the outcome: a *BatchError that names every
	// message tells which failed; any other error failed them all.
	var batchErr *relayer.BatchError
	perMessage := errors.As(err, &batchErr) && len(batchErr.Errs) == len(msgs)
	var sent int64
	var failed map[string]int64
	for i, span := range spans {
		merr := err
		if perMessage {
			merr = batchErr.Errs[i]
		}
		if span != nil {
			endSpan(span, merr, end)
		}
		if merr == nil {
			sent++
			continue
		}
		if failed == nil {
			failed = make(map[string]int64, 1)
		}
		failed[errorType(merr)]++
	}

	first := msgs[0]
	for _, m := range msgs {
		if m != nil {
			first = m
			break
		}
	}
	var set attribute.Set
	if first != nil {
		set = t.metricAttrs(first)
	}
	if sent > 0 {
		t.sent.Add(ctx, sent, metric.WithAttributeSet(set))
	}
	for typ, n := range failed {
		t.sent.Add(ctx, n, metric.WithAttributeSet(withErrorType(set, typ)))
	}
	t.recordDuration(ctx, set, err, end.Sub(start))
	return err
}

// common returns the attributes of spans and metrics alike: the system,
// the operation, the destination, the relayer transport and, when the
// transport can tell, the server's address and port.
func (t *transport) common(msg *relayer.Message, extra int) []attribute.KeyValue {
	kvs := make([]attribute.KeyValue, 0, 7+extra)
	system := t.system
	if !t.hasSystem {
		// The conventions require the attribute; a transport that does not
		// name its broker is named by its relayer transport name.
		system = semconv.MessagingSystemKey.String(t.transportOf(msg))
	}
	kvs = append(kvs, system,
		semconv.MessagingOperationName(operationName), semconv.MessagingOperationTypeSend,
		semconv.MessagingDestinationName(msg.Destination), TransportKey.String(t.transportOf(msg)))
	if t.server != nil {
		if host, port := t.server(); host != "" {
			kvs = append(kvs, semconv.ServerAddress(host))
			if port > 0 {
				kvs = append(kvs, semconv.ServerPort(port))
			}
		}
	}
	return kvs
}

// startSpan starts the send span of msg. Each span is of one message, even
// in a batch, so it carries no messaging.batch.message_count: the
// conventions keep that for operations on several messages.
func (t *transport) startSpan(ctx context.Context, msg *relayer.Message, start time.Time) (context.Context, trace.Span) {
	attrs := append(t.common(msg, 1), semconv.MessagingMessageID(msg.ID.String()))
	// A send span whose context the message carries (no creation context
	// was stored) is where the message's trace starts on the wire: a
	// PRODUCER span. Otherwise the message carries the stored creation
	// context, and the send span is a CLIENT call to the broker, as the
	// messaging conventions ask of spans whose context is not propagated.
	kind := trace.SpanKindProducer
	creation := creationContext(msg)
	if creation.IsValid() {
		kind = trace.SpanKindClient
	}
	opts := []trace.SpanStartOption{
		trace.WithSpanKind(kind),
		trace.WithTimestamp(start),
		trace.WithAttributes(attrs...),
	}
	parent := ctx
	if creation.IsValid() {
		parent = trace.ContextWithRemoteSpanContext(ctx, creation)
		links := []trace.Link{{SpanContext: creation}}
		if own := trace.SpanContextFromContext(ctx); own.IsValid() && !own.Equal(creation) {
			links = append(links, trace.Link{SpanContext: own})
		}
		opts = append(opts, trace.WithLinks(links...))
	}
	return t.tracer.Start(parent, operationName+" "+msg.Destination, opts...)
}

// outgoing returns what tr is given for msg: a copy of msg, made in buf,
// whose headers carry the message's creation context (stored with it, see
// [TraceContext]) unmodified, as the conventions ask of every hop, or, for a
// message stored without one, the send span's context of sctx, which then
// stands for its creation; msg itself when neither is valid.
func (t *transport) outgoing(sctx context.Context, msg, buf *relayer.Message) *relayer.Message {
	if creation := creationContext(msg); creation.IsValid() {
		sctx = trace.ContextWithRemoteSpanContext(context.Background(), creation)
	}
	if !trace.SpanContextFromContext(sctx).IsValid() {
		return msg
	}
	*buf = *msg
	buf.Headers = withTraceHeaders(sctx, msg.Headers)
	return buf
}

func (t *transport) transportOf(msg *relayer.Message) string {
	if t.transportName != "" {
		return t.transportName
	}
	return msg.Transport
}

func (t *transport) metricAttrs(msg *relayer.Message) attribute.Set {
	return attribute.NewSet(t.common(msg, 0)...)
}

func (t *transport) recordDuration(ctx context.Context, set attribute.Set, err error, d time.Duration) {
	if err != nil {
		typ := "batch"
		var batchErr *relayer.BatchError
		if !errors.As(err, &batchErr) {
			typ = errorType(err)
		}
		set = withErrorType(set, typ)
	}
	t.duration.Record(ctx, d.Seconds(), metric.WithAttributeSet(set))
}

func endSpan(span trace.Span, err error, end time.Time) {
	if err != nil {
		span.RecordError(err, trace.WithTimestamp(end))
		span.SetStatus(codes.Error, err.Error())
		span.SetAttributes(semconv.ErrorTypeKey.String(errorType(err)))
	}
	span.End(trace.WithTimestamp(end))
}

func withErrorType(set attribute.Set, typ string) attribute.Set {
	kvs := append(set.ToSlice(), semconv.ErrorTypeKey.String(typ))
	return attribute.NewSet(kvs...)
}

// errorType is the low-cardinality error.type of a failed send.
func errorType(err error) string {
	var typed interface{ ErrorType() string }
	switch {
	case errors.As(err, &typed):
		return typed.ErrorType()
	case errors.Is(err, relayer.ErrPermanent):
		return "permanent"
	case errors.Is(err, relayer.ErrUnavailable):
		return "unavailable"
	case errors.Is(err, context.DeadlineExceeded):
		return "deadline_exceeded"
	case errors.Is(err, context.Canceled):
		return "canceled"
	}
	return semconv.ErrorTypeOther.Value.AsString()
}
