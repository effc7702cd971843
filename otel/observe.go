package relayerotel

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/metric"
	"go.opentelemetry.io/otel/metric/embedded"
	semconv "go.opentelemetry.io/otel/semconv/v1.30.0"

	"github.com/relayer-go/relayer/dispatch"
	"github.com/relayer-go/relayer/store"
)

// Attribute keys that tell apart the outboxes, workers and tables a process
// observes.
const (
	OutboxKey = attribute.Key("relayer.outbox")
	WorkerKey = attribute.Key("relayer.worker")
	TableKey  = attribute.Key("relayer.table")
	// ReasonKey tells apart dead letters by why they left delivery.
	ReasonKey = attribute.Key("relayer.dead.reason")
)

// ObserveTimeout bounds the statement each collection of [ObserveStore]'s
// gauges runs, within whatever deadline the metric reader sets. A slow
// database then costs one missed data point, not a stalled export of every
// other metric.
const ObserveTimeout = 5 * time.Second

// Gauge names registered by [ObserveStore].
const (
	MetricBacklog = "relayer.outbox.backlog"
	// MetricBlocked counts rows that are due but no worker can send yet:
	// behind their key (an earlier message of the key is parked, waiting
	// for its retry time or for a paused destination) or for a paused
	// destination themselves.
	MetricBlocked    = "relayer.outbox.blocked"
	MetricOldestAge  = "relayer.outbox.oldest_age"
	MetricScheduled  = "relayer.outbox.scheduled"
	MetricClaimed    = "relayer.outbox.claimed"
	MetricParked     = "relayer.outbox.parked"
	MetricParkedKeys = "relayer.outbox.parked_keys"
	MetricDead       = "relayer.outbox.dead"
	// MetricRetrying counts rows waiting for the retry time of a failed
	// send (store.Stats.Retrying).
	MetricRetrying = "relayer.outbox.retrying"
	// MetricOldestParkedAge is how long the longest-parked row has been
	// parked, in seconds; 0 when none is.
	MetricOldestParkedAge = "relayer.outbox.oldest_parked_age"
	// MetricDeadByReason counts dead letters per relayer.dead.reason.
	MetricDeadByReason = "relayer.outbox.dead_by_reason"
	// MetricPaused is, per paused (transport, destination), how many
	// workers have paused it (store.Pauses); a destination no longer paused
	// reports 0 for as long as the registration lasts (up to
	// pausedRemembered destinations), one never paused has no data point.
	MetricPaused = "relayer.destination.paused"
	// MetricPausedDestinations counts the destinations paused now, 0 when
	// none is: the series to alert on, present from the first collection.
	MetricPausedDestinations = "relayer.outbox.paused_destinations"
)

// pausedRemembered bounds the destinations ObserveStore keeps reporting at
// 0 once their pause ended.
const pausedRemembered = 1024

// ObserveStore registers gauges of the outbox st reads (for a
// relayer.Outbox, st is store.New(db, store.TablesOf(outbox))), observed
// with three statements per collection ([store.Store.Stats],
// [store.Store.DeadByReason] and [store.Store.Pauses]), each data point
// carrying relayer.outbox = name (default: "<schema>.<prefix>outbox"):
//
//   - relayer.outbox.backlog: rows deliverable now (Stats.Eligible less
//     Stats.Blocked), the backlog the command and the console report;
//   - relayer.outbox.blocked: due rows that wait behind their key, an
//     earlier message of which is parked or waiting for a retry
//     (Stats.Blocked): not backlog, since no worker can send them yet;
//   - relayer.outbox.oldest_age: seconds the longest-waiting deliverable row
//     has been due (now minus Stats.OldestDueAt), 0 when there is none;
//   - relayer.outbox.scheduled, .claimed, .retrying, .parked, .parked_keys
//     and .dead: the other counts of [store.Stats];
//   - relayer.outbox.oldest_parked_age: seconds since the longest-parked row
//     was parked, 0 when none is;
//   - relayer.outbox.dead_by_reason: dead letters per relayer.dead.reason,
//     0 for each of store.DeadReasons that has none;
//   - relayer.destination.paused: per paused destination
//     (relayer.transport, messaging.destination.name), the workers pausing
//     it, as they publish it; 0 once its pause ended;
//   - relayer.outbox.paused_destinations: the destinations paused now.
//
// Series that would vanish at zero report 0 instead, so that an alert
// comparing them with 0 sees them.
//
// They are gauges, not up-down counters, because every process observing one
// outbox reports the same rows: summing them across processes would count
// the rows again. Observe each outbox from one process, or aggregate with max.
//
// The statement reads the whole outbox table; the metric reader's interval
// decides how often, and [ObserveTimeout] bounds it. When it fails, the
// callback returns the error (the SDK hands it to the global error handler)
// and no data point is recorded: a failed query never reads as an empty
// backlog. Unregister the returned registration to stop observing.
func ObserveStore(meter metric.Meter, st *store.Store, name string) (metric.Registration, error) {
	if meter == nil || st == nil {
		return nil, errors.New("relayerotel: ObserveStore needs a meter and a store")
	}
	if name == "" {
		name = st.Tables().Label()
	}
	g, err := newStoreGauges(meter, name)
	if err != nil {
		return nil, err
	}
	return meter.RegisterCallback(func(ctx context.Context, o metric.Observer) error {
		ctx, cancel := context.WithTimeout(ctx, ObserveTimeout)
		defer cancel()
		now := time.Now()
		s, err := st.Stats(ctx, now)
		if err != nil {
			return err
		}
		g.observeStats(o, s, now)
		byReason, err := st.DeadByReason(ctx)
		if err != nil {
			return err
		}
		g.observeDeadByReason(o, byReason)
		pauses, err := st.Pauses(ctx)
		if err != nil {
			return err
		}
		g.observePauses(o, pauses)
		return nil
	}, g.instruments()...)
}

// storeGauges are ObserveStore's instruments for one outbox, and the
// destinations it has seen paused.
type storeGauges struct {
	name  string
	attrs metric.MeasurementOption

	backlog, blocked, scheduled, claimed, parked, parkedKeys, dead, retrying metric.Int64ObservableGauge
	deadBy, paused, pausedCount                                              metric.Int64ObservableGauge
	oldest, oldestParked                                                     metric.Float64ObservableGauge

	// seen holds the destinations seen paused, reported at 0 once their
	// pause ended.
	seenMu sync.Mutex
	seen   map[[2]string]bool
}

func newStoreGauges(meter metric.Meter, name string) (*storeGauges, error) {
	g := &storeGauges{name: name, attrs: metric.WithAttributeSet(attribute.NewSet(OutboxKey.String(name))), seen: map[[2]string]bool{}}
	var errs error
	gauge := func(name, unit, desc string) metric.Int64ObservableGauge {
		g, err := meter.Int64ObservableGauge(name, metric.WithUnit(unit), metric.WithDescription(desc))
		errs = errors.Join(errs, err)
		return g
	}
	g.backlog = gauge(MetricBacklog, "{message}", "Outbox rows deliverable now: due, not parked, not claimed, not behind a held key.")
	g.blocked = gauge(MetricBlocked, "{message}", "Due outbox rows no worker can send yet: behind their key (an earlier message of the key is parked, waiting for a retry or for a paused destination) or for a paused destination.")
	g.scheduled = gauge(MetricScheduled, "{message}", "Outbox rows whose delivery time is ahead.")
	g.claimed = gauge(MetricClaimed, "{message}", "Outbox rows held by a live claim, being sent.")
	g.parked = gauge(MetricParked, "{message}", "Parked outbox rows.")
	g.parkedKeys = gauge(MetricParkedKeys, "{key}", "Ordering keys with parked rows, whose delivery is stopped.")
	g.dead = gauge(MetricDead, "{message}", "Dead-letter rows.")
	g.retrying = gauge(MetricRetrying, "{message}", "Outbox rows waiting for the retry time of a failed send.")
	g.deadBy = gauge(MetricDeadByReason, "{message}", "Dead-letter rows by the reason they left delivery.")
	g.paused = gauge(MetricPaused, "{worker}", "Workers passing a destination over while its broker is down or slow.")
	g.pausedCount = gauge(MetricPausedDestinations, "{destination}", "Destinations some worker passes over now, while their broker is down or slow.")
	var err error
	g.oldest, err = meter.Float64ObservableGauge(MetricOldestAge, metric.WithUnit("s"),
		metric.WithDescription("How long the longest-waiting deliverable outbox row has been due."))
	errs = errors.Join(errs, err)
	g.oldestParked, err = meter.Float64ObservableGauge(MetricOldestParkedAge, metric.WithUnit("s"),
		metric.WithDescription("How long the longest-parked outbox row has been parked."))
	errs = errors.Join(errs, err)
	if errs != nil {
		return nil, errs
	}
	return g, nil
}

func (g *storeGauges) instruments() []metric.Observable {
	return []metric.Observable{g.backlog, g.blocked, g.scheduled, g.claimed, g.parked, g.parkedKeys, g.dead, g.retrying,
		g.deadBy, g.paused, g.pausedCount, g.oldest, g.oldestParked}
}

// observeStats reports the counts of s, read at now.
func (g *storeGauges) observeStats(o metric.Observer, s store.Stats, now time.Time) {
	o.ObserveInt64(g.backlog, s.Eligible-s.Blocked, g.attrs)
	o.ObserveInt64(g.blocked, s.Blocked, g.attrs)
	o.ObserveInt64(g.scheduled, s.Scheduled, g.attrs)
	o.ObserveInt64(g.claimed, s.Claimed, g.attrs)
	o.ObserveInt64(g.parked, s.Parked, g.attrs)
	o.ObserveInt64(g.parkedKeys, s.ParkedKeys, g.attrs)
	o.ObserveInt64(g.dead, s.Dead, g.attrs)
	o.ObserveInt64(g.retrying, s.Retrying, g.attrs)
	o.ObserveFloat64(g.oldest, waited(now, s.OldestDueAt).Seconds(), g.attrs)
	o.ObserveFloat64(g.oldestParked, waited(now, s.OldestParkedAt).Seconds(), g.attrs)
}

// observeDeadByReason reports the dead letters per reason, every known
// reason included (at 0 when it has none).
func (g *storeGauges) observeDeadByReason(o metric.Observer, byReason map[string]int64) {
	for _, reason := range store.DeadReasons() {
		if _, ok := byReason[reason]; !ok {
			o.ObserveInt64(g.deadBy, 0, metric.WithAttributes(OutboxKey.String(g.name), ReasonKey.String(reason)))
		}
	}
	for reason, n := range byReason {
		o.ObserveInt64(g.deadBy, n, metric.WithAttributes(OutboxKey.String(g.name), ReasonKey.String(reason)))
	}
}

// observePauses reports the paused destinations, and at 0 those seen
// paused before whose pause ended.
func (g *storeGauges) observePauses(o metric.Observer, pauses []store.Pause) {
	perDest := map[[2]string]int64{}
	for _, p := range pauses {
		perDest[[2]string{p.Transport, p.Destination}]++
	}
	o.ObserveInt64(g.pausedCount, int64(len(perDest)), g.attrs)
	g.seenMu.Lock()
	defer g.seenMu.Unlock()
	for d := range perDest {
		if !g.seen[d] && len(g.seen) < pausedRemembered {
			g.seen[d] = true
		}
	}
	for d := range g.seen {
		if _, ok := perDest[d]; !ok {
			perDest[d] = 0 // its pause ended
		}
	}
	for d, n := range perDest {
		o.ObserveInt64(g.paused, n, metric.WithAttributes(OutboxKey.String(g.name), TransportKey.String(d[0]), semconv.MessagingDestinationNameKey.String(d[1])))
	}
}

// waited is how long ago since was, zero for the zero time and for instants a
// writer with a clock ahead of ours put in the future.
func waited(now, since time.Time) time.Duration {
	if since.IsZero() || since.After(now) {
		return 0
	}
	return now.Sub(since)
}

// Worker is anything with dispatch counters, such as an adapter over one
// kind of a runner's workers ([ObserveRunner] registers them all).
type Worker interface {
	Stats() dispatch.Stats
}

// CleanupWorker is anything with retention counters.
type CleanupWorker interface {
	Stats() dispatch.CleanupStats
}

// ObserveRunner registers the counters of [ObserveWorker] for each kind of
// worker the runner runs, with relayer.worker = "direct", "recovery" or
// "ordered-1" to "ordered-n" (one per ordered worker), and those of
// [ObserveCleanup] with relayer.worker = "cleanup". The kinds are those the
// runner was made with (RunnerOptions turns kinds off); the counters are
// read from [dispatch.Runner.Stats] at each collection.
func ObserveRunner(meter metric.Meter, r *dispatch.Runner) (metric.Registration, error) {
	if r == nil {
		return nil, errors.New("relayerotel: ObserveRunner needs a runner")
	}
	s := r.Stats()
	regs := &registrations{}
	add := func(reg metric.Registration, err error) error {
		if err != nil {
			return errors.Join(err, regs.Unregister())
		}
		regs.regs = append(regs.regs, reg)
		return nil
	}
	type kind struct {
		name string
		on   bool
		read func(dispatch.RunnerStats) dispatch.Stats
	}
	kinds := []kind{
		{"direct", s.Direct != nil, func(s dispatch.RunnerStats) dispatch.Stats { return deref(s.Direct) }},
		{"recovery", s.Recovery != nil, func(s dispatch.RunnerStats) dispatch.Stats { return deref(s.Recovery) }},
	}
	for i := range s.Ordered {
		kinds = append(kinds, kind{fmt.Sprintf("ordered-%d", i+1), true, func(s dispatch.RunnerStats) dispatch.Stats { return s.Ordered[i].Stats }})
	}
	for _, k := range kinds {
		if !k.on {
			continue
		}
		if err := add(observeCounters(meter, k.name, func() dispatch.Stats { return k.read(r.Stats()) }, workerCounters)); err != nil {
			return nil, err
		}
	}
	if s.Cleanup != nil {
		cleanup := func() dispatch.CleanupStats { return deref(r.Stats().Cleanup) }
		if err := add(observeCounters(meter, "cleanup", cleanup, cleanupCounters)); err != nil {
			return nil, err
		}
	}
	return regs, nil
}

func deref[T any](p *T) T {
	if p == nil {
		var zero T
		return zero
	}
	return *p
}

// registrations unregisters several callbacks as one.
type registrations struct {
	embedded.Registration
	regs []metric.Registration
}

func (rs *registrations) Unregister() error {
	var errs []error
	for _, r := range rs.regs {
		errs = append(errs, r.Unregister())
	}
	return errors.Join(errs...)
}

// counter is one observable counter read from a worker's stats.
type counter[S any] struct {
	name, unit, desc string
	table            string // for the cleanup counters kept per table
	read             func(S) uint64
}

var workerCounters = []counter[dispatch.Stats]{
	{name: "relayer.dispatch.sent", unit: "{message}", desc: "Messages the broker accepted.",
		read: func(s dispatch.Stats) uint64 { return s.Sent }},
	{name: "relayer.dispatch.deleted", unit: "{message}", desc: "Rows deleted after their send.",
		read: func(s dispatch.Stats) uint64 { return s.Deleted }},
	{name: "relayer.dispatch.failed", unit: "{message}", desc: "Failed sends recorded on their rows.",
		read: func(s dispatch.Stats) uint64 { return s.Failed }},
	{name: "relayer.dispatch.claims_expired", unit: "{group}", desc: "Groups not sent, or whose send was abandoned, because their claim expired first.",
		read: func(s dispatch.Stats) uint64 { return s.Expired }},
	{name: "relayer.dispatch.skipped_groups", unit: "{group}", desc: "Groups skipped without a claim: unknown transport, failed capability lookup.",
		read: func(s dispatch.Stats) uint64 { return s.SkippedGroups }},
	{name: "relayer.dispatch.completion_failures", unit: "{batch}", desc: "Batches sent but not deleted; they will be sent again.",
		read: func(s dispatch.Stats) uint64 { return s.CompletionFailures }},
	{name: "relayer.dispatch.left_for_recovery", unit: "{message}", desc: "Committed rows left for recovery to send.",
		read: func(s dispatch.Stats) uint64 { return s.LeftForRecovery }},
	{name: "relayer.dispatch.scans", unit: "{scan}", desc: "Scans of the outbox by recovery and ordered workers.",
		read: func(s dispatch.Stats) uint64 { return s.Scans }},
	{name: "relayer.dispatch.corrupt_rows", unit: "{row}", desc: "Rows recovery could not send because their stored headers do not decode.",
		read: func(s dispatch.Stats) uint64 { return s.CorruptRows }},
	{name: "relayer.dispatch.dead_lettered", unit: "{message}", desc: "Unordered messages moved to the dead letters: refused for good, out of attempts, or corrupt.",
		read: func(s dispatch.Stats) uint64 { return s.DeadLettered }},
	{name: "relayer.dispatch.parked", unit: "{message}", desc: "Ordered messages parked with their key: refused for good or out of attempts.",
		read: func(s dispatch.Stats) uint64 { return s.Parked }},
	{name: "relayer.dispatch.probes", unit: "{send}", desc: "Single-row sends testing whether a paused destination is back.",
		read: func(s dispatch.Stats) uint64 { return s.Probes }},
}

var cleanupCounters = []counter[dispatch.CleanupStats]{
	{name: "relayer.cleanup.runs", unit: "{run}", desc: "Retention passes completed under the lease.",
		read: func(s dispatch.CleanupStats) uint64 { return s.Runs }},
	{name: "relayer.cleanup.skipped", unit: "{run}", desc: "Retention passes skipped because another instance held the lease.",
		read: func(s dispatch.CleanupStats) uint64 { return s.Skipped }},
	{name: "relayer.cleanup.failures", unit: "{run}", desc: "Retention passes ended by an error or a lost lease.",
		read: func(s dispatch.CleanupStats) uint64 { return s.Failures }},
	{name: "relayer.cleanup.deleted", unit: "{row}", desc: "Rows deleted past their retention.", table: "inbox",
		read: func(s dispatch.CleanupStats) uint64 { return s.InboxDeleted }},
	{name: "relayer.cleanup.deleted", unit: "{row}", desc: "Rows deleted past their retention.", table: "dead",
		read: func(s dispatch.CleanupStats) uint64 { return s.DeadDeleted }},
	{name: "relayer.cleanup.statements", unit: "{statement}", desc: "DELETE statements run by retention passes.", table: "inbox",
		read: func(s dispatch.CleanupStats) uint64 { return s.InboxStatements }},
	{name: "relayer.cleanup.statements", unit: "{statement}", desc: "DELETE statements run by retention passes.", table: "dead",
		read: func(s dispatch.CleanupStats) uint64 { return s.DeadStatements }},
}

// ObserveWorker registers observable counters that read w.Stats() at each
// collection, each data point carrying relayer.worker = name (for example
// "direct", "ordered" or "recovery"; required): relayer.dispatch.sent,
// .deleted, .failed, .claims_expired (dispatch.Stats.Expired),
// .skipped_groups, .completion_failures, .left_for_recovery, .scans,
// .corrupt_rows, .dead_lettered, .parked and .probes.
//
// The counters are cumulative since w was made. Register each worker value
// once, and unregister it when the worker is replaced: a new worker starts
// from zero, which a backend sees as a counter reset.
func ObserveWorker(meter metric.Meter, w Worker, name string) (metric.Registration, error) {
	if w == nil {
		return nil, errors.New("relayerotel: ObserveWorker needs a worker")
	}
	return observeCounters(meter, name, w.Stats, workerCounters)
}

// ObserveCleanup is [ObserveWorker] for a retention worker:
// relayer.cleanup.runs, .skipped and .failures count passes, and
// relayer.cleanup.deleted and .statements count rows and DELETE statements
// per table (relayer.table = "inbox" or "dead").
func ObserveCleanup(meter metric.Meter, c CleanupWorker, name string) (metric.Registration, error) {
	if c == nil {
		return nil, errors.New("relayerotel: ObserveCleanup needs a worker")
	}
	return observeCounters(meter, name, c.Stats, cleanupCounters)
}

func observeCounters[S any](meter metric.Meter, name string, stats func() S, specs []counter[S]) (metric.Registration, error) {
	if meter == nil {
		return nil, errors.New("relayerotel: a meter is required")
	}
	if name == "" {
		return nil, errors.New("relayerotel: a worker name is required, to tell workers apart")
	}
	byName := make(map[string]metric.Int64ObservableCounter)
	var instruments []metric.Observable
	attrs := make([]metric.ObserveOption, len(specs))
	var errs error
	for i, sp := range specs {
		if sp.table != "" {
			attrs[i] = metric.WithAttributeSet(attribute.NewSet(WorkerKey.String(name), TableKey.String(sp.table)))
		} else {
			attrs[i] = metric.WithAttributeSet(attribute.NewSet(WorkerKey.String(name)))
		}
		if _, ok := byName[sp.name]; ok {
			continue
		}
		c, err := meter.Int64ObservableCounter(sp.name, metric.WithUnit(sp.unit), metric.WithDescription(sp.desc))
		errs = errors.Join(errs, err)
		byName[sp.name] = c
		instruments = append(instruments, c)
	}
	if errs != nil {
		return nil, errs
	}
	return meter.RegisterCallback(func(_ context.Context, o metric.Observer) error {
		s := stats()
		for i, sp := range specs {
			o.ObserveInt64(byName[sp.name], int64(sp.read(s)), attrs[i])
		}
		return nil
	}, instruments...)
}
