// Package relayernats is a [relayer.Transport] that publishes outbox messages
// to NATS JetStream. It is named relayernats so that it never shadows the nats
// client package it is used with.
//
// A message's destination is the subject it is published to. [Transport.Send]
// returns after JetStream acknowledged storing the message;
// [Transport.SendBatch] publishes a whole batch before awaiting the
// acknowledgements together, so a batch costs about one round trip.
//
// # Setup
//
// The application owns the connection and the JetStream context; the
// transport only publishes through them and never drains or closes them. A
// stream must capture every destination subject — publishing to a subject no
// stream captures fails with [relayer.ErrUnavailable]:
//
//	nc, err := nats.Connect(url)
//	...
//	defer nc.Drain() // after the dispatchers have stopped
//	js, err := jetstream.New(nc)
//	...
//	_, err = js.CreateOrUpdateStream(ctx, jetstream.StreamConfig{
//		Name:       "ORDERS",
//		Subjects:   []string{"orders.>"},
//		Duplicates: 2 * time.Minute, // the deduplication window, see below
//	})
//	...
//	natsTransport, err := relayernats.New(js, relayernats.Options{Stream: "ORDERS"})
//	...
//	outbox := relayer.Outbox{Routes: &routes, Transports: map[string]relayer.Transport{"nats": natsTransport}}
//
// [Options.Stream] is optional. Set, it makes the server refuse a message
// whose subject another stream captures, instead of storing it there, and
// lets [Transport.Capabilities] check each destination once.
//
// # Deduplication
//
// Every message is published with the Nats-Msg-Id header set to its id
// ([relayer.Message.ID] in its canonical string form). JetStream remembers the
// ids it stored during the stream's duplicate window (StreamConfig.Duplicates,
// two minutes unless set) and drops a message whose id it has seen, answering
// with an acknowledgement marked duplicate, which the transport reports as
// success: the stream already holds the message.
//
// This is the broker's half of effectively-once delivery. Relayer delivers at
// least once: when the outbox cannot record that a send succeeded (a crash
// after the broker's acknowledgement, an acknowledgement lost or later than
// the claim's deadline), the message is sent again, and inside the window the
// stream keeps a single copy. Choose the window longer than the time from
// such a send to its resend: a claim's duration (dispatch's ClaimDuration,
// 30s by default) plus recovery's poll interval, with margin. The default
// two minutes covers the default settings; the server keeps every id of the
// window in memory. A resend after the window — after a long outage, say —
// is stored again, and consumers see it twice: the consumer's half is the
// inbox package, which deduplicates by the same id.
//
// Deduplication goes by id alone: a message with a known id is dropped even
// if its body differs.
//
// # Headers
//
// NATS headers are a map from names to lists of values (nats.Header), written
// on the wire as text lines. A message's [relayer.Message.Headers] are added
// to that map in order, under their exact, case-sensitive names, and the
// transport adds Nats-Msg-Id, [relayer.HeaderMessageID] (the id),
// [relayer.HeaderMessageType] ([relayer.Message.Type]) and, for a message
// with an ordering key, [relayer.HeaderKey] (the key, with CR, LF and '%',
// and spaces or tabs at either end, percent-encoded so that NATS carries it
// unchanged). Consumers read the id and type back with [MessageID] and
// [MessageType], and the whole message with [ReceivedMessage]. When a
// message carries headers of these names itself (forwarded with its
// original headers, say), they are kept and the transport's values come
// after them; MessageID and MessageType read the last value, where
// nats.Header's Get returns the first.
//
// Preserved exactly: every name and its letter case; every value's bytes,
// including empty values, NUL and other control bytes, and bytes that are not
// UTF-8; duplicates; and the order of the values of each name. Not preserved:
// the interleaving of different names. Headers a=1, b=2, a=3 arrive as
// a=[1 3] and b=[2], and the names come in no particular order, because the
// client writes the map in Go's map order.
//
// A header NATS would change or misread is refused, never altered: the send
// fails with a [*HeaderError] naming the header, which matches
// [relayer.ErrPermanent], and nothing of the message is published. Refused
// are:
//
//   - names that are empty or hold anything but printable ASCII, or any of
//     the separators "(),/:;<=>?@[\]{} — the nats.go client rejects such
//     names (so spaces, colons and non-ASCII letters are out);
//   - values holding CR or LF, which the client turns into spaces, and values
//     beginning or ending with a space or tab, which it trims;
//   - names beginning with Nats- in any letter case, which JetStream reads as
//     publish directives (Nats-Msg-Id, Nats-Expected-Last-Sequence, Nats-TTL,
//     Nats-Rollup, …): copied from a stored message into every retry, they
//     would change what the stream does, not what it carries;
//   - a header named Status on a message with an empty body, which NATS
//     consumers take for a server status message;
//   - and, by the same value rules, a message type holding a line break or
//     blank ends.
//
// The trace context fields of [relayer.Message] are not put into headers by
// this package.
//
// # Ordering
//
// Capabilities report OrderedByKey for every subject. An ordered dispatcher
// sends a key's messages one at a time with Send, each after the previous one
// was acknowledged, and JetStream stores messages in the order it accepts
// them, giving each the next stream sequence; so a stream holds each key's
// messages in send order. A resend after an unrecorded success does not
// reorder anything: inside the window it is dropped, and the key's next message
// is sent only after it. Consumers see that order when they handle a key's
// messages one at a time, for example with an ordered consumer or
// MaxAckPending 1; with more in flight, a redelivery after a negative or
// missing acknowledgement arrives behind later messages.
//
// SendBatch publishes in slice order on one connection, and when every message
// succeeds the stream stores them in that order. It makes no promise once one
// fails: the later ones are still stored, and a retry of the failed one lands
// behind them. Dispatchers use SendBatch for unordered routes only.
//
// # Errors
//
// Send and SendBatch (per message, through a *[relayer.BatchError]) mark
// failures for the dispatcher:
//
//   - [relayer.ErrPermanent]: a header NATS cannot carry; a message larger
//     than the server's max_payload or the stream's max_msg_size; a subject
//     that cannot be published to (empty, empty tokens, wildcards, spaces); the
//     nil id, which would make every such message a duplicate of the first.
//   - [relayer.ErrUnavailable]: no stream captures the subject (no
//     responders); no acknowledgement before the context's deadline or the
//     JetStream context's async publish timeout; a closed, draining or
//     disconnected connection; JetStream disabled or temporarily unavailable
//     (status 503, which includes a stream that is full and discards new
//     messages); a subject captured by another stream than Options.Stream.
//   - Anything else is unmarked and retryable, and cancellation of the context
//     is reported as such, unmarked.
//
// The transport turns off the client's own retries after "no responders";
// retrying is the dispatcher's business, and an asynchronous retry would
// republish a message behind later ones.
//
// # Pending acknowledgements
//
// A SendBatch abandoned by its context stops waiting at once, but the
// JetStream context keeps each unacknowledged publish until its
// acknowledgement arrives. Give the JetStream context an async publish
// timeout (jetstream.WithPublishAsyncTimeout) so that publishes whose
// acknowledgement never comes are dropped. Batches larger than its
// PublishAsyncMaxPending (4,000 by default) wait for earlier acknowledgements
// before publishing more, noticing the end of the context meanwhile.
// # Consuming
//
// [Consume] runs a consume.Consumer on a durable JetStream pull consumer:
// each message is handled in the consumer's database transaction with its
// inbox record, committed, and only then acknowledged; a failing handler's
// message is negatively acknowledged with the consumer's backoff
// (NakWithDelay, JetStream's own delayed redelivery) and, once its attempts
// are spent, or at once for an error matching relayer.ErrPermanent,
// published to [ConsumeOptions.DeadLetterSubject] with
// [HeaderDeadReason], [HeaderDeadConsumer] and [HeaderDeadSubject], then
// terminated. A message without a Relayer id is dead-lettered the same way,
// never given an id of its own. With Concurrency 1, the default, messages
// are handled one at a time in the order the consumer delivers them, so a
// consumer that filters one subject handles a key's messages in the order
// they were published, a retried message aside: it comes back behind the
// messages delivered during its backoff. Stopping (ctx's end) waits for
// the messages being handled, within DrainTimeout, and acknowledges nothing
// that did not commit.
package relayernats
