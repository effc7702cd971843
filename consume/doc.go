// Package consume handles, on the consumer's side, the messages Relayer
// delivered to a broker: each in a database transaction together with its
// inbox record, committed before the broker is acknowledged, so that a
// message's effects commit once however often the broker delivers it.
//
// Relayer delivers every committed message at least once, and a broker
// redelivers what a consumer did not acknowledge. Between the two, a
// consumer must read the message's Relayer id from the broker's metadata,
// record it in the inbox in the same transaction as its work, commit, and
// only then acknowledge; a failing handler must roll back and be retried a
// bounded number of times, then leave delivery for a dead-letter place. A
// [Consumer] does that for any broker; an adapter per broker (in the
// broker's transport module: transport/nats's Consume for JetStream)
// receives messages the way that broker's users expect and hands each to
// [Consumer.Handle] as a [Delivery]; package consumetest is the
// conformance suite every adapter passes.
//
// # The order of things
//
// For each delivery, [Consumer.Handle]:
//
//  1. reads the message (id, type, key, headers, body) from the broker's
//     metadata; a message without a Relayer id is dead-lettered with
//     [ErrNotRelayer] rather than given an id of its own;
//  2. begins a transaction, records (consumer name, message id) in the
//     inbox, and runs the [Handler] in the same transaction, unless the
//     record was there: then the message is a duplicate and the handler
//     does not run;
//  3. commits, then acknowledges the broker;
//  4. on a handler's error, rolls back and hands the message back to the
//     broker to be delivered again after a backoff, or dead-letters it
//     once its attempts are spent, or at once for an error matching
//     relayer.ErrPermanent.
//
// A crash between the commit and the acknowledgement makes the broker
// deliver the message again; its inbox record is then committed, so the
// redelivery is acknowledged without running the handler. Two deliveries
// of one message racing each other (a redelivery overtaking a slow first
// attempt, two consumer processes) commit the effects once: the second
// waits on the inbox record until the first transaction ends (see package
// inbox).
//
// # Typed handlers
//
// [Typed] turns a handler of one message type into a [Handler]: it checks
// the message's type (relayer.TypeName of the handler's type, as the
// producer routed it) and content type, decodes the body with relayer.JSON
// ([TypedWith] takes the outbox's own Serializer), and hands the handler
// the value. A [Mux] routes the messages of several types, each to the
// typed handler registered for it with [On]. What cannot be decoded, or
// has no handler, is dead-lettered at once ([ErrDecode], [ErrUnknownType]):
// delivering it again would not change it. Both work for [NewTx]'s data
// layers too, whose transaction type they take as a type parameter. A
// handler marks an error of its own as one retries cannot fix with
// [Permanent].
//
// # Follow-up messages
//
// With [Options.Writer] set, a handler publishes follow-up messages through
// its transaction ([Tx.Publish]): consume, handle and publish commit
// together, or nothing of them does. The writer's listener (a
// dispatch.Runner in the same process) sends them after the commit, as
// for any business transaction.
//
// # Trace context
//
// A transport wrapped by package otel sends each message's creation trace
// context (stored with it by the producer's outbox) in the W3C traceparent
// and tracestate headers. The Consumer hands it to the handler as the
// message's TraceParent and TraceState, not as headers, so that the message
// is the one the outbox stored; relayerotel.WrapHandler runs the handler in
// a consumer span linked to it.
//
// # Data layers
//
// [New]'s handlers get a *sql.Tx (in [Tx]). [NewTx] runs handlers in a
// transaction of another data layer, which the data-layer modules wrap:
// relayergorm.NewConsumer hands a *gorm.DB, relayerbun.NewConsumer a
// bun.Tx, relayersqlx.NewConsumer a *sqlx.Tx, relayerpgx.NewConsumer pgx's
// native pgx.Tx; the inbox record is written
// in that same transaction, and follow-ups publish through the layer's own
// enlistment.
//
// # Retries and dead letters
//
// A failing handler spends one attempt per delivery, as the broker counts
// deliveries ([Delivery.Attempt]): the message comes back after
// Options.Retry's backoff (1 s, doubling up to 5 min, by default), and
// after Retry.MaxAttempts failures (10) it is dead-lettered with the
// handler's error. Where the broker has a native way to wait (JetStream's
// delayed negative acknowledgement), the adapter uses it; the adapter's
// documentation says where dead letters go. A panicking handler counts as
// a failing one: a message that panics every time ends in the dead
// letters instead of crashing the consumer at each delivery.
//
// # Adapters
//
// The broker adapters share one shape: Consume(ctx, consumer, broker,
// opts) — relayernats.Consume(ctx, c, js, cons, opts),
// relayeramqp.Consume(ctx, c, conn, queue, opts) and
// relayerkafka.Consume(ctx, c, clientOpts, opts). Each validates its
// options through one table ([CheckLimits]), starts with
// [Consumer.Start] (the database checked, the held keys' drain started),
// hands what it receives to a [Pool] and, when ctx ends, lets the
// deliveries being handled commit and be settled within its DrainTimeout,
// then returns nil. The caller owns the broker connection it passes and
// Consume never closes it; Kafka's client, which franz-go makes with its
// consumer group, is made by Consume from clientOpts and closed by it. A
// broker fault is treated one way: while the broker client reconnects by
// itself (NATS, Kafka), Consume waits and logs once when fetching fails
// and once when it works again; when the connection it was given is gone
// for good (a closed NATS or RabbitMQ connection, a closed RabbitMQ
// channel), it returns an error wrapping relayer.ErrUnavailable, and the
// caller dials again and calls Consume again.
//
// # Order through failures
//
// The outbox delivers a key's messages in the order their transactions
// committed, and a failing message holds its key alone. A consumer keeps
// that order one hop further by holding keys too ([Options].HoldKeys, on
// by default where the adapter hands a key's messages over in order). When
// a message with a key fails and has attempts left, the consumer records
// it in the inbox, holds its key and stores the message in its own
// database (the <prefix>inbox_held and <prefix>inbox_waiting tables), and
// acknowledges it ([Held]); a later message of a held key is stored behind
// it in the same transaction as its inbox record and acknowledged
// ([Waiting]). A background drain ([Consumer.StartHeldKeys], which each
// adapter's Consume runs) tries the first message again after the Retry
// policy's backoff, in a transaction that locks the key; once it succeeds,
// or is dead-lettered after its attempts (through the adapter's
// [DeadLetters]), the messages behind it are handled in the order they
// arrived, and the key is freed. Other keys flow meanwhile; on Kafka a
// failing key no longer holds its partition's other keys. The broker's
// own retry (a redelivery behind the messages delivered meanwhile, or a
// retry in place holding the partition) remains for messages without a
// key and with [HoldKeysOff].
//
// # The database's faults
//
// A transaction that fails because of the consumer's database, not of the
// message, spends no attempt: a server that does not answer or lost the
// connection, that is shutting down or out of connections, a database or
// standby whose transactions are read-only, an inbox table, schema or
// privilege that is missing, a serialization failure or deadlock. The
// delivery waits, and so does every other delivery the database fails
// meanwhile; one probe ([Consumer.Check]'s statement) asks the database
// again after 250 ms, then twice as long after each failure up to 5 s, and
// once it answers the waiting deliveries run again. The adapters fetch no
// more than their workers hold meanwhile, and keep what they hold in
// progress with the broker. The outage is logged once, at warn, when it
// begins, again each minute it lasts, and once, at info, when a
// transaction commits again; [Stats].DatabaseWaits counts the transactions
// it held. A lost connection met by the handler itself (it may call other
// servers) is the database's only when the probe fails too; an error
// matching relayer.ErrPermanent is always the message's.
//
// Before they fetch, the adapters run [Consumer.AwaitDatabase]: a
// consumer whose inbox table does not exist, or whose role may not write
// it, refuses to start with an error wrapping [ErrNotReady] that names the
// `relayer migrate` command for its Options.Tables, instead of failing
// every message; a database that does not answer yet is waited for.
package consume
