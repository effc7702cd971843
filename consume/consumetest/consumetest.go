// Package consumetest is the conformance suite every adapter of package
// consume passes, on its real broker: NATS JetStream's, and Kafka's and
// RabbitMQ's as they come. An adapter's tests describe how to get a fresh
// destination with the adapter's consumer of it and where its dead letters
// are read back, and [Run] checks the promises of consume.Consumer end to
// end, from a transport's send to the consumer's committed effects:
//
//   - the handler gets the message as the producer's outbox stored it (id,
//     type, key where the broker carries it, headers, body, and the trace
//     context a transport wrapped by package otel sends), and each
//     message's effects commit once and the message is acknowledged (it is
//     not delivered again to a consumer started afterwards);
//   - a message whose effects committed but whose acknowledgement was lost
//     (a crash between the two) is acknowledged when it comes again,
//     without its handler;
//   - two consumers of one destination commit each message's effects once;
//   - a failing handler's message comes back, after the backoff, until its
//     attempts are spent, and then reaches the dead letters with the
//     handler's error; an error matching relayer.ErrPermanent sends it
//     there at once;
//   - follow-up messages a handler publishes commit with its effects, or
//     roll back with them;
//   - a consumer that stops lets the message being handled commit and be
//     acknowledged;
//   - a transaction the database fails for a reason not the message's (here
//     its inbox table is away for a while) spends no attempt: nothing is
//     retried nor dead-lettered, and every message is handled once the
//     database is whole again;
//   - a consumer whose inbox table does not exist refuses to start, naming
//     the migration to run;
//   - a failing message holds its key alone: the key's later messages take
//     effect after it, in order, once it succeeds, while another key's
//     flow meanwhile (the adapters hand a key's messages over in order with
//     their default options, and hold keys by default then).
//
// What only one broker does (its dead-letter format, its consumer's
// settings, its ordering) stays in that adapter's own tests.
package consumetest

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/google/uuid"

	"github.com/relayer-go/relayer"
	"github.com/relayer-go/relayer/consume"
	"github.com/relayer-go/relayer/enlist"
	"github.com/relayer-go/relayer/headers"
	"github.com/relayer-go/relayer/internal/testkit"
	"github.com/relayer-go/relayer/store"
)

// Broker is a consume adapter under test on its broker.
type Broker struct {
	// CarriesKey: consumers read Message.Key back (Kafka's record key, the
	// relayer-key header of NATS and RabbitMQ).
	CarriesKey bool
	// Endpoint prepares, for one scenario, a destination no other scenario
	// uses and the adapter's consumer of it.
	Endpoint func(t *testing.T) Endpoint
	// Database returns the database and the outbox tables, migrated, in a
	// schema of the scenario's own, where the scenario's consumers record
	// their inbox and their effects.
	Database func(t *testing.T) (*sql.DB, store.Tables)
}

// Endpoint is one scenario's destination and the adapter's consumer of it.
type Endpoint struct {
	// Transport publishes the messages the scenario consumes, as a
	// producer's dispatcher would.
	Transport relayer.Transport
	// Destination is where the scenario sends (the Transport's destination).
	Destination string
	// Consume runs c on the destination's consumer, as the adapter does,
	// until ctx ends, and returns once the messages being handled were
	// settled. It may be called more than once, at once (two consumer
	// processes of one destination) or after an earlier run returned.
	Consume func(ctx context.Context, c *consume.Consumer) error
	// DeadLetters waits until n messages were dead-lettered (a few seconds
	// at most, failing t otherwise) and returns them as operators find them:
	// the message, with at least its ID, and the reason recorded with it.
	DeadLetters func(t *testing.T, n int) []DeadLetter
}

// DeadLetter is a message an adapter took out of delivery for good.
type DeadLetter struct {
	Message relayer.Message
	// Reason is the cause recorded with it (a header, a field).
	Reason string
}

// Run runs every scenario against b, each in a subtest of its own, in
// parallel.
func Run(t *testing.T, b Broker) {
	t.Helper()
	for _, sc := range []struct {
		name string
		run  func(t *testing.T, s *scenario)
	}{
		{"ReceivesWhatWasSent", receivesWhatWasSent},
		{"CommittedButUnacknowledgedIsSkipped", committedButUnacknowledgedIsSkipped},
		{"TwoConsumersCommitOnce", twoConsumersCommitOnce},
		{"FailuresEndInTheDeadLetters", failuresEndInTheDeadLetters},
		{"PermanentErrorDeadLettersAtOnce", permanentErrorDeadLettersAtOnce},
		{"FollowUpsCommitWithTheHandler", followUpsCommitWithTheHandler},
		{"StopDrainsTheMessageBeingHandled", stopDrainsTheMessageBeingHandled},
		{"DatabaseFaultsSpendNoAttempt", databaseFaultsSpendNoAttempt},
		{"RefusesAnUnmigratedDatabase", refusesAnUnmigratedDatabase},
		{"AFailingMessageHoldsOnlyItsKey", aFailingMessageHoldsOnlyItsKey},
	} {
		t.Run(sc.name, func(t *testing.T) {
			t.Parallel()
			db, tables := b.Database(t)
			s := &scenario{b: b, e: b.Endpoint(t), db: db, tables: tables}
			if _, err := db.ExecContext(context.Background(), `CREATE TABLE `+s.effectsTable()+` (message_id uuid NOT NULL, consumer text NOT NULL)`); err != nil {
				t.Fatal(err)
			}
			sc.run(t, s)
		})
	}
}

// scenario is one subtest's endpoint and database.
type scenario struct {
	b      Broker
	e      Endpoint
	db     *sql.DB
	tables store.Tables
}

func (s *scenario) effectsTable() string { return `"` + s.tables.Schema + `".consumetest_effects` }

// send publishes msgs to the scenario's destination.
func (s *scenario) send(t *testing.T, msgs ...*relayer.Message) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	for _, m := range msgs {
		if err := s.e.Transport.Send(ctx, m); err != nil {
			t.Fatalf("send %v: %v", m.ID, err)
		}
	}
}

// message returns a message for the scenario's destination.
func (s *scenario) message(t *testing.T, key string, body string, hs ...string) *relayer.Message {
	t.Helper()
	id, err := relayer.NewID()
	if err != nil {
		t.Fatal(err)
	}
	m := &relayer.Message{ID: id, Type: "consumetest.Event", Destination: s.e.Destination, Key: key, Body: []byte(body)}
	for i := 0; i+1 < len(hs); i += 2 {
		m.Headers = append(m.Headers, headers.Header{Name: hs[i], Value: []byte(hs[i+1])})
	}
	return m
}

// consumer returns a consumer named name whose handler runs h and then
// records the message's effect, unless h fails.
func (s *scenario) consumer(t *testing.T, name string, opts consume.Options, h consume.Handler) *consume.Consumer {
	t.Helper()
	opts.Name = name
	if opts.Writer == nil {
		opts.Tables = s.tables
	}
	c, err := consume.New(s.db, func(ctx context.Context, tx *consume.Tx, m *relayer.Message) error {
		if h != nil {
			if err := h(ctx, tx, m); err != nil {
				return err
			}
		}
		_, err := tx.ExecContext(ctx, `INSERT INTO `+s.effectsTable()+` (message_id, consumer) VALUES ($1, $2)`, m.ID, name)
		return err
	}, opts)
	if err != nil {
		t.Fatal(err)
	}
	return c
}

// run runs c on the endpoint until the returned stop is called, which waits
// for the run to return and fails t on its error.
func (s *scenario) run(t *testing.T, c *consume.Consumer) (stop func()) {
	t.Helper()
	stopErr := Running(t, func(ctx context.Context) error { return s.e.Consume(ctx, c) })
	return func() {
		if err := stopErr(); err != nil {
			t.Errorf("Consume = %v", err)
		}
	}
}

// Running runs consume in a goroutine until the returned stop is called
// (at the latest when t ends), which cancels consume's context, waits for
// it to return and returns its error; later calls return the same error.
// An adapter's tests run its Consume with it.
func Running(t testing.TB, consume func(ctx context.Context) error) (stop func() error) {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- consume(ctx) }()
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

// effects returns how many effect rows message id has.
func (s *scenario) effects(t *testing.T, id uuid.UUID) int {
	t.Helper()
	var n int
	if err := s.db.QueryRow(`SELECT count(*) FROM `+s.effectsTable()+` WHERE message_id = $1`, id).Scan(&n); err != nil {
		t.Fatal(err)
	}
	return n
}

// statsOf formats consumers' stats when printed: at a failed wait's time
// out.
type statsOf []*consume.Consumer

func (cs statsOf) String() string {
	stats := make([]string, len(cs))
	for i, c := range cs {
		stats[i] = fmt.Sprintf("%+v", c.Stats())
	}
	return strings.Join(stats, ", ")
}

// quiet runs a new consumer for a moment and reports how many deliveries it
// got: none, once everything sent was acknowledged or dead-lettered.
func (s *scenario) quiet(t *testing.T) int {
	t.Helper()
	var got atomic.Int64
	c := s.consumer(t, "after", consume.Options{}, func(context.Context, *consume.Tx, *relayer.Message) error {
		got.Add(1)
		return nil
	})
	stop := s.run(t, c)
	// An absence: nothing arrives within 300 ms.
	time.Sleep(300 * time.Millisecond)
	stop()
	return int(got.Load())
}

func receivesWhatWasSent(t *testing.T, s *scenario) {
	binary := string([]byte{0, 1, 0x7f, 0x80, 0xff})
	sent := []*relayer.Message{
		s.message(t, "customer-7", `{"id":"o-1"}`, "trace", "a", "dup", "1", "dup", "2"),
		s.message(t, "customer-8", "", "bin", binary),
		s.message(t, "", "no key"),
		// What a transport wrapped by package otel sends: the creation
		// trace context in headers, which the consumer reads back.
		s.message(t, "customer-9", "traced", relayer.HeaderTraceParent, traceParent, relayer.HeaderTraceState, "vendor=1", "app", "x"),
	}
	s.send(t, sent...)
	var mu sync.Mutex
	var got []relayer.Message
	c := s.consumer(t, "billing", consume.Options{}, func(_ context.Context, _ *consume.Tx, m *relayer.Message) error {
		cp := *m
		cp.Body = slices.Clone(m.Body)
		cp.Headers = slices.Clone(m.Headers)
		mu.Lock()
		got = append(got, cp)
		mu.Unlock()
		return nil
	})
	stop := s.run(t, c)
	testkit.Eventually(t, 10*time.Second, func() bool { return c.Stats().Handled >= uint64(len(sent)) }, "every message handled; consumers' stats: %v", statsOf{c})
	stop()
	if len(got) != len(sent) {
		t.Fatalf("handled %d messages, want %d", len(got), len(sent))
	}
	for _, want := range sent {
		i := slices.IndexFunc(got, func(m relayer.Message) bool { return m.ID == want.ID })
		if i < 0 {
			t.Errorf("message %v never handled", want.ID)
			continue
		}
		g := got[i]
		if g.Type != want.Type || string(g.Body) != string(want.Body) || g.Destination != want.Destination {
			t.Errorf("message %v: type %q, body %q, destination %q; want %q, %q, %q", want.ID, g.Type, g.Body, g.Destination, want.Type, want.Body, want.Destination)
		}
		if s.b.CarriesKey && g.Key != want.Key {
			t.Errorf("message %v: key %q, want %q", want.ID, g.Key, want.Key)
		}
		wantHeaders, wantParent, wantState := untraced(want.Headers)
		if !slices.Equal(byName(g.Headers), byName(wantHeaders)) {
			t.Errorf("message %v: headers %q, want %q", want.ID, byName(g.Headers), byName(wantHeaders))
		}
		if g.TraceParent != wantParent || g.TraceState != wantState {
			t.Errorf("message %v: trace context %q, %q; want %q, %q", want.ID, g.TraceParent, g.TraceState, wantParent, wantState)
		}
		if n := s.effects(t, want.ID); n != 1 {
			t.Errorf("message %v: %d effect rows, want 1", want.ID, n)
		}
	}
	if n := s.quiet(t); n != 0 {
		t.Errorf("a consumer started afterwards got %d deliveries; every message was acknowledged", n)
	}
}

// traceParent is a valid W3C traceparent.
const traceParent = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"

// untraced splits the trace context headers from hs: the consumer hands
// them over as TraceParent and TraceState.
func untraced(hs []headers.Header) (rest []headers.Header, parent, state string) {
	for _, h := range hs {
		switch h.Name {
		case relayer.HeaderTraceParent:
			parent = string(h.Value)
		case relayer.HeaderTraceState:
			state = string(h.Value)
		default:
			rest = append(rest, h)
		}
	}
	return rest, parent, state
}

// byName lists headers as "name=value" strings, by name, each name's
// values in order: brokers keep the order of one name's values, not always
// that of different names.
func byName(hs []headers.Header) []string {
	out := make([]string, len(hs))
	for i, h := range hs {
		out[i] = h.Name + "=" + string(h.Value)
	}
	slices.SortStableFunc(out, func(a, b string) int {
		return strings.Compare(a[:strings.IndexByte(a, '=')], b[:strings.IndexByte(b, '=')])
	})
	return out
}

// A crash between the commit and the acknowledgement: the message's
// effects and inbox record are committed, the broker still holds it.
func committedButUnacknowledgedIsSkipped(t *testing.T, s *scenario) {
	m := s.message(t, "k", "x")
	s.send(t, m)
	// What the first delivery committed before its process died: its
	// effects and inbox record, and no acknowledgement.
	first := s.consumer(t, "billing", consume.Options{}, nil)
	if out, err := first.Handle(context.Background(), &committedDelivery{msg: *m}); err != nil || out != consume.Handled {
		t.Fatalf("the first delivery: %s, %v", out, err)
	}
	// The redelivery.
	runs := 0
	c := s.consumer(t, "billing", consume.Options{}, func(context.Context, *consume.Tx, *relayer.Message) error { runs++; return nil })
	stop := s.run(t, c)
	testkit.Eventually(t, 10*time.Second, func() bool { return c.Stats().Duplicates == 1 }, "the redelivery; consumers' stats: %v", statsOf{c})
	stop()
	if runs != 0 || s.effects(t, m.ID) != 1 {
		t.Errorf("the redelivery ran the handler %d times, %d effect rows; want it skipped", runs, s.effects(t, m.ID))
	}
	if n := s.quiet(t); n != 0 {
		t.Errorf("the duplicate was not acknowledged: a consumer started afterwards got %d deliveries", n)
	}
}

// committedDelivery stands for the first delivery of a message whose
// process died after its commit: it settles nothing.
type committedDelivery struct{ msg relayer.Message }

func (d *committedDelivery) Message() (relayer.Message, error)          { return d.msg, nil }
func (d *committedDelivery) Attempt() int                               { return 1 }
func (d *committedDelivery) Ack(context.Context) error                  { return nil }
func (d *committedDelivery) Retry(context.Context, time.Duration) error { return nil }
func (d *committedDelivery) DeadLetter(context.Context, error) error    { return nil }

func twoConsumersCommitOnce(t *testing.T, s *scenario) {
	const n = 20
	msgs := make([]*relayer.Message, n)
	for i := range msgs {
		msgs[i] = s.message(t, fmt.Sprintf("k%d", i%3), fmt.Sprint(i))
	}
	s.send(t, msgs...)
	slow := func(context.Context, *consume.Tx, *relayer.Message) error {
		time.Sleep(5 * time.Millisecond)
		return nil
	}
	a := s.consumer(t, "billing", consume.Options{}, slow)
	b := s.consumer(t, "billing", consume.Options{}, slow)
	stopA, stopB := s.run(t, a), s.run(t, b)
	testkit.Eventually(t, 10*time.Second, func() bool { return a.Stats().Handled+b.Stats().Handled >= n }, "every message handled; consumers' stats: %v", statsOf{a, b})
	stopA()
	stopB()
	for _, m := range msgs {
		if got := s.effects(t, m.ID); got != 1 {
			t.Errorf("message %v: %d effect rows, want 1", m.ID, got)
		}
	}
}

// errFailing is a handler error the scenarios recognize.
var errFailing = errors.New("consumetest: ledger unavailable")

func failuresEndInTheDeadLetters(t *testing.T, s *scenario) {
	m := s.message(t, "k", "fails")
	s.send(t, m)
	var mu sync.Mutex
	var at []time.Time
	c := s.consumer(t, "billing", consume.Options{Retry: relayer.Retry{MaxAttempts: 3, Backoff: 200 * time.Millisecond, MaxBackoff: time.Second}},
		func(context.Context, *consume.Tx, *relayer.Message) error {
			mu.Lock()
			at = append(at, time.Now())
			mu.Unlock()
			return errFailing
		})
	stop := s.run(t, c)
	dead := s.e.DeadLetters(t, 1)
	stop()
	if len(at) != 3 {
		t.Errorf("the handler ran %d times, want 3 (the attempts)", len(at))
	} else if gap := at[1].Sub(at[0]); gap < 150*time.Millisecond {
		t.Errorf("the first retry came %v after the failure, want the 200ms backoff (less up to a fifth)", gap)
	}
	if dead[0].Message.ID != m.ID || !strings.Contains(dead[0].Reason, errFailing.Error()) {
		t.Errorf("dead letter %v with reason %q; want %v with the handler's error", dead[0].Message.ID, dead[0].Reason, m.ID)
	}
	if s.effects(t, m.ID) != 0 {
		t.Error("a failing handler's effects were committed")
	}
	if n := s.quiet(t); n != 0 {
		t.Errorf("the dead-lettered message was delivered again %d times", n)
	}
}

func permanentErrorDeadLettersAtOnce(t *testing.T, s *scenario) {
	m := s.message(t, "k", "refused")
	s.send(t, m)
	var runs atomic.Int64
	c := s.consumer(t, "billing", consume.Options{}, func(context.Context, *consume.Tx, *relayer.Message) error {
		runs.Add(1)
		return fmt.Errorf("unknown customer: %w", relayer.ErrPermanent)
	})
	stop := s.run(t, c)
	dead := s.e.DeadLetters(t, 1)
	stop()
	if runs.Load() != 1 || dead[0].Message.ID != m.ID || !strings.Contains(dead[0].Reason, "unknown customer") {
		t.Errorf("the handler ran %d times; dead letter %v, reason %q", runs.Load(), dead[0].Message.ID, dead[0].Reason)
	}
}

// FollowUp is the message the follow-up scenario's handler publishes.
type FollowUp struct{ Of string }

func followUpsCommitWithTheHandler(t *testing.T, s *scenario) {
	var routes relayer.Routes
	if err := relayer.AddType[FollowUp](&routes, relayer.Route{Transport: "broker", Destination: "follow-ups"}); err != nil {
		t.Fatal(err)
	}
	w, err := enlist.NewWriter(relayer.Outbox{Schema: s.tables.Schema, TablePrefix: s.tables.TablePrefix, Routes: &routes}, enlist.Options{})
	if err != nil {
		t.Fatal(err)
	}
	ok, bad := s.message(t, "k1", "ok"), s.message(t, "k2", "bad")
	s.send(t, ok, bad)
	c := s.consumer(t, "billing", consume.Options{Writer: w}, func(ctx context.Context, tx *consume.Tx, m *relayer.Message) error {
		if err := tx.Publish(ctx, FollowUp{Of: m.ID.String()}); err != nil {
			return err
		}
		if string(m.Body) == "bad" {
			return fmt.Errorf("rejected after publishing: %w", relayer.ErrPermanent)
		}
		return nil
	})
	stop := s.run(t, c)
	testkit.Eventually(t, 10*time.Second, func() bool { st := c.Stats(); return st.Handled == 1 && st.DeadLettered == 1 }, "both messages settled; consumers' stats: %v", statsOf{c})
	stop()
	var bodies []string
	rows, err := s.db.Query(`SELECT convert_from(body, 'UTF8') FROM "` + s.tables.Schema + `"."` + s.tables.TablePrefix + `outbox"`)
	if err != nil {
		t.Fatal(err)
	}
	defer rows.Close()
	for rows.Next() {
		var b string
		if err := rows.Scan(&b); err != nil {
			t.Fatal(err)
		}
		bodies = append(bodies, b)
	}
	if want := fmt.Sprintf(`{"Of":%q}`, ok.ID); len(bodies) != 1 || bodies[0] != want {
		t.Errorf("follow-ups in the outbox %q, want the handled message's alone: %s", bodies, want)
	}
}

func stopDrainsTheMessageBeingHandled(t *testing.T, s *scenario) {
	m := s.message(t, "k", "slow")
	s.send(t, m)
	inHandler, release := make(chan struct{}), make(chan struct{})
	c := s.consumer(t, "billing", consume.Options{}, func(context.Context, *consume.Tx, *relayer.Message) error {
		close(inHandler)
		<-release
		return nil
	})
	stop := s.run(t, c)
	<-inHandler
	stopped := make(chan struct{})
	go func() {
		stop()
		close(stopped)
	}()
	time.Sleep(50 * time.Millisecond) // the consumer is stopping meanwhile
	close(release)
	<-stopped
	if st := c.Stats(); st.Handled != 1 || s.effects(t, m.ID) != 1 {
		t.Errorf("after the stop: %+v, %d effect rows; want the message handled once", st, s.effects(t, m.ID))
	}
	if n := s.quiet(t); n != 0 {
		t.Errorf("the message handled during the stop was delivered again %d times", n)
	}
}

func databaseFaultsSpendNoAttempt(t *testing.T, s *scenario) {
	ctx := context.Background()
	inboxTable := `"` + s.tables.Schema + `"."` + s.tables.TablePrefix + `inbox"`
	away := s.tables.TablePrefix + "inbox_away"
	// Two attempts 10 ms apart: an outage that spent attempts would
	// dead-letter every message well within the wait below.
	c := s.consumer(t, "billing", consume.Options{Retry: relayer.Retry{MaxAttempts: 2, Backoff: 10 * time.Millisecond, MaxBackoff: 10 * time.Millisecond}}, nil)
	stop := s.run(t, c)
	defer stop()
	// The consumer starts with its tables whole, then loses its inbox.
	s.send(t, s.message(t, "k", "before"))
	testkit.Eventually(t, 10*time.Second, func() bool { return c.Stats().Handled == 1 }, "the first message handled; consumers' stats: %v", statsOf{c})
	if _, err := s.db.ExecContext(ctx, `ALTER TABLE `+inboxTable+` RENAME TO "`+away+`"`); err != nil {
		t.Fatal(err)
	}
	msgs := make([]*relayer.Message, 5)
	for i := range msgs {
		msgs[i] = s.message(t, fmt.Sprintf("k%d", i), "while the inbox is away")
	}
	s.send(t, msgs...)
	testkit.Eventually(t, 10*time.Second, func() bool { st := c.Stats(); return st.DatabaseWaits > 0 || st.DeadLettered > 0 }, "deliveries waiting for the database; consumers' stats: %v", statsOf{c})
	// Asserting an absence: for a while, nothing is retried nor
	// dead-lettered while the inbox is away.
	time.Sleep(time.Second)
	if st := c.Stats(); st.Retried != 0 || st.DeadLettered != 0 || st.Handled != 1 {
		t.Fatalf("while the inbox table was away: %+v; want deliveries waiting, none retried, dead-lettered or handled", st)
	}
	if _, err := s.db.ExecContext(ctx, `ALTER TABLE "`+s.tables.Schema+`"."`+away+`" RENAME TO "`+s.tables.TablePrefix+`inbox"`); err != nil {
		t.Fatal(err)
	}
	testkit.Eventually(t, 10*time.Second, func() bool { return c.Stats().Handled == uint64(1+len(msgs)) }, "every message handled once the inbox is back; consumers' stats: %v", statsOf{c})
	stop()
	for _, m := range msgs {
		if n := s.effects(t, m.ID); n != 1 {
			t.Errorf("message %v has %d effects, want 1", m.ID, n)
		}
	}
	if st := c.Stats(); st.Retried != 0 || st.DeadLettered != 0 {
		t.Errorf("stats %+v: a database fault spent attempts", st)
	}
}

func refusesAnUnmigratedDatabase(t *testing.T, s *scenario) {
	c, err := consume.New(s.db, func(context.Context, *consume.Tx, *relayer.Message) error { return nil },
		consume.Options{Name: "billing", Tables: store.Tables{Schema: "consumetest_never_migrated"}})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	err = s.e.Consume(ctx, c)
	if !errors.Is(err, consume.ErrNotReady) || !strings.Contains(err.Error(), "relayer migrate") {
		t.Fatalf("Consume on a schema never migrated = %v; want an error wrapping consume.ErrNotReady that names relayer migrate", err)
	}
}

func aFailingMessageHoldsOnlyItsKey(t *testing.T, s *scenario) {
	var mu sync.Mutex
	failures := 2
	var order []string
	c := s.consumer(t, "billing", consume.Options{Retry: relayer.Retry{MaxAttempts: 5, Backoff: 50 * time.Millisecond, MaxBackoff: 50 * time.Millisecond}},
		func(_ context.Context, _ *consume.Tx, m *relayer.Message) error {
			mu.Lock()
			defer mu.Unlock()
			if string(m.Body) == "k1" && failures > 0 {
				failures--
				return errFailing
			}
			order = append(order, string(m.Body))
			return nil
		})
	stop := s.run(t, c)
	defer stop()
	k1, k2, j1, k3 := s.message(t, "k", "k1"), s.message(t, "k", "k2"), s.message(t, "j", "j1"), s.message(t, "k", "k3")
	s.send(t, k1, k2, j1, k3)
	testkit.Eventually(t, 10*time.Second, func() bool { return c.Stats().Handled == 4 }, "every message handled; consumers' stats: %v", statsOf{c})
	stop()
	mu.Lock()
	got := strings.Join(order, " ")
	mu.Unlock()
	var keyOrder []string
	for _, o := range order {
		if strings.HasPrefix(o, "k") {
			keyOrder = append(keyOrder, o)
		}
	}
	if strings.Join(keyOrder, " ") != "k1 k2 k3" || order[0] != "j1" {
		t.Errorf("handled in the order %s; want j1 first (its key was free) and k1 k2 k3 in order", got)
	}
	for _, m := range []*relayer.Message{k1, k2, j1, k3} {
		if n := s.effects(t, m.ID); n != 1 {
			t.Errorf("message %s has %d effects, want 1", m.Body, n)
		}
	}
	if st := c.Stats(); st.Held != 1 || st.DeadLettered != 0 {
		t.Errorf("stats %+v; want the key held once, nothing dead-lettered", st)
	}
	if n := s.quiet(t); n != 0 {
		t.Errorf("%d messages were delivered again", n)
	}
}
