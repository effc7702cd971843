package consume_test

import (
	"context"
	"fmt"
	"log/slog"
	"math/rand/v2"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/google/uuid"

	"github.com/relayer-go/relayer"
	"github.com/relayer-go/relayer/dispatch"
	"github.com/relayer-go/relayer/enlist"
	"github.com/relayer-go/relayer/internal/testkit"
	"github.com/relayer-go/relayer/internal/testkit/testdb"
	"github.com/relayer-go/relayer/store"
)

// step is a message of the order test: step N of its key's sequence.
type step struct {
	N int `json:"n"`
}

func (step) MessageType() string { return "order.Step" }

// orderedEffects names the table of the order test's effects: each one's
// key and step, in the order they committed (seq).
func orderedEffects(tables store.Tables) string { return `"` + tables.Schema + `".ordered_effects` }

// quiet is a logger that drops everything.
func quiet() *slog.Logger { return slog.New(slog.DiscardHandler) }

// Per-key order from the producer's commit to the consumer's committed
// effect, through failures, on each broker: producers commit each key's
// steps in sequence; a relay process (the deployable `relayer run`)
// delivers the first steps alone, then an embedded runner shares the
// ordered route's lanes with it, and the relay is killed while it delivers
// and replaced; consumer processes (one at a time, their adapter handing a
// key's messages over in order, so that they hold keys) fail a fifth of
// their handlers at random and kill themselves between a commit and its
// acknowledgement, again and again. In the end every committed step has
// exactly one effect, and each key's effects committed in step order.
func TestOrderEndToEnd(t *testing.T) {
	t.Parallel()
	relay := buildRelay(t, t.TempDir())
	for _, broker := range []struct {
		name string
		rig  func(t testing.TB) rig
	}{
		// One unacknowledged message at a time: JetStream delivers the
		// later ones to the next process before it delivers again what a
		// killed one left unacknowledged, otherwise.
		{"nats", func(t testing.TB) rig { return natsRigWith(t, 1) }},
		{"rabbitmq", rabbitRig},
		{"kafka", kafkaRig},
	} {
		t.Run(broker.name, func(t *testing.T) {
			t.Parallel()
			orderEndToEnd(t, broker.rig(t), relay)
		})
	}
}

func orderEndToEnd(t *testing.T, r rig, relayBin string) {
	const keys, steps, minKills = 10, 20, 4
	ctx := context.Background()
	db := testdb.Open(t, "pgx")
	tables := store.Tables{Schema: testdb.NewSchema(t), TablePrefix: "o_"}
	// The producers' outbox and the consumer's inbox share the database and
	// the schema, as a service consuming its own events would.
	routes := &relayer.Routes{}
	if err := relayer.AddType[step](routes, relayer.Route{Transport: "broker", Destination: r.dst, Ordered: true}); err != nil {
		t.Fatal(err)
	}
	outbox := relayer.Outbox{Schema: tables.Schema, TablePrefix: tables.TablePrefix, Routes: routes,
		Transports: map[string]relayer.Transport{"broker": r.tr}}
	if _, err := store.Migrate(ctx, db, tables); err != nil {
		t.Fatal(err)
	}
	if _, err := db.ExecContext(ctx, `CREATE TABLE `+orderedEffects(tables)+` (seq bigserial PRIMARY KEY, message_id uuid NOT NULL,
		key text NOT NULL, n int NOT NULL, pid int NOT NULL)`); err != nil {
		t.Fatal(err)
	}
	w, err := enlist.NewWriter(outbox, enlist.Options{})
	if err != nil {
		t.Fatal(err)
	}
	runner, err := dispatch.NewRunner(db, outbox, dispatch.RunnerOptions{Logger: quiet(),
		Ordered: dispatch.OrderedOptions{Name: "order-test", PollInterval: 20 * time.Millisecond, LeaseDuration: 5 * time.Second}})
	if err != nil {
		t.Fatal(err)
	}
	outboxRows := func() (n int) {
		if err := db.QueryRow(`SELECT count(*) FROM "` + tables.Schema + `".o_outbox`).Scan(&n); err != nil {
			t.Fatal(err)
		}
		return n
	}
	// Each key's steps from, up to to, commit in sequence, the keys side by
	// side.
	committed := make(map[uuid.UUID]bool, keys*steps)
	commitSteps := func(from, to int) {
		var mu sync.Mutex
		var wg sync.WaitGroup
		for k := range keys {
			wg.Go(func() {
				key := fmt.Sprintf("account-%d", k)
				for n := from; n < to; n++ {
					id := uuid.Must(relayer.NewID())
					err := w.RunInTx(ctx, db, nil, func(tx *enlist.Tx) error {
						return tx.Publish(ctx, step{N: n}, relayer.Key(key), relayer.WithID(id))
					})
					if err != nil {
						t.Errorf("commit %s step %d: %v", key, n, err)
						return
					}
					mu.Lock()
					committed[id] = true
					mu.Unlock()
				}
			})
		}
		wg.Wait()
	}

	// The relay delivers the first steps alone.
	relay := startRelay(t, relayBin, tables, relayURL(r.cfg), "order-relay-1")
	const alone = steps / 4
	commitSteps(0, alone)
	testkit.Eventually(t, time.Minute, func() bool { return outboxRows() == 0 }, "the relay to deliver the first %d messages:\n%s", keys*alone, relay.logs)

	// The embedded runner joins it, and the rest commit.
	rctx, stopRunner := context.WithCancel(ctx)
	defer stopRunner()
	if err := runner.Start(rctx); err != nil {
		t.Fatal(err)
	}
	defer func() {
		stopRunner()
		sctx, cancel := context.WithTimeout(ctx, 10*time.Second)
		defer cancel()
		_ = runner.Stop(sctx)
	}()
	// It holds some lanes as it joins; the rest commit once one of them is
	// a key's, so that it has messages of its own to send.
	keyLanes := map[int]bool{}
	for k := range keys {
		lane, err := relayer.Lane(fmt.Sprintf("account-%d", k), relayer.LanesDefault)
		if err != nil {
			t.Fatal(err)
		}
		keyLanes[lane] = true
	}
	testkit.Eventually(t, time.Minute, func() bool {
		return slices.ContainsFunc(runner.Lanes(), func(l int) bool { return keyLanes[l] })
	}, "the embedded runner to hold the lane of a key beside the relay")
	commitSteps(alone, steps)

	// The relay crashes once some of them left the outbox; a second one
	// takes its place (the first one's leases free its lanes when they
	// expire, to whichever worker claims them first).
	testkit.Eventually(t, time.Minute, func() bool { return outboxRows() <= keys*(steps-alone)*3/4 },
		"a quarter of the last %d messages to leave the outbox:\n%s", keys*(steps-alone), relay.logs)
	relay.kill(t)
	relay = startRelay(t, relayBin, tables, relayURL(r.cfg), "order-relay-2")

	r.cfg.Tables, r.cfg.Ordered, r.cfg.Concurrency, r.cfg.FailPercent = tables, true, 1, 20
	handled := func() (n int) {
		if err := db.QueryRow(`SELECT count(DISTINCT message_id) FROM ` + orderedEffects(tables)).Scan(&n); err != nil {
			t.Fatal(err)
		}
		return n
	}
	kills := 0
	deadline := time.Now().Add(3 * time.Minute)
	for handled() < keys*steps {
		if time.Now().After(deadline) {
			t.Fatalf("after %d kills, %d of %d messages handled", kills, handled(), keys*steps)
		}
		r.cfg.KillAfter = 5 + rand.IntN(21)
		if kills >= minKills {
			r.cfg.KillAfter = 0
		}
		if runConsumer(t, r.cfg, deadline, func() bool { return handled() >= keys*steps }) {
			kills++
		}
	}

	relay.stop(t)
	embedded := uint64(0)
	for _, o := range runner.Stats().Ordered {
		embedded += o.Stats.Sent
	}
	if embedded == 0 {
		t.Errorf("the embedded runner sent none of the %d messages the relay had not delivered alone", keys*(steps-alone))
	}

	rows, err := db.Query(`SELECT message_id, key, n FROM ` + orderedEffects(tables) + ` ORDER BY seq`)
	if err != nil {
		t.Fatal(err)
	}
	defer rows.Close()
	effects := map[uuid.UUID]int{}
	next := map[string]int{}
	var violations []string
	for rows.Next() {
		var id uuid.UUID
		var key string
		var n int
		if err := rows.Scan(&id, &key, &n); err != nil {
			t.Fatal(err)
		}
		effects[id]++
		if n != next[key] {
			violations = append(violations, fmt.Sprintf("%s: step %d took effect where step %d was due", key, n, next[key]))
		}
		next[key] = n + 1
	}
	if err := rows.Err(); err != nil {
		t.Fatal(err)
	}
	for id := range committed {
		if effects[id] != 1 {
			t.Errorf("message %v: %d effects, want 1", id, effects[id])
		}
	}
	if len(effects) != len(committed) || len(violations) > 0 || kills < minKills {
		t.Errorf("%d messages have effects of %d committed; %d order violations %s; %d kills (want at least %d)",
			len(effects), len(committed), len(violations), strings.Join(violations, "; "), kills, minKills)
	}
	var held int
	if err := db.QueryRow(`SELECT count(*) FROM "` + tables.Schema + `".o_inbox_waiting`).Scan(&held); err != nil || held != 0 {
		t.Errorf("%d messages still wait behind held keys (%v)", held, err)
	}
	t.Logf("%d keys × %d steps, the first %d of each sent by a relay alone, then %d sends by the embedded runner beside it (the rest by the relays), %d consumer processes killed between a commit and its acknowledgement",
		keys, steps, alone, embedded, kills)
}
