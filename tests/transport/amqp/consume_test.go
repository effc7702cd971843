package relayeramqp_test

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	amqp "github.com/rabbitmq/amqp091-go"

	"github.com/relayer-go/relayer"
	"github.com/relayer-go/relayer/consume"
	"github.com/relayer-go/relayer/consume/consumetest"
	"github.com/relayer-go/relayer/headers"
	"github.com/relayer-go/relayer/internal/testkit"
	"github.com/relayer-go/relayer/internal/testkit/testdb"
	"github.com/relayer-go/relayer/store"
	relayeramqp "github.com/relayer-go/relayer/transport/amqp"
)

// consumeBundle is a test's queue, dead-letter queue and consumer
// database. Its queues are durable, not exclusive, so that several
// consumers and their retry queues can reach them; they are deleted when
// the test ends, and expire on their own if it never ends.
type consumeBundle struct {
	*testBundle
	dead   string
	db     *sql.DB
	tables store.Tables
}

func setupConsume(t *testing.T, args amqp.Table) *consumeBundle {
	t.Helper()
	b := setup(t, relayeramqp.Options{})
	b = b.scenario(t)
	b.queue = b.durableQueue(t, "queue", args)
	return &consumeBundle{testBundle: b, dead: b.durableQueue(t, "dead", nil)}
}

// durableQueue declares a durable queue that expires ten minutes after its
// last use, and deletes it, and the retry queues the scenarios' backoffs
// make for it, when the test ends.
func (b *testBundle) durableQueue(t *testing.T, kind string, args amqp.Table) string {
	t.Helper()
	all := amqp.Table{"x-expires": int64(10 * time.Minute / time.Millisecond)}
	for k, v := range args {
		all[k] = v
	}
	q, err := b.ch.QueueDeclare(uniqueName(t, kind), true, false, false, false, all)
	if err != nil {
		t.Fatalf("declaring a queue: %v", err)
	}
	t.Cleanup(func() {
		for _, name := range []string{q.Name, q.Name + ".retry-200ms", q.Name + ".retry-400ms", q.Name + ".retry-1000ms"} {
			if ch, err := b.conn.Channel(); err == nil {
				_, _ = ch.QueueDelete(name, false, false, false)
				_ = ch.Close()
			}
		}
	})
	return q.Name
}

// database returns the consumer's database with migrated outbox tables in
// a schema of the test's own.
func database(t *testing.T) (*sql.DB, store.Tables) {
	t.Helper()
	db := testdb.Open(t, "pgx")
	tables := store.Tables{Schema: testdb.NewSchema(t), TablePrefix: "c_"}
	if _, err := store.Migrate(context.Background(), db, tables); err != nil {
		t.Fatal(err)
	}
	return db, tables
}

// consumer returns a consumer named billing on the bundle's database.
func (b *consumeBundle) consumer(t *testing.T, h consume.Handler, opts consume.Options) *consume.Consumer {
	t.Helper()
	if b.db == nil {
		b.db, b.tables = database(t)
	}
	opts.Name, opts.Tables = "billing", b.tables
	c, err := consume.New(b.db, h, opts)
	if err != nil {
		t.Fatal(err)
	}
	return c
}

// run runs Consume until the test calls the returned stop, which waits for
// it to return and reports its error.
func (b *consumeBundle) run(t *testing.T, c *consume.Consumer, opts relayeramqp.ConsumeOptions) (stop func() error) {
	t.Helper()
	if opts.DeadLetterExchange == "" && opts.DeadLetterRoutingKey == "" {
		opts.DeadLetterRoutingKey = b.dead
	}
	return consumetest.Running(t, func(ctx context.Context) error { return relayeramqp.Consume(ctx, c, b.conn, b.queue, opts) })
}

// The adapter passes the consume conformance suite: each scenario gets a
// queue of its own, which the transport reaches through the default
// exchange, and a dead-letter queue.
func TestConsumeConformance(t *testing.T) {
	t.Parallel()
	consumetest.Run(t, consumetest.Broker{
		CarriesKey: true,
		Endpoint: func(t *testing.T) consumetest.Endpoint {
			b := setupConsume(t, nil)
			return consumetest.Endpoint{
				Transport:   b.tr,
				Destination: b.queue,
				Consume: func(ctx context.Context, c *consume.Consumer) error {
					return relayeramqp.Consume(ctx, c, b.conn, b.queue, relayeramqp.ConsumeOptions{DeadLetterRoutingKey: b.dead})
				},
				DeadLetters: func(t *testing.T, n int) []consumetest.DeadLetter {
					var out []consumetest.DeadLetter
					for _, d := range b.receive(t, b.dead, n) {
						m, err := relayeramqp.ReceivedMessage(d)
						if err != nil {
							t.Fatal(err)
						}
						reason, _ := d.Headers[relayeramqp.HeaderDeadReason].(string)
						out = append(out, consumetest.DeadLetter{Message: m, Reason: reason})
					}
					return out
				},
			}
		},
		Database: database,
	})
}

// A message that no Relayer transport published (no id) is dead-lettered
// at once, naming why, and never handled.
func TestConsumeDeadLettersForeignMessages(t *testing.T) {
	t.Parallel()
	b := setupConsume(t, nil)
	if err := b.ch.PublishWithContext(context.Background(), "", b.queue, false, false, amqp.Publishing{Body: []byte("hand-made")}); err != nil {
		t.Fatal(err)
	}
	ran := false
	c := b.consumer(t, func(context.Context, *consume.Tx, *relayer.Message) error { ran = true; return nil }, consume.Options{})
	stop := b.run(t, c, relayeramqp.ConsumeOptions{})
	testkit.Eventually(t, 10*time.Second, func() bool { return c.Stats().DeadLettered == 1 }, "the message dead-lettered")
	if err := stop(); err != nil {
		t.Fatal(err)
	}
	if ran {
		t.Error("the handler ran for a message without a Relayer id")
	}
	d := b.receive(t, b.dead, 1)[0]
	reason, _ := d.Headers[relayeramqp.HeaderDeadReason].(string)
	if !strings.Contains(reason, "not a Relayer message") || string(d.Body) != "hand-made" || d.Headers[relayeramqp.HeaderDeadQueue] != b.queue ||
		d.Headers[relayeramqp.HeaderDeadConsumer] != "billing" {
		t.Errorf("dead letter %q with headers %v", d.Body, d.Headers)
	}
}

// A retried message keeps its destination, properties and headers, counts
// its failures, and comes back through the retry queue of its backoff;
// through an exchange, a dead letter keeps the message's routing key.
func TestConsumeRetryKeepsTheMessage(t *testing.T) {
	t.Parallel()
	b := setupConsume(t, nil)
	// A topic exchange routes the message to the queue and the dead letters.
	ex := uniqueName(t, "exchange")
	if err := b.ch.ExchangeDeclare(ex, "topic", false, true, false, false, nil); err != nil {
		t.Fatal(err)
	}
	if err := b.ch.QueueBind(b.queue, "orders.*", ex, false, nil); err != nil {
		t.Fatal(err)
	}
	dlx := uniqueName(t, "dlx")
	if err := b.ch.ExchangeDeclare(dlx, "topic", false, true, false, false, nil); err != nil {
		t.Fatal(err)
	}
	if err := b.ch.QueueBind(b.dead, "orders.#", dlx, false, nil); err != nil {
		t.Fatal(err)
	}
	tr, err := relayeramqp.New(b.conn, relayeramqp.Options{Exchange: ex})
	if err != nil {
		t.Fatal(err)
	}
	m := newMessage(t, "orders.placed")
	m.Key = "customer-7"
	m.Headers = []headers.Header{{Name: "trace", Value: []byte("t1")}}
	if err := tr.Send(context.Background(), m); err != nil {
		t.Fatal(err)
	}
	var mu sync.Mutex
	var seen []relayer.Message
	c := b.consumer(t, func(_ context.Context, _ *consume.Tx, got *relayer.Message) error {
		mu.Lock()
		seen = append(seen, *got)
		mu.Unlock()
		return errors.New("ledger down")
	}, consume.Options{Retry: relayer.Retry{MaxAttempts: 3, Backoff: 200 * time.Millisecond, MaxBackoff: time.Second},
		HoldKeys: consume.HoldKeysOff}) // the broker's retry queues, not the consumer's held keys
	stop := b.run(t, c, relayeramqp.ConsumeOptions{DeadLetterExchange: dlx})
	d := b.receive(t, b.dead, 1)[0]
	if err := stop(); err != nil {
		t.Fatal(err)
	}
	if len(seen) != 3 {
		t.Fatalf("the handler ran %d times, want 3", len(seen))
	}
	for i, got := range seen {
		if got.ID != m.ID || got.Destination != "orders.placed" || got.Key != m.Key || got.Type != m.Type ||
			len(got.Headers) != 1 || got.Headers[0].Name != "trace" || !got.CreatedAt.Equal(m.CreatedAt.Truncate(time.Second)) {
			t.Errorf("delivery %d: %+v, want the message sent", i+1, got)
		}
	}
	if d.RoutingKey != "orders.placed" || d.MessageId != m.ID.String() || d.Headers[relayeramqp.HeaderAttempts] != int64(2) {
		t.Errorf("dead letter routed by %q, id %q, attempts %v", d.RoutingKey, d.MessageId, d.Headers[relayeramqp.HeaderAttempts])
	}
	if reason, _ := d.Headers[relayeramqp.HeaderDeadReason].(string); reason != "ledger down" {
		t.Errorf("dead letter reason %q", reason)
	}
	// The retry queues of the two backoffs exist, and are empty.
	for _, q := range []string{b.queue + ".retry-200ms", b.queue + ".retry-400ms"} {
		if n := b.count(t, q); n != 0 {
			t.Errorf("retry queue %s holds %d messages", q, n)
		}
	}
}

// Consume refuses options, queues and exchanges it cannot keep its promises
// with.
func TestConsumeRefusesWhatCannotWork(t *testing.T) {
	t.Parallel()
	b := setupConsume(t, nil)
	c := b.consumer(t, func(context.Context, *consume.Tx, *relayer.Message) error { return nil }, consume.Options{})
	ctx := context.Background()
	for _, tc := range []struct {
		name  string
		queue string
		opts  relayeramqp.ConsumeOptions
		text  string
	}{
		{"no dead-letter destination", b.queue, relayeramqp.ConsumeOptions{}, "DeadLetterExchange or DeadLetterRoutingKey is required"},
		{"missing queue", b.queue + ".missing", relayeramqp.ConsumeOptions{DeadLetterRoutingKey: b.dead}, "NOT_FOUND"},
		{"missing exchange", b.queue, relayeramqp.ConsumeOptions{DeadLetterExchange: "relayer-test.no-such-exchange"}, "DeadLetterExchange"},
		{"concurrency", b.queue, relayeramqp.ConsumeOptions{DeadLetterRoutingKey: b.dead, Concurrency: relayeramqp.ConcurrencyMax + 1}, "Concurrency"},
		{"prefetch", b.queue, relayeramqp.ConsumeOptions{DeadLetterRoutingKey: b.dead, Prefetch: -1}, "Prefetch"},
		{"long queue name", strings.Repeat("q", 250), relayeramqp.ConsumeOptions{DeadLetterRoutingKey: b.dead}, "retry queues"},
	} {
		err := relayeramqp.Consume(ctx, c, b.conn, tc.queue, tc.opts)
		if !errors.Is(err, relayeramqp.ErrInvalidOptions) || !strings.Contains(err.Error(), tc.text) {
			t.Errorf("%s: Consume = %v, want ErrInvalidOptions naming %q", tc.name, err, tc.text)
		}
	}
}

// With a single active consumer and Concurrency 1, two consumers of one
// queue handle its messages in the order they were sent, one consumer at
// a time, also when the active one stops midway.
func TestConsumeSingleActiveConsumerKeepsOrder(t *testing.T) {
	t.Parallel()
	b := setupConsume(t, amqp.Table{"x-single-active-consumer": true})
	const n = 60
	sent := make([]string, n)
	for i := range sent {
		m := newMessage(t, b.queue)
		m.Key = "customer-7"
		m.Body = fmt.Appendf(nil, "%d", i)
		sent[i] = string(m.Body)
		if err := b.tr.Send(context.Background(), m); err != nil {
			t.Fatal(err)
		}
	}
	var mu sync.Mutex
	var handled []string
	handler := func(_ context.Context, _ *consume.Tx, m *relayer.Message) error {
		time.Sleep(2 * time.Millisecond)
		mu.Lock()
		handled = append(handled, string(m.Body))
		mu.Unlock()
		return nil
	}
	first, second := b.consumer(t, handler, consume.Options{}), b.consumer(t, handler, consume.Options{})
	stopFirst := b.run(t, first, relayeramqp.ConsumeOptions{Prefetch: 10})
	testkit.Eventually(t, 10*time.Second, func() bool { return first.Stats().Handled >= 5 }, "the first consumer active")
	_ = b.run(t, second, relayeramqp.ConsumeOptions{Prefetch: 10})
	testkit.Eventually(t, 10*time.Second, func() bool { return first.Stats().Handled >= n/3 }, "a third handled")
	if err := stopFirst(); err != nil {
		t.Fatal(err)
	}
	testkit.Eventually(t, 10*time.Second, func() bool { return first.Stats().Handled+second.Stats().Handled >= n }, "every message handled")
	mu.Lock()
	defer mu.Unlock()
	if !slices.Equal(handled, sent) {
		t.Errorf("handled in the order %v, want %v", handled, sent)
	}
	if second.Stats().Handled == 0 {
		t.Error("the second consumer took over nothing")
	}
}
