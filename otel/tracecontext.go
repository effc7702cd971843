package relayerotel

import (
	"context"
	"strings"

	"go.opentelemetry.io/otel/propagation"
	"go.opentelemetry.io/otel/trace"

	"github.com/relayer-go/relayer"
	"github.com/relayer-go/relayer/headers"
)

// Header names of the W3C Trace Context, as the wrapped transport writes them
// into outgoing messages.
const (
	HeaderTraceParent = relayer.HeaderTraceParent
	HeaderTraceState  = relayer.HeaderTraceState
)

// The stored columns and the message headers are W3C Trace Context whatever
// propagator the application installed globally: rows outlive configuration
// changes, and every reader must parse what every writer stored.
var w3c propagation.TraceContext

// TraceContext returns the W3C traceparent and tracestate of the span context
// in ctx, or two empty strings when ctx holds no valid span context. Assign it
// to relayer.Outbox.TraceContext so that the writer stores the context of the
// business operation with each message:
//
//	outbox.TraceContext = relayerotel.TraceContext
//
// Unsampled span contexts are stored too (with the sampled flag clear), so that
// send spans inherit the sampling decision of the operation that wrote the
// message instead of starting traces of their own. Without an OpenTelemetry
// SDK there are no span contexts unless one arrived with an incoming request,
// and nothing is stored.
func TraceContext(ctx context.Context) (traceParent, traceState string) {
	if !trace.SpanContextFromContext(ctx).IsValid() {
		return "", ""
	}
	var c pairCarrier
	w3c.Inject(ctx, &c)
	return c.parent, c.state
}

// ConsumerContext returns ctx carrying, as its remote parent, the span
// context found in the traceparent and tracestate headers of a received
// message, so that the consumer's spans continue the trace of the send. When
// the headers hold no valid traceparent, ctx is returned as it is.
//
// Names are matched exactly first and then without regard to case, since some
// brokers and client libraries change the case of header names.
func ConsumerContext(ctx context.Context, hs []headers.Header) context.Context {
	sc := trace.SpanContextFromContext(w3c.Extract(context.Background(), headerCarrier(hs)))
	if !sc.IsValid() {
		return ctx
	}
	return trace.ContextWithRemoteSpanContext(ctx, sc)
}

// creationContext returns the span context stored with msg when it enlisted,
// or an invalid one when none, or an unparsable one, was stored.
func creationContext(msg *relayer.Message) trace.SpanContext {
	if msg.TraceParent == "" {
		return trace.SpanContext{}
	}
	c := pairCarrier{parent: msg.TraceParent, state: msg.TraceState}
	return trace.SpanContextFromContext(w3c.Extract(context.Background(), &c))
}

// withTraceHeaders returns a new header slice: hs without any trace context
// header, followed by the trace context of ctx. hs and its backing array are
// left untouched; the values of the kept headers are shared, not copied.
func withTraceHeaders(ctx context.Context, hs []headers.Header) []headers.Header {
	var c pairCarrier
	w3c.Inject(ctx, &c)
	out := make([]headers.Header, 0, len(hs)+2)
	for _, h := range hs {
		// Any earlier context, in whatever case, names some other span: a
		// consumer that found two would have to guess.
		if strings.EqualFold(h.Name, HeaderTraceParent) || strings.EqualFold(h.Name, HeaderTraceState) {
			continue
		}
		out = append(out, h)
	}
	out = append(out, headers.Header{Name: HeaderTraceParent, Value: []byte(c.parent)})
	if c.state != "" {
		out = append(out, headers.Header{Name: HeaderTraceState, Value: []byte(c.state)})
	}
	return out
}

// pairCarrier holds one trace context as the two strings the outbox stores.
type pairCarrier struct{ parent, state string }

func (c *pairCarrier) Get(key string) string {
	switch key {
	case HeaderTraceParent:
		return c.parent
	case HeaderTraceState:
		return c.state
	}
	return ""
}

func (c *pairCarrier) Set(key, value string) {
	switch key {
	case HeaderTraceParent:
		c.parent = value
	case HeaderTraceState:
		c.state = value
	}
}

func (c *pairCarrier) Keys() []string { return []string{HeaderTraceParent, HeaderTraceState} }

// headerCarrier reads a trace context from received message headers. It is
// read-only: extraction never calls Set.
type headerCarrier []headers.Header

func (hc headerCarrier) Get(key string) string {
	if v, ok := headers.Get(hc, key); ok {
		return string(v)
	}
	for _, h := range hc {
		if strings.EqualFold(h.Name, key) {
			return string(h.Value)
		}
	}
	return ""
}

func (hc headerCarrier) Set(string, string) {}

func (hc headerCarrier) Keys() []string {
	keys := make([]string, len(hc))
	for i, h := range hc {
		keys[i] = h.Name
	}
	return keys
}
