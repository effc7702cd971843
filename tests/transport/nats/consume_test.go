package relayernats_test

import (
	"context"
	"database/sql"
	"errors"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/relayer-go/relayer"
	"github.com/relayer-go/relayer/consume"
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
	tables store.Options
	dead   string
	cons   jetstream.Consumer
}

func setupConsume(t *testing.T, cfg func(*jetstream.ConsumerConfig)) *consumeBundle {
	t.Helper()
	b := setup(t, setupOpts{})
	ctx := testContext(t)
	db := testdb.Open(t, "pgx")
	tables := store.Options{Schema: testdb.NewSchema(t), TablePrefix: "c_"}
	if _, err := store.Migrate(ctx, db, tables); err != nil {
		t.Fatal(err)
	}
	if _, err := db.ExecContext(ctx, `CREATE TABLE `+tables.Schema+`.effects (message_id uuid NOT NULL)`); err != nil {
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

// effects returns how many effect rows message id has.
func (b *consumeBundle) effects(t *testing.T, id uuid.UUID) int {
	t.Helper()
	var n int
	if err := b.db.QueryRow(`SELECT count(*) FROM `+b.tables.Schema+`.effects WHERE message_id = $1`, id).Scan(&n); err != nil {
		t.Fatal(err)
	}
	return n
}

func (b *consumeBundle) writeEffect(ctx context.Context, tx *consume.Tx, m *relayer.Message) error {
	_, err := tx.ExecContext(ctx, `INSERT INTO `+b.tables.Schema+`.effects (message_id) VALUES ($1)`, m.ID)
	return err
}

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
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- relayernats.Consume(ctx, b.js, b.cons, c, opts) }()
	var once sync.Once
	var err error
	stop = func() error {
		once.Do(func() {
			cancel()
			err = <-done
		})
		return err
	}
	t.Cleanup(func() { _ = stop() })
	return stop
}

// until waits up to 10 s for cond.
func until(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// settled waits until the consumer has no message left undelivered or
// unacknowledged (acknowledgements and terminations are asynchronous).
func (b *consumeBundle) settled(t *testing.T, what string) {
	t.Helper()
	until(t, what, func() bool {
		info, err := b.cons.Info(testContext(t))
		if err != nil {
			t.Fatal(err)
		}
		return info.NumPending == 0 && info.NumAckPending == 0
	})
}

// The handler gets the message the transport published, with its id,
// type, key and headers, and each message's effects commit once, acknowledged.
func TestConsumeReceivesWhatWasSent(t *testing.T) {
	t.Parallel()
	b := setupConsume(t, nil)
	ctx := testContext(t)
	sent := []*relayer.Message{
		newMessage(t, b.subject("orders.placed"), "orders.OrderPlaced", []byte(`{"id":"o-1"}`), "trace", "a", "dup", "1", "dup", "2"),
		newMessage(t, b.subject("orders.placed"), "orders.OrderPlaced", []byte{}, "bin", string(binaryValue())),
		newMessage(t, b.subject("orders.shipped"), "orders.OrderShipped", []byte("x")),
	}
	sent[0].Key = "customer-7"
	sent[1].Key = " a key\r\nwith 100% of the awkward bytes\t" // escaped on the wire, read back as is
	for _, m := range sent {
		if err := b.tr.Send(ctx, m); err != nil {
			t.Fatal(err)
		}
	}
	var mu sync.Mutex
	var got []relayer.Message
	c := b.consumer(t, func(ctx context.Context, tx *consume.Tx, m *relayer.Message) error {
		mu.Lock()
		cp := *m
		cp.Body = slices.Clone(m.Body)
		got = append(got, cp)
		mu.Unlock()
		return b.writeEffect(ctx, tx, m)
	}, consume.Options{})
	stop := b.run(t, c, relayernats.ConsumeOptions{})
	until(t, "every message handled", func() bool { return c.Stats().Handled == uint64(len(sent)) })
	if err := stop(); err != nil {
		t.Fatalf("Consume = %v", err)
	}
	if len(got) != len(sent) {
		t.Fatalf("handled %d messages, want %d", len(got), len(sent))
	}
	for i, want := range sent {
		g := got[i] // one at a time, in stream order
		if g.ID != want.ID || g.Type != want.Type || g.Key != want.Key || g.Destination != want.Destination || string(g.Body) != string(want.Body) {
			t.Errorf("message %d: got id %v type %q key %q destination %q body %q; want %v %q %q %q %q",
				i, g.ID, g.Type, g.Key, g.Destination, g.Body, want.ID, want.Type, want.Key, want.Destination, want.Body)
		}
		if !sameHeaders(g, want) {
			t.Errorf("message %d: headers %v, want %v (in any order of names)", i, g.Headers, want.Headers)
		}
		if n := b.effects(t, want.ID); n != 1 {
			t.Errorf("message %d: %d effect rows, want 1", i, n)
		}
	}
	b.settled(t, "the acknowledgements")
}

// sameHeaders reports whether a and b hold the same values under each name,
// in the same order within a name.
func sameHeaders(a relayer.Message, b *relayer.Message) bool {
	byName := func(m *relayer.Message) map[string][]string {
		out := map[string][]string{}
		for _, h := range m.Headers {
			out[h.Name] = append(out[h.Name], string(h.Value))
		}
		return out
	}
	ga, gb := byName(&a), byName(b)
	if len(ga) != len(gb) {
		return false
	}
	for name, vs := range ga {
		if !slices.Equal(vs, gb[name]) {
			return false
		}
	}
	return true
}

// A failing handler's message comes back, through JetStream's delayed
// negative acknowledgement, until its attempts are spent; then it is
// published to the dead-letter subject with its error and terminated.
func TestConsumeRetriesThenDeadLetters(t *testing.T) {
	t.Parallel()
	b := setupConsume(t, nil)
	ctx := testContext(t)
	m := newMessage(t, b.subject("orders.placed"), "orders.OrderPlaced", []byte("body"), "h", "v")
	m.Key = "customer-9"
	if err := b.tr.Send(ctx, m); err != nil {
		t.Fatal(err)
	}
	var mu sync.Mutex
	var at []time.Time
	c := b.consumer(t, func(ctx context.Context, tx *consume.Tx, m *relayer.Message) error {
		mu.Lock()
		at = append(at, time.Now())
		mu.Unlock()
		if err := b.writeEffect(ctx, tx, m); err != nil {
			return err
		}
		return errors.New("ledger\nunavailable")
	}, consume.Options{Retry: relayer.Retry{MaxAttempts: 3, Backoff: 200 * time.Millisecond, MaxBackoff: time.Second}})
	stop := b.run(t, c, relayernats.ConsumeOptions{})
	until(t, "the message dead-lettered", func() bool { return c.Stats().DeadLettered == 1 })
	if err := stop(); err != nil {
		t.Fatal(err)
	}
	if len(at) != 3 {
		t.Fatalf("handler ran %d times, want 3", len(at))
	}
	if gap := at[1].Sub(at[0]); gap < 150*time.Millisecond {
		t.Errorf("the first retry came %v after the failure, want about 200ms (less up to a fifth)", gap)
	}
	if b.effects(t, m.ID) != 0 {
		t.Error("a failing handler's effects were committed")
	}
	dead, err := b.js.CreateOrUpdateConsumer(ctx, b.stream.CachedInfo().Config.Name, jetstream.ConsumerConfig{
		Durable: "dead-reader", FilterSubject: b.dead, AckPolicy: jetstream.AckExplicitPolicy})
	if err != nil {
		t.Fatal(err)
	}
	msgs := drain(t, dead, 1)
	d := msgs[0]
	if id, err := relayernats.MessageID(d.Headers()); err != nil || id != m.ID || string(d.Data()) != "body" {
		t.Errorf("dead letter id %v (%v), body %q; want the message's", id, err, d.Data())
	}
	if got := d.Headers().Get(relayernats.HeaderDeadReason); got != "ledger unavailable" {
		t.Errorf("dead letter reason %q, want the handler's error on one line", got)
	}
	if d.Headers().Get(relayernats.HeaderDeadConsumer) != "billing" || d.Headers().Get(relayernats.HeaderDeadSubject) != m.Destination {
		t.Errorf("dead letter headers %v", d.Headers())
	}
	if got, err := relayernats.ReceivedMessage(d); err != nil || got.Key != m.Key || got.Type != m.Type {
		t.Errorf("the dead letter reads back as %+v, %v", got, err)
	}
	b.settled(t, "the termination")
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
	until(t, "the message dead-lettered", func() bool { return c.Stats().DeadLettered == 1 })
	if err := stop(); err != nil {
		t.Fatal(err)
	}
	if ran {
		t.Error("the handler ran for a message without a Relayer id")
	}
	dead, err := b.js.CreateOrUpdateConsumer(ctx, b.stream.CachedInfo().Config.Name, jetstream.ConsumerConfig{
		Durable: "dead-reader", FilterSubject: b.dead, AckPolicy: jetstream.AckExplicitPolicy})
	if err != nil {
		t.Fatal(err)
	}
	d := drain(t, dead, 1)[0]
	if reason := d.Headers().Get(relayernats.HeaderDeadReason); !strings.Contains(reason, "not a Relayer message") || string(d.Data()) != "hand-made" {
		t.Errorf("dead letter %q with reason %q", d.Data(), reason)
	}
}

// Stopping lets the message being handled commit and be acknowledged: it
// is not delivered again.
func TestConsumeStopDrainsTheMessageBeingHandled(t *testing.T) {
	t.Parallel()
	b := setupConsume(t, nil)
	ctx := testContext(t)
	m := newMessage(t, b.subject("orders.placed"), "orders.OrderPlaced", []byte("x"))
	if err := b.tr.Send(ctx, m); err != nil {
		t.Fatal(err)
	}
	inHandler, release := make(chan struct{}), make(chan struct{})
	c := b.consumer(t, func(ctx context.Context, tx *consume.Tx, m *relayer.Message) error {
		close(inHandler)
		<-release
		return b.writeEffect(ctx, tx, m)
	}, consume.Options{})
	stop := b.run(t, c, relayernats.ConsumeOptions{})
	<-inHandler
	stopped := make(chan error, 1)
	go func() { stopped <- stop() }()
	time.Sleep(50 * time.Millisecond) // Consume is stopping meanwhile
	close(release)
	if err := <-stopped; err != nil {
		t.Fatal(err)
	}
	if s := c.Stats(); s.Handled != 1 || b.effects(t, m.ID) != 1 {
		t.Errorf("after the stop: %+v, %d effect rows; want the message handled once", s, b.effects(t, m.ID))
	}
	b.settled(t, "the acknowledgement")
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
	} {
		err := relayernats.Consume(ctx, b.js, b.cons, c, tc.opts)
		if !errors.Is(err, relayernats.ErrInvalidOptions) || !strings.Contains(err.Error(), tc.text) {
			t.Errorf("%s: Consume = %v, want ErrInvalidOptions naming %q", tc.name, err, tc.text)
		}
	}
	none, err := b.js.CreateOrUpdateConsumer(ctx, b.stream.CachedInfo().Config.Name, jetstream.ConsumerConfig{
		Durable: "no-acks", AckPolicy: jetstream.AckNonePolicy, FilterSubject: b.subject("orders.>")})
	if err != nil {
		t.Fatal(err)
	}
	if err := relayernats.Consume(ctx, b.js, none, c, relayernats.ConsumeOptions{DeadLetterSubject: b.dead}); !errors.Is(err, relayernats.ErrInvalidOptions) {
		t.Errorf("a consumer without acknowledgements: Consume = %v, want ErrInvalidOptions", err)
	}
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
