// Package relayerotel connects a Relayer outbox to OpenTelemetry: traces that
// follow each message from the transaction that wrote it to the consumer that
// reads it, metrics of the broker sends, and gauges of the outbox itself.
//
// The root package relayer does not depend on OpenTelemetry; it offers two
// seams, relayer.Outbox.TraceContext and relayer.Transport, and this package
// plugs into both. Applications that do not use OpenTelemetry do not import it.
//
// # Tracing a message
//
// A message is written in one place and time and sent in another: by a
// dispatcher in the same process right after commit, by recovery minutes later
// in another process, or again after a failure. The trace context therefore
// travels with the row. Three steps connect it:
//
//  1. At enlistment, the writer calls relayer.Outbox.TraceContext with the
//     context of the business transaction and stores the W3C traceparent and
//     tracestate it returns with the row. Set it to [TraceContext].
//  2. At delivery, the transport returned by [WrapTransport] starts a send
//     span per message, parented to the stored context, and passes the broker
//     a copy of the message whose traceparent and tracestate headers carry the
//     stored context unchanged, as the messaging conventions ask of every hop:
//     the send span is then a CLIENT span. A message stored without a context
//     carries the send span's own, which is then a PRODUCER span, the start of
//     the message's trace on the wire. A retry is a new span under the same
//     parent.
//  3. At consumption, package consume reads those headers back into the
//     message's TraceParent and TraceState, and [WrapHandler] runs the
//     handler in a consumer span linked to that context, as the messaging
//     conventions ask; a consumer of its own reads the headers with
//     [ConsumerContext], so that its spans join the trace.
//
// The result is one trace per business operation: the request span, the send
// span of each message it published (one per attempt), and whatever its
// consumers do.
//
// Stored contexts and message headers are always W3C Trace Context, whatever
// propagator the application installed: rows outlive configuration changes,
// and every reader must parse what every writer stored.
//
// # Metrics
//
// A wrapped transport counts the messages it sent, failures marked with
// error.type, and measures each call ([MetricSent],
// [MetricOperationDuration]), under the messaging semantic conventions' names;
// the outbox's own gauges keep relayer.* names.
//
// [ObserveStore] registers gauges of an outbox table, read with three
// statements per collection: the backlog of deliverable rows, how long the
// oldest of them has waited, the rows blocked behind a parked or retrying
// key, and the scheduled, claimed, retrying, parked and dead rows, including
// the number of parked ordering keys and the dead letters by reason, and the
// destinations paused, in all and each. A series that an alert compares with
// 0 is reported at 0 rather than left out: each dead-letter reason, the count
// of paused destinations, and a destination whose pause has ended.
//
// [ObserveRunner] registers counters that read a dispatch.Runner's Stats:
// sends, failures, expired claims, rows left for recovery, retention passes
// and the rows they deleted, per kind of worker. [ObserveWorker] and
// [ObserveCleanup] register the same counters for anything that reports
// them through the small interfaces [Worker] and [CleanupWorker].
//
// On the consumer's side, [ObserveConsumer] counts what a consume.Consumer
// did with its deliveries (relayer.consumer.messages by relayer.outcome:
// handled, duplicate, retried, dead_lettered, abandoned), the settling calls
// that failed and the transactions that waited for the database, by
// messaging.consumer.group.name; [ObserveHeldKeys] reports the keys
// consumers hold and the messages waiting behind them; [WrapHandler]
// measures each handler run as messaging.process.duration.
//
// # Providers
//
// Everything defaults to the global providers (otel.GetTracerProvider,
// otel.GetMeterProvider); [WithTracerProvider] and [WithMeterProvider] choose
// others. Without an SDK the API is a no-op: no spans are recorded and no
// headers are added, except that a context stored with a message is passed on
// unchanged, as the OpenTelemetry API does for incoming contexts.
//
// # Wiring
//
//	outbox := relayer.Outbox{
//		Routes:       routes,
//		Transports:   map[string]relayer.Transport{
//			"nats": relayerotel.WrapTransport(natsTransport), // messaging.system "nats", from the transport
//		},
//		TraceContext: relayerotel.TraceContext,
//	}
//	meter := otel.Meter("orders")
//	relayerotel.ObserveStore(meter, st, "orders")
//	relayerotel.ObserveRunner(meter, runner)
package relayerotel
