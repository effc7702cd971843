// Package relayeramqp is a [relayer.Transport] that publishes outbox
// messages to RabbitMQ (AMQP 0-9-1) with publisher confirms.
//
// A send succeeds only once the broker has confirmed every message in it, so
// a dispatcher deletes an outbox row only after RabbitMQ took responsibility
// for the message: for a persistent message routed to a durable queue, after
// the queue has it on disk. Delivery stays at least once; consumers
// deduplicate by message id (see [MessageID] and package inbox).
//
// # Connection and channels
//
// [New] takes an *amqp.Connection that the caller dialled and keeps owning:
// the transport never closes it, and does not redial it. The transport opens
// its own channels on it, in confirm mode. An AMQP channel cannot tell which
// of several concurrent publishers a confirm or a returned message belongs
// to, so each send borrows one channel for itself from a small pool
// (Options.Channels, opened as concurrent sends need them) from its first
// publish to its last confirm. Sends beyond the pool wait for a channel, or for their context.
// A channel that the broker closed (for instance because the exchange is
// gone) is replaced with a fresh one by the next send; a send that gave up
// waiting for its confirms closes its channel, so that late confirms cannot
// be mistaken for the next send's. [Transport.Close] closes the channels and
// leaves the connection open.
//
// When the connection itself is closed, sends fail with an error wrapping
// [relayer.ErrUnavailable] until the caller replaces the transport with one
// on a new connection. The client's automatic connection recovery may be
// enabled on the connection; the transport does not rely on it and replaces
// channels itself.
//
// # Destinations
//
// A message's Destination is its routing key, published to the exchange in
// Options.Exchange — by default the default exchange, where the routing key
// is the name of the queue. The destination is used verbatim: a "/" in it is
// part of the routing key, not a separator. Publishing to several exchanges
// takes several transports, registered under different names in
// relayer.Outbox.Transports; they can share one connection.
//
// # Message mapping
//
// Each message becomes one AMQP message:
//
//   - ID becomes the message-id property, in the canonical UUID form;
//   - Type becomes the type property;
//   - Body becomes the body, unchanged;
//   - CreatedAt becomes the timestamp property (AMQP keeps whole seconds);
//   - the first content-type header ([relayer.HeaderContentType]) also
//     becomes the content-type property when it is text of at most 255
//     bytes, so that AMQP tools see it; the header is sent too, since
//     headers are sent unchanged;
//   - Key, when not empty, becomes the header [HeaderKey];
//   - messages are persistent (delivery mode 2) unless Options.Transient.
//
// Identity and type travel in properties, not in the [relayer.HeaderMessageID]
// and [relayer.HeaderMessageType] headers, because AMQP has fields for them.
// Trace context (Message.TraceParent, TraceState) is not added as headers.
//
// # Headers
//
// AMQP headers are a table, a map from name to value: it cannot hold two
// entries of one name, and it does not keep order between names. Relayer
// headers keep exact bytes, duplicates and order, so the transport encodes
// them as follows, and [Headers] decodes them back:
//
//   - a name that occurs once maps to its value;
//   - a repeated name maps to an AMQP array of its values, in their order;
//   - a value that is valid UTF-8 is sent as a long string, anything else as
//     a byte array; both carry the exact bytes, empty values included.
//
// Nothing is dropped. What is lost is only the relative order of different
// names, which AMQP does not carry. A header name longer than 255 bytes (the
// AMQP limit) fails its message with an error wrapping [relayer.ErrPermanent]
// that names the header. The ordering key is added under [HeaderKey]; if the
// message's own headers already use that name, the key becomes the last
// element of its array.
//
// # Confirms and errors
//
// Send publishes one message and waits for its confirm; SendBatch publishes
// all its messages in order on one channel and then waits for their confirms
// together, reporting per-message failures in a [*relayer.BatchError] aligned
// with the batch. Failures are classified for the dispatcher:
//
//   - a message that no queue is bound for comes back as a basic.return
//     (messages are mandatory unless Options.AllowUnroutable); it fails with
//     a [*ReturnError], which wraps [relayer.ErrUnavailable];
//   - a nack fails the message with [ErrNacked], which wraps
//     [relayer.ErrUnavailable]: RabbitMQ nacks only when a queue could not
//     take the message (a crashed queue process, a quorum queue without
//     quorum, a full queue with the reject-publish overflow policy);
//   - a channel or connection that closes before the confirms arrive — a
//     missing exchange, refused access, a network failure — fails the
//     unconfirmed messages with errors wrapping [relayer.ErrUnavailable];
//     messages confirmed before the close succeed;
//   - a channel closed with PRECONDITION_FAILED, RabbitMQ's answer to a
//     message above its max_message_size, fails the one unconfirmed message
//     with [relayer.ErrPermanent]; when several were unconfirmed, which one
//     was refused is unknown and they fail without a mark, to be retried;
//   - a header, type or destination that AMQP cannot carry fails its message
//     with [relayer.ErrPermanent] before anything is published.
//
// The context bounds waiting for a channel, the publishing and the wait for
// confirms; it is checked before each publish. When it ends, messages already
// confirmed succeed and the others fail with an error wrapping ctx's error.
// A publish itself is a socket write that does not observe the context: when
// RabbitMQ blocks a publishing connection under a memory or disk alarm and
// the socket buffers are full, the write waits for the alarm to clear.
//
// # Ordering
//
// Capabilities reports OrderedByKey for every destination, meaning what
// RabbitMQ guarantees: messages published on one channel that are routed to
// the same queue are enqueued in publish order. A batch is published in
// slice order on one channel, and a send returns only when all its messages
// are confirmed, so messages sent one send after another are enqueued in
// that order too, whichever channels carried them. The order holds per
// queue: it is what a single consumer of that queue (or a single active
// consumer) sees. It does not survive competing consumers, consumers that
// requeue or reject messages, or redelivery after a failure; and a batch in
// which one message failed may have enqueued the messages after it, which
// the dispatcher's retry then follows. Routing one key to several queues
// keeps the order in each of them.
//
// Capabilities reports Options.MaxBatchSize as the batch size and no native
// scheduling: relayer keeps scheduled messages in the database.
//
// # Consuming
//
// [Consume] hands the messages of a queue to a consume.Consumer until its
// context ends. Each message is handled in the consumer's database
// transaction together with its inbox record, and it is settled with the
// broker only once that transaction has ended. Consume opens two channels
// of its own on the connection it is given: one consumes the queue with
// manual acknowledgements and a prefetch (ConsumeOptions.Prefetch), the
// other publishes retries and dead letters, mandatory and with publisher
// confirms. The connection stays the caller's, and Consume never closes it.
//
// Consume fails at once, before consuming anything, for options that cannot
// work, a queue or dead-letter exchange that does not exist, and a
// consume.Consumer whose database is not ready (consume.ErrNotReady: the
// inbox table is missing; a database that does not answer yet is waited
// for). RabbitMQ's client does not reconnect: when the connection or the
// consuming channel closes under it, Consume returns an error wrapping
// relayer.ErrUnavailable, and the caller dials again and calls Consume
// again, as with every adapter; the broker delivers again whatever was not
// acknowledged. When ctx ends, Consume stops taking messages, waits up to
// ConsumeOptions.DrainTimeout for those being handled, and returns nil; a
// message whose transaction did not commit is never acknowledged.
//
// RabbitMQ's consumer_timeout (30 minutes by default) bounds a handler: the
// broker closes the channel of a consumer that keeps a message longer.
//
// # Settling a message
//
// Once its transaction has ended, a message is settled by what happened to
// it:
//
//   - handled and committed, or found a duplicate: acknowledged;
//   - its handler failed and it has attempts left: retried through a retry
//     queue (below), or, when its key is held, stored behind the key in the
//     consumer's database (see Order when consuming); either way it is then
//     acknowledged;
//   - its handler failed for good, after Retry.MaxAttempts failures or at
//     once for an error matching relayer.ErrPermanent: published to the
//     dead-letter exchange and routing key of [ConsumeOptions] with
//     [HeaderDeadReason], [HeaderDeadConsumer] and [HeaderDeadQueue], then
//     acknowledged.
//
// A message without a Relayer id is dead-lettered the same way, never given
// an id of its own. A retry or dead letter that no queue took, or that the
// broker did not confirm, leaves the message in its queue: it is handed
// back and delivered again. A message that the broker delivers again after
// a consumer crashed before acknowledging it has not failed an attempt: if
// its transaction committed, its inbox record makes it a duplicate.
//
// # Retry queues
//
// RabbitMQ has no delayed redelivery of its own (a rejected message comes
// back at once), so a failing message waits out its backoff in a retry
// queue, one per backoff of the consumer's Retry policy, named
// "<queue>.retry-<backoff in ms>ms". Consume declares the retry queue,
// durable, at each retry through it, and publishes the message there with
// [HeaderAttempts] counting its failures and an expiration of its backoff;
// when the message expires, the retry queue dead-letters it back to its
// queue through the default exchange. A retry queue that no one used for an
// hour beyond its backoff is deleted by the broker.
//
// # Order when consuming
//
// For order, declare the queue with the "x-single-active-consumer" argument
// and keep ConsumeOptions.Concurrency at 1: one consumer at a time then
// handles the queue's messages, one by one, in queue order, and a consumer
// that stops hands the messages it was sent ahead back in their place
// before the next one takes over. With Concurrency 1 the consume.Consumer
// also holds keys (consume.HoldKeysAuto): a failing message with a key is
// stored in its database, the key's later messages wait behind it there,
// and the key's messages take effect in order once it succeeds or is
// dead-lettered, while other keys flow. A failing message without a key, or
// any with consume.HoldKeysOff, goes through a retry queue and comes back
// behind the messages published during its backoff. With a Concurrency
// above 1, messages of one queue may be handled out of order.
//
// [ReceivedMessage] reads a delivery back as the relayer.Message that was
// sent; [MessageID] reads its relayer message id alone; [Headers] decodes
// a headers table into relayer headers.
package relayeramqp
