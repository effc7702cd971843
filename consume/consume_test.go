package consume_test

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/google/uuid"

	"github.com/relayer-go/relayer"
	"github.com/relayer-go/relayer/consume"
	"github.com/relayer-go/relayer/enlist"
	"github.com/relayer-go/relayer/headers"
	"github.com/relayer-go/relayer/internal/testkit"
	"github.com/relayer-go/relayer/internal/testkit/dbproxy"
	"github.com/relayer-go/relayer/internal/testkit/syncbuf"
	"github.com/relayer-go/relayer/internal/testkit/testdb"
	"github.com/relayer-go/relayer/store"
)

func TestMain(m *testing.M) { testdb.Main(m) }

// delivery is a broker message as a test adapter hands it over: it records
// how the consumer settled it.
type delivery struct {
	msg     relayer.Message
	err     error // Message's error
	attempt int
	// onSettle runs at the settling call, before it is recorded.
	onSettle func()

	mu      sync.Mutex
	acks    int
	retries []time.Duration
	dead    []error
}

func (d *delivery) Message() (relayer.Message, error) { return d.msg, d.err }
func (d *delivery) Attempt() int                      { return d.attempt }

func (d *delivery) Ack(context.Context) error {
	d.settled()
	d.mu.Lock()
	defer d.mu.Unlock()
	d.acks++
	return nil
}

func (d *delivery) Retry(_ context.Context, delay time.Duration) error {
	d.settled()
	d.mu.Lock()
	defer d.mu.Unlock()
	d.retries = append(d.retries, delay)
	return nil
}

func (d *delivery) DeadLetter(_ context.Context, cause error) error {
	d.settled()
	d.mu.Lock()
	defer d.mu.Unlock()
	d.dead = append(d.dead, cause)
	return nil
}

func (d *delivery) settled() {
	if d.onSettle != nil {
		d.onSettle()
	}
}

// calls returns how many times each settling call was made.
func (d *delivery) calls() (acks, retries, dead int) {
	d.mu.Lock()
	defer d.mu.Unlock()
	return d.acks, len(d.retries), len(d.dead)
}

// bundle is one test's database: migrated outbox tables in a schema of its
// own, and an effects table the handlers write to.
type bundle struct {
	db     *sql.DB
	tables store.Tables
}

func newBundle(t *testing.T) *bundle {
	t.Helper()
	ctx := context.Background()
	db := testdb.Open(t, "pgx")
	tables := store.Tables{Schema: testdb.NewSchema(t), TablePrefix: "c_"}
	if _, err := store.Migrate(ctx, db, tables); err != nil {
		t.Fatal(err)
	}
	if _, err := db.ExecContext(ctx, `CREATE TABLE `+tables.Schema+`.effects (message_id uuid NOT NULL, note text)`); err != nil {
		t.Fatal(err)
	}
	return &bundle{db: db, tables: tables}
}

// effects returns how many effect rows message id has, read outside any
// consumer's transaction.
func (b *bundle) effects(t *testing.T, id uuid.UUID) int {
	t.Helper()
	var n int
	if err := b.db.QueryRow(`SELECT count(*) FROM `+b.tables.Schema+`.effects WHERE message_id = $1`, id).Scan(&n); err != nil {
		t.Fatal(err)
	}
	return n
}

// recorded reports whether the inbox holds message id for consumer.
func (b *bundle) recorded(t *testing.T, consumer string, id uuid.UUID) bool {
	t.Helper()
	var n int
	if err := b.db.QueryRow(`SELECT count(*) FROM `+b.tables.Schema+`.c_inbox WHERE consumer = $1 AND message_id = $2`, consumer, id).Scan(&n); err != nil {
		t.Fatal(err)
	}
	return n == 1
}

// writeEffect is a handler that records its message's effect.
func (b *bundle) writeEffect(ctx context.Context, tx *consume.Tx, m *relayer.Message) error {
	_, err := tx.ExecContext(ctx, `INSERT INTO `+b.tables.Schema+`.effects (message_id, note) VALUES ($1, $2)`, m.ID, string(m.Body))
	return err
}

func message() relayer.Message {
	return relayer.Message{ID: uuid.Must(relayer.NewID()), Type: "orders.OrderPlaced", Destination: "orders.placed",
		Key: "customer-7", Body: []byte(`{"id":"o-1"}`)}
}

func (b *bundle) consumer(t *testing.T, h consume.Handler, opts consume.Options) *consume.Consumer {
	t.Helper()
	if opts.Name == "" {
		opts.Name = "billing"
	}
	if opts.Tables == (store.Tables{}) && opts.Writer == nil {
		opts.Tables = b.tables
	}
	c, err := consume.New(b.db, h, opts)
	if err != nil {
		t.Fatal(err)
	}
	return c
}

// A handled message is acknowledged only once its effects and its inbox
// record are committed: at the acknowledgement, another session sees them.
func TestHandleCommitsBeforeItAcknowledges(t *testing.T) {
	t.Parallel()
	b := newBundle(t)
	c := b.consumer(t, b.writeEffect, consume.Options{})
	d := &delivery{msg: message(), attempt: 1}
	var atAck int
	d.onSettle = func() { atAck = b.effects(t, d.msg.ID) }
	out, err := c.Handle(context.Background(), d)
	if err != nil || out != consume.Handled {
		t.Fatalf("Handle = %s, %v; want handled", out, err)
	}
	if acks, retries, dead := d.calls(); acks != 1 || retries != 0 || dead != 0 {
		t.Errorf("settled with %d acks, %d retries, %d dead letters; want one ack", acks, retries, dead)
	}
	if atAck != 1 {
		t.Errorf("at the acknowledgement another session saw %d effect rows, want the committed one", atAck)
	}
	if !b.recorded(t, "billing", d.msg.ID) {
		t.Error("the inbox has no record of the handled message")
	}
	if s := c.Stats(); s.Handled != 1 {
		t.Errorf("Stats = %+v", s)
	}
}

// A redelivery of a handled message (a crash between commit and
// acknowledgement) is acknowledged without running the handler.
func TestRedeliveryIsAcknowledgedWithoutTheHandler(t *testing.T) {
	t.Parallel()
	b := newBundle(t)
	runs := 0
	c := b.consumer(t, func(ctx context.Context, tx *consume.Tx, m *relayer.Message) error {
		runs++
		return b.writeEffect(ctx, tx, m)
	}, consume.Options{})
	m := message()
	for i, want := range []consume.Outcome{consume.Handled, consume.Duplicate, consume.Duplicate} {
		d := &delivery{msg: m, attempt: i + 1}
		if out, err := c.Handle(context.Background(), d); err != nil || out != want {
			t.Fatalf("delivery %d: Handle = %s, %v; want %s", i+1, out, err, want)
		}
		if acks, _, _ := d.calls(); acks != 1 {
			t.Errorf("delivery %d acknowledged %d times, want once", i+1, acks)
		}
	}
	if runs != 1 || b.effects(t, m.ID) != 1 {
		t.Errorf("the handler ran %d times, %d effect rows; want once", runs, b.effects(t, m.ID))
	}
	// Another consumer name handles the same message once more.
	other := b.consumer(t, b.writeEffect, consume.Options{Name: "shipping"})
	if out, err := other.Handle(context.Background(), &delivery{msg: m, attempt: 1}); err != nil || out != consume.Handled {
		t.Errorf("another consumer: Handle = %s, %v; want handled", out, err)
	}
}

// Two deliveries of one message at once (a redelivery overtaking a slow
// first attempt, two consumer processes) commit its effects once.
func TestRacingDeliveriesCommitOnce(t *testing.T) {
	t.Parallel()
	b := newBundle(t)
	started := make(chan struct{}, 2)
	c := b.consumer(t, func(ctx context.Context, tx *consume.Tx, m *relayer.Message) error {
		started <- struct{}{}
		time.Sleep(100 * time.Millisecond) // the other delivery waits on the inbox record meanwhile
		return b.writeEffect(ctx, tx, m)
	}, consume.Options{})
	m := message()
	outs := make([]consume.Outcome, 2)
	var wg sync.WaitGroup
	for i := range outs {
		wg.Go(func() {
			var err error
			if outs[i], err = c.Handle(context.Background(), &delivery{msg: m, attempt: 1}); err != nil {
				t.Error(err)
			}
		})
	}
	wg.Wait()
	if !(outs[0] == consume.Handled && outs[1] == consume.Duplicate || outs[0] == consume.Duplicate && outs[1] == consume.Handled) {
		t.Errorf("outcomes %v, want one handled and one duplicate", outs)
	}
	if n := b.effects(t, m.ID); n != 1 || len(started) != 1 {
		t.Errorf("%d effect rows, handler started %d times; want once", n, len(started))
	}
}

// A failing handler rolls back, effects and inbox record alike, and the
// message comes back after the policy's backoff until its attempts are
// spent; then it is dead-lettered with the handler's error.
func TestFailingHandlerIsRetriedThenDeadLettered(t *testing.T) {
	t.Parallel()
	b := newBundle(t)
	boom := errors.New("ledger unavailable")
	c := b.consumer(t, func(ctx context.Context, tx *consume.Tx, m *relayer.Message) error {
		if err := b.writeEffect(ctx, tx, m); err != nil {
			return err
		}
		return boom
	}, consume.Options{Retry: relayer.Retry{MaxAttempts: 3, Backoff: time.Second, MaxBackoff: 3 * time.Second}})
	m := message()
	for attempt, want := range map[int]time.Duration{1: time.Second, 2: 2 * time.Second} {
		d := &delivery{msg: m, attempt: attempt}
		out, err := c.Handle(context.Background(), d)
		if err != nil || out != consume.Retried {
			t.Fatalf("attempt %d: Handle = %s, %v; want retried", attempt, out, err)
		}
		if len(d.retries) != 1 || d.retries[0] > want || d.retries[0] < want-want/5 {
			t.Errorf("attempt %d: retried after %v, want %v less up to a fifth", attempt, d.retries, want)
		}
	}
	d := &delivery{msg: m, attempt: 3}
	if out, err := c.Handle(context.Background(), d); err != nil || out != consume.DeadLettered {
		t.Fatalf("last attempt: Handle = %s, %v; want dead-lettered", out, err)
	}
	if len(d.dead) != 1 || !errors.Is(d.dead[0], boom) {
		t.Errorf("dead-lettered with %v, want the handler's error", d.dead)
	}
	if b.effects(t, m.ID) != 0 || b.recorded(t, "billing", m.ID) {
		t.Error("a failed handler's effects or inbox record were committed")
	}
	if s := c.Stats(); s.Retried != 2 || s.DeadLettered != 1 || s.Handled != 0 {
		t.Errorf("Stats = %+v", s)
	}
}

// An error matching relayer.ErrPermanent dead-letters the message at once.
func TestPermanentErrorDeadLettersAtOnce(t *testing.T) {
	t.Parallel()
	b := newBundle(t)
	c := b.consumer(t, func(context.Context, *consume.Tx, *relayer.Message) error {
		return fmt.Errorf("order for an unknown customer: %w", relayer.ErrPermanent)
	}, consume.Options{})
	d := &delivery{msg: message(), attempt: 1}
	if out, err := c.Handle(context.Background(), d); err != nil || out != consume.DeadLettered {
		t.Fatalf("Handle = %s, %v; want dead-lettered", out, err)
	}
	if len(d.dead) != 1 || !errors.Is(d.dead[0], relayer.ErrPermanent) {
		t.Errorf("dead-lettered with %v", d.dead)
	}
}

// A panicking handler counts as a failing one: retried, then dead-lettered.
func TestPanickingHandlerIsRetried(t *testing.T) {
	t.Parallel()
	b := newBundle(t)
	c := b.consumer(t, func(context.Context, *consume.Tx, *relayer.Message) error { panic("nil map") },
		consume.Options{Retry: relayer.Retry{MaxAttempts: 2}})
	m := message()
	if out, err := c.Handle(context.Background(), &delivery{msg: m, attempt: 1}); err != nil || out != consume.Retried {
		t.Fatalf("first delivery: Handle = %s, %v; want retried", out, err)
	}
	d := &delivery{msg: m, attempt: 2}
	if out, err := c.Handle(context.Background(), d); err != nil || out != consume.DeadLettered {
		t.Fatalf("second delivery: Handle = %s, %v; want dead-lettered", out, err)
	}
	if len(d.dead) != 1 || !strings.Contains(d.dead[0].Error(), "panicked: nil map") {
		t.Errorf("dead-lettered with %v", d.dead)
	}
}

// A broker message without a Relayer id is dead-lettered with
// ErrNotRelayer, never given an id of its own.
func TestMessageWithoutAnIDIsDeadLettered(t *testing.T) {
	t.Parallel()
	b := newBundle(t)
	ran := false
	c := b.consumer(t, func(context.Context, *consume.Tx, *relayer.Message) error { ran = true; return nil }, consume.Options{})
	for _, d := range []*delivery{
		{err: errors.New("no relayer-message-id header"), attempt: 1},
		{msg: relayer.Message{Type: "t", Body: []byte("x")}, attempt: 1}, // the zero id
	} {
		if out, err := c.Handle(context.Background(), d); err != nil || out != consume.DeadLettered {
			t.Fatalf("Handle = %s, %v; want dead-lettered", out, err)
		}
		if len(d.dead) != 1 || !errors.Is(d.dead[0], consume.ErrNotRelayer) {
			t.Errorf("dead-lettered with %v, want ErrNotRelayer", d.dead)
		}
	}
	if ran {
		t.Error("the handler ran for a message without an id")
	}
}

// When ctx ends during the handler, nothing is committed nor settled: the
// broker delivers the message again.
func TestContextEndAbandonsTheDelivery(t *testing.T) {
	t.Parallel()
	b := newBundle(t)
	ctx, cancel := context.WithCancel(context.Background())
	c := b.consumer(t, func(ctx context.Context, tx *consume.Tx, m *relayer.Message) error {
		if err := b.writeEffect(ctx, tx, m); err != nil {
			return err
		}
		cancel()
		<-ctx.Done()
		return ctx.Err()
	}, consume.Options{})
	d := &delivery{msg: message(), attempt: 1}
	out, err := c.Handle(ctx, d)
	if out != consume.Abandoned || !errors.Is(err, context.Canceled) {
		t.Fatalf("Handle = %s, %v; want abandoned", out, err)
	}
	if acks, retries, dead := d.calls(); acks+retries+dead != 0 {
		t.Errorf("an abandoned delivery was settled: %d acks, %d retries, %d dead letters", acks, retries, dead)
	}
	if b.effects(t, d.msg.ID) != 0 || b.recorded(t, "billing", d.msg.ID) {
		t.Error("an abandoned delivery committed")
	}
}

// FollowUp is the message a handler publishes after handling one.
type FollowUp struct{ Order string }

// Follow-up messages published through the consumer's transaction commit
// with the handler's effects, or roll back with them.
func TestFollowUpsCommitWithTheHandler(t *testing.T) {
	t.Parallel()
	b := newBundle(t)
	var routes relayer.Routes
	if err := relayer.AddType[FollowUp](&routes, relayer.Route{Transport: "broker", Destination: "invoices"}); err != nil {
		t.Fatal(err)
	}
	w, err := enlist.NewWriter(relayer.Outbox{Schema: b.tables.Schema, TablePrefix: b.tables.TablePrefix, Routes: &routes}, enlist.Options{})
	if err != nil {
		t.Fatal(err)
	}
	fail := errors.New("rejected after publishing")
	c := b.consumer(t, func(ctx context.Context, tx *consume.Tx, m *relayer.Message) error {
		if err := b.writeEffect(ctx, tx, m); err != nil {
			return err
		}
		if err := tx.Publish(ctx, FollowUp{Order: string(m.Body)}); err != nil {
			return err
		}
		if m.Key == "fail" {
			return fail
		}
		return nil
	}, consume.Options{Writer: w, Retry: relayer.Retry{MaxAttempts: 5}})
	if got := c.Options().Tables; got != b.tables {
		t.Fatalf("Tables = %+v, want the writer's %+v", got, b.tables)
	}
	ok, bad := message(), message()
	bad.Key = "fail"
	if out, err := c.Handle(context.Background(), &delivery{msg: ok, attempt: 1}); err != nil || out != consume.Handled {
		t.Fatalf("Handle = %s, %v", out, err)
	}
	if out, err := c.Handle(context.Background(), &delivery{msg: bad, attempt: 1}); err != nil || out != consume.Retried {
		t.Fatalf("Handle of the failing message = %s, %v", out, err)
	}
	var bodies []string
	rows, err := b.db.Query(`SELECT convert_from(body, 'UTF8') FROM ` + b.tables.Schema + `.c_outbox`)
	if err != nil {
		t.Fatal(err)
	}
	defer rows.Close()
	for rows.Next() {
		var s string
		if err := rows.Scan(&s); err != nil {
			t.Fatal(err)
		}
		bodies = append(bodies, s)
	}
	if want := fmt.Sprintf(`{"Order":%q}`, ok.Body); len(bodies) != 1 || bodies[0] != want {
		t.Errorf("outbox bodies %q, want the handled message's follow-up alone, %s", bodies, want)
	}

	// Without a writer, publishing is refused and the handler fails.
	plain := b.consumer(t, func(ctx context.Context, tx *consume.Tx, m *relayer.Message) error {
		return tx.Publish(ctx, FollowUp{})
	}, consume.Options{Name: "plain"})
	d := &delivery{msg: message(), attempt: 1}
	if out, _ := plain.Handle(context.Background(), d); out != consume.Retried {
		t.Errorf("publishing without a writer: %s, want retried", out)
	}
}

func TestNewValidates(t *testing.T) {
	t.Parallel()
	db := testdb.Open(t, "pgx")
	h := func(context.Context, *consume.Tx, *relayer.Message) error { return nil }
	for _, c := range []struct {
		name string
		db   *sql.DB
		h    consume.Handler
		opts consume.Options
		want error
		text string
	}{
		{"nil db", nil, h, consume.Options{Name: "x"}, store.ErrNilDB, ""},
		{"nil handler", db, nil, consume.Options{Name: "x"}, consume.ErrInvalidOptions, "handler"},
		{"no name", db, h, consume.Options{}, consume.ErrInvalidOptions, "Name"},
		{"long name", db, h, consume.Options{Name: strings.Repeat("n", store.ConsumerMaxBytes+1)}, consume.ErrInvalidOptions, "Name"},
		{"NUL in name", db, h, consume.Options{Name: "a\x00b"}, consume.ErrInvalidOptions, "Name"},
		{"bad schema", db, h, consume.Options{Name: "x", Tables: store.Tables{Schema: "no; drop"}}, consume.ErrInvalidOptions, "Tables"},
		{"bad retry", db, h, consume.Options{Name: "x", Retry: relayer.Retry{MaxAttempts: -1}}, consume.ErrInvalidOptions, "Retry"},
	} {
		_, err := consume.New(c.db, c.h, c.opts)
		if !errors.Is(err, c.want) || !strings.Contains(fmt.Sprint(err), c.text) {
			t.Errorf("%s: New = %v, want %v naming %q", c.name, err, c.want, c.text)
		}
	}
}

func TestDeadReason(t *testing.T) {
	for _, tc := range []struct{ in, want string }{
		{"ledger down", "ledger down"},
		{" two\r\nlines\n ", "two lines"},
		{"bad \xff byte", "bad \uFFFD byte"},
		{strings.Repeat("a", consume.DeadReasonMax-1) + "é", strings.Repeat("a", consume.DeadReasonMax-1)},
	} {
		if got := consume.DeadReason(tc.in); got != tc.want {
			t.Errorf("DeadReason(%.20q…) = %.20q… (%d bytes), want %.20q… (%d bytes)", tc.in, got, len(got), tc.want, len(tc.want))
		}
	}
}

// OnCommit functions run after the commit, before the acknowledgement, in
// order, once; not at all on a rollback; and a panicking one is logged and
// does not keep the message from being acknowledged.
func TestOnCommitRunsBetweenCommitAndAcknowledgement(t *testing.T) {
	t.Parallel()
	b := newBundle(t)
	var order []string
	fail := false
	c := b.consumer(t, func(ctx context.Context, tx *consume.Tx, m *relayer.Message) error {
		tx.OnCommit(func() { order = append(order, fmt.Sprintf("first sees %d", b.effects(t, m.ID))) })
		tx.OnCommit(func() { panic("boom") })
		tx.OnCommit(func() { order = append(order, "third") })
		if err := b.writeEffect(ctx, tx, m); err != nil {
			return err
		}
		if fail {
			return errors.New("rolled back")
		}
		return nil
	}, consume.Options{Logger: slog.New(slog.DiscardHandler)})
	d := &delivery{msg: message(), attempt: 1}
	d.onSettle = func() { order = append(order, "ack") }
	if out, err := c.Handle(context.Background(), d); err != nil || out != consume.Handled {
		t.Fatalf("Handle = %s, %v", out, err)
	}
	if got := strings.Join(order, ", "); got != "first sees 1, third, ack" {
		t.Errorf("ran %s; want first sees 1, third, ack", got)
	}
	order, fail = nil, true
	d = &delivery{msg: message(), attempt: 1}
	d.onSettle = func() { order = append(order, "retry") }
	if out, _ := c.Handle(context.Background(), d); out != consume.Retried {
		t.Fatalf("Handle = %s, want retried", out)
	}
	if got := strings.Join(order, ", "); got != "retry" {
		t.Errorf("after a rollback ran %s; want the retry alone", got)
	}
}

// countingTx is a data layer's transaction in miniature: a *sql.Tx whose
// commits are counted.
type countingTx struct {
	*sql.Tx
	commits *int
}

func (t countingTx) Commit() error {
	*t.commits++
	return t.Tx.Commit()
}

// NewTx hands the handler the data layer's transaction, records the inbox
// in it, and commits through it; a duplicate commits nothing new.
func TestNewTxRunsTheHandlerInTheDataLayersTransaction(t *testing.T) {
	t.Parallel()
	b := newBundle(t)
	commits := 0
	begin := func(ctx context.Context, opts *sql.TxOptions) (countingTx, consume.Txn, error) {
		tx, err := b.db.BeginTx(ctx, opts)
		if err != nil {
			return countingTx{}, nil, err
		}
		ct := countingTx{Tx: tx, commits: &commits}
		return ct, ct, nil
	}
	runs := 0
	c, err := consume.NewTx(begin, func(ctx context.Context, tx countingTx, m *relayer.Message) error {
		runs++
		_, err := tx.ExecContext(ctx, `INSERT INTO `+b.tables.Schema+`.effects (message_id, note) VALUES ($1, 'x')`, m.ID)
		return err
	}, consume.Options{Name: "billing", Tables: b.tables})
	if err != nil {
		t.Fatal(err)
	}
	msg := message()
	for range 2 {
		if _, err := c.Handle(context.Background(), &delivery{msg: msg, attempt: 1}); err != nil {
			t.Fatal(err)
		}
	}
	if st := c.Stats(); runs != 1 || commits != 2 || st.Handled != 1 || st.Duplicates != 1 || b.effects(t, msg.ID) != 1 {
		t.Errorf("%d runs, %d commits, %+v, %d effect rows; want the handler once, both transactions committed", runs, commits, st, b.effects(t, msg.ID))
	}
	var routes relayer.Routes
	if err := routes.Add("x", relayer.Route{Transport: "t", Destination: "d"}); err != nil {
		t.Fatal(err)
	}
	w, err := enlist.NewWriter(relayer.Outbox{Schema: b.tables.Schema, TablePrefix: b.tables.TablePrefix, Routes: &routes}, enlist.Options{})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := consume.NewTx(begin, func(context.Context, countingTx, *relayer.Message) error { return nil },
		consume.Options{Name: "billing", Writer: w}); !errors.Is(err, consume.ErrInvalidOptions) {
		t.Errorf("NewTx with a Writer = %v, want ErrInvalidOptions", err)
	}
}

// The W3C trace context headers, whatever their case, become the message's
// TraceParent and TraceState; the other headers stay as they came.
func TestTraceContextHeadersBecomeTheMessagesTraceContext(t *testing.T) {
	t.Parallel()
	b := newBundle(t)
	var seen relayer.Message
	c := b.consumer(t, func(_ context.Context, _ *consume.Tx, m *relayer.Message) error { seen = *m; return nil }, consume.Options{})
	msg := message()
	msg.Headers = []headers.Header{{Name: "Traceparent", Value: []byte("00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01")},
		{Name: "app", Value: []byte("1")}, {Name: "TRACESTATE", Value: []byte("v=1")}}
	if _, err := c.Handle(context.Background(), &delivery{msg: msg, attempt: 1}); err != nil {
		t.Fatal(err)
	}
	if seen.TraceParent != "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01" || seen.TraceState != "v=1" ||
		len(seen.Headers) != 1 || seen.Headers[0].Name != "app" {
		t.Errorf("the handler saw %q, %q, headers %v", seen.TraceParent, seen.TraceState, seen.Headers)
	}
	if len(msg.Headers) != 3 {
		t.Errorf("the delivery's own headers changed: %v", msg.Headers)
	}
}

// A database that goes away is not the messages' fault: deliveries on
// their last attempt wait for it instead of going to the dead letters, are
// handled once it answers, and the outage is logged once when it begins
// and once when it ends.
func TestDatabaseOutageSpendsNoAttempt(t *testing.T) {
	t.Parallel()
	b := newBundle(t)
	proxy, db := dbproxy.Open(t, testdb.URL(t))
	var logs syncbuf.Buffer
	c, err := consume.New(db, b.writeEffect, consume.Options{Name: "billing", Tables: b.tables,
		Retry:  relayer.Retry{MaxAttempts: 3, Backoff: time.Millisecond, MaxBackoff: time.Millisecond},
		Logger: slog.New(slog.NewTextHandler(&logs, nil))})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	if err := c.Check(ctx); err != nil {
		t.Fatal(err)
	}
	proxy.Down()
	const n = 4
	ds := make([]*delivery, n)
	outcomes := make(chan consume.Outcome, n)
	for i := range ds {
		ds[i] = &delivery{msg: message(), attempt: 3}
		go func() {
			o, err := c.Handle(ctx, ds[i])
			if err != nil {
				t.Errorf("Handle: %v", err)
			}
			outcomes <- o
		}()
	}
	testkit.Eventually(t, 15*time.Second, func() bool { return c.Stats().DatabaseWaits >= n || len(outcomes) != 0 }, "the deliveries waiting for the database")
	// Asserting an absence: while the database is away, nothing settles.
	time.Sleep(500 * time.Millisecond)
	if len(outcomes) != 0 {
		t.Fatalf("a delivery settled while the database was away: %v; stats %+v", <-outcomes, c.Stats())
	}
	proxy.Up(t)
	for range n {
		select {
		case o := <-outcomes:
			if o != consume.Handled {
				t.Errorf("outcome %v, want handled", o)
			}
		case <-ctx.Done():
			t.Fatalf("the deliveries were not handled once the database answered: %+v", c.Stats())
		}
	}
	for _, d := range ds {
		if acks, retries, dead := d.calls(); acks != 1 || retries != 0 || dead != 0 {
			t.Errorf("delivery settled with %d acks, %d retries, %d dead letters; want one ack", acks, retries, dead)
		}
		if got := b.effects(t, d.msg.ID); got != 1 {
			t.Errorf("message %v has %d effects, want 1", d.msg.ID, got)
		}
	}
	out := logs.String()
	if got := strings.Count(out, "the database failed, not the message"); got != 1 {
		t.Errorf("the outage's start was logged %d times, want once:\n%s", got, out)
	}
	if got := strings.Count(out, "the database answers again"); got != 1 {
		t.Errorf("the outage's end was logged %d times, want once:\n%s", got, out)
	}
}

// A handler whose call to another server fails with a lost connection
// spends its attempt, as any failing handler does, when the consumer's
// database answers: a lost connection is the database's fault only when
// the database fails too.
func TestHandlersLostConnectionElsewhereSpendsAnAttempt(t *testing.T) {
	t.Parallel()
	b := newBundle(t)
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	closed := ln.Addr().String()
	ln.Close()
	c := b.consumer(t, func(ctx context.Context, _ *consume.Tx, _ *relayer.Message) error {
		conn, err := (&net.Dialer{}).DialContext(ctx, "tcp", closed)
		if err == nil {
			conn.Close()
			return errors.New("the closed port answered")
		}
		return fmt.Errorf("calling the payment service: %w", err)
	}, consume.Options{Retry: relayer.Retry{MaxAttempts: 2, Backoff: time.Millisecond, MaxBackoff: time.Millisecond}})
	d := &delivery{msg: message(), attempt: 1}
	o, err := c.Handle(context.Background(), d)
	if err != nil || o != consume.Retried {
		t.Fatalf("Handle = %v, %v; want retried", o, err)
	}
	if st := c.Stats(); st.DatabaseWaits != 0 {
		t.Errorf("the handler's failed call waited for the database: %+v", st)
	}
}

// Check names the migration to run for a consumer whose inbox table does
// not exist, and passes on a migrated one.
func TestCheckRefusesAnUnmigratedSchema(t *testing.T) {
	t.Parallel()
	b := newBundle(t)
	ctx := context.Background()
	if err := b.consumer(t, b.writeEffect, consume.Options{}).Check(ctx); err != nil {
		t.Fatalf("Check on migrated tables = %v", err)
	}
	c := b.consumer(t, b.writeEffect, consume.Options{Tables: store.Tables{Schema: b.tables.Schema + "_none", TablePrefix: "x_"}})
	err := c.Check(ctx)
	want := "relayer migrate --database-url URL --schema " + b.tables.Schema + "_none --prefix x_"
	if !errors.Is(err, consume.ErrNotReady) || !strings.Contains(err.Error(), want) {
		t.Fatalf("Check = %v; want consume.ErrNotReady naming %q", err, want)
	}
	if err := c.AwaitDatabase(ctx); !errors.Is(err, consume.ErrNotReady) {
		t.Fatalf("AwaitDatabase = %v; want consume.ErrNotReady at once", err)
	}
}
