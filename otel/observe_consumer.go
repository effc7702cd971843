package relayerotel

import (
	"context"
	"errors"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/metric"
	semconv "go.opentelemetry.io/otel/semconv/v1.30.0"

	"github.com/relayer-go/relayer/consume"
)

// OutcomeKey is the attribute of relayer.consumer.messages that says what
// the consumer did with a delivery (consume.Outcome's names, with
// underscores): handled, duplicate, retried, dead_lettered, abandoned,
// held or waiting.
const OutcomeKey = attribute.Key("relayer.outcome")

// consumerOutcomes are the outcomes relayer.consumer.messages counts, each
// read from consume.Stats.
var consumerOutcomes = []struct {
	name string
	read func(consume.Stats) uint64
}{
	{"handled", func(s consume.Stats) uint64 { return s.Handled }},
	{"duplicate", func(s consume.Stats) uint64 { return s.Duplicates }},
	{"retried", func(s consume.Stats) uint64 { return s.Retried }},
	{"dead_lettered", func(s consume.Stats) uint64 { return s.DeadLettered }},
	{"abandoned", func(s consume.Stats) uint64 { return s.Abandoned }},
	{"held", func(s consume.Stats) uint64 { return s.Held }},
	{"waiting", func(s consume.Stats) uint64 { return s.Waiting }},
}

// ObserveConsumer registers observable counters that read c.Stats() at each
// collection, each data point carrying messaging.consumer.group.name, the
// consumer's name in the inbox:
//
//   - relayer.consumer.messages, the deliveries c settled, by relayer.outcome
//     (handled, duplicate, retried, dead_lettered, abandoned; held, a
//     failing message that held its key, and waiting, one stored behind a
//     held key; see consume.Consumer.StartHeldKeys): every outcome
//     is reported, at zero too, so that an alert on dead letters compares
//     with a series that exists;
//   - relayer.consumer.settle_failures, the broker calls that settle a
//     delivery and failed;
//   - relayer.consumer.database_waits, the transactions the consumer's
//     database failed for a reason not the message's, which waited for it
//     without spending an attempt.
//
// How long handlers take is [WrapHandler]'s messaging.process.duration. The
// counters are cumulative since c was made; register each consumer once.
func ObserveConsumer(meter metric.Meter, c *consume.Consumer) (metric.Registration, error) {
	if meter == nil {
		return nil, errors.New("relayerotel: a meter is required")
	}
	if c == nil {
		return nil, errors.New("relayerotel: ObserveConsumer needs a consumer")
	}
	group := semconv.MessagingConsumerGroupName(c.Options().Name)
	messages, err1 := meter.Int64ObservableCounter("relayer.consumer.messages", metric.WithUnit("{message}"),
		metric.WithDescription("Deliveries the consumer settled, by outcome."))
	settle, err2 := meter.Int64ObservableCounter("relayer.consumer.settle_failures", metric.WithUnit("{call}"),
		metric.WithDescription("Broker calls settling a delivery (acknowledgement, retry, dead letter) that failed; the broker delivers the message again."))
	waits, err3 := meter.Int64ObservableCounter("relayer.consumer.database_waits", metric.WithUnit("{transaction}"),
		metric.WithDescription("Transactions the consumer's database failed for a reason not the message's; each waited for the database, spending no attempt."))
	if err := errors.Join(err1, err2, err3); err != nil {
		return nil, err
	}
	byOutcome := make([]metric.ObserveOption, len(consumerOutcomes))
	for i, o := range consumerOutcomes {
		byOutcome[i] = metric.WithAttributeSet(attribute.NewSet(group, OutcomeKey.String(o.name)))
	}
	only := metric.WithAttributeSet(attribute.NewSet(group))
	return meter.RegisterCallback(func(_ context.Context, obs metric.Observer) error {
		s := c.Stats()
		for i, o := range consumerOutcomes {
			obs.ObserveInt64(messages, int64(o.read(s)), byOutcome[i])
		}
		obs.ObserveInt64(settle, int64(s.SettleFailures), only)
		obs.ObserveInt64(waits, int64(s.DatabaseWaits), only)
		return nil
	}, messages, settle, waits)
}
