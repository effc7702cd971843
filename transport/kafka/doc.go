// Package relayerkafka delivers outbox messages to Apache Kafka through a
// franz-go client (github.com/twmb/franz-go/pkg/kgo).
//
// [New] wraps a *kgo.Client the application creates and owns; the returned
// [Transport] is a relayer.Transport to register under a name in
// relayer.Outbox.Transports:
//
//	client, err := kgo.NewClient(kgo.SeedBrokers("localhost:9092"))
//	...
//	tr, err := relayerkafka.New(client, relayerkafka.Options{})
//
// # Producer settings
//
// The transport relies on the client's defaults: acks from all in-sync
// replicas, the idempotent producer and a partitioner that hashes keys. New
// rejects a client that disables idempotence, lowers the acks, is
// transactional, flushes manually or forces a default topic; see [New].
// Lingering (kgo.ProducerLinger) does not delay sends: once the client knows a
// topic's partitions, the transport cuts the linger short for the partitions
// it produces to.
//
// # Mapping
//
// Each relayer.Message becomes one Kafka record:
//
//   - Destination is the topic. The record's partition is chosen by the
//     client's partitioner.
//   - Key is the record key, the UTF-8 bytes of the string. A message without
//     a key gets a null key, so that the partitioner spreads such records
//     over the partitions instead of sending them all to one.
//   - Body is the record value, byte for byte. An empty body is sent as an
//     empty value, never as a null one (which compacted topics read as a
//     tombstone).
//   - Headers become record headers in the same order, with the same names
//     and value bytes; repeated names stay repeated, since Kafka carries a
//     list. After them come relayer.HeaderMessageID, the message id in its
//     canonical text form, and relayer.HeaderMessageType, the message type.
//     [MessageID] reads the id back on the consumer side.
//   - The record timestamp is the time of the send, not the message's
//     creation: a message that waited in the outbox longer than the topic's
//     allowed timestamp skew would otherwise be refused.
//
// # Ordering
//
// Every destination reports OrderedByKey. A key always hashes to the same
// partition while the topic's partition count stays the same, the idempotent
// producer keeps each partition's records in production order through its
// retries, and dispatchers send one key's messages one after another. Adding
// partitions to a topic moves keys; do it only when the key's in-flight
// messages have drained.
//
// # Batches
//
// [Transport.SendBatch] produces every message of the batch before waiting
// for any acknowledgement, then waits for all of them together, so that a
// batch of a thousand messages costs a few produce requests rather than a
// thousand round trips. Its partial failures are reported per message
// through a *relayer.BatchError.
//
// # Errors
//
// Failures are classified for the dispatcher, which tests them with
// errors.Is; the client's original error stays in the chain:
//
//   - relayer.ErrPermanent: the record can never be stored. Too large for
//     the client (kgo.ProducerBatchMaxBytes, checked before sending) or for
//     the broker (the topic's max.message.bytes): kerr.MessageTooLarge and
//     kerr.RecordListTooLarge; kerr.InvalidRecord; a topic name Kafka does
//     not allow (kerr.InvalidTopicException, checked before sending); a
//     message without a destination.
//   - relayer.ErrUnavailable: the destination or the cluster cannot take
//     records now. An unknown topic (kerr.UnknownTopicOrPartition) belongs
//     here: the message is fine and the topic may be created yet, whereas a
//     permanent failure would give up on every message of the route. The
//     client reports it after kgo.UnknownTopicRetries metadata answers (4
//     by default; with -1 the send waits until its deadline instead).
//     Authorization failures, retriable broker errors the client gave up on,
//     network failures and a closed client belong here too.
//   - The context's own error, as is, when the send's context ended.
//   - Anything else is unmarked and retried.
//
// # Cancellation
//
// A send's context bounds it: when the context ends, the send returns at once
// with the context's error even if the broker never answers. The client keeps
// a record it has already written to a broker until the broker answers,
// because the idempotent producer cannot tell a lost request from a lost
// reply, so such a message may still be stored; a goroutine per abandoned
// send waits for that outcome and ends at the latest when the client is
// closed. The transport copies what records refer to, so the caller may
// reuse a message's memory as soon as the send returns.
//
// # Consuming
//
// [Consume] runs a consume.Consumer as a member of a Kafka consumer group.
// franz-go makes a group member and its client together, so Consume makes
// the client itself, from the options the caller passes for seed brokers,
// TLS, SASL and the like (what the other adapters take as a connection),
// and closes it before it returns. Each record is handled in the
// consumer's database transaction with its inbox record, and its offset is
// marked for commit only after that.
//
// A partition's records are handled one at a time, in offset order, so
// that a key's messages are handled in the order they were produced; the
// partitions are handled side by side. A partition whose handler has a
// thousand records waiting is no longer fetched until it is down to two
// hundred.
//
// Consume fails at once for options that cannot work, a client that cannot
// be made, and a consume.Consumer whose database is not ready
// (consume.ErrNotReady: the inbox table is missing; a database that does
// not answer yet is waited for). A broker outage never ends it: the client
// reconnects by itself, and Consume waits, logging once when fetching
// starts failing and once when it works again. When ctx ends, Consume stops
// fetching, waits up to ConsumeOptions.DrainTimeout for the records being
// handled, commits the offsets of what committed, leaves the group and
// returns nil.
//
// Consume sets the client's consumer group, topics, offset commits and
// rebalance callbacks (kgo.ConsumerGroup, kgo.ConsumeTopics,
// kgo.AutoCommitMarks, kgo.BlockRebalanceOnPoll, kgo.OnPartitionsRevoked
// and kgo.OnPartitionsLost), so the caller's options must not. The same
// client produces the dead letters, with its producer defaults.
//
// # Offsets
//
// A record's offset is marked once its transaction committed, it proved a
// duplicate, or its dead letter was produced, and nothing else is. Marked
// offsets are committed every five seconds, at each rebalance (once the
// partitions taken away have finished the record they were handling) and
// at the end. After a rebalance or a crash, a partition's next owner thus
// starts from the first record whose work did not commit; the records
// before it that it meets again are duplicates to the inbox.
//
// # Failing records
//
// A failing record with a key holds its key, not its partition
// (consume.HoldKeysAuto, the default, since a partition hands its records
// over in order): the consume.Consumer stores it in its database, and the
// key's later records behind it as they come, marks their offsets, and
// handles them from there in order once the first succeeds or is
// dead-lettered (see consume.Consumer.StartHeldKeys). The partition's other
// keys go on meanwhile.
//
// A failing record without a key, or any record with consume.HoldKeysOff,
// is retried in place after the consumer's backoff and holds its partition
// while it waits. It is never moved to a retry topic: that would let the
// key's later records overtake it, and order is why Kafka was chosen. The
// attempts are bounded (Retry.MaxAttempts), so a poison record holds its
// partition for its backoffs at most, about 13 minutes with the defaults (a
// shorter MaxBackoff shortens it). The attempts are counted in memory: a
// record whose partition moves to another consumer, or whose consumer
// restarts, starts counting again. The wait gives way to a rebalance, which
// may take the partition away between two attempts.
//
// After its attempts, or at once for an error matching
// relayer.ErrPermanent, a record is produced to
// [ConsumeOptions.DeadLetterTopic] with [HeaderDeadReason],
// [HeaderDeadConsumer], [HeaderDeadTopic], [HeaderDeadPartition] and
// [HeaderDeadOffset], and its partition moves on. A record without a
// Relayer id is dead-lettered the same way. While a dead letter cannot be
// produced, the record is handled again after a pause, and its partition
// waits.
//
// [ReceivedMessage] reads a record back as the relayer.Message that was
// produced.
package relayerkafka
