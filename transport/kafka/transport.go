package relayerkafka

import (
	"context"
	"errors"
	"fmt"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/relayer-go/relayer"
)

// ErrUnsupportedClient is returned by [New] for a client configured in a way
// that would break the transport's guarantees. The message names the setting.
var ErrUnsupportedClient = errors.New("relayerkafka: unsupported client configuration")

// Transport is a relayer.Transport that produces messages to Kafka through a
// franz-go client. It is safe for concurrent use. Create it with [New].
type Transport struct {
	client   *kgo.Client
	maxBatch int
}

var _ relayer.Transport = (*Transport)(nil)

// New returns a transport producing through client, which the caller owns:
// the transport never closes it, and it may be shared with other producers
// and consumers. The client needs its default producer guarantees:
//
//   - acks from all in-sync replicas (kgo.RequiredAcks(kgo.AllISRAcks()), the
//     default), so that success means the record is replicated;
//   - the idempotent producer (the default; do not use
//     kgo.DisableIdempotentWrite), so that the client's own retries neither
//     duplicate nor reorder records within a partition, with up to five
//     requests in flight per broker;
//   - neither kgo.TransactionalID, kgo.ManualFlushing nor
//     kgo.DefaultProduceTopicAlways, under which records are not committed,
//     not sent, or not sent to their destination;
//   - a partitioner that maps a key to a fixed partition for per-key order.
//     The default (kgo.UniformBytesPartitioner) hashes keys like the Java
//     client does; New cannot check a custom one.
//
// Set kgo.RecordDeliveryTimeout below the dispatcher's claim duration (30 s
// by default): the client then gives up on a record whose cluster is down
// with an error the transport marks relayer.ErrUnavailable, which charges
// the message no attempt. Without it, the send runs into the claim's
// deadline, which the dispatcher counts as a failed attempt, so that a long
// outage moves the messages it probes with to the dead letters.
//
// New rejects the settings it can read back from the client with
// [ErrUnsupportedClient], and options out of range with [ErrInvalidOptions].
func New(client *kgo.Client, opts Options) (*Transport, error) {
	if client == nil {
		return nil, fmt.Errorf("%w: nil client", ErrUnsupportedClient)
	}
	if err := opts.Validate(); err != nil {
		return nil, err
	}
	if err := checkClient(client); err != nil {
		return nil, err
	}
	opts = opts.withDefaults()
	return &Transport{client: client, maxBatch: opts.MaxBatchSize}, nil
}

func checkClient(client *kgo.Client) error {
	if acks, _ := client.OptValue(kgo.RequiredAcks).(kgo.Acks); acks != kgo.AllISRAcks() {
		return fmt.Errorf("%w: RequiredAcks must be AllISRAcks: success must mean every in-sync replica has the record", ErrUnsupportedClient)
	}
	if disabled, _ := client.OptValue(kgo.DisableIdempotentWrite).(bool); disabled {
		return fmt.Errorf("%w: DisableIdempotentWrite: the idempotent producer keeps retried records in order and without duplicates", ErrUnsupportedClient)
	}
	if v := client.OptValues(kgo.TransactionalID); len(v) == 2 {
		if set, _ := v[1].(bool); set {
			return fmt.Errorf("%w: TransactionalID: records would only become visible when a transaction the transport does not run commits", ErrUnsupportedClient)
		}
	}
	if manual, _ := client.OptValue(kgo.ManualFlushing).(bool); manual {
		return fmt.Errorf("%w: ManualFlushing: records would wait for a Flush the transport does not call", ErrUnsupportedClient)
	}
	if always, _ := client.OptValue(kgo.DefaultProduceTopicAlways).(bool); always {
		return fmt.Errorf("%w: DefaultProduceTopicAlways: records would ignore their destination topic", ErrUnsupportedClient)
	}
	return nil
}

// Capabilities implements relayer.Transport. Every destination reports the
// same: OrderedByKey, MaxBatchSize from [Options], and no native scheduling.
// It does no I/O, so a topic that does not exist yet still reports; sends to
// it fail with relayer.ErrUnavailable.
//
// Order by key holds because three things line up: the partitioner maps a
// key to one partition (as long as the topic's partition count does not
// change), the idempotent producer keeps a partition's records in the order
// they were produced across retries and in-flight requests, and dispatchers
// send one key's messages one after another, waiting for each outcome, or in
// slice order within one [Transport.SendBatch].
func (t *Transport) Capabilities(ctx context.Context, destination string) (relayer.Capabilities, error) {
	return relayer.Capabilities{OrderedByKey: true, MaxBatchSize: t.maxBatch}, nil
}

// Send implements relayer.Transport: it produces msg and waits until the
// partition leader has acknowledged it with every in-sync replica. ctx bounds
// the whole send: producing, which blocks while the client's buffer is full,
// and waiting for the acknowledgement.
//
// When ctx ends first, Send returns ctx's error at once. The record stays
// with the client until the client settles it: one not yet written to the
// broker is dropped, one already written may still be stored (the idempotent
// producer cannot tell), and a goroutine waits for the outcome meanwhile,
// which Close on the client ends. The message may therefore arrive although
// Send failed, as at-least-once delivery allows.
func (t *Transport) Send(ctx context.Context, msg *relayer.Message) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	b := newBatch([]*relayer.Message{msg})
	if b.errs[0] != nil {
		return b.errs[0]
	}
	results, err := t.produce(ctx, b.produce)
	if err != nil {
		return err
	}
	return classify(ctx, msg.Destination, results[0].Err)
}

// SendBatch implements relayer.Transport. It hands every message to the
// client before waiting for any acknowledgement, so that the client packs
// them into as few produce requests as the partitions allow and the batch
// costs about one round trip instead of one per message. Messages may have
// different destinations. Within a partition, and therefore for one key,
// records are stored in slice order.
//
// When some messages fail, SendBatch returns a *relayer.BatchError whose Errs
// is index-aligned with msgs, nil for each message the broker acknowledged;
// failures are classified as described in the package documentation. A
// failed message need not hold back later messages of its key in the same
// batch: the client rejects a record too large for it alone, and a broker
// rejects the records of one produce request, not the ones after it. ctx
// bounds the whole batch as for [Transport.Send]: when it ends first,
// SendBatch returns ctx's error and the whole batch counts as failed, though
// some messages may have been stored.
func (t *Transport) SendBatch(ctx context.Context, msgs []*relayer.Message) error {
	if len(msgs) == 0 {
		return nil
	}
	if len(msgs) > t.maxBatch {
		return fmt.Errorf("relayerkafka: batch of %d messages exceeds MaxBatchSize %d", len(msgs), t.maxBatch)
	}
	if err := ctx.Err(); err != nil {
		return err
	}
	b := newBatch(msgs)
	if len(b.produce) > 0 {
		results, err := t.produce(ctx, b.produce)
		if err != nil {
			return err
		}
		// The client reports records in the order it settles them, which
		// differs from slice order across partitions.
		index := make(map[*kgo.Record]int, len(b.produce))
		for i, r := range b.records {
			if r != nil {
				index[r] = i
			}
		}
		for _, res := range results {
			i := index[res.Record]
			b.errs[i] = classify(ctx, msgs[i].Destination, res.Err)
		}
	}
	for _, err := range b.errs {
		if err != nil {
			return &relayer.BatchError{Errs: b.errs}
		}
	}
	return nil
}

// produce hands records to the client and waits for all of them or for ctx.
//
// ProduceSync cuts the client's linger short for the partitions it produced
// to, which Produce with promises cannot, so a send never waits out
// kgo.ProducerLinger. It cannot be interrupted, though: the idempotent
// producer does not give up on a record already written to a broker until
// the broker answers or the client closes. It therefore runs in a goroutine
// that outlives an abandoned call until the client settles the records.
func (t *Transport) produce(ctx context.Context, records []*kgo.Record) (kgo.ProduceResults, error) {
	done := make(chan kgo.ProduceResults, 1)
	go func() { done <- t.client.ProduceSync(ctx, records...) }()
	select {
	case results := <-done:
		return results, nil
	case <-ctx.Done():
		select {
		case results := <-done: // settled just as ctx ended: report the outcome
			return results, nil
		default:
			return nil, ctx.Err()
		}
	}
}

// MessagingSystem returns "kafka", the OpenTelemetry semantic conventions'
// name of the broker, for instrumentation such as relayerotel.WrapTransport.
func (t *Transport) MessagingSystem() string { return "kafka" }
