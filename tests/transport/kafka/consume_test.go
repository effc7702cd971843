package relayerkafka_test

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/relayer-go/relayer"
	relayerconsume "github.com/relayer-go/relayer/consume"
	"github.com/relayer-go/relayer/consume/consumetest"
	"github.com/relayer-go/relayer/internal/testkit"
	"github.com/relayer-go/relayer/internal/testkit/testdb"
	"github.com/relayer-go/relayer/store"
	relayerkafka "github.com/relayer-go/relayer/transport/kafka"
)

// Topics of a consume test's cluster.
const (
	ordersTopic = "orders"
	deadTopic   = "orders.dead"
)

// consumeBundle is a consume test's cluster, with its orders and dead
// letter topics, a transport producing to it, and the consumer database.
type consumeBundle struct {
	*testBundle
	db     *sql.DB
	tables store.Tables
}

func setupConsume(t *testing.T, partitions int32) *consumeBundle {
	t.Helper()
	b := setup(t, setupOpts{cluster: []kfake.Opt{kfake.SeedTopics(partitions, ordersTopic), kfake.SeedTopics(1, deadTopic)}})
	db, tables := database(t)
	return &consumeBundle{testBundle: b, db: db, tables: tables}
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

// consume runs Consume in the group "billing" of the bundle's cluster.
func (b *consumeBundle) consume(ctx context.Context, c *relayerconsume.Consumer, opts relayerkafka.ConsumeOptions) error {
	opts.Group, opts.Topics = "billing", []string{ordersTopic}
	if opts.DeadLetterTopic == "" {
		opts.DeadLetterTopic = deadTopic
	}
	return relayerkafka.Consume(ctx, c, []kgo.Opt{kgo.SeedBrokers(b.cluster.ListenAddrs()...), kgo.ConsumeResetOffset(kgo.NewOffset().AtStart())}, opts)
}

// consumer returns a consumer named billing on the bundle's database.
func (b *consumeBundle) consumer(t *testing.T, h relayerconsume.Handler, opts relayerconsume.Options) *relayerconsume.Consumer {
	t.Helper()
	opts.Name, opts.Tables = "billing", b.tables
	c, err := relayerconsume.New(b.db, h, opts)
	if err != nil {
		t.Fatal(err)
	}
	return c
}

// run runs Consume until the test calls the returned stop, which waits for
// it to return and reports its error.
func (b *consumeBundle) run(t *testing.T, c *relayerconsume.Consumer, opts relayerkafka.ConsumeOptions) (stop func() error) {
	t.Helper()
	return consumetest.Running(t, func(ctx context.Context) error { return b.consume(ctx, c, opts) })
}

// The adapter passes the consume conformance suite, each scenario on a
// cluster of its own with a one-partition orders topic.
func TestConsumeConformance(t *testing.T) {
	t.Parallel()
	consumetest.Run(t, consumetest.Broker{
		CarriesKey: true,
		Endpoint: func(t *testing.T) consumetest.Endpoint {
			b := setupConsume(t, 1)
			return consumetest.Endpoint{
				Transport:   b.tr,
				Destination: ordersTopic,
				Consume: func(ctx context.Context, c *relayerconsume.Consumer) error {
					return b.consume(ctx, c, relayerkafka.ConsumeOptions{})
				},
				DeadLetters: func(t *testing.T, n int) []consumetest.DeadLetter {
					var out []consumetest.DeadLetter
					for _, r := range consume(t, b.testBundle, deadTopic, n) {
						m, err := relayerkafka.ReceivedMessage(r)
						if err != nil {
							t.Fatal(err)
						}
						out = append(out, consumetest.DeadLetter{Message: m, Reason: header(r, relayerkafka.HeaderDeadReason)})
					}
					return out
				},
			}
		},
		Database: database,
	})
}

// header returns the last value of r's header name.
func header(r *kgo.Record, name string) string {
	v := ""
	for _, h := range r.Headers {
		if h.Key == name {
			v = string(h.Value)
		}
	}
	return v
}

// A record that no Relayer transport produced (no id) is dead-lettered at
// once, naming why and where it came from, and never handled.
func TestConsumeDeadLettersForeignRecords(t *testing.T) {
	t.Parallel()
	b := setupConsume(t, 1)
	if err := b.client.ProduceSync(context.Background(), &kgo.Record{Topic: ordersTopic, Key: []byte("k"), Value: []byte("hand-made")}).FirstErr(); err != nil {
		t.Fatal(err)
	}
	ran := false
	c := b.consumer(t, func(context.Context, *relayerconsume.Tx, *relayer.Message) error { ran = true; return nil }, relayerconsume.Options{})
	stop := b.run(t, c, relayerkafka.ConsumeOptions{})
	testkit.Eventually(t, 10*time.Second, func() bool { return c.Stats().DeadLettered == 1 }, "the record dead-lettered")
	if err := stop(); err != nil {
		t.Fatal(err)
	}
	if ran {
		t.Error("the handler ran for a record without a Relayer id")
	}
	d := consume(t, b.testBundle, deadTopic, 1)[0]
	if reason := header(d, relayerkafka.HeaderDeadReason); !strings.Contains(reason, "not a Relayer message") || string(d.Value) != "hand-made" ||
		string(d.Key) != "k" || header(d, relayerkafka.HeaderDeadTopic) != ordersTopic || header(d, relayerkafka.HeaderDeadOffset) != "0" {
		t.Errorf("dead letter %q key %q with headers %v", d.Value, d.Key, d.Headers)
	}
}

// A poison record holds its partition for its attempts only: the records
// behind it are handled once it is dead-lettered, in order.
func TestConsumePoisonHoldsItsPartitionForItsAttemptsOnly(t *testing.T) {
	t.Parallel()
	b := setupConsume(t, 1)
	var sent []string
	for i := range 5 {
		m := newMessage(t, ordersTopic, "customer-7", strconv.Itoa(i))
		sent = append(sent, m.ID.String())
		if err := b.tr.Send(context.Background(), m); err != nil {
			t.Fatal(err)
		}
	}
	var mu sync.Mutex
	var handled []string
	c := b.consumer(t, func(_ context.Context, _ *relayerconsume.Tx, m *relayer.Message) error {
		mu.Lock()
		defer mu.Unlock()
		handled = append(handled, string(m.Body))
		if string(m.Body) == "1" {
			return errors.New("poison")
		}
		return nil
	}, relayerconsume.Options{Retry: relayer.Retry{MaxAttempts: 3, Backoff: 50 * time.Millisecond}})
	stop := b.run(t, c, relayerkafka.ConsumeOptions{})
	testkit.Eventually(t, 10*time.Second, func() bool { st := c.Stats(); return st.Handled == 4 && st.DeadLettered == 1 }, "every record settled")
	if err := stop(); err != nil {
		t.Fatal(err)
	}
	if got := strings.Join(handled, " "); got != "0 1 1 1 2 3 4" {
		t.Errorf("handled %s, want 0 1 1 1 2 3 4 (the poison three times, in place)", got)
	}
	if d := consume(t, b.testBundle, deadTopic, 1)[0]; header(d, relayer.HeaderMessageID) != sent[1] {
		t.Errorf("dead letter %v, want the poison %s", d.Headers, sent[1])
	}
}

// Consumers joining and leaving the group move partitions between them;
// each key's messages are still handled in the order produced, each
// exactly once, and the offsets committed at each rebalance let the next
// owner resume where the work committed.
func TestConsumeRebalanceKeepsKeyOrder(t *testing.T) {
	t.Parallel()
	b := setupConsume(t, 4)
	const keys = 12
	// A producer sends a round (one message per key) every 10 ms until the
	// consumers have changed hands, then ten rounds more.
	handOverDone := make(chan struct{})
	produced := make(chan int, 1)
	go func() {
		for round := 0; ; round++ {
			select {
			case <-handOverDone:
				produced <- round
				return
			default:
			}
			for k := range keys {
				m := newMessage(t, ordersTopic, fmt.Sprintf("customer-%d", k), strconv.Itoa(round))
				if err := b.tr.Send(context.Background(), m); err != nil {
					t.Error(err)
				}
			}
			time.Sleep(10 * time.Millisecond)
		}
	}()
	var mu sync.Mutex
	next := map[string]int{} // the round each key expects next
	var disorder []string
	handler := func(_ context.Context, _ *relayerconsume.Tx, m *relayer.Message) error {
		time.Sleep(2 * time.Millisecond)
		n, _ := strconv.Atoi(string(m.Body))
		mu.Lock()
		defer mu.Unlock()
		if next[m.Key] != n {
			disorder = append(disorder, fmt.Sprintf("%s: %d after %d", m.Key, n, next[m.Key]-1))
		}
		next[m.Key] = n + 1
		return nil
	}
	handled := func(cs ...*relayerconsume.Consumer) (n uint64) {
		for _, c := range cs {
			n += c.Stats().Handled
		}
		return n
	}
	a, bc, cc := b.consumer(t, handler, relayerconsume.Options{}), b.consumer(t, handler, relayerconsume.Options{}), b.consumer(t, handler, relayerconsume.Options{})
	// A alone, then A and B, then A, B and C, then B and C.
	stopA := b.run(t, a, relayerkafka.ConsumeOptions{})
	testkit.Eventually(t, 10*time.Second, func() bool { return handled(a) >= 50 }, "A handling")
	stopB := b.run(t, bc, relayerkafka.ConsumeOptions{})
	testkit.Eventually(t, 10*time.Second, func() bool { return handled(bc) > 0 }, "B taking partitions over")
	_ = b.run(t, cc, relayerkafka.ConsumeOptions{})
	testkit.Eventually(t, 10*time.Second, func() bool { return handled(cc) > 0 }, "C taking partitions over")
	if err := stopA(); err != nil {
		t.Fatal(err)
	}
	after := handled(bc, cc)
	testkit.Eventually(t, 10*time.Second, func() bool { return handled(bc, cc) > after }, "B and C handling messages after A left")
	close(handOverDone)
	rounds := <-produced
	testkit.Eventually(t, 10*time.Second, func() bool { return handled(a, bc, cc) >= uint64(keys*rounds) }, "every message handled")
	if err := stopB(); err != nil {
		t.Fatal(err)
	}
	mu.Lock()
	defer mu.Unlock()
	if len(disorder) > 0 {
		t.Errorf("out of order: %v", disorder)
	}
	if got := handled(a, bc, cc); got != uint64(keys*rounds) {
		t.Errorf("handled %d, want %d: each message once", got, keys*rounds)
	}
	for k := range keys {
		if key := fmt.Sprintf("customer-%d", k); next[key] != rounds {
			t.Errorf("%s: handled up to round %d, want %d", key, next[key]-1, rounds-1)
		}
	}
	t.Logf("%d rounds; handled by A, B, C: %d, %d, %d", rounds, handled(a), handled(bc), handled(cc))
}

// Consume refuses options it cannot keep its promises with.
func TestConsumeRefusesWhatCannotWork(t *testing.T) {
	t.Parallel()
	b := setupConsume(t, 1)
	c := b.consumer(t, func(context.Context, *relayerconsume.Tx, *relayer.Message) error { return nil }, relayerconsume.Options{})
	for _, tc := range []struct {
		name string
		opts relayerkafka.ConsumeOptions
		text string
	}{
		{"no group", relayerkafka.ConsumeOptions{Topics: []string{ordersTopic}, DeadLetterTopic: deadTopic}, "Group is required"},
		{"no topics", relayerkafka.ConsumeOptions{Group: "g", DeadLetterTopic: deadTopic}, "Topics is empty"},
		{"no dead-letter topic", relayerkafka.ConsumeOptions{Group: "g", Topics: []string{ordersTopic}}, "DeadLetterTopic is required"},
		{"dead letters consumed", relayerkafka.ConsumeOptions{Group: "g", Topics: []string{ordersTopic, deadTopic}, DeadLetterTopic: deadTopic}, "would be consumed again"},
		{"bad topic", relayerkafka.ConsumeOptions{Group: "g", Topics: []string{"a b"}, DeadLetterTopic: deadTopic}, "not a valid topic name"},
	} {
		err := relayerkafka.Consume(context.Background(), c, []kgo.Opt{kgo.SeedBrokers(b.cluster.ListenAddrs()...)}, tc.opts)
		if !errors.Is(err, relayerkafka.ErrInvalidOptions) || !strings.Contains(err.Error(), tc.text) {
			t.Errorf("%s: Consume = %v, want ErrInvalidOptions naming %q", tc.name, err, tc.text)
		}
	}
}
