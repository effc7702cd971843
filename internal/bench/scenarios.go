package bench

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/google/uuid"

	"github.com/relayer-go/relayer"
	"github.com/relayer-go/relayer/dispatch"
	"github.com/relayer-go/relayer/enlist"
	"github.com/relayer-go/relayer/store"
)

// quiet discards the workers' logs: a run reports figures.
var quiet = slog.New(slog.DiscardHandler)

// stamper is a commit listener that notes when each row committed, then
// hands the rows on.
type stamper struct {
	next    enlist.CommitListener
	mu      sync.Mutex
	commits []committed
}

func (s *stamper) StoreOptions() store.Options { return s.next.StoreOptions() }

func (s *stamper) Committed(rows []relayer.Message) error {
	now := time.Now()
	s.mu.Lock()
	for i := range rows {
		s.commits = append(s.commits, committed{id: rows[i].ID, at: now})
	}
	s.mu.Unlock()
	return s.next.Committed(rows)
}

// produce runs the run's producers until stop closes, each committing one
// transaction after another with the function newCommit makes for it, paced
// to one transaction per every (0: as fast as it can). It returns the
// transactions committed.
func (r *runner) produce(ctx context.Context, newCommit func(producer int) func(context.Context) error, every time.Duration, stop <-chan struct{}) (int64, error) {
	var txs atomic.Int64
	var wg sync.WaitGroup
	errs := make(chan error, r.cfg.Producers)
	for p := range r.cfg.Producers {
		commit := newCommit(p)
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

// relayerCommits makes producers that insert one business row and publish
// perTx messages (with three headers) through w, in one transaction.
func (r *runner) relayerCommits(w *enlist.Writer, outbox relayer.Outbox, perTx int) func(int) func(context.Context) error {
	insert := `INSERT INTO ` + r.orders(outbox) + ` (note) VALUES ($1)`
	body := newPayload(r.cfg.BodySize, 0, false)
	return func(p int) func(context.Context) error {
		msgs := make([]relayer.Outgoing, perTx)
		for i := range msgs {
			msgs[i] = relayer.NewOutgoing(body, relayer.Header("bench-producer", []byte(strconv.Itoa(p))),
				relayer.Header("bench-run", []byte(r.cfg.Schema)), relayer.Header("traceparent", []byte("00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01")))
		}
		return func(ctx context.Context) error {
			return w.RunInTx(ctx, r.cfg.DB, nil, func(tx *enlist.Tx) error {
				if _, err := tx.ExecContext(ctx, insert, "order"); err != nil {
					return err
				}
				return tx.PublishAll(ctx, msgs...)
			})
		}
	}
}

// timed runs f until the scenario's duration has passed, then closes stop and
// returns the time it ran.
func (r *runner) timed(ctx context.Context, f func(stop <-chan struct{}) error) (time.Duration, error) {
	stop := make(chan struct{})
	start := time.Now()
	timer := time.AfterFunc(r.cfg.Duration, func() { close(stop) })
	defer timer.Stop()
	err := f(stop)
	return time.Since(start), err
}

// enlist measures transactions per second with 0 (the business insert
// alone), 1, 10 and 100 messages each, without dispatch, against the
// hand-written loop's multi-row insert of the same messages: each pair
// alternates, for the configured rounds, and the medians are compared.
func (r *runner) enlist(ctx context.Context) ([]Result, error) {
	type variant struct {
		perTx int
		loop  bool
	}
	variants := []variant{{0, true}, {1, true}, {1, false}, {10, true}, {10, false}, {100, true}, {100, false}}
	runs := make([][]Result, len(variants))
	for round := range r.cfg.Rounds {
		for i, v := range variants {
			res, err := r.enlistOnce(ctx, v.perTx, v.loop, round)
			if err != nil {
				return nil, err
			}
			runs[i] = append(runs[i], res)
		}
	}
	results := make([]Result, len(variants))
	for i, v := range variants {
		results[i] = median(runs[i])
		if v.perTx == 0 {
			results[i].Variant = "business insert alone"
		}
		results[i].Ratio = results[i].TxPerSec / results[0].TxPerSec
		if !v.loop {
			results[i].VsLoop = results[i].TxPerSec / results[i-1].TxPerSec
		}
	}
	return results, nil
}

// median returns the run with the median TxPerSec, with the range of all.
func median(runs []Result) Result {
	sorted := slices.SortedFunc(slices.Values(runs), func(a, b Result) int { return cmp.Compare(a.TxPerSec, b.TxPerSec) })
	m := sorted[len(sorted)/2]
	m.Rounds = len(runs)
	m.TxPerSecMin, m.TxPerSecMax = sorted[0].TxPerSec, sorted[len(sorted)-1].TxPerSec
	return m
}

// enlistOnce runs the producers for the scenario's duration with perTx
// messages per transaction, through Relayer or the hand-written loop.
func (r *runner) enlistOnce(ctx context.Context, perTx int, loop bool, round int) (Result, error) {
	how := "relayer"
	if loop {
		how = "hand-written loop"
	}
	r.cfg.Progress(fmt.Sprintf("%s: round %d, %d per tx, %s", ScenarioEnlist, round+1, perTx, how))
	outbox, err := r.fresh(ctx, &sink{})
	if err != nil {
		return Result{}, err
	}
	newCommit := func(int) func(context.Context) error { return nil }
	if loop {
		lp, err := newLoopProducer(r, outbox, perTx)
		if err != nil {
			return Result{}, err
		}
		newCommit = lp.commits(r.cfg.DB, perTx, nil)
	} else {
		w, err := enlist.NewWriter(outbox, enlist.Options{Logger: quiet})
		if err != nil {
			return Result{}, err
		}
		newCommit = r.relayerCommits(w, outbox, perTx)
	}
	var txs int64
	elapsed, err := r.timed(ctx, func(stop <-chan struct{}) (err error) {
		txs, err = r.produce(ctx, newCommit, 0, stop)
		return err
	})
	return Result{Scenario: ScenarioEnlist, Variant: fmt.Sprintf("%d per tx, %s", perTx, how), Elapsed: elapsed,
		TxPerSec: float64(txs) / elapsed.Seconds(), MsgsPerSec: float64(txs*int64(perTx)) / elapsed.Seconds()}, err
}

// dispatched runs producers of perTx messages per transaction, paced to one
// transaction per every per producer (0: as fast as they can), for the
// scenario's duration, with a runner dispatching or, when loop is set, the
// hand-written loop (its producers' multi-row insert, and two workers
// deleting up to 1,000 rows per statement, polling every 10 ms when idle).
// Then it waits for the backlog to drain and checks what arrived.
func (r *runner) dispatched(ctx context.Context, scenario, variant string, perTx int, every time.Duration, loop bool) (Result, error) {
	if loop {
		variant += ", hand-written loop"
	} else {
		variant += ", relayer"
	}
	r.cfg.Progress(fmt.Sprintf("%s: %s", scenario, variant))
	sk := &sink{next: r.cfg.Transport}
	outbox, err := r.fresh(ctx, sk)
	if err != nil {
		return Result{}, err
	}
	st := &stamper{}
	var newCommit func(int) func(context.Context) error
	var failed func() error
	if loop {
		lp, err := newLoopProducer(r, outbox, perTx)
		if err != nil {
			return Result{}, err
		}
		newCommit = lp.commits(r.cfg.DB, perTx, st)
		drainer := r.newLoopDrainer(outbox, sk, dispatch.RecoveryWorkersDefault, 1000, 10*time.Millisecond)
		failed = drainer.failed
		if err := drainer.start(ctx); err != nil {
			return Result{}, err
		}
		defer drainer.stop(ctx)
	} else {
		runner, err := dispatch.NewRunner(r.cfg.DB, outbox, dispatch.RunnerOptions{DisableCleanup: true, DisableOrdered: true, Logger: quiet})
		if err != nil {
			return Result{}, err
		}
		st.next = runner
		w, err := enlist.NewWriter(outbox, enlist.Options{Listener: st, Logger: quiet})
		if err != nil {
			return Result{}, err
		}
		if err := runner.Start(ctx); err != nil {
			return Result{}, err
		}
		defer runner.Stop(context.WithoutCancel(ctx))
		newCommit = r.relayerCommits(w, outbox, perTx)
	}
	var txs int64
	elapsed, err := r.timed(ctx, func(stop <-chan struct{}) (err error) {
		txs, err = r.produce(ctx, newCommit, every, stop)
		return err
	})
	if err != nil {
		return Result{}, err
	}
	delivered := sk.count.Load()
	backlog, err := r.outboxRows(ctx, outbox)
	if err != nil {
		return Result{}, err
	}
	if err := sk.wait(ctx, txs*int64(perTx), 2*time.Minute, failed); err != nil {
		return Result{}, err
	}
	res := Result{Scenario: scenario, Variant: variant, Elapsed: elapsed, Backlog: backlog,
		Produced: float64(txs*int64(perTx)) / elapsed.Seconds(), MsgsPerSec: float64(delivered) / elapsed.Seconds()}
	st.mu.Lock()
	commits := st.commits
	st.mu.Unlock()
	var latencies []time.Duration
	res.Lost, res.Duplicates, res.OutOfOrder, latencies = sk.check(commits)
	res.withLatencies(latencies)
	return res, nil
}

// againstLoop runs a dispatched scenario with the hand-written loop, then
// with Relayer, and sets Relayer's VsLoop to its delivered rate against the
// loop's.
func (r *runner) againstLoop(ctx context.Context, scenario, variant string, perTx int, every time.Duration) ([]Result, error) {
	loop, err := r.dispatched(ctx, scenario, variant, perTx, every, true)
	if err != nil {
		return []Result{loop}, err
	}
	res, err := r.dispatched(ctx, scenario, variant, perTx, every, false)
	if loop.MsgsPerSec > 0 {
		res.VsLoop = res.MsgsPerSec / loop.MsgsPerSec
	}
	return []Result{loop, res}, err
}

// endToEnd is producers committing 10 messages per transaction as fast as
// they can, with dispatch running.
func (r *runner) endToEnd(ctx context.Context) ([]Result, error) {
	return r.againstLoop(ctx, ScenarioE2E, "10 per tx", 10, 0)
}

// latency is transactions of 10 messages at the configured total rate:
// commit-to-send latency while the machine has room to spare (on two cores,
// 2,000 single-message transactions a second with dispatch running leave
// none, and what would be measured is the queueing of a saturated machine).
func (r *runner) latency(ctx context.Context) ([]Result, error) {
	const perTx = 10
	every := time.Duration(float64(time.Second) * float64(r.cfg.Producers*perTx) / float64(r.cfg.Rate))
	return r.againstLoop(ctx, ScenarioLatency, fmt.Sprintf("%d msg/s, %d per tx", r.cfg.Rate, perTx), perTx, every)
}

// outboxRows counts the rows of an outbox.
func (r *runner) outboxRows(ctx context.Context, outbox relayer.Outbox) (int64, error) {
	st, err := store.New(r.cfg.DB, store.OptionsOf(outbox))
	if err != nil {
		return 0, err
	}
	s, err := st.Stats(ctx, time.Now())
	return s.Eligible + s.Scheduled + s.Claimed + s.Retrying + s.Parked, err
}

// fill writes n messages to the outbox without dispatch, 1,000 per
// statement, ordered ones over keys when keys > 0 (numbered per key), and
// returns them as committed.
func (r *runner) fill(ctx context.Context, outbox relayer.Outbox, n, keys int) ([]committed, error) {
	w, err := enlist.NewWriter(outbox, enlist.Options{Logger: quiet})
	if err != nil {
		return nil, err
	}
	seq := make([]int, keys)
	commits := make([]committed, 0, n)
	for start := 0; start < n; start += 1000 {
		msgs := make([]relayer.Outgoing, min(1000, n-start))
		for i := range msgs {
			if keys == 0 {
				msgs[i] = relayer.NewOutgoing(newPayload(r.cfg.BodySize, 0, false), relayer.WithID(uuid.Must(relayer.NewID())))
				continue
			}
			k := (start + i) % keys
			seq[k]++
			msgs[i] = relayer.NewOutgoing(newPayload(r.cfg.BodySize, seq[k], true),
				relayer.Key("key-"+strconv.Itoa(k)), relayer.WithID(uuid.Must(relayer.NewID())))
		}
		if err := w.RunInTx(ctx, r.cfg.DB, nil, func(tx *enlist.Tx) error { return tx.PublishAll(ctx, msgs...) }); err != nil {
			return nil, err
		}
		for _, m := range msgs {
			commits = append(commits, committed{id: m.ID})
		}
	}
	_, err = r.cfg.DB.ExecContext(ctx, `ANALYZE `+r.table(outbox, "outbox"))
	return commits, err
}

// drain pre-fills the backlog, then measures the hand-written loop (1,000
// rows per statement, two workers) and recovery delivering it, one after the
// other, each from its own copy.
func (r *runner) drain(ctx context.Context) ([]Result, error) {
	var results []Result
	for _, loop := range []bool{true, false} {
		how := "recovery"
		if loop {
			how = "hand-written loop, 1,000 per statement"
		}
		r.cfg.Progress(fmt.Sprintf("%s: filling %d rows for the %s", ScenarioDrain, r.cfg.Backlog, how))
		sk := &sink{next: r.cfg.Transport}
		outbox, err := r.fresh(ctx, sk)
		if err != nil {
			return results, err
		}
		commits, err := r.fill(ctx, outbox, r.cfg.Backlog, 0)
		if err != nil {
			return results, err
		}
		r.cfg.Progress(fmt.Sprintf("%s: %d rows through the %s", ScenarioDrain, r.cfg.Backlog, how))
		start, stop := func(context.Context) error { return nil }, func(context.Context) error { return nil }
		var failed func() error
		if loop {
			l := r.newLoopDrainer(outbox, sk, dispatch.RecoveryWorkersDefault, 1000, 10*time.Millisecond)
			start, stop, failed = l.start, l.stop, l.failed
		} else {
			rec, err := dispatch.NewRecovery(r.cfg.DB, outbox, dispatch.RecoveryOptions{MinAge: time.Nanosecond, Logger: quiet})
			if err != nil {
				return results, err
			}
			start, stop = rec.Start, rec.Stop
		}
		res, err := r.deliverBacklog(ctx, sk, commits, start, stop, failed)
		res.Scenario, res.Variant = ScenarioDrain, fmt.Sprintf("%d rows, %s", r.cfg.Backlog, how)
		if !loop {
			res.VsLoop = res.MsgsPerSec / results[0].MsgsPerSec
		}
		results = append(results, res)
		if err != nil {
			return results, err
		}
	}
	return results, nil
}

// deliverBacklog starts a worker on a filled outbox, times it until every
// committed message arrived, stops it and checks what arrived.
func (r *runner) deliverBacklog(ctx context.Context, sk *sink, commits []committed, start, stop func(context.Context) error, failed func() error) (Result, error) {
	begin := time.Now()
	if err := start(ctx); err != nil {
		return Result{}, err
	}
	waitErr := sk.wait(ctx, int64(len(commits)), 10*time.Minute, failed)
	elapsed := time.Since(begin)
	if err := errors.Join(waitErr, stop(context.WithoutCancel(ctx))); err != nil {
		return Result{}, err
	}
	res := Result{Elapsed: elapsed, MsgsPerSec: float64(len(commits)) / elapsed.Seconds()}
	res.Lost, res.Duplicates, res.OutOfOrder, _ = sk.check(commits)
	return res, nil
}

// ordered delivers a backlog of ordered messages over 1,000 keys and 32
// lanes with 1, 2 and 4 ordered workers, checking per-key order.
func (r *runner) ordered(ctx context.Context) ([]Result, error) {
	n := 20_000
	if r.cfg.Quick {
		n = 2000
	}
	var results []Result
	for _, workers := range []int{1, 2, 4} {
		r.cfg.Progress(fmt.Sprintf("%s: %d rows, %d workers", ScenarioOrdered, n, workers))
		sk := &sink{next: r.cfg.Transport}
		outbox, err := r.fresh(ctx, sk)
		if err != nil {
			return results, err
		}
		commits, err := r.fill(ctx, outbox, n, 1000)
		if err != nil {
			return results, err
		}
		var ws []*dispatch.Ordered
		for i := range workers {
			o, err := dispatch.NewOrdered(r.cfg.DB, outbox, dispatch.OrderedOptions{Name: fmt.Sprintf("bench-%d", i), Logger: quiet})
			if err != nil {
				return results, err
			}
			ws = append(ws, o)
		}
		startAll := func(ctx context.Context) error {
			for _, o := range ws {
				if err := o.Start(ctx); err != nil {
					return err
				}
			}
			return nil
		}
		stopAll := func(ctx context.Context) error {
			var err error
			for _, o := range ws {
				err = errors.Join(err, o.Stop(ctx))
			}
			return err
		}
		res, err := r.deliverBacklog(ctx, sk, commits, startAll, stopAll, nil)
		res.Scenario, res.Variant = ScenarioOrdered, fmt.Sprintf("%d workers", workers)
		results = append(results, res)
		if err != nil {
			return results, err
		}
	}
	return results, nil
}
