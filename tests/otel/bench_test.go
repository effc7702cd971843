package relayerotel_test

import (
	"context"
	"testing"

	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/trace"
	"go.opentelemetry.io/otel/trace/noop"

	"github.com/relayer-go/relayer"
	"github.com/relayer-go/relayer/headers"
	relayerotel "github.com/relayer-go/relayer/otel"
)

// discard accepts every message without keeping it, so that the benchmarks
// measure the wrapper alone.
type discard struct{}

func (discard) Send(context.Context, *relayer.Message) error        { return nil }
func (discard) SendBatch(context.Context, []*relayer.Message) error { return nil }
func (discard) Capabilities(context.Context, string) (relayer.Capabilities, error) {
	return relayer.Capabilities{MaxBatchSize: 1000}, nil
}

func benchMessage(b *testing.B) *relayer.Message {
	sc := trace.NewSpanContext(trace.SpanContextConfig{TraceID: trace.TraceID{1}, SpanID: trace.SpanID{2},
		TraceFlags: trace.FlagsSampled, Remote: true})
	id, err := relayer.NewID()
	if err != nil {
		b.Fatal(err)
	}
	m := &relayer.Message{ID: id, Type: "orders.Placed", Body: []byte(`{"id":1}`), Transport: "nats", Destination: "orders.placed",
		Headers: []headers.Header{{Name: "content-type", Value: []byte("application/json")}}}
	m.TraceParent, m.TraceState = relayerotel.TraceContext(trace.ContextWithRemoteSpanContext(context.Background(), sc))
	return m
}

func BenchmarkSend(b *testing.B) {
	for name, tp := range map[string]trace.TracerProvider{
		"noop":    noop.NewTracerProvider(),
		"sampled": sdktrace.NewTracerProvider(), // no exporter: spans are made and dropped
	} {
		b.Run(name, func(b *testing.B) {
			tr := relayerotel.WrapTransport(discard{}, relayerotel.WithTracerProvider(tp))
			m := benchMessage(b)
			ctx := context.Background()
			b.ReportAllocs()
			for b.Loop() {
				if err := tr.Send(ctx, m); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}

func BenchmarkTraceContext(b *testing.B) {
	sc := trace.NewSpanContext(trace.SpanContextConfig{TraceID: trace.TraceID{1}, SpanID: trace.SpanID{2},
		TraceFlags: trace.FlagsSampled})
	ctx := trace.ContextWithSpanContext(context.Background(), sc)
	b.ReportAllocs()
	for b.Loop() {
		if p, _ := relayerotel.TraceContext(ctx); p == "" {
			b.Fatal("no traceparent")
		}
	}
}
