package relayerotel_test

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"go.opentelemetry.io/otel/attribute"
	sdkmetric "go.opentelemetry.io/otel/sdk/metric"
	"go.opentelemetry.io/otel/sdk/metric/metricdata"

	"github.com/google/uuid"

	"github.com/relayer-go/relayer"
	"github.com/relayer-go/relayer/dispatch"
	relayerenlist "github.com/relayer-go/relayer/enlist"
	"github.com/relayer-go/relayer/internal/testkit"
	"github.com/relayer-go/relayer/internal/testkit/testdb"
	"github.com/relayer-go/relayer/internal/workerstore"
	relayerotel "github.com/relayer-go/relayer/otel"
	"github.com/relayer-go/relayer/store"
	"github.com/relayer-go/relayer/transport/memory"
)

// meterBundle is a meter provider read on demand.
type meterBundle struct {
	reader *sdkmetric.ManualReader
	mp     *sdkmetric.MeterProvider
}

func setupMeter(t *testing.T) *meterBundle {
	t.Helper()
	reader := sdkmetric.NewManualReader()
	mp := sdkmetric.NewMeterProvider(sdkmetric.WithReader(reader))
	t.Cleanup(func() { _ = mp.Shutdown(context.Background()) })
	return &meterBundle{reader: reader, mp: mp}
}

// collect reads every metric; err is what the callbacks returned.
func (b *meterBundle) collect(t *testing.T) (metricdata.ResourceMetrics, error) {
	t.Helper()
	var rm metricdata.ResourceMetrics
	err := b.reader.Collect(context.Background(), &rm)
	return rm, err
}

func (b *meterBundle) mustCollect(t *testing.T) metricdata.ResourceMetrics {
	t.Helper()
	rm, err := b.collect(t)
	if err != nil {
		t.Fatalf("Collect: %v", err)
	}
	return rm
}

func find(rm metricdata.ResourceMetrics, name string) (metricdata.Metrics, bool) {
	for _, sm := range rm.ScopeMetrics {
		for _, m := range sm.Metrics {
			if m.Name == name {
				return m, true
			}
		}
	}
	return metricdata.Metrics{}, false
}

// matches reports whether set holds every key=value of want.
func matches(set attribute.Set, want map[string]string) bool {
	for k, v := range want {
		got, ok := set.Value(attribute.Key(k))
		if !ok || got.String() != v {
			return false
		}
	}
	return true
}

// total sums the int64 data points of a counter or gauge whose attributes
// match want; ok is false when no point matched.
func total(t *testing.T, rm metricdata.ResourceMetrics, name string, want map[string]string) (n int64, ok bool) {
	t.Helper()
	m, found := find(rm, name)
	if !found {
		return 0, false
	}
	var points []metricdata.DataPoint[int64]
	switch d := m.Data.(type) {
	case metricdata.Sum[int64]:
		if !d.IsMonotonic {
			t.Fatalf("%s is not monotonic", name)
		}
		points = d.DataPoints
	case metricdata.Gauge[int64]:
		points = d.DataPoints
	default:
		t.Fatalf("%s holds %T", name, m.Data)
	}
	for _, p := range points {
		if matches(p.Attributes, want) {
			n += p.Value
			ok = true
		}
	}
	return n, ok
}

func TestTransportMetrics(t *testing.T) {
	t.Parallel()
	mb := setupMeter(t)
	mem := memory.New()
	tr := relayerotel.WrapTransport(mem, relayerotel.WithMeterProvider(mb.mp),
		relayerotel.WithMessagingSystem("memory"), relayerotel.WithTransportName("primary"))
	ctx := context.Background()

	var failIDs sync.Map // message id -> error
	mem.FailWith(func(m *relayer.Message) error {
		if err, ok := failIDs.Load(m.ID); ok {
			return err.(error)
		}
		return nil
	})
	msg := func(dest string, fail error) *relayer.Message {
		m := enlist(t, ctx, dest)
		if fail != nil {
			failIDs.Store(m.ID, fail)
		}
		return m
	}
	permanent := fmt.Errorf("too large: %w", relayer.ErrPermanent)
	unavailable := fmt.Errorf("no leader: %w", relayer.ErrUnavailable)

	for _, m := range []*relayer.Message{msg("a", nil), msg("a", nil), msg("a", permanent)} {
		_ = tr.Send(ctx, m)
	}
	_ = tr.SendBatch(ctx, []*relayer.Message{msg("a", nil), msg("a", unavailable), msg("a", nil)})
	_ = tr.Send(ctx, msg("b", errors.New("something else")))

	rm := mb.mustCollect(t)
	base := map[string]string{"messaging.system": "memory", "relayer.transport": "primary",
		"messaging.operation.name": "send", "messaging.operation.type": "send"}
	with := func(kv ...string) map[string]string {
		m := map[string]string{}
		for k, v := range base {
			m[k] = v
		}
		for i := 0; i < len(kv); i += 2 {
			m[kv[i]] = kv[i+1]
		}
		return m
	}
	checks := []struct {
		metric string
		attrs  map[string]string
		want   int64
	}{
		// Every message sent counts; the 2 of a and the 1 of b that failed
		// carry error.type.
		{relayerotel.MetricSent, with("messaging.destination.name", "a"), 6},
		{relayerotel.MetricSent, with("messaging.destination.name", "b"), 1},
		{relayerotel.MetricSent, with("messaging.destination.name", "a", "error.type", "permanent"), 1},
		{relayerotel.MetricSent, with("messaging.destination.name", "a", "error.type", "unavailable"), 1},
		{relayerotel.MetricSent, with("messaging.destination.name", "b", "error.type", "_OTHER"), 1},
	}
	for _, c := range checks {
		if got, _ := total(t, rm, c.metric, c.attrs); got != c.want {
			t.Errorf("%s %v = %d, want %d", c.metric, c.attrs, got, c.want)
		}
	}

	m, ok := find(rm, relayerotel.MetricOperationDuration)
	if !ok {
		t.Fatal("no send duration histogram")
	}
	if m.Unit != "s" {
		t.Errorf("duration unit %q, want s", m.Unit)
	}
	counts := map[string]uint64{}
	for _, p := range m.Data.(metricdata.Histogram[float64]).DataPoints {
		typ, _ := p.Attributes.Value("error.type")
		dest, _ := p.Attributes.Value("messaging.destination.name")
		counts[dest.String()+"/"+typ.String()] += p.Count
		if p.Sum <= 0 || p.Sum > 10 {
			t.Errorf("duration sum %v s for %v", p.Sum, p.Attributes)
		}
	}
	want := map[string]uint64{"a/": 2, "a/permanent": 1, "a/batch": 1, "b/_OTHER": 1}
	if fmt.Sprint(counts) != fmt.Sprint(want) {
		t.Errorf("duration counts by destination/error.type = %v, want %v", counts, want)
	}
}

// fakeWorker is a dispatch worker whose counters the test sets.
type fakeWorker struct {
	mu sync.Mutex
	s  dispatch.Stats
}

func (w *fakeWorker) Stats() dispatch.Stats {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.s
}

func (w *fakeWorker) set(s dispatch.Stats) {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.s = s
}

type fakeCleanup dispatch.CleanupStats

func (c fakeCleanup) Stats() dispatch.CleanupStats { return dispatch.CleanupStats(c) }

func TestObserveWorker(t *testing.T) {
	t.Parallel()
	mb := setupMeter(t)
	meter := mb.mp.Meter("test")
	direct, recovery := &fakeWorker{}, &fakeWorker{}
	direct.set(dispatch.Stats{Sent: 10, Deleted: 9, Failed: 2, Expired: 3, SkippedGroups: 4,
		CompletionFailures: 5, LeftForRecovery: 6})
	recovery.set(dispatch.Stats{Sent: 100, Expired: 7})
	regDirect, err := relayerotel.ObserveWorker(meter, direct, "direct")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := relayerotel.ObserveWorker(meter, recovery, "recovery"); err != nil {
		t.Fatal(err)
	}

	rm := mb.mustCollect(t)
	want := map[string]int64{
		"relayer.dispatch.sent": 10, "relayer.dispatch.deleted": 9, "relayer.dispatch.failed": 2,
		"relayer.dispatch.claims_expired": 3,
		"relayer.dispatch.skipped_groups": 4, "relayer.dispatch.completion_failures": 5,
		"relayer.dispatch.left_for_recovery": 6,
	}
	for name, n := range want {
		if got, _ := total(t, rm, name, map[string]string{"relayer.worker": "direct"}); got != n {
			t.Errorf("%s{direct} = %d, want %d", name, got, n)
		}
	}
	if got, _ := total(t, rm, "relayer.dispatch.claims_expired", map[string]string{"relayer.worker": "recovery"}); got != 7 {
		t.Errorf("claims_expired{recovery} = %d, want 7", got)
	}

	// Counters follow the worker, and stop when unregistered.
	direct.set(dispatch.Stats{Sent: 15})
	rm = mb.mustCollect(t)
	if got, _ := total(t, rm, "relayer.dispatch.sent", map[string]string{"relayer.worker": "direct"}); got != 15 {
		t.Errorf("sent{direct} after more sends = %d, want 15", got)
	}
	if err := regDirect.Unregister(); err != nil {
		t.Fatal(err)
	}
	rm = mb.mustCollect(t)
	if _, ok := total(t, rm, "relayer.dispatch.sent", map[string]string{"relayer.worker": "direct"}); ok {
		t.Error("an unregistered worker is still observed")
	}
	if got, _ := total(t, rm, "relayer.dispatch.sent", map[string]string{"relayer.worker": "recovery"}); got != 100 {
		t.Errorf("sent{recovery} = %d, want 100", got)
	}

	if _, err := relayerotel.ObserveWorker(meter, direct, ""); err == nil {
		t.Error("ObserveWorker accepted an empty name")
	}
	if _, err := relayerotel.ObserveWorker(meter, nil, "x"); err == nil {
		t.Error("ObserveWorker accepted a nil worker")
	}
}

type runnerPlaced struct{ N int }

type runnerShipped struct{ N int }

// ObserveRunner counts per kind of worker, from the runner's own counters,
// and only the kinds the runner runs.
func TestObserveRunner(t *testing.T) {
	t.Parallel()
	db, _, _ := storeOutbox(t)
	schema := testdb.NewSchema(t)
	if _, err := store.Migrate(context.Background(), db, store.Tables{Schema: schema}); err != nil {
		t.Fatal(err)
	}
	var routes relayer.Routes
	if err := errors.Join(
		relayer.AddType[runnerPlaced](&routes, relayer.Route{Transport: "mem", Destination: "placed"}),
		relayer.AddType[runnerShipped](&routes, relayer.Route{Transport: "mem", Destination: "shipped", Ordered: true}),
	); err != nil {
		t.Fatal(err)
	}
	mem := memory.New()
	outbox := relayer.Outbox{Schema: schema, Routes: &routes, Transports: map[string]relayer.Transport{"mem": mem}}
	r, err := dispatch.NewRunner(db, outbox, dispatch.RunnerOptions{DisableRecovery: true})
	if err != nil {
		t.Fatal(err)
	}
	w, err := relayerenlist.NewWriter(outbox, relayerenlist.Options{Listener: r})
	if err != nil {
		t.Fatal(err)
	}
	if err := r.Start(context.Background()); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { r.Stop(context.Background()) })
	mb := setupMeter(t)
	reg, err := relayerotel.ObserveRunner(mb.mp.Meter("test"), r)
	if err != nil {
		t.Fatal(err)
	}
	if err := w.RunInTx(context.Background(), db, nil, func(tx *relayerenlist.Tx) error {
		return tx.PublishAll(context.Background(), relayer.NewOutgoing(runnerPlaced{1}),
			relayer.NewOutgoing(runnerShipped{1}, relayer.Key("k")), relayer.NewOutgoing(runnerShipped{2}, relayer.Key("k")))
	}); err != nil {
		t.Fatal(err)
	}
	// A worker counts a send just after the broker took it: wait for the
	// counts, not only for the messages.
	sent := func(rm metricdata.ResourceMetrics, worker string) int64 {
		n, _ := total(t, rm, "relayer.dispatch.sent", map[string]string{"relayer.worker": worker})
		return n
	}
	var rm metricdata.ResourceMetrics
	testkit.Within(10*time.Second, func() bool {
		rm = mb.mustCollect(t)
		return len(mem.Messages("placed"))+len(mem.Messages("shipped")) >= 3 && sent(rm, "direct") >= 1 && sent(rm, "ordered-1") >= 2
	})
	for worker, want := range map[string]int64{"direct": 1, "ordered-1": 2} {
		if got, _ := total(t, rm, "relayer.dispatch.sent", map[string]string{"relayer.worker": worker}); got != want {
			t.Errorf("sent{%s} = %d, want %d", worker, got, want)
		}
	}
	if _, ok := total(t, rm, "relayer.dispatch.sent", map[string]string{"relayer.worker": "recovery"}); ok {
		t.Error("recovery is turned off, yet observed")
	}
	if _, ok := total(t, rm, "relayer.cleanup.runs", map[string]string{"relayer.worker": "cleanup"}); !ok {
		t.Error("cleanup is not observed")
	}
	if err := reg.Unregister(); err != nil {
		t.Fatal(err)
	}
	rm = mb.mustCollect(t)
	if _, ok := total(t, rm, "relayer.dispatch.sent", map[string]string{"relayer.worker": "direct"}); ok {
		t.Error("an unregistered runner is still observed")
	}
	if _, err := relayerotel.ObserveRunner(mb.mp.Meter("test"), nil); err == nil {
		t.Error("ObserveRunner accepted a nil runner")
	}
}

func TestObserveCleanup(t *testing.T) {
	t.Parallel()
	mb := setupMeter(t)
	c := fakeCleanup{Runs: 3, Skipped: 4, Failures: 1, InboxDeleted: 500, DeadDeleted: 20, InboxStatements: 6, DeadStatements: 2}
	if _, err := relayerotel.ObserveCleanup(mb.mp.Meter("test"), c, "cleanup"); err != nil {
		t.Fatal(err)
	}
	rm := mb.mustCollect(t)
	for _, w := range []struct {
		name, table string
		want        int64
	}{
		{"relayer.cleanup.runs", "", 3}, {"relayer.cleanup.skipped", "", 4}, {"relayer.cleanup.failures", "", 1},
		{"relayer.cleanup.deleted", "inbox", 500}, {"relayer.cleanup.deleted", "dead", 20},
		{"relayer.cleanup.deleted", "", 520},
		{"relayer.cleanup.statements", "inbox", 6}, {"relayer.cleanup.statements", "dead", 2},
	} {
		attrs := map[string]string{"relayer.worker": "cleanup"}
		if w.table != "" {
			attrs["relayer.table"] = w.table
		}
		if got, _ := total(t, rm, w.name, attrs); got != w.want {
			t.Errorf("%s%v = %d, want %d", w.name, attrs, got, w.want)
		}
	}
}

// storeOutbox is a migrated outbox in its own schema.
func storeOutbox(t *testing.T) (*sql.DB, *workerstore.Store, string) {
	t.Helper()
	db := testdb.Open(t, "pgx")
	opts := store.Tables{Schema: testdb.NewSchema(t), TablePrefix: "obs_"}
	if _, err := store.Migrate(context.Background(), db, opts); err != nil {
		t.Fatal(err)
	}
	st, err := workerstore.New(db, opts)
	if err != nil {
		t.Fatal(err)
	}
	return db, st, `"` + opts.Schema + `"."obs_outbox"`
}

func TestObserveStore(t *testing.T) {
	t.Parallel()
	db, st, table := storeOutbox(t)
	ctx := context.Background()
	now := time.Now().UTC()
	var msgs []relayer.Message
	add := func(created, deliverAt time.Time, key string) {
		id, err := relayer.NewID()
		if err != nil {
			t.Fatal(err)
		}
		m := relayer.Message{ID: id, Type: "t", Body: []byte("{}"), Transport: "mem", Destination: "d",
			CreatedAt: created, DeliverAt: deliverAt, Key: key}
		if key != "" {
			m.Ordered, m.Lane = true, 3
		}
		msgs = append(msgs, m)
	}
	add(now.Add(-90*time.Second), time.Time{}, "")         // waiting 90s
	add(now.Add(-time.Hour), now.Add(-30*time.Second), "") // scheduled, due 30s ago
	add(now.Add(-time.Second), time.Time{}, "k1")          // ordered, waiting 1s
	add(now, now.Add(time.Hour), "")                       // scheduled
	add(now.Add(-2*time.Hour), time.Time{}, "parked-key")  // parked below
	add(now.Add(-2*time.Hour), time.Time{}, "parked-key")  // same key
	if err := st.Insert(ctx, msgs); err != nil {
		t.Fatal(err)
	}
	if _, err := db.Exec(`UPDATE ` + table + ` SET parked_at = now() - interval '1 minute' WHERE ordering_key = 'parked-key'`); err != nil {
		t.Fatal(err)
	}
	// One row waits for its retry; two dead letters of two reasons; one
	// destination paused by two workers.
	if _, err := db.Exec(`UPDATE ` + table + ` SET retry_at = now() + interval '1 hour', attempts = 1 WHERE ordering_key = 'k1'`); err != nil {
		t.Fatal(err)
	}
	// A later message of k1: due, but blocked behind the retry, so not
	// backlog.
	msgs = msgs[:0]
	add(now.Add(-time.Second), time.Time{}, "k1")
	if err := st.Insert(ctx, msgs); err != nil {
		t.Fatal(err)
	}
	dead := strings.Replace(table, "obs_outbox", "obs_dead", 1)
	if _, err := db.Exec(`INSERT INTO ` + dead + ` (id, message_type, transport, destination, body, headers, created_at, attempts, reason)
		VALUES (gen_random_uuid(), 't', 'mem', 'd', '\x', '\x0100000000000000', now(), 1, 'permanent'),
		       (gen_random_uuid(), 't', 'mem', 'd', '\x', '\x0100000000000000', now(), 10, 'exhausted')`); err != nil {
		t.Fatal(err)
	}
	for _, owner := range []string{"w1", "w2"} {
		p := store.Pause{Transport: "nats", Destination: "orders", Since: now, NextProbe: now.Add(time.Second), LastError: "down"}
		if err := st.PublishPauses(ctx, uuid.New(), owner, []store.Pause{p}); err != nil {
			t.Fatal(err)
		}
	}

	mb := setupMeter(t)
	reg, err := relayerotel.ObserveStore(mb.mp.Meter("test"), st.Store, "orders")
	if err != nil {
		t.Fatal(err)
	}
	defer reg.Unregister()
	rm := mb.mustCollect(t)
	outbox := map[string]string{"relayer.outbox": "orders"}
	for name, want := range map[string]int64{
		relayerotel.MetricBacklog: 2, relayerotel.MetricBlocked: 1, relayerotel.MetricScheduled: 1, relayerotel.MetricClaimed: 0, relayerotel.MetricRetrying: 1,
		relayerotel.MetricParked: 2, relayerotel.MetricParkedKeys: 1, relayerotel.MetricDead: 2,
	} {
		if got, ok := total(t, rm, name, outbox); !ok || got != want {
			t.Errorf("%s = %d (reported %v), want %d", name, got, ok, want)
		}
	}
	for _, w := range []struct {
		name  string
		attrs map[string]string
		want  int64
	}{
		{relayerotel.MetricDeadByReason, map[string]string{"relayer.outbox": "orders", "relayer.dead.reason": "permanent"}, 1},
		{relayerotel.MetricDeadByReason, map[string]string{"relayer.outbox": "orders", "relayer.dead.reason": "exhausted"}, 1},
		{relayerotel.MetricPaused, map[string]string{"relayer.outbox": "orders", "relayer.transport": "nats", "messaging.destination.name": "orders"}, 2},
	} {
		if got, ok := total(t, rm, w.name, w.attrs); !ok || got != w.want {
			t.Errorf("%s%v = %d (reported %v), want %d", w.name, w.attrs, got, ok, w.want)
		}
	}
	if m, ok := find(rm, relayerotel.MetricOldestParkedAge); !ok {
		t.Error("no oldest parked age gauge")
	} else if p := m.Data.(metricdata.Gauge[float64]).DataPoints; len(p) != 1 || p[0].Value < 59 || p[0].Value > 90 {
		t.Errorf("oldest parked age %+v, want about 60s", p)
	}
	m, ok := find(rm, relayerotel.MetricOldestAge)
	if !ok {
		t.Fatal("no oldest age gauge")
	}
	points := m.Data.(metricdata.Gauge[float64]).DataPoints
	// The oldest due row was created 90s ago; the scheduled row created an hour
	// ago has waited only 30s, and parked rows do not count.
	if len(points) != 1 || points[0].Value < 90 || points[0].Value > 90+30 {
		t.Fatalf("oldest age %+v, want about 90s", points)
	}

	// The default name is the table's.
	mb2 := setupMeter(t)
	if _, err := relayerotel.ObserveStore(mb2.mp.Meter("test"), st.Store, ""); err != nil {
		t.Fatal(err)
	}
	want := map[string]string{"relayer.outbox": st.Tables().Schema + ".obs_outbox"}
	if got, ok := total(t, mb2.mustCollect(t), relayerotel.MetricBacklog, want); !ok || got != 2 {
		t.Errorf("backlog under the default name = %d (reported %v), want 2", got, ok)
	}
}

// TestObserveStoreFailure checks that a failed query reports an error and no
// data point rather than an empty backlog.
func TestObserveStoreFailure(t *testing.T) {
	t.Parallel()
	db, st, _ := storeOutbox(t)
	mb := setupMeter(t)
	if _, err := relayerotel.ObserveStore(mb.mp.Meter("test"), st.Store, "orders"); err != nil {
		t.Fatal(err)
	}
	db.Close()
	rm, err := mb.collect(t)
	if err == nil || !strings.Contains(err.Error(), "closed") {
		t.Fatalf("Collect error %v, want the closed database reported", err)
	}
	if _, ok := total(t, rm, relayerotel.MetricBacklog, nil); ok {
		t.Fatal("a backlog was reported for a database that cannot be queried")
	}
}

// Series an alert compares with 0 are there at 0: each dead-letter reason
// without dead letters, the count of paused destinations when none is, and a
// destination whose pause ended (before, such series vanished, and an alert
// on them saw nothing rather than 0).
func TestObserveStoreReportsZeros(t *testing.T) {
	t.Parallel()
	_, st, _ := storeOutbox(t)
	ctx := t.Context()
	mb := setupMeter(t)
	reg, err := relayerotel.ObserveStore(mb.mp.Meter("test"), st.Store, "orders")
	if err != nil {
		t.Fatal(err)
	}
	defer reg.Unregister()
	dest := map[string]string{"relayer.outbox": "orders", "relayer.transport": "nats", "messaging.destination.name": "orders"}
	expect := func(stage string, rm metricdata.ResourceMetrics, name string, attrs map[string]string, want int64) {
		t.Helper()
		if got, ok := total(t, rm, name, attrs); !ok || got != want {
			t.Errorf("%s: %s%v = %d (reported %v), want %d", stage, name, attrs, got, ok, want)
		}
	}
	rm := mb.mustCollect(t)
	for _, reason := range store.DeadReasons() {
		expect("empty", rm, relayerotel.MetricDeadByReason, map[string]string{"relayer.outbox": "orders", "relayer.dead.reason": reason}, 0)
	}
	expect("empty", rm, relayerotel.MetricPausedDestinations, map[string]string{"relayer.outbox": "orders"}, 0)

	token := uuid.New()
	p := store.Pause{Transport: "nats", Destination: "orders", Since: time.Now(), NextProbe: time.Now().Add(time.Second), LastError: "down"}
	if err := st.PublishPauses(ctx, token, "w1", []store.Pause{p}); err != nil {
		t.Fatal(err)
	}
	rm = mb.mustCollect(t)
	expect("paused", rm, relayerotel.MetricPaused, dest, 1)
	expect("paused", rm, relayerotel.MetricPausedDestinations, map[string]string{"relayer.outbox": "orders"}, 1)
	if err := st.ClearPauses(ctx, token); err != nil {
		t.Fatal(err)
	}
	rm = mb.mustCollect(t)
	expect("back", rm, relayerotel.MetricPaused, dest, 0)
	expect("back", rm, relayerotel.MetricPausedDestinations, map[string]string{"relayer.outbox": "orders"}, 0)
}
