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
// [Consume] runs a consume.Consumer in a consumer group, on a client it
// makes from the caller's options: each record is handled in the
// consumer's database transaction with its inbox record, committed, and
// only then marked for the offset commit, which follows every five
// seconds, at each rebalance (after the partitions taken away finished the
// record they were handling) and at the end. A partition's records are
// handled one at a time in offset order, so a key's messages are handled
// in the order produced, while partitions are handled side by side.
//
// A failing handler's record is retried in its place after the consumer's
// backoff, holding its partition, and never moved to a retry topic: a retry
// topic would let the key's later messages overtake it, and Kafka is chosen
// for that order. Its attempts are bounded (Retry.MaxAttempts), so a poison
// record holds its partition for its backoffs at most (about 13 minutes
// with the defaults; a shorter MaxBackoff shortens it) and then goes to
// [ConsumeOptions.DeadLetterTopic] with [HeaderDeadReason],
// [HeaderDeadConsumer], [HeaderDeadTopic], [HeaderDeadPartition] and
// [HeaderDeadOffset]; an error matching relayer.ErrPermanent sends it there
// at once. A record without a Relayer id is dead-lettered the same way.
// Stopping (ctx's end) waits for the records being handled, within
// DrainTimeout, and commits the offsets of nothing that did not commit.
//
// [ReceivedMessage] reads a record back as the relayer.Message that was
// produced.
package relayerkafka
