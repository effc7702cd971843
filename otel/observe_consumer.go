package relayerotel

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"sync"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/metric"
	semconv "go.opentelemetry.io/otel/semconv/v1.30.0"

	"github.com/relayer-go/relayer/consume"
	"github.com/relayer-go/relayer/consume/heldkeys"
	"github.com/relayer-go/relayer/store"
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
//   - relayer.consumer.messages, what c did with its deliveries and with
//     the held messages its drain handled, by relayer.outcome
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
		metric.WithDescription("Deliveries the consumer settled, and held messages it handled from its database, by outcome."))
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

// ObserveHeldKeys registers gauges of the ordering keys consumers hold in
// the tables of opts (see consume.Consumer.StartHeldKeys), read with one
// statement per collection ([heldkeys.Counts]), per
// messaging.consumer.group.name:
//
//   - relayer.consumer.held_keys: the keys the consumer holds;
//   - relayer.consumer.held_messages: the messages waiting behind them, the
//     failing ones included.
//
// A consumer seen holding keys reports 0 once it holds none, for as long
// as the registration lasts, so that an alert on held keys compares with a
// series that exists. Register it once per consumers' database, in one
// process (every process reading it would report the same keys).
func ObserveHeldKeys(meter metric.Meter, db *sql.DB, tables store.Tables) (metric.Registration, error) {
	if meter == nil {
		return nil, errors.New("relayerotel: a meter is required")
	}
	if db == nil {
		return nil, errors.New("relayerotel: ObserveHeldKeys needs a database")
	}
	if err := tables.Validate(); err != nil {
		return nil, fmt.Errorf("relayerotel: %w", err)
	}
	keys, err1 := meter.Int64ObservableGauge("relayer.consumer.held_keys", metric.WithUnit("{key}"),
		metric.WithDescription("Ordering keys a consumer holds after one of their messages failed."))
	msgs, err2 := meter.Int64ObservableGauge("relayer.consumer.held_messages", metric.WithUnit("{message}"),
		metric.WithDescription("Messages waiting in the consumer's database behind held keys, the failing ones included."))
	if err := errors.Join(err1, err2); err != nil {
		return nil, err
	}
	var mu sync.Mutex
	seen := map[string]bool{}
	return meter.RegisterCallback(func(ctx context.Context, obs metric.Observer) error {
		ctx, cancel := context.WithTimeout(ctx, ObserveTimeout)
		defer cancel()
		counts, err := heldkeys.Counts(ctx, db, tables)
		if err != nil {
			return err
		}
		mu.Lock()
		defer mu.Unlock()
		now := map[string]bool{}
		for _, c := range counts {
			attrs := metric.WithAttributeSet(attribute.NewSet(semconv.MessagingConsumerGroupName(c.Consumer)))
			obs.ObserveInt64(keys, c.Keys, attrs)
			obs.ObserveInt64(msgs, c.Waiting, attrs)
			now[c.Consumer], seen[c.Consumer] = true, true
		}
		for name := range seen {
			if !now[name] {
				attrs := metric.WithAttributeSet(attribute.NewSet(semconv.MessagingConsumerGroupName(name)))
				obs.ObserveInt64(keys, 0, attrs)
				obs.ObserveInt64(msgs, 0, attrs)
			}
		}
		return nil
	}, keys, msgs)
}
