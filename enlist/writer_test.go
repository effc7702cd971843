package enlist_test

import (
	"context"
	"errors"
	"log/slog"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/relayer-go/relayer"
	"github.com/relayer-go/relayer/enlist"
	"github.com/relayer-go/relayer/enlist/enlisttest"
	"github.com/relayer-go/relayer/internal/testkit/testdb"
	"github.com/relayer-go/relayer/store"
)

type fullListener struct {
	opts  store.Tables
	calls atomic.Int64
}

func (l *fullListener) Tables() store.Tables { return l.opts }
func (l *fullListener) Committed(rows []relayer.Message) error {
	l.calls.Add(1)
	return errors.New("queue full")
}

func routes(t *testing.T) *relayer.Routes {
	var r relayer.Routes
	if err := relayer.AddType[enlisttest.Placed](&r, relayer.Route{Transport: "mem", Destination: "d"}); err != nil {
		t.Fatal(err)
	}
	return &r
}

func TestNewWriterValidates(t *testing.T) {
	t.Parallel()
	r := routes(t)
	for name, c := range map[string]struct {
		outbox relayer.Outbox
		opts   enlist.Options
		want   error
	}{
		"schema":              {relayer.Outbox{Schema: "Bad-Name", Routes: r}, enlist.Options{}, store.ErrInvalidOptions},
		"prefix":              {relayer.Outbox{TablePrefix: `x"`, Routes: r}, enlist.Options{}, store.ErrInvalidOptions},
		"no routes":           {relayer.Outbox{}, enlist.Options{}, relayer.ErrInvalidRoute},
		"lanes":               {relayer.Outbox{Routes: r, Lanes: 70000}, enlist.Options{}, relayer.ErrInvalidLanes},
		"lanes, as an outbox": {relayer.Outbox{Routes: r, Lanes: 70000}, enlist.Options{}, relayer.ErrInvalidOutbox},
		"nil transport": {relayer.Outbox{Routes: r, Transports: map[string]relayer.Transport{"x": nil}}, enlist.Options{},
			relayer.ErrInvalidOutbox},
		"listener of another schema": {relayer.Outbox{Schema: "orders", Routes: r},
			enlist.Options{Listener: &fullListener{opts: store.Tables{Schema: "billing"}}}, enlist.ErrStoreMismatch},
		"listener of another prefix": {relayer.Outbox{Schema: "orders", TablePrefix: "a_", Routes: r},
			enlist.Options{Listener: &fullListener{opts: store.Tables{Schema: "orders", TablePrefix: "b_"}}}, enlist.ErrStoreMismatch},
	} {
		if _, err := enlist.NewWriter(c.outbox, c.opts); !errors.Is(err, c.want) {
			t.Errorf("%s: NewWriter = %v, want %v", name, err, c.want)
		}
	}
	// Defaults are applied before comparing: "" and "public" are one schema.
	w, err := enlist.NewWriter(relayer.Outbox{Routes: r}, enlist.Options{Listener: &fullListener{opts: store.Tables{Schema: "public"}}})
	if err != nil || w.Tables().Schema != "public" {
		t.Errorf("NewWriter with the default schema = %v", err)
	}
}

// TestFullListenerNeverFailsCommit: the business data is committed whatever the
// listener says, and the rows it refused are counted for recovery.
func TestFullListenerNeverFailsCommit(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	db := testdb.Open(t, "pgx")
	opts := store.Tables{Schema: testdb.NewSchema(t)}
	if _, err := store.Migrate(ctx, db, opts); err != nil {
		t.Fatal(err)
	}
	l := &fullListener{opts: opts}
	w, err := enlist.NewWriter(relayer.Outbox{Schema: opts.Schema, Routes: routes(t)}, enlist.Options{Listener: l})
	if err != nil {
		t.Fatal(err)
	}
	err = w.RunInTx(ctx, db, nil, func(tx *enlist.Tx) error {
		return tx.PublishAll(ctx, relayer.NewOutgoing(enlisttest.Placed{N: 1}), relayer.NewOutgoing(enlisttest.Placed{N: 2}))
	})
	if err != nil {
		t.Fatalf("commit failed because the listener was full: %v", err)
	}
	if l.calls.Load() != 1 || w.LeftForRecovery() != 2 {
		t.Errorf("listener called %d times, %d rows left for recovery; want 1 and 2", l.calls.Load(), w.LeftForRecovery())
	}
	st, _ := store.New(db, opts)
	if n, err := st.CountEligible(ctx, nowish()); err != nil || n != 2 {
		t.Errorf("committed rows = %d, %v; want 2", n, err)
	}
}

func TestPublishOnNilTx(t *testing.T) {
	t.Parallel()
	var tx *enlist.Tx
	if err := tx.Publish(context.Background(), enlisttest.Placed{}); !errors.Is(err, relayer.ErrNotInTransaction) {
		t.Errorf("Publish on a nil Tx = %v", err)
	}
	w, _ := enlist.NewWriter(relayer.Outbox{Routes: routes(t)}, enlist.Options{})
	if _, err := w.Begin(context.Background(), nil, nil); err == nil || !strings.Contains(err.Error(), "nil") {
		t.Errorf("Begin on a nil DB = %v", err)
	}
}

func nowish() time.Time { return time.Now().Add(time.Second) }

// Validate refuses what Publish would refuse, without a database.
func TestValidateRefusesWhatPublishWould(t *testing.T) {
	t.Parallel()
	r := routes(t)
	if err := relayer.AddType[enlisttest.Shipped](r, relayer.Route{Transport: "mem", Destination: "s", Ordered: true}); err != nil {
		t.Fatal(err)
	}
	w, err := enlist.NewWriter(relayer.Outbox{Routes: r}, enlist.Options{})
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	if err := w.Validate(ctx, relayer.NewOutgoing(enlisttest.Placed{N: 1}), relayer.NewOutgoing(enlisttest.Shipped{N: 1}, relayer.Key("k"))); err != nil {
		t.Errorf("valid messages: %v", err)
	}
	for name, m := range map[string]relayer.Outgoing{
		"no route":        relayer.NewOutgoing(enlisttest.Unrouted{}),
		"ordered, no key": relayer.NewOutgoing(enlisttest.Shipped{N: 1}),
		"header name":     relayer.NewOutgoing(enlisttest.Placed{N: 1}, relayer.Header("\xff", nil)),
		"NUL in the key":  relayer.NewOutgoing(enlisttest.Placed{N: 1}, relayer.Key("a\x00b")),
	} {
		if err := w.Validate(ctx, relayer.NewOutgoing(enlisttest.Placed{N: 1}), m); !errors.Is(err, relayer.ErrInvalidMessage) {
			t.Errorf("%s: Validate = %v, want ErrInvalidMessage", name, err)
		}
	}
}

// A writer warns about routes whose type name follows the Go type.
func TestWriterWarnsAboutGoNamedTypes(t *testing.T) {
	t.Parallel()
	logs := &syncBuffer{}
	if _, err := enlist.NewWriter(relayer.Outbox{Routes: routes(t)}, enlist.Options{Logger: slog.New(slog.NewTextHandler(logs, nil))}); err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(logs.String(), "MessageType method") || !strings.Contains(logs.String(), "enlisttest.Placed") {
		t.Errorf("no warning naming the Go-named type:\n%s", logs)
	}
}
