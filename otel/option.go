package relayerotel

import (
	"go.opentelemetry.io/otel"
	"go.opentelemetry.io/otel/metric"
	"go.opentelemetry.io/otel/trace"
)

// ScopeName is the instrumentation scope of the tracer and meter this package
// takes from its providers.
const ScopeName = "github.com/relayer-go/relayer/otel"

// Option configures [WrapTransport].
type Option func(*config)

type config struct {
	tracerProvider trace.TracerProvider
	meterProvider  metric.MeterProvider
	system         string
	transportName  string
}

// WithTracerProvider sets the provider of the tracer that makes send spans.
// Default (or nil): the global provider, otel.GetTracerProvider(), read once
// when the transport is wrapped; the global provider forwards to one set later
// with otel.SetTracerProvider.
func WithTracerProvider(tp trace.TracerProvider) Option {
	return func(c *config) { c.tracerProvider = tp }
}

// WithMeterProvider sets the provider of the meter that records send
// metrics. Default (or nil): the global provider, otel.GetMeterProvider(),
// which likewise forwards to one set later.
func WithMeterProvider(mp metric.MeterProvider) Option {
	return func(c *config) { c.meterProvider = mp }
}

// WithMessagingSystem sets the messaging.system attribute of spans and
// metrics, such as "kafka", "nats" or "rabbitmq" (the semantic conventions'
// names). Default: what the transport's MessagingSystem method returns (the
// NATS, Kafka and RabbitMQ transports have one), else the message's relayer
// transport name, since the conventions require the attribute.
func WithMessagingSystem(system string) Option {
	return func(c *config) { c.system = system }
}

// WithTransportName sets the relayer.transport attribute of spans and
// metrics. Default: "", which uses each message's Transport field, the name
// its route gave and the outbox registered the transport under.
func WithTransportName(name string) Option {
	return func(c *config) { c.transportName = name }
}

func newConfig(opts []Option) config {
	var c config
	for _, opt := range opts {
		if opt != nil {
			opt(&c)
		}
	}
	if c.tracerProvider == nil {
		c.tracerProvider = otel.GetTracerProvider()
	}
	if c.meterProvider == nil {
		c.meterProvider = otel.GetMeterProvider()
	}
	return c
}
