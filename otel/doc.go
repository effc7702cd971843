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
// # Send spans
//
// The transport [WrapTransport] returns starts one span per message it
// sends, named "send <destination>" as the messaging semantic conventions
// name it. Its parent is the creation context stored with the message (see
// [TraceContext]); the span is then of kind CLIENT and links to that
// context and, when the ctx of the call carries a different span (a
// dispatcher's worker, say), to that span too, so that a trace of the
// dispatcher still leads to the messages it sent. A message stored without
// a creation context gets a PRODUCER span under the span in ctx, if any:
// its own context is what travels with the message.
//
// Each span carries messaging.system, messaging.destination.name,
// messaging.operation.name ("send"), messaging.operation.type,
// messaging.message.id and relayer.transport, and server.address and
// server.port when the transport can tell them (the NATS and RabbitMQ
// transports can). messaging.system is, in order of preference, what
// [WithMessagingSystem] set, what the transport's MessagingSystem method
// returns, or the message's relayer transport name, since the conventions
// require it.
//
// SendBatch also makes one span per message, each spanning the whole call,
// and none of them carries messaging.batch.message_count, since each is of
// one message. A single span for the batch, linked to every creation
// context, would not do: a link is followed only from the span that holds
// it, so the trace of each message would lack its send. A sampled batch of
// n messages thus records n spans; under the ParentBased sampler, messages
// of unsampled operations cost a span context each and record nothing.
//
// A failed send records its error on the span, sets the span's status to
// Error and sets error.type; in a batch that failed in part, each span gets
// its own message's error. The transport cannot tell a retry from a first
// attempt, so every attempt is a span of its own, a sibling of the earlier
// ones under the creation context: a message's retries line up in its
// trace.
//
// # Trace headers
//
// The wrapped transport hands the broker a copy of each message whose
// traceparent and tracestate headers carry the message's creation context
// as stored, untouched, as the conventions ask of every hop: a consumer
// sees the context of the operation that wrote the message, however many
// hops it took, and continues that trace with [ConsumerContext]. A message
// stored without a creation context carries its send span's context
// instead. Either replaces the message's own headers of those names,
// compared without regard to case. The caller's messages, their header
// slices and the arrays under those slices are never written to. When
// there is no valid context to carry (no SDK installed, no stored context
// and no span in ctx), the message is passed on as it came.
//
// # Metrics
//
// A wrapped transport counts the messages it sent in [MetricSent]
// (messaging.client.sent.messages) and records the duration of each Send
// and SendBatch call, in seconds, in [MetricOperationDuration]
// (messaging.client.operation.duration): the messaging semantic
// conventions' names, whereas the outbox's own gauges keep relayer.* names.
// Both carry messaging.operation.name ("send"), messaging.operation.type,
// messaging.destination.name, messaging.system, relayer.transport and,
// when the transport can tell them, server.address and server.port. Every
// destination is a time series of its own: keep their number bounded.
//
// The messages the broker refused are counted with error.type; a call that
// failed without a *relayer.BatchError naming its messages counts them all
// as failed, and the durations of failed calls carry error.type too. Its
// value is the ErrorType() string of the first error in the chain that has
// that method; otherwise "permanent" or "unavailable" for errors marked with
// relayer.ErrPermanent or relayer.ErrUnavailable, "deadline_exceeded" or
// "canceled" for the context's errors, and "_OTHER" for anything else. The
// duration of a call that returned a *relayer.BatchError is marked "batch".
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
