package relayernats_test

import (
	"context"
	"database/sql"
	"errors"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/relayer-go/relayer"
	"github.com/relayer-go/relayer/consume"
	"github.com/relayer-go/relayer/consume/consumetest"
	"github.com/relayer-go/relayer/internal/testkit"
	"github.com/relayer-go/relayer/internal/testkit/dbproxy"
	"github.com/relayer-go/relayer/internal/testkit/testdb"
	"github.com/relayer-go/relayer/store"
	relayernats "github.com/relayer-go/relayer/transport/nats"
)

// consumeBundle is a test's stream, transport and consumer database: the
// consumer reads the stream's orders subjects; dead letters go to its dead
// subject, which the stream captures too.
type consumeBundle struct {
	*testBundle
	db     *sql.DB
	tables store.Tables
	dead   string
	cons   jetstream.Consumer
}

func setupConsume(t *testing.T, cfg func(*jetstream.ConsumerConfig)) *consumeBundle {
	t.Helper()
	b := setup(t, setupOpts{})
	ctx := testContext(t)
	db := testdb.Open(t, "pgx")
	tables := store.Tables{Schema: testdb.NewSchema(t), TablePrefix: "c_"}
	if _, err := store.Migrate(ctx, db, tables); err != nil {
		t.Fatal(err)
	}
	cc := jetstream.ConsumerConfig{
		Durable:       "billing",
		AckPolicy:     jetstream.AckExplicitPolicy,
		FilterSubject: b.subject("orders.>"),
		AckWait:       5 * time.Second,
	}
	if cfg != nil {
		cfg(&cc)
	}
	cons, err := b.js.CreateOrUpdateConsumer(ctx, b.stream.CachedInfo().Config.Name, cc)
	if err != nil {
		t.Fatal(err)
	}
	return &consumeBundle{testBundle: b, db: db, tables: tables, dead: b.subject("dead"), cons: cons}
}

// consumer returns a consumer named billing on the bundle's database.
func (b *consumeBundle) consumer(t *testing.T, h consume.Handler, opts consume.Options) *consume.Consumer {
	t.Helper()
	opts.Name, opts.Tables = "billing", b.tables
	c, err := consume.New(b.db, h, opts)
	if err != nil {
		t.Fatal(err)
	}
	return c
}

// run runs Consume until the test calls the returned stop, which waits for
// it to return and reports its error.
func (b *consumeBundle) run(t *testing.T, c *consume.Consumer, opts relayernats.ConsumeOptions) (stop func() error) {
	t.Helper()
	if opts.DeadLetterSubject == "" {
		opts.DeadLetterSubject = b.dead
	}
	return consumetest.Running(t, func(ctx context.Context) error { return relayernats.Consume(ctx, c, b.js, b.cons, opts) })
}

// A message that no Relayer transport published (no id) is dead-lettered
// at once, naming why, and never handled.
func TestConsumeDeadLettersForeignMessages(t *testing.T) {
	t.Parallel()
	b := setupConsume(t, nil)
	ctx := testContext(t)
	if _, err := b.js.Publish(ctx, b.subject("orders.placed"), []byte("hand-made")); err != nil {
		t.Fatal(err)
	}
	ran := false
	c := b.consumer(t, func(context.Context, *consume.Tx, *relayer.Message) error { ran = true; return nil }, consume.Options{})
	stop := b.run(t, c, relayernats.ConsumeOptions{})
	testkit.Eventually(t, 10*time.Second, func() bool { return c.Stats().DeadLettered == 1 }, "the message dead-lettered")
	if err := stop(); err != nil {
		t.Fatal(err)
	}
	if ran {
		t.Error("the handler ran for a message without a Relayer id")
	}
	d := b.deadLetters(t, 1)[0]
	if reason := d.Headers().Get(relayernats.HeaderDeadReason); !strings.Contains(reason, "not a Relayer message") || string(d.Data()) != "hand-made" {
		t.Errorf("dead letter %q with reason %q", d.Data(), reason)
	}
}

// Consume refuses options and consumers it cannot keep its promises with.
func TestConsumeRefusesWhatCannotWork(t *testing.T) {
	t.Parallel()
	b := setupConsume(t, func(cc *jetstream.ConsumerConfig) { cc.MaxDeliver = 2 })
	c := b.consumer(t, func(context.Context, *consume.Tx, *relayer.Message) error { return nil }, consume.Options{})
	ctx := testContext(t)
	for _, tc := range []struct {
		name string
		opts relayernats.ConsumeOptions
		text string
	}{
		{"MaxDeliver below the attempts", relayernats.ConsumeOptions{DeadLetterSubject: b.dead}, "at most 2 times"},
		{"no dead-letter subject", relayernats.ConsumeOptions{}, "DeadLetterSubject is required"},
		{"wildcard dead-letter subject", relayernats.ConsumeOptions{DeadLetterSubject: "dead.>"}, "wildcard"},
		{"concurrency", relayernats.ConsumeOptions{DeadLetterSubject: b.dead, Concurrency: -1}, "Concurrency"},
		{"prefetch", relayernats.ConsumeOptions{DeadLetterSubject: b.dead, Prefetch: 10_001}, "Prefetch"},
	} {
		err := relayernats.Consume(ctx, c, b.js, b.cons, tc.opts)
		if !errors.Is(err, relayernats.ErrInvalidOptions) || !strings.Contains(err.Error(), tc.text) {
			t.Errorf("%s: Consume = %v, want ErrInvalidOptions naming %q", tc.name, err, tc.text)
		}
	}
	none, err := b.js.CreateOrUpdateConsumer(ctx, b.stream.CachedInfo().Config.Name, jetstream.ConsumerConfig{
		Durable: "no-acks", AckPolicy: jetstream.AckNonePolicy, FilterSubject: b.subject("orders.>")})
	if err != nil {
		t.Fatal(err)
	}
	if err := relayernats.Consume(ctx, c, b.js, none, relayernats.ConsumeOptions{DeadLetterSubject: b.dead}); !errors.Is(err, relayernats.ErrInvalidOptions) {
		t.Errorf("a consumer without acknowledgements: Consume = %v, want ErrInvalidOptions", err)
	}
}

// The adapter passes the consume conformance suite: each scenario gets a
// stream of its own, a durable consumer of its orders subjects, and a dead
// subject the stream captures too.
func TestConsumeConformance(t *testing.T) {
	t.Parallel()
	consumetest.Run(t, consumetest.Broker{
		CarriesKey: true,
		Endpoint: func(t *testing.T) consumetest.Endpoint {
			b := setupConsume(t, nil)
			return consumetest.Endpoint{
				Transport:   b.tr,
				Destination: b.subject("orders.placed"),
				Consume: func(ctx context.Context, c *consume.Consumer) error {
					return relayernats.Consume(ctx, c, b.js, b.cons, relayernats.ConsumeOptions{DeadLetterSubject: b.dead})
				},
				DeadLetters: func(t *testing.T, n int) []consumetest.DeadLetter {
					var out []consumetest.DeadLetter
					for _, d := range b.deadLetters(t, n) {
						m, err := relayernats.ReceivedMessage(d)
						if err != nil {
							t.Fatal(err)
						}
						out = append(out, consumetest.DeadLetter{Message: m, Reason: d.Headers().Get(relayernats.HeaderDeadReason)})
					}
					return out
				},
			}
		},
		Database: func(t *testing.T) (*sql.DB, store.Tables) {
			db := testdb.Open(t, "pgx")
			tables := store.Tables{Schema: testdb.NewSchema(t), TablePrefix: "c_"}
			if _, err := store.Migrate(context.Background(), db, tables); err != nil {
				t.Fatal(err)
			}
			return db, tables
		},
	})
}

// deadLetters reads n messages from the bundle's dead subject.
func (b *consumeBundle) deadLetters(t *testing.T, n int) []jetstream.Msg {
	t.Helper()
	dead, err := b.js.CreateOrUpdateConsumer(testContext(t), b.stream.CachedInfo().Config.Name, jetstream.ConsumerConfig{
		Durable: "dead-reader", FilterSubject: b.dead, AckPolicy: jetstream.AckExplicitPolicy})
	if err != nil {
		t.Fatal(err)
	}
	return drain(t, dead, n)
}

// ReceivedMessage leaves out the headers the transport added and reads the
// key back whatever its bytes.
func TestReceivedMessageOfAHandMadeMessage(t *testing.T) {
	t.Parallel()
	b := setup(t, setupOpts{})
	ctx := testContext(t)
	id := uuid.Must(relayer.NewID())
	msg := &nats.Msg{Subject: b.subject("x"), Data: []byte("b"), Header: nats.Header{
		relayer.HeaderMessageID: {"forwarded", id.String()}, // the transport's value is the last
		relayer.HeaderKey:       {"k%25%0A"},
		"app":                   {"1"},
	}}
	if _, err := b.js.PublishMsg(ctx, msg); err != nil {
		t.Fatal(err)
	}
	got, err := relayernats.ReceivedMessage(b.fetch(t, 1)[0])
	if err != nil {
		t.Fatal(err)
	}
	if got.ID != id || got.Key != "k%\n" || len(got.Headers) != 2 || got.Headers[0].Name != "app" ||
		got.Headers[1].Name != relayer.HeaderMessageID || string(got.Headers[1].Value) != "forwarded" {
		t.Errorf("ReceivedMessage = id %v key %q headers %v", got.ID, got.Key, got.Headers)
	}
}

// A handler that runs past the consumer's AckWait keeps its message: the
// adapter reports it in progress, so JetStream does not deliver it again
// meanwhile (a redelivery would wait on the inbox and end as a duplicate).
func TestConsumeKeepsALongHandlersMessage(t *testing.T) {
	t.Parallel()
	b := setupConsume(t, func(cc *jetstream.ConsumerConfig) { cc.AckWait = time.Second })
	ctx := testContext(t)
	m := &relayer.Message{ID: uuid.Must(relayer.NewID()), Type: "slow", Destination: b.subject("orders.placed"), Body: []byte("x")}
	if err := b.tr.Send(ctx, m); err != nil {
		t.Fatal(err)
	}
	var runs atomic.Int64
	c := b.consumer(t, func(context.Context, *consume.Tx, *relayer.Message) error {
		runs.Add(1)
		time.Sleep(2500 * time.Millisecond)
		return nil
	}, consume.Options{})
	stop := b.run(t, c, relayernats.ConsumeOptions{Concurrency: 2})
	testkit.Eventually(t, 10*time.Second, func() bool { return c.Stats().Handled == 1 }, "the message handled")
	time.Sleep(1500 * time.Millisecond) // a redelivery would come within an AckWait
	if err := stop(); err != nil {
		t.Fatal(err)
	}
	if st := c.Stats(); runs.Load() != 1 || st.Duplicates != 0 {
		t.Errorf("the handler ran %d times, %d duplicates; want one run, no redelivery", runs.Load(), st.Duplicates)
	}
}

// The consumer's database down for longer than the JetStream consumer's
// AckWait, with messages arriving meanwhile: nothing is retried nor
// dead-lettered (two attempts 10 ms apart would have dead-lettered them
// all at once), and every message commits its effects once when the
// database is back.
func TestConsumeThroughTheConsumersDatabaseOutage(t *testing.T) {
	t.Parallel()
	b := setupConsume(t, nil) // AckWait 5 s
	ctx := testContext(t)
	proxy, db := dbproxy.Open(t, testdb.URL(t))
	if _, err := b.db.ExecContext(ctx, `CREATE TABLE "`+b.tables.Schema+`".effects (message_id uuid NOT NULL)`); err != nil {
		t.Fatal(err)
	}
	c, err := consume.New(db, func(ctx context.Context, tx *consume.Tx, m *relayer.Message) error {
		_, err := tx.ExecContext(ctx, `INSERT INTO "`+b.tables.Schema+`".effects (message_id) VALUES ($1)`, m.ID)
		return err
	}, consume.Options{Name: "billing", Tables: b.tables, Retry: relayer.Retry{MaxAttempts: 2, Backoff: 10 * time.Millisecond, MaxBackoff: 10 * time.Millisecond}})
	if err != nil {
		t.Fatal(err)
	}
	stop := b.run(t, c, relayernats.ConsumeOptions{Concurrency: 2, Prefetch: 4})
	send := func(n int) []uuid.UUID {
		ids := make([]uuid.UUID, n)
		for i := range ids {
			ids[i] = uuid.Must(relayer.NewID())
			m := &relayer.Message{ID: ids[i], Type: "orders.OrderPlaced", Destination: b.subject("orders.placed"), Body: []byte("x")}
			if err := b.tr.Send(ctx, m); err != nil {
				t.Fatal(err)
			}
		}
		return ids
	}
	ids := send(3)
	testkit.Eventually(t, 10*time.Second, func() bool { return c.Stats().Handled == 3 }, "the first messages handled")
	proxy.Down()
	ids = append(ids, send(12)...)
	testkit.Eventually(t, 10*time.Second, func() bool { st := c.Stats(); return st.DatabaseWaits > 0 || st.DeadLettered > 0 }, "deliveries waiting for the database")
	// Asserting an absence: past the consumer's AckWait, nothing was retried,
	// dead-lettered or handled while the database was down.
	time.Sleep(6 * time.Second)
	if st := c.Stats(); st.Retried != 0 || st.DeadLettered != 0 || st.Handled != 3 {
		t.Fatalf("while the database was down: %+v; want deliveries waiting, none retried, dead-lettered or handled", st)
	}
	proxy.Up(t)
	testkit.Eventually(t, 10*time.Second, func() bool { return c.Stats().Handled == uint64(len(ids)) }, "every message handled once the database answers")
	if err := stop(); err != nil {
		t.Fatal(err)
	}
	for _, id := range ids {
		var n int
		if err := b.db.QueryRowContext(ctx, `SELECT count(*) FROM "`+b.tables.Schema+`".effects WHERE message_id = $1`, id).Scan(&n); err != nil {
			t.Fatal(err)
		}
		if n != 1 {
			t.Errorf("message %v has %d effects, want 1", id, n)
		}
	}
	if st := c.Stats(); st.Retried != 0 || st.DeadLettered != 0 {
		t.Errorf("stats %+v: the outage spent attempts", st)
	}
}

// A connection closed for good ends Consume with an error wrapping
// relayer.ErrUnavailable, as every adapter does: the caller dials again.
func TestConsumeReturnsWhenItsConnectionCloses(t *testing.T) {
	t.Parallel()
	b := setupConsume(t, nil)
	ctx := testContext(t)
	nc, err := nats.Connect(serverURL(t), nats.MaxReconnects(0))
	if err != nil {
		t.Fatal(err)
	}
	js, err := jetstream.New(nc)
	if err != nil {
		t.Fatal(err)
	}
	cons, err := js.Consumer(ctx, b.stream.CachedInfo().Config.Name, "billing")
	if err != nil {
		t.Fatal(err)
	}
	c := b.consumer(t, func(context.Context, *consume.Tx, *relayer.Message) error { return nil }, consume.Options{})
	done := make(chan error, 1)
	go func() {
		done <- relayernats.Consume(ctx, c, js, cons, relayernats.ConsumeOptions{DeadLetterSubject: b.dead})
	}()
	m := &relayer.Message{ID: uuid.Must(relayer.NewID()), Type: "t", Destination: b.subject("orders.placed"), Body: []byte("x")}
	if err := b.tr.Send(ctx, m); err != nil {
		t.Fatal(err)
	}
	testkit.Eventually(t, 10*time.Second, func() bool { return c.Stats().Handled == 1 }, "the message handled")
	nc.Close()
	select {
	case err := <-done:
		if !errors.Is(err, relayer.ErrUnavailable) {
			t.Errorf("Consume after its connection closed = %v, want an error wrapping relayer.ErrUnavailable", err)
		}
	case <-time.After(15 * time.Second):
		t.Fatal("Consume did not return after its connection closed")
	}
}
