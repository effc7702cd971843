package relayerotel_test

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/google/uuid"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/sdk/metric/metricdata"
	"go.opentelemetry.io/otel/trace"

	"github.com/relayer-go/relayer"
	"github.com/relayer-go/relayer/consume"
	"github.com/relayer-go/relayer/headers"
	"github.com/relayer-go/relayer/internal/testkit/testdb"
	relayerotel "github.com/relayer-go/relayer/otel"
	"github.com/relayer-go/relayer/store"
)

// received is a message as a broker adapter hands it over: what the wrapped
// transport sent, whose trace context travels in headers.
type received struct{ msg relayer.Message }

func (d *received) Message() (relayer.Message, error) {
	m := d.msg
	m.TraceParent, m.TraceState = "", "" // not on the wire but in headers
	return m, nil
}
func (d *received) Attempt() int                               { return 1 }
func (d *received) Ack(context.Context) error                  { return nil }
func (d *received) Retry(context.Context, time.Duration) error { return nil }
func (d *received) DeadLetter(context.Context, error) error    { return nil }

// A message written under a request's span, sent through the wrapped
// transport and consumed: the handler sees the creation context the outbox
// stored, as TraceParent rather than headers, and runs in a consumer span
// linked to it; a failing handler's span says so.
func TestWrapHandlerLinksToTheCreationContext(t *testing.T) {
	t.Parallel()
	b := setupTrace(t)
	ctx, request := b.app.Start(context.Background(), "POST /orders")
	m := enlist(t, ctx, "orders", headers.Header{Name: "app", Value: []byte("1")})
	request.End()
	if err := b.tr.Send(context.Background(), m); err != nil {
		t.Fatal(err)
	}
	sent := b.mem.Messages("orders")[0]

	db := testdb.Open(t, "pgx")
	tables := store.Tables{Schema: testdb.NewSchema(t)}
	if _, err := store.Migrate(context.Background(), db, tables); err != nil {
		t.Fatal(err)
	}
	var seen relayer.Message
	fail := false
	c, err := consume.New(db, relayerotel.WrapHandler(func(ctx context.Context, _ *consume.Tx, got *relayer.Message) error {
		seen = *got
		if fail {
			return errors.New("ledger down")
		}
		return nil
	}, relayerotel.WithTracerProvider(b.tp), relayerotel.WithMessagingSystem("memory")), consume.Options{Name: "billing", Tables: tables})
	if err != nil {
		t.Fatal(err)
	}
	if out, err := c.Handle(context.Background(), &received{msg: sent}); out != consume.Handled || err != nil {
		t.Fatalf("Handle = %s, %v", out, err)
	}
	if seen.TraceParent != m.TraceParent || seen.TraceState != m.TraceState || len(seen.Headers) != 1 || seen.Headers[0].Name != "app" {
		t.Errorf("the handler saw traceparent %q, headers %v; want the stored %q and the message's own headers", seen.TraceParent, seen.Headers, m.TraceParent)
	}
	var process []string
	for _, s := range b.rec.Ended() {
		if s.SpanKind() != trace.SpanKindConsumer {
			continue
		}
		process = append(process, s.Name())
		links := s.Links()
		if len(links) != 1 || links[0].SpanContext.SpanID() != request.SpanContext().SpanID() {
			t.Errorf("span %s links %v, want the request's span %v", s.Name(), links, request.SpanContext().SpanID())
		}
		a := attrs(s)
		if a["messaging.operation.type"].AsString() != "process" || a["messaging.message.id"].AsString() != m.ID.String() || a["messaging.system"].AsString() != "memory" {
			t.Errorf("span attributes %v", a)
		}
	}
	if strings.Join(process, ",") != "process orders" {
		t.Fatalf("consumer spans %q, want one: process orders", process)
	}

	fail = true
	sentOther := sent
	sentOther.ID, _ = relayer.NewID()
	if out, _ := c.Handle(context.Background(), &received{msg: sentOther}); out != consume.Retried {
		t.Fatalf("Handle = %s, want retried", out)
	}
	last := b.rec.Ended()[len(b.rec.Ended())-1]
	if last.SpanKind() != trace.SpanKindConsumer || last.Status().Code != codes.Error || !strings.Contains(last.Status().Description, "ledger down") {
		t.Errorf("the failing handler's span: %s, status %v", last.Name(), last.Status())
	}
}

// A consumer's outcomes are counted by ObserveConsumer, every outcome at
// zero too, and WrapHandler measures each handler run, marking failures.
func TestConsumerMetrics(t *testing.T) {
	t.Parallel()
	mb := setupMeter(t)
	db := testdb.Open(t, "pgx")
	tables := store.Tables{Schema: testdb.NewSchema(t)}
	if _, err := store.Migrate(context.Background(), db, tables); err != nil {
		t.Fatal(err)
	}
	c, err := consume.New(db, relayerotel.WrapHandler(func(_ context.Context, _ *consume.Tx, m *relayer.Message) error {
		if string(m.Body) == "fail" {
			return errors.New("ledger down")
		}
		return nil
	}, relayerotel.WithMeterProvider(mb.mp), relayerotel.WithMessagingSystem("nats")), consume.Options{Name: "billing", Tables: tables})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := relayerotel.ObserveConsumer(mb.mp.Meter("test"), c); err != nil {
		t.Fatal(err)
	}
	ok := relayer.Message{ID: uuid.Must(relayer.NewID()), Type: "t", Destination: "orders", Body: []byte("ok")}
	failing := relayer.Message{ID: uuid.Must(relayer.NewID()), Type: "t", Destination: "orders", Body: []byte("fail")}
	for _, m := range []relayer.Message{ok, ok, failing} {
		if _, err := c.Handle(context.Background(), &received{msg: m}); err != nil {
			t.Fatal(err)
		}
	}
	rm := mb.mustCollect(t)
	for outcome, want := range map[string]int64{"handled": 1, "duplicate": 1, "retried": 1, "dead_lettered": 0, "abandoned": 0, "held": 0, "waiting": 0} {
		got, found := total(t, rm, "relayer.consumer.messages", map[string]string{"messaging.consumer.group.name": "billing", "relayer.outcome": outcome})
		if !found || got != want {
			t.Errorf("relayer.consumer.messages{%s} = %d (reported: %v), want %d", outcome, got, found, want)
		}
	}
	for _, name := range []string{"relayer.consumer.settle_failures", "relayer.consumer.database_waits"} {
		if got, found := total(t, rm, name, map[string]string{"messaging.consumer.group.name": "billing"}); !found || got != 0 {
			t.Errorf("%s = %d (reported: %v), want 0", name, got, found)
		}
	}
	m, found := find(rm, relayerotel.MetricProcessDuration)
	if !found {
		t.Fatalf("no %s", relayerotel.MetricProcessDuration)
	}
	hist, isHist := m.Data.(metricdata.Histogram[float64])
	if !isHist {
		t.Fatalf("%s holds %T", relayerotel.MetricProcessDuration, m.Data)
	}
	var runs, failed uint64
	for _, p := range hist.DataPoints {
		if !matches(p.Attributes, map[string]string{"messaging.system": "nats", "messaging.destination.name": "orders", "messaging.operation.name": "process"}) {
			t.Errorf("a handler run measured with %v", p.Attributes.ToSlice())
		}
		runs += p.Count
		if _, ok := p.Attributes.Value("error.type"); ok {
			failed += p.Count
		}
	}
	if runs != 2 || failed != 1 {
		t.Errorf("%d handler runs measured, %d failed; want 2 and 1 (a duplicate runs no handler)", runs, failed)
	}
}

// ObserveHeldKeys reports the keys each consumer holds and the messages
// behind them, and 0 once it holds none.
func TestObserveHeldKeys(t *testing.T) {
	t.Parallel()
	mb := setupMeter(t)
	db := testdb.Open(t, "pgx")
	tables := store.Tables{Schema: testdb.NewSchema(t), TablePrefix: "hk_"}
	if _, err := store.Migrate(context.Background(), db, tables); err != nil {
		t.Fatal(err)
	}
	if _, err := relayerotel.ObserveHeldKeys(mb.mp.Meter("test"), db, tables); err != nil {
		t.Fatal(err)
	}
	held := `"` + tables.Schema + `".hk_inbox_held`
	exec := func(q string) {
		t.Helper()
		if _, err := db.Exec(q); err != nil {
			t.Fatal(err)
		}
	}
	exec(`INSERT INTO ` + held + ` (consumer, ordering_key) VALUES ('billing', 'a'), ('billing', 'b')`)
	for range 3 {
		exec(`INSERT INTO "` + tables.Schema + `".hk_inbox_waiting (consumer, ordering_key, message_id, message_type, destination, headers, body)
VALUES ('billing', 'a', gen_random_uuid(), 't', 'd', '\x0100000000000000', '')`)
	}
	group := map[string]string{"messaging.consumer.group.name": "billing"}
	rm := mb.mustCollect(t)
	if keys, _ := total(t, rm, "relayer.consumer.held_keys", group); keys != 2 {
		t.Errorf("held_keys = %d, want 2", keys)
	}
	if msgs, _ := total(t, rm, "relayer.consumer.held_messages", group); msgs != 3 {
		t.Errorf("held_messages = %d, want 3", msgs)
	}
	exec(`DELETE FROM ` + held)
	rm = mb.mustCollect(t)
	if keys, found := total(t, rm, "relayer.consumer.held_keys", group); !found || keys != 0 {
		t.Errorf("held_keys once released = %d (reported: %v), want 0", keys, found)
	}
}
