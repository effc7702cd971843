package consume_test

import (
	"context"
	"errors"
	"testing"

	"github.com/relayer-go/relayer"
	"github.com/relayer-go/relayer/consume"
	"github.com/relayer-go/relayer/headers"
)

// OrderPlaced and OrderCancelled are the typed handlers' messages.
type OrderPlaced struct {
	ID    string `json:"id"`
	Total int    `json:"total"`
}

func (OrderPlaced) MessageType() string { return "orders.OrderPlaced" }

type OrderCancelled struct {
	ID string `json:"id"`
}

func (OrderCancelled) MessageType() string { return "orders.OrderCancelled" }

func typedMessage(typ, body string, hs ...headers.Header) relayer.Message {
	m := message()
	m.Type, m.Body, m.Headers = typ, []byte(body), hs
	return m
}

// A typed handler gets the body decoded into its type, in the consumer's
// transaction; a message it cannot decode — another type, another content
// type, a body that does not parse — goes to the dead letters at once,
// without running the handler.
func TestTypedHandlerDecodesOrDeadLetters(t *testing.T) {
	t.Parallel()
	b := newBundle(t)
	var got []OrderPlaced
	c := b.consumer(t, consume.Typed(func(ctx context.Context, tx *consume.Tx, m *relayer.Message, o OrderPlaced) error {
		got = append(got, o)
		return b.writeEffect(ctx, tx, m)
	}), consume.Options{})
	ctx := context.Background()
	ok := &delivery{msg: typedMessage("orders.OrderPlaced", `{"id":"o-1","total":42}`,
		headers.Header{Name: "content-type", Value: []byte("application/json; charset=utf-8")}), attempt: 1}
	if out, err := c.Handle(ctx, ok); out != consume.Handled || err != nil {
		t.Fatalf("Handle = %s, %v; want handled", out, err)
	}
	if len(got) != 1 || got[0] != (OrderPlaced{ID: "o-1", Total: 42}) || b.effects(t, ok.msg.ID) != 1 {
		t.Fatalf("the handler got %+v (%d effects); want the decoded order, once", got, b.effects(t, ok.msg.ID))
	}
	for name, d := range map[string]*delivery{
		"another type":               {msg: typedMessage("orders.OrderCancelled", `{"id":"o-1"}`), attempt: 1},
		"another content type":       {msg: typedMessage("orders.OrderPlaced", `{}`, headers.Header{Name: "content-type", Value: []byte("application/protobuf")}), attempt: 1},
		"a body that does not parse": {msg: typedMessage("orders.OrderPlaced", `{"id":`), attempt: 1},
	} {
		out, err := c.Handle(ctx, d)
		if out != consume.DeadLettered || err != nil {
			t.Errorf("%s: Handle = %s, %v; want dead-lettered at once", name, out, err)
			continue
		}
		if _, _, dead := d.calls(); dead != 1 || !errors.Is(d.dead[0], consume.ErrDecode) || !errors.Is(d.dead[0], relayer.ErrPermanent) {
			t.Errorf("%s: dead letters %v; want one whose cause wraps ErrDecode and relayer.ErrPermanent", name, d.dead)
		}
	}
	if len(got) != 1 {
		t.Errorf("the handler ran for messages it could not decode: %+v", got)
	}
}

// A Mux routes each message to the handler of its type; a type without
// one is dead-lettered at once, naming the types the consumer handles.
func TestMuxRoutesByType(t *testing.T) {
	t.Parallel()
	b := newBundle(t)
	mux := consume.NewMux[*consume.Tx](nil)
	var placed, cancelled []string
	if err := consume.On(mux, func(ctx context.Context, tx *consume.Tx, m *relayer.Message, o OrderPlaced) error {
		placed = append(placed, o.ID)
		return b.writeEffect(ctx, tx, m)
	}); err != nil {
		t.Fatal(err)
	}
	if err := consume.On(mux, func(ctx context.Context, tx *consume.Tx, m *relayer.Message, o OrderCancelled) error {
		cancelled = append(cancelled, o.ID)
		return b.writeEffect(ctx, tx, m)
	}); err != nil {
		t.Fatal(err)
	}
	if err := consume.On(mux, func(context.Context, *consume.Tx, *relayer.Message, OrderPlaced) error { return nil }); !errors.Is(err, consume.ErrInvalidOptions) {
		t.Errorf("a second handler for one type: On = %v, want ErrInvalidOptions", err)
	}
	c := b.consumer(t, mux.Handle, consume.Options{})
	ctx := context.Background()
	for _, m := range []relayer.Message{
		typedMessage("orders.OrderPlaced", `{"id":"o-1"}`),
		typedMessage("orders.OrderCancelled", `{"id":"o-2"}`),
	} {
		if out, err := c.Handle(ctx, &delivery{msg: m, attempt: 1}); out != consume.Handled || err != nil {
			t.Fatalf("%s: Handle = %s, %v", m.Type, out, err)
		}
	}
	if len(placed) != 1 || placed[0] != "o-1" || len(cancelled) != 1 || cancelled[0] != "o-2" {
		t.Errorf("placed %v, cancelled %v; want one each", placed, cancelled)
	}
	unknown := &delivery{msg: typedMessage("orders.OrderShipped", `{}`), attempt: 1}
	if out, _ := c.Handle(ctx, unknown); out != consume.DeadLettered || !errors.Is(unknown.dead[0], consume.ErrUnknownType) {
		t.Errorf("an unknown type: %s, dead letters %v; want dead-lettered with ErrUnknownType", out, unknown.dead)
	}
}

// Permanent marks an error for the dead letters at once, keeping the
// error itself.
func TestPermanent(t *testing.T) {
	t.Parallel()
	cause := errors.New("no such customer")
	err := consume.Permanent(cause)
	if !errors.Is(err, cause) || !errors.Is(err, relayer.ErrPermanent) || err.Error() != cause.Error() {
		t.Errorf("Permanent(%v) = %v; want it to match the cause and relayer.ErrPermanent, with the cause's text", cause, err)
	}
	if consume.Permanent(nil) != nil {
		t.Error("Permanent(nil) is not nil")
	}
	b := newBundle(t)
	c := b.consumer(t, func(context.Context, *consume.Tx, *relayer.Message) error { return err }, consume.Options{})
	d := &delivery{msg: message(), attempt: 1}
	if out, _ := c.Handle(context.Background(), d); out != consume.DeadLettered {
		t.Errorf("Handle = %s, want dead-lettered at the first attempt", out)
	}
}
