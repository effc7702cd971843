package dispatch_test

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"math/rand/v2"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/google/uuid"

	"github.com/relayer-go/relayer"
	"github.com/relayer-go/relayer/dispatch"
	"github.com/relayer-go/relayer/enlist"
	"github.com/relayer-go/relayer/headers"
	"github.com/relayer-go/relayer/internal/testkit"
	"github.com/relayer-go/relayer/store"
)

// keysInLane returns n distinct keys that hash into lane (of the default
// lane count), each starting with prefix.
func keysInLane(prefix string, lane, n int) []string {
	var keys []string
	for i := 0; len(keys) < n; i++ {
		k := fmt.Sprintf("%s-%d", prefix, i)
		if l, _ := relayer.Lane(k, relayer.LanesDefault); l == lane {
			keys = append(keys, k)
		}
	}
	return keys
}

// A row whose stored headers do not decode, on an ordered route, is parked
// with its key: its key's later rows wait for the operator, and every other
// key of its lane is delivered at once. Before, every batch of the lane
// failed reading its heads, and nothing of the lane went out.
func TestOrderedCorruptRowIsParkedAndItsLaneGoesOn(t *testing.T) {
	t.Parallel()
	b := setup(t, dispatch.DirectOptions{})
	keys := keysInLane("corrupt", 3, 7)
	b.shipped(t, keys, 7, 49) // 49 rows in one lane, the first of keys[0] first
	for _, stored := range []string{`\x0100000005000000`, `\x0200000000000000`} {
		_, err := b.db.Exec(`UPDATE "`+b.schema+`".ob_outbox SET headers = $1::bytea
			WHERE id = (SELECT id FROM "`+b.schema+`".ob_outbox WHERE ordering_key = $2 AND octet_length(headers) > 8 ORDER BY id LIMIT 1)`,
			stored, keys[0])
		must(t, err)
	}
	// keys[0]'s first two rows are corrupt (a count past the end, and a
	// version this reader does not know).
	o := b.orderedWorker(t, b.db, b.mem, dispatch.OrderedOptions{LeaseDuration: 3 * time.Second, PollInterval: 900 * time.Millisecond})
	started := time.Now()
	testkit.Eventually(t, 10*time.Second, func() bool { return len(b.mem.All()) >= 42 }, "the other keys' 42 messages")
	if took := time.Since(started); took > 800*time.Millisecond {
		t.Errorf("the lane's other keys took %s, want them at once (under the 900ms poll)", took)
	}
	checkOrder(t, b.mem.All(), keys[1:], 7, false)
	for _, m := range b.mem.All() {
		if m.Key == keys[0] {
			t.Errorf("message of the corrupt row's key sent: %s", m.Body)
		}
	}
	testkit.Eventually(t, 10*time.Second, func() bool {
		parked, err := b.store.ParkedKeys(context.Background(), store.ParkedFilter{}, 10)
		must(t, err)
		return len(parked) != 0 && o.Stats().Parked != 0
	}, "the corrupt row's key parked")
	parked, err := b.store.ParkedKeys(context.Background(), store.ParkedFilter{}, 10)
	must(t, err)
	if len(parked) != 1 || parked[0].Head.Key != keys[0] || !strings.Contains(parked[0].Head.LastError, "corrupt row") {
		t.Fatalf("parked keys = %+v, want %s parked at its corrupt row", parked, keys[0])
	}
	if n := len(b.rows(t)); n != 7 {
		t.Errorf("outbox holds %d rows, want the 7 of the corrupt row's key", n)
	}
	if st := o.Stats(); st.CorruptRows != 1 || st.Parked != 1 {
		t.Errorf("stats = %+v, want 1 corrupt row parked", st)
	}
	// The operator skips the corrupt head: the second corrupt row is parked
	// in turn, and once that is skipped too the key's five good rows go out
	// in order.
	for range 2 {
		n, err := b.store.SkipParkedHead(context.Background(), keys[0])
		must(t, err)
		if n != 1 {
			t.Fatalf("SkipParkedHead moved %d rows, want 1", n)
		}
		testkit.Eventually(t, 10*time.Second, func() bool {
			p, err := b.store.ParkedKeys(context.Background(), store.ParkedFilter{}, 10)
			must(t, err)
			return len(p) == 1 || len(b.mem.All()) == 47
		}, "the next head parked or sent")
	}
	testkit.Eventually(t, 10*time.Second, func() bool { return len(b.mem.All()) == 47 }, "the key's good rows")
	seq := sequences(t, b.mem.All())[keys[0]]
	if fmt.Sprint(seq) != "[3 4 5 6 7]" {
		t.Errorf("the corrupt rows' key arrived as %v, want [3 4 5 6 7]", seq)
	}
	dead := b.deadLetters(t)
	if len(dead) != 2 || len(dead[0].headers) != 8 {
		t.Errorf("dead letters = %+v, want the two corrupt rows with their bytes", dead)
	}
}

// The outbox has no check constraints (migration 6), so another program can
// write rows no writer of Relayer would: headers shorter than their prefix,
// an ordered row without a key, a negative lane. None is lost and none
// stops the others: the short headers and the keyless row go to the dead
// letters as corrupt, and the row in a negative lane stays, counted as a
// row no worker scans.
func TestRowsOtherProgramsWriteWronglyLoseNothing(t *testing.T) {
	t.Parallel()
	b := setup(t, dispatch.DirectOptions{})
	ids := b.enlistOnly(t, relayer.NewOutgoing(Placed{1}), relayer.NewOutgoing(Placed{2}))
	_, err := b.db.Exec(`UPDATE "`+b.schema+`".ob_outbox SET headers = '\x010000' WHERE id = $1`, ids[0])
	must(t, err)
	keys := keysInLane("wrong", 4, 3)
	b.shipped(t, keys, 1, 3)
	var keyless uuid.UUID
	must(t, b.db.QueryRow(`UPDATE "`+b.schema+`".ob_outbox SET ordering_key = NULL WHERE ordering_key = $1 RETURNING id`, keys[0]).Scan(&keyless))
	_, err = b.db.Exec(`UPDATE "`+b.schema+`".ob_outbox SET lane = -1 WHERE ordering_key = $1`, keys[1])
	must(t, err)
	r := b.recovery(t, dispatch.RecoveryOptions{PollInterval: 50 * time.Millisecond, MinAge: time.Nanosecond})
	must(t, r.Start(context.Background()))
	o := b.orderedWorker(t, b.db, b.mem, dispatch.OrderedOptions{LeaseDuration: 3 * time.Second, PollInterval: 50 * time.Millisecond})
	testkit.Eventually(t, 10*time.Second, func() bool { return b.mem.Len() >= 2 }, "the good unordered row and the third key's row")
	testkit.Eventually(t, 10*time.Second, func() bool { return len(b.deadLetters(t)) == 2 }, "two dead letters")
	morePasses(t, r, 3)
	morePasses(t, o, 3)
	got := map[string]int{}
	for _, m := range b.mem.All() {
		got[m.Key]++
	}
	if want := map[string]int{"": 1, keys[2]: 1}; !maps.Equal(got, want) {
		t.Errorf("sent per key %v, want %v: the good unordered row and %s's", got, want, keys[2])
	}
	dead := map[uuid.UUID]deadLetter{}
	for _, d := range b.deadLetters(t) {
		dead[d.id] = d
	}
	if d := dead[ids[0]]; d.reason != store.ReasonCorrupt || string(d.headers) != "\x01\x00\x00" {
		t.Errorf("dead letter of the short headers: %+v, want reason %q and the 3 stored bytes", d, store.ReasonCorrupt)
	}
	if d := dead[keyless]; d.reason != store.ReasonCorrupt || !strings.Contains(d.lastErr, "no ordering key") {
		t.Errorf("dead letter of the keyless ordered row: %+v, want reason %q saying it has no key", d, store.ReasonCorrupt)
	}
	if st := o.Stats(); st.CorruptRows != 1 || st.DeadLettered != 1 {
		t.Errorf("ordered stats = %+v, want the keyless row counted corrupt and dead-lettered", st)
	}
	if n := o.RowsBeyondLanes(); n != 1 {
		t.Errorf("RowsBeyondLanes = %d, want the row in lane -1", n)
	}
	var left string
	must(t, b.db.QueryRow(`SELECT ordering_key FROM "`+b.schema+`".ob_outbox`).Scan(&left))
	if left != keys[1] {
		t.Errorf("the outbox holds %q, want the row of %s in lane -1 kept", left, keys[1])
	}
}

// When heads of a lane fail, each holds its own key only: the lane's other
// keys go out in the same batch, without waiting a poll per failing head.
// Before, a batch stopped at its first failure and the lane waited a poll
// interval, so ten failing heads cost every other key ten polls.
func TestOrderedFailingHeadsHoldOnlyTheirKeys(t *testing.T) {
	t.Parallel()
	b := setup(t, dispatch.DirectOptions{})
	keys := keysInLane("refused", 5, 20)
	refused := keys[:10]
	// Each refused key's head comes before the other keys' messages.
	b.shipped(t, refused, 1, 10)
	b.shipped(t, keys[10:], 2, 20)
	b.mem.FailWith(func(m *relayer.Message) error {
		for _, k := range refused {
			if m.Key == k {
				return errors.New("broker refused the key")
			}
		}
		return nil
	})
	outbox := b.withRetry(t, relayer.Retry{}, relayer.Retry{}, relayer.Retry{}, relayer.Retry{Backoff: time.Hour})
	outbox.Transports = map[string]relayer.Transport{"mem": b.mem}
	o := b.orderedWorkerOn(t, b.db, outbox, dispatch.OrderedOptions{LeaseDuration: 9 * time.Second, PollInterval: 2 * time.Second})
	started := time.Now()
	testkit.Eventually(t, 10*time.Second, func() bool { return len(b.mem.All()) >= 20 }, "the other keys' 20 messages")
	if took := time.Since(started); took > 1500*time.Millisecond {
		t.Errorf("the other keys' messages took %s behind 10 failing heads, want well under one 2s poll", took)
	}
	checkOrder(t, b.mem.All(), keys[10:], 2, false)
	testkit.Eventually(t, 10*time.Second, func() bool { return o.Stats().Failed == 10 }, "ten failures recorded")
	var waiting int
	must(t, b.db.QueryRow(`SELECT count(*) FROM "`+b.schema+`".ob_outbox WHERE retry_at > now() AND attempts = 1`).Scan(&waiting))
	if waiting != 10 {
		t.Errorf("%d rows wait for their retry with one attempt, want the 10 refused heads", waiting)
	}
}

// randomText returns n bytes of text that does not compress, so that an
// index entry holding it is as long as the text.
func randomText(n int) string {
	const alphabet = "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789-_."
	var b strings.Builder
	for range n {
		b.WriteByte(alphabet[rand.IntN(len(alphabet))])
	}
	return b.String()
}

// Every indexed text a message carries works at its documented maximum
// through every statement that indexes it (a failure waiting for its
// retry, a parked key, a paused destination, a skip to the dead letters),
// and one byte over is refused when published or routed, naming the limit.
// Before, publish took keys of any length, and a 3,000-byte key whose send
// failed broke every batch of its lane (an index row over 2,704 bytes).
func TestIndexedTextAtItsMaximum(t *testing.T) {
	t.Parallel()
	b := setup(t, dispatch.DirectOptions{})
	transport := randomText(relayer.EndpointMaxBytes)
	destination := randomText(relayer.EndpointMaxBytes)
	var routes relayer.Routes
	must(t, relayer.AddType[Shipped](&routes, relayer.Route{Transport: transport, Destination: destination, Ordered: true,
		Retry: relayer.Retry{MaxAttempts: 2, Backoff: 10 * time.Millisecond}}))
	must(t, relayer.AddType[Placed](&routes, relayer.Route{Transport: transport, Destination: destination}))
	outbox := b.outbox
	outbox.Routes = &routes
	outbox.Transports = map[string]relayer.Transport{transport: b.mem}
	w, err := enlist.NewWriter(outbox, enlist.Options{})
	must(t, err)
	publish := func(msgs ...relayer.Outgoing) error {
		return w.RunInTx(context.Background(), b.db, nil, func(tx *enlist.Tx) error { return tx.PublishAll(context.Background(), msgs...) })
	}

	long := randomText(relayer.KeyMaxBytes)
	other := randomText(relayer.KeyMaxBytes)
	for _, k := range []string{long, long, other} {
		must(t, publish(relayer.NewOutgoing(Shipped{1}, relayer.Key(k))))
	}
	var mu sync.Mutex
	unavailable := true
	b.mem.FailWith(func(m *relayer.Message) error {
		mu.Lock()
		defer mu.Unlock()
		switch {
		case unavailable:
			return fmt.Errorf("broker down: %w", relayer.ErrUnavailable)
		case m.Key == long:
			return errors.New("refused")
		}
		return nil
	})
	b.quickRunner(t, outbox, false)
	must(t, publish(relayer.NewOutgoing(Placed{1})))
	testkit.Eventually(t, 10*time.Second, func() bool {
		p, err := b.store.Pauses(context.Background())
		must(t, err)
		return len(p) > 0 && p[0].Destination == destination && p[0].Transport == transport
	}, "the destination paused and published")
	mu.Lock()
	unavailable = false
	mu.Unlock()
	testkit.Eventually(t, 10*time.Second, func() bool {
		p, err := b.store.ParkedKeys(context.Background(), store.ParkedFilter{}, 10)
		must(t, err)
		return len(p) == 1 && p[0].Head.Key == long
	}, "the long key parked after two attempts")
	testkit.Eventually(t, 10*time.Second, func() bool { return len(b.mem.All()) == 2 }, "the other key and the unordered message sent")
	n, err := b.store.SkipParkedHead(context.Background(), long)
	must(t, err)
	if n != 1 {
		t.Fatalf("SkipParkedHead moved %d rows, want 1", n)
	}
	if dead := b.deadLetters(t); len(dead) != 1 {
		t.Errorf("dead letters = %d, want the skipped head", len(dead))
	}

	// One byte over each limit is refused, naming it.
	err = publish(relayer.NewOutgoing(Shipped{2}, relayer.Key(long+"x")))
	if !errors.Is(err, relayer.ErrInvalidMessage) || !strings.Contains(err.Error(), "1024") {
		t.Errorf("publishing a key of %d bytes: %v, want ErrInvalidMessage naming the limit", len(long)+1, err)
	}
	for _, route := range []relayer.Route{{Transport: transport + "x", Destination: "d"}, {Transport: "t", Destination: destination + "x"}} {
		var rs relayer.Routes
		if err := rs.Add("too.long", route); !errors.Is(err, relayer.ErrInvalidRoute) || !strings.Contains(err.Error(), "1024") {
			t.Errorf("a route with a %d-byte transport and a %d-byte destination: %v, want ErrInvalidRoute naming the limit",
				len(route.Transport), len(route.Destination), err)
		}
	}
	if _, err := b.store.RecordInbox(context.Background(), randomText(store.ConsumerMaxBytes+1), uuid.Must(relayer.NewID())); !errors.Is(err, store.ErrInvalidArgument) {
		t.Errorf("an inbox consumer over the limit: %v, want ErrInvalidArgument", err)
	}
	if _, err := b.store.RecordInbox(context.Background(), randomText(store.ConsumerMaxBytes), uuid.Must(relayer.NewID())); err != nil {
		t.Errorf("an inbox consumer at the limit: %v", err)
	}
}

// Writers and workers check the schema once at start: an outdated one (an
// upgrade whose migration was forgotten) is refused with how to migrate,
// and a newer one (a rolling deploy) is accepted with a warning, or refused
// when told to. Before, they started and wrote on an outdated schema, and
// every poll then failed on a missing column.
func TestSchemaVersionIsCheckedAtStart(t *testing.T) {
	t.Parallel()
	b := setup(t, dispatch.DirectOptions{})
	ctx := context.Background()
	old := b.outbox
	old.TablePrefix = "old_"
	steps, err := store.Migrations(store.TablesOf(old))
	must(t, err)
	_, err = b.db.Exec(steps[0].SQL)
	must(t, err)
	publishWith := func(outbox relayer.Outbox, opts enlist.Options) error {
		w, err := enlist.NewWriter(outbox, opts)
		must(t, err)
		return w.RunInTx(ctx, b.db, nil, func(tx *enlist.Tx) error {
			return tx.PublishAll(ctx, relayer.NewOutgoing(Placed{1}))
		})
	}
	start := func(outbox relayer.Outbox, opts dispatch.RunnerOptions) error {
		opts.Logger = b.logger()
		r, err := dispatch.NewRunner(b.db, outbox, opts)
		must(t, err)
		err = r.Start(ctx)
		r.Stop(ctx)
		return err
	}
	if err := publishWith(old, enlist.Options{}); !errors.Is(err, store.ErrSchemaOutdated) || !strings.Contains(err.Error(), "relayer migrate") {
		t.Errorf("publish on a schema at migration 1: %v, want ErrSchemaOutdated saying how to migrate", err)
	}
	if err := start(old, dispatch.RunnerOptions{}); !errors.Is(err, store.ErrSchemaOutdated) {
		t.Errorf("Runner.Start on a schema at migration 1: %v, want ErrSchemaOutdated", err)
	}
	var n int
	must(t, b.db.QueryRow(`SELECT count(*) FROM "`+b.schema+`".old_outbox`).Scan(&n))
	if n != 0 {
		t.Errorf("%d rows written to the outdated outbox", n)
	}

	// A schema that lacks only migrations after MinSchemaVersion is used as
	// it is, and the runner names the migrations it lacks, each by what it
	// adds (not all of them make anything faster).
	atMin := b.outbox
	atMin.TablePrefix = "min_"
	steps, err = store.Migrations(store.TablesOf(atMin))
	must(t, err)
	for _, step := range steps[:store.MinSchemaVersion] {
		_, err = b.db.Exec(step.SQL)
		must(t, err)
	}
	if err := publishWith(atMin, enlist.Options{RefuseNewerSchema: true}); err != nil {
		t.Errorf("publish on a schema at MinSchemaVersion: %v", err)
	}
	newest := steps[len(steps)-1]
	if err := start(atMin, dispatch.RunnerOptions{}); err != nil || !strings.Contains(b.logs.String(), "lacks migrations of this release") ||
		!strings.Contains(b.logs.String(), fmt.Sprintf("%d: %s", newest.Version, newest.Name)) || strings.Contains(b.logs.String(), "faster") {
		t.Errorf("Runner.Start on a schema at MinSchemaVersion: %v, want it started, naming the migrations it lacks (not calling them faster); logs:\n%s", err, b.logs.String())
	}

	_, err = b.db.Exec(`INSERT INTO "`+b.schema+`".ob_relayer_migrations (version, name) VALUES ($1, 'newer')`, store.SchemaVersion+1)
	must(t, err)
	if err := publishWith(b.outbox, enlist.Options{}); err != nil {
		t.Errorf("publish on a newer schema: %v", err)
	}
	if err := publishWith(b.outbox, enlist.Options{RefuseNewerSchema: true}); !errors.Is(err, store.ErrSchemaNewer) {
		t.Errorf("publish on a newer schema, refusing it: %v, want ErrSchemaNewer", err)
	}
	if err := start(b.outbox, dispatch.RunnerOptions{}); err != nil || !strings.Contains(b.logs.String(), "newer than this release") {
		t.Errorf("Runner.Start on a newer schema: %v, want it started with a warning; logs:\n%s", err, b.logs.String())
	}
	if err := start(b.outbox, dispatch.RunnerOptions{RefuseNewerSchema: true}); !errors.Is(err, store.ErrSchemaNewer) {
		t.Errorf("Runner.Start on a newer schema, refusing it: %v, want ErrSchemaNewer", err)
	}
}

// Rows stored before the limits were checked at publish (or by hand), with an
// ordering key or a destination too long for the index that records a
// failure, end in the dead letters when their send fails, as over_limit,
// instead of failing every batch of their lane or every take that holds
// them. Before, recording their failure failed the statement ("index row
// size exceeds btree maximum"), and they were sent again and again.
func TestStoredRowsOverTheLimitsEndWhenTheyFail(t *testing.T) {
	t.Parallel()
	b := setup(t, dispatch.DirectOptions{})
	longKey := randomText(3000)
	longDest := randomText(3000)
	lane, err := relayer.Lane(longKey, relayer.LanesDefault)
	must(t, err)
	others := keysInLane("beside", lane, 3)
	insert := func(key, destination string, ordered bool) {
		var laneArg any
		var keyArg any
		if ordered {
			laneArg, keyArg = lane, key
		}
		hdrs, err := headers.Encode(nil)
		must(t, err)
		_, err = b.db.Exec(`INSERT INTO "`+b.schema+`".ob_outbox (id, message_type, transport, destination, body, headers, ordering_key, lane, created_at)
			VALUES ($1, 'dispatch_test.Shipped', 'mem', $2, '{"N":1}', $3, $4, $5, now() - interval '1 minute')`,
			uuid.Must(relayer.NewID()), destination, hdrs, keyArg, laneArg)
		must(t, err)
	}
	insert(longKey, "orders.shipped", true)
	insert(longKey, "orders.shipped", true)
	insert("", longDest, false)
	b.shipped(t, others, 2, 6)
	var refusedKey atomic.Bool
	b.mem.FailWith(func(m *relayer.Message) error {
		switch {
		case len(m.Destination) > relayer.EndpointMaxBytes:
			return errors.New("refused")
		case len(m.Key) > relayer.KeyMaxBytes && refusedKey.CompareAndSwap(false, true):
			return errors.New("refused once")
		}
		return nil
	})
	outbox := b.outbox
	outbox.Transports = map[string]relayer.Transport{"mem": b.mem}
	b.quickRunner(t, outbox, true)
	b.waitRows(t, 0)
	dead := b.deadLetters(t)
	if len(dead) != 2 || dead[0].reason != store.ReasonOverLimit || dead[1].reason != store.ReasonOverLimit {
		t.Fatalf("dead letters = %+v, want the failed long-key head and the long-destination row, over_limit", dead)
	}
	// The long key's second row went out after its head was dead-lettered,
	// and the lane's other keys in order.
	checkOrder(t, b.mem.Messages("orders.shipped"), others, 2, false)
	if got := sequences(t, b.mem.Messages("orders.shipped"))[longKey]; len(got) != 1 {
		t.Errorf("the long key's rows sent: %v, want its second", got)
	}
}

// quickRunner starts a Runner on outbox whose ordered workers and recovery
// poll every 50 ms (recovery taking rows of any age), stopped at cleanup.
func (b *bundle) quickRunner(t *testing.T, outbox relayer.Outbox, disableDirect bool) {
	t.Helper()
	r, err := dispatch.NewRunner(b.db, outbox, dispatch.RunnerOptions{
		DisableDirect: disableDirect,
		Ordered:       dispatch.OrderedOptions{LeaseDuration: 3 * time.Second, PollInterval: 50 * time.Millisecond},
		Recovery:      dispatch.RecoveryOptions{PollInterval: 50 * time.Millisecond, MinAge: time.Nanosecond},
		Logger:        b.logger(),
	})
	must(t, err)
	must(t, r.Start(context.Background()))
	t.Cleanup(func() { r.Stop(context.Background()) })
}
