package consume_test

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/google/uuid"

	"github.com/relayer-go/relayer"
	"github.com/relayer-go/relayer/consume"
	"github.com/relayer-go/relayer/consume/heldkeys"
	"github.com/relayer-go/relayer/headers"
	"github.com/relayer-go/relayer/internal/testkit"
)

// sink collects the dead letters of held messages.
type sink struct {
	mu     sync.Mutex
	msgs   []relayer.Message
	causes []error
}

func (s *sink) DeadLetter(_ context.Context, m *relayer.Message, cause error) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.msgs = append(s.msgs, *m)
	s.causes = append(s.causes, cause)
	return nil
}

func (s *sink) count() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return len(s.msgs)
}

// orderedEffects is a table of effects in the order they committed.
func (b *bundle) orderedEffects(t *testing.T) string {
	t.Helper()
	table := `"` + b.tables.Schema + `".ordered_effects`
	if _, err := b.db.Exec(`CREATE TABLE ` + table + ` (seq bigserial PRIMARY KEY, message_id uuid NOT NULL, note text NOT NULL)`); err != nil {
		t.Fatal(err)
	}
	return table
}

// notes returns the effects' notes in commit order.
func (b *bundle) notes(t *testing.T, table string) []string {
	t.Helper()
	rows, err := b.db.Query(`SELECT note FROM ` + table + ` ORDER BY seq`)
	if err != nil {
		t.Fatal(err)
	}
	defer rows.Close()
	var out []string
	for rows.Next() {
		var n string
		if err := rows.Scan(&n); err != nil {
			t.Fatal(err)
		}
		out = append(out, n)
	}
	return out
}

func keyed(key, note string) relayer.Message {
	return relayer.Message{ID: uuid.Must(relayer.NewID()), Type: "orders.Event", Destination: "orders", Key: key, Body: []byte(note),
		Headers: []headers.Header{{Name: "app", Value: []byte(note)}}, TraceParent: "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01"}
}

// A failing message holds its key alone: the key's later messages wait
// behind it in the consumer's database, acknowledged, and take effect in
// the order they arrived once it succeeds; another key flows meanwhile.
// The held messages reach the handler as they arrived.
func TestHeldKeyKeepsItsOrder(t *testing.T) {
	t.Parallel()
	b := newBundle(t)
	table := b.orderedEffects(t)
	var mu sync.Mutex
	failures := map[string]int{"k1": 2}
	var seen []relayer.Message
	c := b.consumer(t, func(ctx context.Context, tx *consume.Tx, m *relayer.Message) error {
		mu.Lock()
		seen = append(seen, *m)
		fail := failures[string(m.Body)] > 0
		if fail {
			failures[string(m.Body)]--
		}
		mu.Unlock()
		if _, err := tx.ExecContext(ctx, `INSERT INTO `+table+` (message_id, note) VALUES ($1, $2)`, m.ID, string(m.Body)); err != nil {
			return err
		}
		if fail {
			return errors.New("ledger busy")
		}
		return nil
	}, consume.Options{Retry: relayer.Retry{MaxAttempts: 5, Backoff: 20 * time.Millisecond, MaxBackoff: 20 * time.Millisecond}})
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	dl := &sink{}
	stop, err := c.StartHeldKeys(ctx, consume.HeldKeysOptions{Ordered: true, DeadLetters: dl, Poll: 10 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	defer stop()
	k1, k2, j1, k3 := keyed("k", "k1"), keyed("k", "k2"), keyed("j", "j1"), keyed("k", "k3")
	want := map[*relayer.Message]consume.Outcome{&k1: consume.Held, &k2: consume.Waiting, &j1: consume.Handled, &k3: consume.Waiting}
	for _, m := range []*relayer.Message{&k1, &k2, &j1, &k3} {
		d := &delivery{msg: *m, attempt: 1}
		out, err := c.Handle(ctx, d)
		if err != nil || out != want[m] {
			t.Fatalf("%s: Handle = %s, %v; want %s", m.Body, out, err, want[m])
		}
		if acks, retries, dead := d.calls(); acks != 1 || retries+dead != 0 {
			t.Errorf("%s settled with %d acks, %d retries, %d dead letters; want one ack", m.Body, acks, retries, dead)
		}
	}
	// A redelivery of a waiting message is a duplicate.
	if out, err := c.Handle(ctx, &delivery{msg: k2, attempt: 1}); out != consume.Duplicate || err != nil {
		t.Fatalf("k2 again: Handle = %s, %v; want a duplicate", out, err)
	}
	testkit.Eventually(t, 15*time.Second, func() bool { return len(b.notes(t, table)) == 4 }, "the held key drained")
	if got := strings.Join(b.notes(t, table), " "); got != "j1 k1 k2 k3" {
		t.Errorf("effects in commit order: %s; want j1 k1 k2 k3 (the failures rolled back, the key in order)", got)
	}
	if st := c.Stats(); st.Held != 1 || st.Waiting != 2 || st.Handled != 4 || st.DeadLettered != 0 || st.Retried != 1 {
		t.Errorf("stats %+v; want 1 held, 2 waiting, 4 handled, 1 retry from the database", st)
	}
	mu.Lock()
	handledAs := append([]relayer.Message(nil), seen...)
	mu.Unlock()
	for _, m := range handledAs {
		if string(m.Body) == "k2" && (m.Key != "k" || m.Type != "orders.Event" || m.Destination != "orders" ||
			len(m.Headers) != 1 || string(m.Headers[0].Value) != "k2" || m.TraceParent != k2.TraceParent || m.ID != k2.ID) {
			t.Errorf("a held message reached the handler as %+v; want it as it arrived", m)
		}
	}
	testkit.Eventually(t, 15*time.Second, func() bool {
		var n int
		_ = b.db.QueryRow(`SELECT count(*) FROM "` + b.tables.Schema + `".c_inbox_held`).Scan(&n)
		return n == 0
	}, "the key freed")
	// Freed, the key's next message is handled at once.
	if out, err := c.Handle(ctx, &delivery{msg: keyed("k", "k4"), attempt: 1}); out != consume.Handled || err != nil {
		t.Fatalf("k4: Handle = %s, %v; want handled", out, err)
	}
}

// A held message whose attempts run out goes to the adapter's dead
// letters from the database, and its key goes on.
func TestHeldMessageDeadLettersAndItsKeyGoesOn(t *testing.T) {
	t.Parallel()
	b := newBundle(t)
	table := b.orderedEffects(t)
	c := b.consumer(t, func(ctx context.Context, tx *consume.Tx, m *relayer.Message) error {
		if string(m.Body) == "poison" {
			return errors.New("cannot bill")
		}
		_, err := tx.ExecContext(ctx, `INSERT INTO `+table+` (message_id, note) VALUES ($1, $2)`, m.ID, string(m.Body))
		return err
	}, consume.Options{Retry: relayer.Retry{MaxAttempts: 3, Backoff: 10 * time.Millisecond, MaxBackoff: 10 * time.Millisecond}})
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	dl := &sink{}
	stop, err := c.StartHeldKeys(ctx, consume.HeldKeysOptions{Ordered: true, DeadLetters: dl, Poll: 10 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	defer stop()
	poison, after := keyed("k", "poison"), keyed("k", "after")
	for _, m := range []relayer.Message{poison, after} {
		if _, err := c.Handle(ctx, &delivery{msg: m, attempt: 1}); err != nil {
			t.Fatal(err)
		}
	}
	testkit.Eventually(t, 15*time.Second, func() bool { return len(b.notes(t, table)) == 1 }, "the key's next message handled")
	if dl.count() != 1 || dl.msgs[0].ID != poison.ID || !strings.Contains(dl.causes[0].Error(), "cannot bill") {
		t.Fatalf("dead letters %v; want the poison message with its handler's error", dl.msgs)
	}
	if st := c.Stats(); st.DeadLettered != 1 || st.Retried != 1 {
		t.Errorf("stats %+v; want 1 dead letter after 1 retry from the database (3 attempts)", st)
	}
}

// With HoldKeysOff, or with HoldKeysAuto when the adapter does not hand a
// key's messages over in order, a failing message goes back to the broker.
func TestKeysAreNotHeldWhenOffOrUnordered(t *testing.T) {
	t.Parallel()
	b := newBundle(t)
	ctx := context.Background()
	failing := func(context.Context, *consume.Tx, *relayer.Message) error { return errors.New("down") }
	for _, tc := range []struct {
		name    string
		mode    consume.KeyHolding
		ordered bool
	}{
		{"off", consume.HoldKeysOff, true},
		{"auto, unordered", consume.HoldKeysAuto, false},
	} {
		c := b.consumer(t, failing, consume.Options{Name: "c-" + fmt.Sprint(tc.mode), HoldKeys: tc.mode})
		stop, err := c.StartHeldKeys(ctx, consume.HeldKeysOptions{Ordered: tc.ordered, DeadLetters: &sink{}})
		if err != nil {
			t.Fatal(err)
		}
		if out, _ := c.Handle(ctx, &delivery{msg: keyed("k", "x"), attempt: 1}); out != consume.Retried {
			t.Errorf("%s: Handle = %s, want retried through the broker", tc.name, out)
		}
		stop()
	}
	if _, err := b.consumer(t, failing, consume.Options{HoldKeys: consume.HoldKeysOn}).StartHeldKeys(ctx, consume.HeldKeysOptions{}); !errors.Is(err, consume.ErrInvalidOptions) {
		t.Errorf("StartHeldKeys without DeadLetters = %v, want ErrInvalidOptions", err)
	}
	if _, err := consume.New(b.db, failing, consume.Options{Name: "x", Tables: b.tables, HoldKeys: 7}); !errors.Is(err, consume.ErrInvalidOptions) {
		t.Errorf("New with HoldKeys 7 = %v, want ErrInvalidOptions", err)
	}
}

// A consumer deployed before migration 9 keeps the broker's retry with
// HoldKeysAuto, and refuses to start with HoldKeysOn, naming the migration.
func TestHeldKeysBeforeTheirMigration(t *testing.T) {
	t.Parallel()
	b := newBundle(t)
	if _, err := b.db.Exec(`DROP TABLE "` + b.tables.Schema + `".c_inbox_waiting, "` + b.tables.Schema + `".c_inbox_held`); err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	failing := func(context.Context, *consume.Tx, *relayer.Message) error { return errors.New("down") }
	auto := b.consumer(t, failing, consume.Options{Name: "auto"})
	stop, err := auto.StartHeldKeys(ctx, consume.HeldKeysOptions{Ordered: true, DeadLetters: &sink{}})
	if err != nil {
		t.Fatalf("StartHeldKeys with HoldKeysAuto = %v; want keys not held", err)
	}
	defer stop()
	if out, _ := auto.Handle(ctx, &delivery{msg: keyed("k", "x"), attempt: 1}); out != consume.Retried {
		t.Errorf("Handle = %s, want retried through the broker", out)
	}
	on := b.consumer(t, failing, consume.Options{Name: "on", HoldKeys: consume.HoldKeysOn})
	if _, err := on.StartHeldKeys(ctx, consume.HeldKeysOptions{Ordered: true, DeadLetters: &sink{}}); !errors.Is(err, consume.ErrNotReady) ||
		!strings.Contains(err.Error(), "relayer migrate") {
		t.Errorf("StartHeldKeys with HoldKeysOn = %v; want ErrNotReady naming relayer migrate", err)
	}
}

// Operators see held keys and release them: Retry tries the first message
// again at once, Skip sends it to the dead letters and lets the key go on.
func TestHeldKeysAreListedRetriedAndSkipped(t *testing.T) {
	t.Parallel()
	b := newBundle(t)
	table := b.orderedEffects(t)
	var mu sync.Mutex
	failing := map[string]bool{"a1": true, "b1": true}
	c := b.consumer(t, func(ctx context.Context, tx *consume.Tx, m *relayer.Message) error {
		mu.Lock()
		fail := failing[string(m.Body)]
		mu.Unlock()
		if fail {
			return errors.New("ledger down")
		}
		_, err := tx.ExecContext(ctx, `INSERT INTO `+table+` (message_id, note) VALUES ($1, $2)`, m.ID, string(m.Body))
		return err
	}, consume.Options{Retry: relayer.Retry{MaxAttempts: 10, Backoff: time.Hour, MaxBackoff: time.Hour}})
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	dl := &sink{}
	stop, err := c.StartHeldKeys(ctx, consume.HeldKeysOptions{Ordered: true, DeadLetters: dl, Poll: 10 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	defer stop()
	a1, a2, b1, b2 := keyed("a", "a1"), keyed("a", "a2"), keyed("b", "b1"), keyed("b", "b2")
	for _, m := range []relayer.Message{a1, a2, b1, b2} {
		if _, err := c.Handle(ctx, &delivery{msg: m, attempt: 1}); err != nil {
			t.Fatal(err)
		}
	}
	keys, err := heldkeys.List(ctx, b.db, b.tables, heldkeys.Filter{Consumer: "billing"}, 10)
	if err != nil {
		t.Fatal(err)
	}
	if len(keys) != 2 || keys[0].Key != "a" || keys[0].Waiting != 2 || keys[0].HeadID != a1.ID || keys[0].Attempts != 1 ||
		keys[0].LastError != "ledger down" || keys[0].HeadType != "orders.Event" || keys[0].HeadDestination != "orders" {
		t.Fatalf("List = %+v; want keys a and b, each with its failed head first and 2 messages", keys)
	}
	counts, err := heldkeys.Counts(ctx, b.db, b.tables)
	if err != nil || len(counts) != 1 || counts[0] != (heldkeys.Count{Consumer: "billing", Keys: 2, Waiting: 4}) {
		t.Fatalf("Counts = %+v, %v; want billing holding 2 keys with 4 messages", counts, err)
	}
	if _, err := heldkeys.Retry(ctx, b.db, b.tables, heldkeys.Filter{}); !errors.Is(err, heldkeys.ErrNoSelection) {
		t.Errorf("Retry of everything = %v, want ErrNoSelection", err)
	}
	// The ledger is back for a1: retried at once, a's messages go in order.
	mu.Lock()
	failing["a1"] = false
	mu.Unlock()
	if n, err := heldkeys.Retry(ctx, b.db, b.tables, heldkeys.Filter{Consumer: "billing", Key: "a"}); err != nil || n != 1 {
		t.Fatalf("Retry = %d, %v; want key a", n, err)
	}
	testkit.Eventually(t, 15*time.Second, func() bool { return len(b.notes(t, table)) == 2 }, "key a drained")
	// b1 cannot be billed: skipped, it goes to the dead letters and b2 goes on.
	if ok, err := heldkeys.Skip(ctx, b.db, b.tables, "billing", "b", b2.ID); err != nil || ok {
		t.Fatalf("Skip of b2, not the first of b = %v, %v; want nothing skipped", ok, err)
	}
	if ok, err := heldkeys.Skip(ctx, b.db, b.tables, "billing", "b", b1.ID); err != nil || !ok {
		t.Fatalf("Skip = %v, %v", ok, err)
	}
	testkit.Eventually(t, 15*time.Second, func() bool { return len(b.notes(t, table)) == 3 }, "key b drained")
	if got := strings.Join(b.notes(t, table), " "); got != "a1 a2 b2" {
		t.Errorf("effects %s; want a1 a2 b2", got)
	}
	if dl.count() != 1 || dl.msgs[0].ID != b1.ID || !errors.Is(dl.causes[0], consume.ErrSkipped) {
		t.Errorf("dead letters %+v; want b1, skipped", dl.msgs)
	}
	testkit.Eventually(t, 15*time.Second, func() bool {
		keys, err := heldkeys.List(ctx, b.db, b.tables, heldkeys.Filter{}, 10)
		return err == nil && len(keys) == 0
	}, "no key held")
}

// Turning holding off (or an adapter that is not ordered) does not let a
// key's later messages overtake the ones already waiting behind it: they
// wait too, and the drain still runs.
func TestHeldKeysStayHeldWhenHoldingIsTurnedOff(t *testing.T) {
	t.Parallel()
	b := newBundle(t)
	table := b.orderedEffects(t)
	var failing atomic.Bool
	failing.Store(true)
	handler := func(ctx context.Context, tx *consume.Tx, m *relayer.Message) error {
		if string(m.Body) == "k1" && failing.Load() {
			return errors.New("ledger down")
		}
		_, err := tx.ExecContext(ctx, `INSERT INTO `+table+` (message_id, note) VALUES ($1, $2)`, m.ID, string(m.Body))
		return err
	}
	retry := relayer.Retry{MaxAttempts: 5, Backoff: 10 * time.Millisecond, MaxBackoff: 10 * time.Millisecond}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	before := b.consumer(t, handler, consume.Options{Retry: retry})
	stop, err := before.StartHeldKeys(ctx, consume.HeldKeysOptions{Ordered: true, DeadLetters: &sink{}, Poll: time.Hour})
	if err != nil {
		t.Fatal(err)
	}
	k1 := keyed("k", "k1")
	if out, _ := before.Handle(ctx, &delivery{msg: k1, attempt: 1}); out != consume.Held {
		t.Fatalf("k1: %s, want held", out)
	}
	stop()
	// Restarted with holding off.
	failing.Store(false)
	after := b.consumer(t, handler, consume.Options{Retry: retry, HoldKeys: consume.HoldKeysOff})
	stop, err = after.StartHeldKeys(ctx, consume.HeldKeysOptions{Ordered: true, DeadLetters: &sink{}, Poll: 10 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	defer stop()
	if out, _ := after.Handle(ctx, &delivery{msg: keyed("k", "k2"), attempt: 1}); out != consume.Waiting && out != consume.Handled {
		t.Fatalf("k2: %s", out)
	}
	testkit.Eventually(t, 15*time.Second, func() bool { return len(b.notes(t, table)) == 2 }, "k1 and k2 handled")
	if got := strings.Join(b.notes(t, table), " "); got != "k1 k2" {
		t.Errorf("effects %s; want k1 k2: the key's order kept with holding off", got)
	}
}
