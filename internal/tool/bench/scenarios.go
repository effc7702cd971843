package bench

import (
	"cmp"
	"context"
	"database/sql"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/google/uuid"

	"github.com/relayer-go/relayer/headers"
)

// quiet discards the workers' logs: a run reports figures.
var quiet = slog.New(slog.DiscardHandler)

// all returns every contender taking part in scenario: the hand-written
// loop first (the others' ratios are against it), the minimal loop (and
// against it too), then Relayer's paths, then the Config's.
func (r *runner) all(scenario string) []Contender {
	if scenario == ScenarioBloat {
		one := relayerPath{PathOrdered, 1}
		return []Contender{one, snapshotHeld{one}}
	}
	if scenario == ScenarioOrdered {
		// Relayer's ordered path with 1, 2 and 4 workers, and nothing else:
		// no other contender keeps per-key order with several workers.
		return []Contender{relayerPath{PathOrdered, 1}, relayerPath{PathOrdered, 2}, relayerPath{PathOrdered, 4}}
	}
	all := []Contender{Loop{}, Minimal{}, MinimalSQL{}, Relayer(PathDirect), Relayer(PathRecovery), Relayer(PathOrdered)}
	if scenario == ScenarioLatency {
		// A Runner's default, one ordered worker, as well as four: the
		// latency at a moderate rate.
		all = slices.Insert(all, len(all)-1, Contender(relayerPath{PathOrdered, 1}))
	}
	for _, path := range []string{PathOrderedRemote, PathOrderedWoken, PathRelay} { // only when named
		if slices.Contains(r.cfg.Only, path) {
			all = append(all, relayerPath{path, 1})
		}
	}
	var cs []Contender
	for _, c := range append(all, r.cfg.Contenders...) {
		if c.Runs(scenario) {
			cs = append(cs, c)
		}
	}
	return cs
}

// contenders returns the contenders of scenario the run measures: all of
// them, or those Config.Only names.
func (r *runner) contenders(scenario string) []Contender {
	cs := r.all(scenario)
	if len(r.cfg.Only) > 0 {
		cs = slices.DeleteFunc(cs, func(c Contender) bool { return !slices.Contains(r.cfg.Only, c.Name()) })
	}
	return cs
}

// Steps returns how many progress steps a run of cfg reports.
func Steps(cfg Config) int {
	cfg = cfg.withDefaults()
	r := &runner{cfg: cfg}
	n := 0
	for _, s := range cfg.Scenarios {
		per := len(r.contenders(s))
		if s == ScenarioEnlist {
			per = 1 + 3*per // the business insert alone, then 1, 10 and 100 per tx
		}
		n += per * cfg.Rounds
	}
	return n
}

// env sets up a new Env in the run's schema: a new table prefix and the
// business table.
func (r *runner) env(ctx context.Context, sink *sink, committed func(time.Time, []uuid.UUID)) (Env, error) {
	r.next++
	env := Env{DB: r.cfg.DB, Schema: r.cfg.Schema, Prefix: fmt.Sprintf("b%d_", r.next), Destination: r.cfg.Destination,
		Sink: sink, Body: newPayload(r.cfg.BodySize, 0, false).(event).body, Producers: r.cfg.Producers, Committed: committed,
		OrderedBatchSize: r.cfg.OrderedBatchSize,
		Headers: []headers.Header{
			{Name: "bench-producer", Value: []byte("0")},
			{Name: "bench-run", Value: []byte(r.cfg.Schema)},
			{Name: "traceparent", Value: []byte("00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01")},
		}}
	env.Orders = quoteTable(env.Schema, env.Prefix+"orders")
	_, err := r.cfg.DB.ExecContext(ctx, `CREATE TABLE `+env.Orders+` (id bigserial PRIMARY KEY, note text NOT NULL)`)
	return env, err
}

// recorder collects what producers committed, and when.
type recorder struct {
	mu      sync.Mutex
	commits []committed
}

func (c *recorder) committed(at time.Time, ids []uuid.UUID) {
	c.mu.Lock()
	for _, id := range ids {
		c.commits = append(c.commits, committed{id: id, at: at})
	}
	c.mu.Unlock()
}

func (c *recorder) all() []committed {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.commits
}

// produce runs the run's producers until stop closes, each committing one
// transaction after another with its own function from in, perTx messages
// each, paced to one transaction per every (0: as fast as it can). It
// returns the transactions committed.
func (r *runner) produce(ctx context.Context, in Instance, perTx int, every time.Duration, stop <-chan struct{}) (int64, error) {
	commits := make([]func(context.Context) error, r.cfg.Producers)
	for p := range commits {
		var err error
		if commits[p], err = in.Producer(p, perTx); err != nil {
			return 0, err
		}
	}
	var txs atomic.Int64
	var wg sync.WaitGroup
	errs := make(chan error, r.cfg.Producers)
	for p, commit := range commits {
		wg.Go(func() {
			// Paced producers keep a schedule rather than a ticker: a
			// transaction that starts late does not drop the next one, so
			// the rate holds and slow commits show as latency.
			next := time.Now().Add(every * time.Duration(p) / time.Duration(r.cfg.Producers)) // spread out
			for {
				select {
				case <-stop:
					return
				case <-ctx.Done():
					return
				default:
				}
				if every > 0 {
					if wait := time.Until(next); wait > 0 {
						select {
						case <-stop:
							return
						case <-time.After(wait):
						}
					}
					next = next.Add(every)
				}
				if err := commit(ctx); err != nil {
					if ctx.Err() == nil {
						errs <- err
					}
					return
				}
				txs.Add(1)
			}
		})
	}
	wg.Wait()
	close(errs)
	return txs.Load(), <-errs
}

// timed runs f until the scenario's duration has passed, then closes stop and
// returns the time it ran.
func (r *runner) timed(f func(stop <-chan struct{}) error) (time.Duration, error) {
	stop := make(chan struct{})
	start := time.Now()
	timer := time.AfterFunc(r.cfg.Duration, func() { close(stop) })
	defer timer.Stop()
	err := f(stop)
	return time.Since(start), err
}

// rounds runs each variant for the configured rounds, the contenders of a
// round one after the other, and returns each contender's aggregate, in
// the order of cs.
func (r *runner) rounds(ctx context.Context, cs []Contender, once func(ctx context.Context, c Contender, round int) (Result, error), headline func(Result) float64) ([]Result, error) {
	runs := make([][]Result, len(cs))
	for round := range r.cfg.Rounds {
		for i, c := range cs {
			res, err := once(ctx, c, round)
			if err != nil {
				return nil, fmt.Errorf("%s, round %d: %w", c.Name(), round+1, err)
			}
			res.Contender = c.Name()
			runs[i] = append(runs[i], res)
		}
	}
	results := make([]Result, len(cs))
	for i := range cs {
		results[i] = aggregate(runs[i], headline)
	}
	return results, nil
}

// aggregate returns the run with the median headline figure, with the range
// of each figure over all runs, and the losses, duplicates and reorderings
// of all runs added up.
func aggregate(runs []Result, headline func(Result) float64) Result {
	sorted := slices.SortedFunc(slices.Values(runs), func(a, b Result) int { return cmp.Compare(headline(a), headline(b)) })
	m := sorted[len(sorted)/2]
	m.Rounds = len(runs)
	m.Lost, m.Duplicates, m.OutOfOrder = 0, 0, 0
	m.TxPerSecMin, m.MsgsPerSecMin, m.P99Min = runs[0].TxPerSec, runs[0].MsgsPerSec, runs[0].P99
	for _, run := range runs {
		m.Lost += run.Lost
		m.Duplicates += run.Duplicates
		m.OutOfOrder += run.OutOfOrder
		m.TxPerSecMin, m.TxPerSecMax = min(m.TxPerSecMin, run.TxPerSec), max(m.TxPerSecMax, run.TxPerSec)
		m.MsgsPerSecMin, m.MsgsPerSecMax = min(m.MsgsPerSecMin, run.MsgsPerSec), max(m.MsgsPerSecMax, run.MsgsPerSec)
		m.P99Min, m.P99Max = min(m.P99Min, run.P99), max(m.P99Max, run.P99)
		m.LongestPauseMax = max(m.LongestPauseMax, run.LongestPause)
	}
	if runs[0].CPU > 0 {
		// The CPU figures' own medians and range: they move apart from
		// the throughput's.
		bycpu := slices.SortedFunc(slices.Values(runs), func(a, b Result) int { return cmp.Compare(a.CPU, b.CPU) })
		med := bycpu[len(bycpu)/2]
		m.CPU, m.DBCPU = med.CPU, med.DBCPU
		m.CPUMin, m.CPUMax = bycpu[0].CPU, bycpu[len(bycpu)-1].CPU
	}
	return m
}

func txPerSec(r Result) float64   { return r.TxPerSec }
func msgsPerSec(r Result) float64 { return r.MsgsPerSec }
func p99(r Result) float64        { return float64(r.P99) }

// vsLoop sets each result's VsLoop and VsMinimal to its headline figure
// against the hand-written loop's and the minimal loop's, of the same
// variant.
func vsLoop(results []Result, headline func(Result) float64) {
	of := func(name, variant string) float64 {
		for _, r := range results {
			if r.Contender == name && r.Variant == variant {
				return headline(r)
			}
		}
		return 0
	}
	for i := range results {
		r := &results[i]
		if base := of((Loop{}).Name(), r.Variant); base > 0 && r.Contender != (Loop{}).Name() {
			r.VsLoop = headline(*r) / base
		}
		if base := of((Minimal{}).Name(), r.Variant); base > 0 && r.Contender != (Minimal{}).Name() {
			r.VsMinimal = headline(*r) / base
		}
	}
	cpuVsMinimal(results)
}

// cpuVsMinimal sets each result's CPUVsMinimal to the minimal loop's CPU,
// of the same variant, against its own, where both include the
// database's.
func cpuVsMinimal(results []Result) {
	for i := range results {
		r := &results[i]
		for _, m := range results {
			if m.Contender == (Minimal{}).Name() && m.Variant == r.Variant && r.Contender != m.Contender &&
				m.DBCPU > 0 && r.DBCPU > 0 {
				r.CPUVsMinimal = float64(m.CPU) / float64(r.CPU)
			}
		}
	}
}

// enlist measures transactions per second with 0 (the business insert
// alone), 1, 10 and 100 messages each, without dispatch, for every
// contender that writes messages, the contenders alternating within each
// round.
func (r *runner) enlist(ctx context.Context) ([]Result, error) {
	once := func(perTx int) func(context.Context, Contender, int) (Result, error) {
		return func(ctx context.Context, c Contender, round int) (Result, error) {
			r.cfg.Progress(fmt.Sprintf("%s: round %d, %d per tx, %s", ScenarioEnlist, round+1, perTx, c.Name()))
			env, err := r.env(ctx, &sink{}, nil)
			if err != nil {
				return Result{}, err
			}
			in, err := c.New(ctx, env)
			if err != nil {
				return Result{}, err
			}
			var txs int64
			before := r.cpu.sample()
			elapsed, err := r.timed(func(stop <-chan struct{}) (err error) {
				txs, err = r.produce(ctx, in, perTx, 0, stop)
				return err
			})
			res := Result{Scenario: ScenarioEnlist, Variant: fmt.Sprintf("%d per tx", perTx), Elapsed: elapsed,
				TxPerSec: float64(txs) / elapsed.Seconds(), MsgsPerSec: float64(txs*int64(perTx)) / elapsed.Seconds()}
			res.CPU, res.DBCPU = r.cpu.sample().per(before, txs)
			return res, err
		}
	}
	alone, err := r.rounds(ctx, []Contender{Loop{}}, once(0), txPerSec)
	if err != nil {
		return nil, err
	}
	alone[0].Variant, alone[0].Contender = "business insert alone", ""
	results := slices.Clone(alone)
	for _, perTx := range []int{1, 10, 100} {
		res, err := r.rounds(ctx, r.contenders(ScenarioEnlist), once(perTx), txPerSec)
		if err != nil {
			return results, err
		}
		vsLoop(res, txPerSec)
		for i := range res {
			res[i].Ratio = res[i].TxPerSec / alone[0].TxPerSec
		}
		results = append(results, res...)
	}
	return results, nil
}

// dispatched runs producers of perTx messages per transaction, paced to one
// transaction per every per producer (0: as fast as they can), for the
// scenario's duration, with the contender delivering; then it waits for the
// backlog to drain and checks what arrived.
func (r *runner) dispatched(ctx context.Context, c Contender, scenario, variant string, perTx int, every time.Duration, round int) (_ Result, err error) {
	r.cfg.Progress(fmt.Sprintf("%s: round %d, %s, %s", scenario, round+1, variant, c.Name()))
	sk := &sink{next: r.cfg.Transport}
	rec := &recorder{}
	env, err := r.env(ctx, sk, rec.committed)
	if err != nil {
		return Result{}, err
	}
	in, err := c.New(ctx, env)
	if err != nil {
		return Result{}, err
	}
	if err := in.Start(ctx); err != nil {
		return Result{}, err
	}
	stopped := false
	defer func() {
		if !stopped {
			in.Stop(context.WithoutCancel(ctx))
		}
	}()
	if _, ok := c.(snapshotHeld); ok {
		release, holdErr := holdSnapshot(ctx, r.cfg.DB)
		if holdErr != nil {
			return Result{}, holdErr
		}
		defer func() { err = errors.Join(err, release()) }()
	}
	serverTx, err := r.serverTransactions(ctx)
	if err != nil {
		return Result{}, err
	}
	cpuBefore := r.cpu.sample()
	var txs int64
	elapsed, err := r.timed(func(stop <-chan struct{}) (err error) {
		txs, err = r.produce(ctx, in, perTx, every, stop)
		return err
	})
	if err != nil {
		return Result{}, err
	}
	delivered := sk.count.Load()
	serverTxAfter, err := r.serverTransactions(ctx)
	if err != nil {
		return Result{}, err
	}
	backlog, err := in.Backlog(ctx)
	if err != nil {
		return Result{}, err
	}
	if err := sk.wait(ctx, txs*int64(perTx), 10*time.Minute, in.Err); err != nil {
		return Result{}, err
	}
	cpu, dbCPU := r.cpu.sample().per(cpuBefore, txs*int64(perTx))
	stopped = true
	if err := in.Stop(context.WithoutCancel(ctx)); err != nil {
		return Result{}, err
	}
	res := Result{Scenario: scenario, Variant: variant, Elapsed: elapsed, Backlog: backlog,
		Produced: float64(txs*int64(perTx)) / elapsed.Seconds(), MsgsPerSec: float64(delivered) / elapsed.Seconds(),
		CPU: cpu, DBCPU: dbCPU}
	if txs > 0 {
		res.ServerTxPerMsg = float64(serverTxAfter-serverTx) / float64(txs*int64(perTx))
	}
	var latencies []time.Duration
	commits := rec.all()
	res.Lost, res.Duplicates, res.OutOfOrder, latencies = sk.check(commits)
	res.withLatencies(latencies)
	res.LongestPause, res.LongestPauseAt = sk.longestPause(commits, min(pauseWarmUp, r.cfg.Duration/10))
	return res, nil
}

// pauseWarmUp is how long after the first commit a pause is not counted
// (see Result.LongestPause), at most a tenth of the run: the workers'
// connections open and their statements are planned.
const pauseWarmUp = time.Second

// serverTransactions returns the transactions the database has committed
// and rolled back so far, as its statistics have them (they lag by up to a
// second: PostgreSQL flushes a session's counts when it goes idle).
func (r *runner) serverTransactions(ctx context.Context) (n int64, err error) {
	if _, err = r.cfg.DB.ExecContext(ctx, `SELECT pg_stat_clear_snapshot()`); err != nil {
		return 0, err
	}
	err = r.cfg.DB.QueryRowContext(ctx, `SELECT xact_commit + xact_rollback FROM pg_stat_database WHERE datname = current_database()`).Scan(&n)
	return n, err
}

// endToEnd is producers committing 10 messages per transaction as fast as
// they can, with dispatch running.
func (r *runner) endToEnd(ctx context.Context) ([]Result, error) {
	res, err := r.rounds(ctx, r.contenders(ScenarioE2E), func(ctx context.Context, c Contender, round int) (Result, error) {
		return r.dispatched(ctx, c, ScenarioE2E, "10 per tx", 10, 0, round)
	}, msgsPerSec)
	vsLoop(res, msgsPerSec)
	vsDirect(res)
	return res, err
}

// vsDirect sets the ordered path's VsDirect to its delivered rate against
// direct dispatch's.
func vsDirect(results []Result) {
	i := slices.IndexFunc(results, func(r Result) bool { return r.Contender == PathDirect })
	if i < 0 || results[i].MsgsPerSec == 0 {
		return
	}
	for j := range results {
		if results[j].Contender == PathOrdered {
			results[j].VsDirect = results[j].MsgsPerSec / results[i].MsgsPerSec
		}
	}
}

// stream returns the latency scenario's transactions: Config.PerTx messages
// each, one every so often per producer, so that together they make
// Config.Rate messages a second.
func (r *runner) stream() (perTx int, every time.Duration) {
	perTx = r.cfg.PerTx
	return perTx, time.Duration(float64(time.Second) * float64(r.cfg.Producers*perTx) / float64(r.cfg.Rate))
}

// latency is transactions of Config.PerTx messages (10 by default) at the
// configured total rate: commit-to-send latency while the machine has room
// to spare (on two cores, 2,000 single-message transactions a second with
// dispatch running leave little, and what is measured then includes the
// queueing of a saturated machine).
func (r *runner) latency(ctx context.Context) ([]Result, error) {
	perTx, every := r.stream()
	variant := fmt.Sprintf("%d msg/s, %d per tx", r.cfg.Rate, perTx)
	res, err := r.rounds(ctx, r.contenders(ScenarioLatency), func(ctx context.Context, c Contender, round int) (Result, error) {
		return r.dispatched(ctx, c, ScenarioLatency, variant, perTx, every, round)
	}, p99)
	cpuVsMinimal(res)
	return res, err
}

// backlog fills a contender's outbox with n messages, then times its
// delivery until every one arrived and checks what arrived.
func (r *runner) backlog(ctx context.Context, c Contender, scenario, variant string, n, round int) (_ Result, err error) {
	r.cfg.Progress(fmt.Sprintf("%s: round %d, %d rows, %s", scenario, round+1, n, c.Name()))
	sk := &sink{next: r.cfg.Transport}
	env, err := r.env(ctx, sk, nil)
	if err != nil {
		return Result{}, err
	}
	in, err := c.New(ctx, env)
	if err != nil {
		return Result{}, err
	}
	ids, err := in.Fill(ctx, n)
	if err != nil {
		return Result{}, err
	}
	if _, ok := c.(snapshotHeld); ok {
		release, holdErr := holdSnapshot(ctx, r.cfg.DB)
		if holdErr != nil {
			return Result{}, holdErr
		}
		defer func() { err = errors.Join(err, release()) }()
	}
	cpuBefore := r.cpu.sample()
	begin := time.Now()
	if err := in.Start(ctx); err != nil {
		return Result{}, err
	}
	waitErr := sk.wait(ctx, int64(len(ids)), 10*time.Minute, in.Err)
	elapsed := time.Since(begin)
	cpu, dbCPU := r.cpu.sample().per(cpuBefore, int64(len(ids)))
	if err := errors.Join(waitErr, in.Stop(context.WithoutCancel(ctx))); err != nil {
		return Result{}, err
	}
	commits := make([]committed, len(ids))
	for i, id := range ids {
		commits[i].id = id
	}
	res := Result{Scenario: scenario, Variant: variant, Elapsed: elapsed, MsgsPerSec: float64(len(ids)) / elapsed.Seconds(),
		CPU: cpu, DBCPU: dbCPU}
	res.Lost, res.Duplicates, res.OutOfOrder, _ = sk.check(commits)
	return res, nil
}

// drain measures the delivery of a pre-filled backlog.
func (r *runner) drain(ctx context.Context) ([]Result, error) {
	variant := fmt.Sprintf("%d rows", r.cfg.Backlog)
	res, err := r.rounds(ctx, r.contenders(ScenarioDrain), func(ctx context.Context, c Contender, round int) (Result, error) {
		return r.backlog(ctx, c, ScenarioDrain, variant, r.cfg.Backlog, round)
	}, msgsPerSec)
	vsLoop(res, msgsPerSec)
	return res, err
}

// ordered delivers a backlog of ordered messages over 1,000 keys and 32
// lanes with 1, 2 and 4 ordered workers, checking per-key order.
func (r *runner) ordered(ctx context.Context) ([]Result, error) {
	n := r.cfg.OrderedBacklog
	variant := fmt.Sprintf("%d rows, %d keys", n, orderedKeys)
	return r.rounds(ctx, r.contenders(ScenarioOrdered), func(ctx context.Context, c Contender, round int) (Result, error) {
		return r.backlog(ctx, c, ScenarioOrdered, variant, n, round)
	}, msgsPerSec)
}

// bloat delivers an ordered backlog of Config.Backlog rows with one worker,
// as is and with a snapshot held open meanwhile, and sets the second's Ratio
// to its rate against the first's; then it runs the latency scenario's
// stream (Config.Rate messages a second, Config.PerTx per transaction, for
// Config.Duration) to the same worker, as is and with a snapshot held open
// meanwhile, and sets the second's Ratio to its p99 latency against the
// first's.
func (r *runner) bloat(ctx context.Context) ([]Result, error) {
	variant := fmt.Sprintf("%d rows, %d keys", r.cfg.Backlog, orderedKeys)
	cs := r.contenders(ScenarioBloat)
	res, err := r.rounds(ctx, cs, func(ctx context.Context, c Contender, round int) (Result, error) {
		return r.backlog(ctx, c, ScenarioBloat, variant, r.cfg.Backlog, round)
	}, msgsPerSec)
	if err != nil {
		return res, err
	}
	if len(res) == 2 && res[0].MsgsPerSec > 0 {
		res[1].Ratio = res[1].MsgsPerSec / res[0].MsgsPerSec
	}
	perTx, every := r.stream()
	variant = fmt.Sprintf("stream, %d msg/s, %d per tx", r.cfg.Rate, perTx)
	stream, err := r.rounds(ctx, cs, func(ctx context.Context, c Contender, round int) (Result, error) {
		return r.dispatched(ctx, c, ScenarioBloat, variant, perTx, every, round)
	}, p99)
	if len(stream) == 2 && stream[0].P99 > 0 {
		stream[1].Ratio = float64(stream[1].P99) / float64(stream[0].P99)
	}
	return append(res, stream...), err
}

// snapshotHeld is a contender delivering a backlog or a stream while a
// snapshot taken before the delivery stays open, so that vacuum can remove
// none of the row versions the delivery leaves behind.
type snapshotHeld struct{ Contender }

func (c snapshotHeld) Name() string { return c.Contender.Name() + ", snapshot held" }

// holdSnapshot opens a repeatable read transaction on a connection of its
// own and takes its snapshot; release ends it.
func holdSnapshot(ctx context.Context, db *sql.DB) (release func() error, err error) {
	tx, err := db.BeginTx(ctx, &sql.TxOptions{Isolation: sql.LevelRepeatableRead, ReadOnly: true})
	if err != nil {
		return nil, fmt.Errorf("hold a snapshot: %w", err)
	}
	var n int
	if err := tx.QueryRowContext(ctx, `SELECT 1`).Scan(&n); err != nil {
		return nil, errors.Join(fmt.Errorf("hold a snapshot: %w", err), tx.Rollback())
	}
	return tx.Rollback, nil
}
