package dispatch_test

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/google/uuid"

	"github.com/relayer-go/relayer"
	"github.com/relayer-go/relayer/dispatch"
	"github.com/relayer-go/relayer/enlist"
)

// producers is the number of goroutines committing transactions.
const producers = 8

// BenchmarkDirectThroughput measures end to end: producers commit
// transactions of perTx messages; the direct dispatcher claims, sends to the
// in-memory transport and deletes them. msgs/s counts messages that reached the
// transport and were deleted, over the time from the first commit until the
// table is empty again; backlog is what was still in the table when producers
// finished. Compare with BenchmarkPlainSQLLoop in the same run.
func BenchmarkDirectThroughput(b *testing.B) {
	for _, perTx := range []int{1, 10, 100} {
		for _, workers := range []int{1, 2} {
			for _, plans := range []string{"generic", "custom"} {
				b.Run(fmt.Sprintf("perTx=%d/workers=%d/plans=%s", perTx, workers, plans), func(b *testing.B) {
					defer dispatch.SetGenericTakePlans(dispatch.SetGenericTakePlans(plans == "generic"))
					benchThroughput(b, perTx, workers)
				})
			}
		}
	}
}

// BenchmarkProducersAlone is the producers with no dispatcher at all: the
// committed/s that dispatch must not slow down.
func BenchmarkProducersAlone(b *testing.B) {
	for _, perTx := range []int{1, 10, 100} {
		b.Run(fmt.Sprintf("perTx=%d", perTx), func(b *testing.B) {
			bu := setup(b, dispatch.DirectOptions{})
			w, err := enlist.NewWriter(bu.outbox, enlist.Options{})
			must(b, err)
			cpu, ok := serverCPU()
			produce(b, bu, w, perTx)
			reportServerCPU(b, cpu, ok, max(1, b.N/perTx)*perTx)
		})
	}
}

// serverCPU returns the CPU time the local PostgreSQL server's processes have
// used so far, read from /proc (Linux, server on this machine), or false. The
// difference over a run, divided by the messages, is the database work per
// message, a figure much less noisy than rates on a shared machine. Processes
// that exit during the run are not counted; the benchmarks keep their
// connections open.
func serverCPU() (time.Duration, bool) {
	entries, err := os.ReadDir("/proc")
	if err != nil {
		return 0, false
	}
	var ticks int64
	found := false
	for _, e := range entries {
		if _, err := strconv.Atoi(e.Name()); err != nil {
			continue
		}
		stat, err := os.ReadFile("/proc/" + e.Name() + "/stat")
		if err != nil {
			continue
		}
		// pid (comm) state ppid ... utime stime: fields 14 and 15, counted
		// from the one after comm, which may itself contain spaces.
		open, close := bytes.IndexByte(stat, '('), bytes.LastIndexByte(stat, ')')
		if open < 0 || close < open || string(stat[open+1:close]) != "postgres" {
			continue
		}
		fields := strings.Fields(string(stat[close+1:]))
		if len(fields) < 13 {
			continue
		}
		ut, err1 := strconv.ParseInt(fields[11], 10, 64)
		st, err2 := strconv.ParseInt(fields[12], 10, 64)
		if err1 != nil || err2 != nil {
			continue
		}
		ticks += ut + st
		found = true
	}
	const clockTicks = 100 // USER_HZ on Linux
	return time.Duration(ticks) * time.Second / clockTicks, found
}

// reportServerCPU reports the server's CPU time per message since start.
func reportServerCPU(b *testing.B, start time.Duration, ok bool, msgs int) {
	if end, ok2 := serverCPU(); ok && ok2 {
		b.ReportMetric(float64((end-start).Microseconds())/float64(msgs), "db-cpu-µs/msg")
	}
}

// produce runs the producers, reporting the rate at which they committed.
func produce(b *testing.B, bu *bundle, w *enlist.Writer, perTx int) {
	ctx := context.Background()
	txs := max(1, b.N/perTx)
	var next atomic.Int64
	start := time.Now()
	var wg sync.WaitGroup
	for range producers {
		wg.Go(func() {
			msgs := make([]relayer.Outgoing, perTx)
			for next.Add(1) <= int64(txs) {
				for i := range msgs {
					msgs[i] = relayer.NewOutgoing(Placed{i})
				}
				if err := w.RunInTx(ctx, bu.db, nil, func(tx *enlist.Tx) error {
					return tx.PublishAll(ctx, msgs...)
				}); err != nil {
					b.Error(err)
					return
				}
			}
		})
	}
	wg.Wait()
	produced := time.Since(start)
	b.ReportMetric(float64(txs*perTx)/produced.Seconds(), "committed/s")
	b.ReportMetric(0, "ns/op")
}

// BenchmarkPlainSQLLoop is the database's own limit for the same traffic: the
// same producers insert the same rows, and one loop deletes them 100 at a time
// with a single statement, sending nothing.
func BenchmarkPlainSQLLoop(b *testing.B) {
	for _, perTx := range []int{1, 10, 100} {
		b.Run(fmt.Sprintf("perTx=%d", perTx), func(b *testing.B) {
			benchThroughput(b, perTx, 0)
		})
	}
}

// benchThroughput runs direct dispatch with the given number of workers, or
// the plain delete loop when workers is 0.
func benchThroughput(b *testing.B, perTx, workers int) {
	direct := workers > 0
	bu := setup(b, dispatch.DirectOptions{QueueCapacity: 4096, Workers: max(workers, 1)})
	ctx := context.Background()
	stop := make(chan struct{})
	var consumer sync.WaitGroup
	var plainDeleted atomic.Uint64
	deleted := func() uint64 { return bu.direct.Stats().Deleted }
	if direct {
		must(b, bu.direct.Start(ctx))
	} else {
		deleted = plainDeleted.Load
		consumer.Go(func() { plainDeleteLoop(b, bu, stop, &plainDeleted) })
	}
	w := bu.writer
	if !direct {
		var err error
		w, err = enlist.NewWriter(bu.outbox, enlist.Options{})
		must(b, err)
	}
	start := time.Now()
	cpu, ok := serverCPU()
	produce(b, bu, w, perTx)
	total := max(1, b.N/perTx) * perTx
	backlog := uint64(total) - deleted()
	waitFor(b, deleted, uint64(total))
	elapsed := time.Since(start)
	close(stop)
	consumer.Wait()
	if direct {
		sctx, cancel := context.WithTimeout(ctx, 10*time.Second)
		bu.direct.Stop(sctx)
		cancel()
	}
	reportServerCPU(b, cpu, ok, total)
	b.ReportMetric(float64(total)/elapsed.Seconds(), "msgs/s")
	b.ReportMetric(float64(backlog), "backlog")
}

// waitFor polls a counter until it reaches n. Counting rows in the table
// instead would scan it and compete with the work being measured.
func waitFor(b *testing.B, counter func() uint64, n uint64) {
	deadline := time.Now().Add(5 * time.Minute)
	for counter() < n {
		if time.Now().After(deadline) {
			b.Fatalf("counted %d of %d", counter(), n)
		}
		time.Sleep(200 * time.Microsecond)
	}
}

func plainDeleteLoop(b *testing.B, bu *bundle, stop chan struct{}, deleted *atomic.Uint64) {
	q := `DELETE FROM "` + bu.schema + `".ob_outbox WHERE id = ANY(ARRAY(
		SELECT id FROM "` + bu.schema + `".ob_outbox WHERE lane IS NULL AND parked_at IS NULL ORDER BY id LIMIT 100 FOR UPDATE SKIP LOCKED))`
	for {
		select {
		case <-stop:
			return
		default:
		}
		res, err := bu.db.Exec(q)
		if err != nil {
			b.Error(err)
			return
		}
		n, _ := res.RowsAffected()
		deleted.Add(uint64(n))
		if n == 0 {
			time.Sleep(200 * time.Microsecond)
		}
	}
}

// stamped records when each message reached the broker.
type stamped struct {
	relayer.Transport
	mu   sync.Mutex
	seen map[uuid.UUID]time.Time
}

func (s *stamped) Send(ctx context.Context, m *relayer.Message) error {
	err := s.Transport.Send(ctx, m)
	s.stamp(m)
	return err
}

func (s *stamped) SendBatch(ctx context.Context, ms []*relayer.Message) error {
	err := s.Transport.SendBatch(ctx, ms)
	for _, m := range ms {
		s.stamp(m)
	}
	return err
}

func (s *stamped) stamp(m *relayer.Message) {
	now := time.Now()
	s.mu.Lock()
	s.seen[m.ID] = now
	s.mu.Unlock()
}

// stampCommits is a commit listener that notes when each row's commit
// returned, then passes the rows on to the direct dispatcher.
type stampCommits struct {
	*dispatch.Direct
	mu sync.Mutex
	at map[uuid.UUID]time.Time
}

func (s *stampCommits) Committed(rows []relayer.Message) error {
	now := time.Now()
	s.mu.Lock()
	for i := range rows {
		s.at[rows[i].ID] = now
	}
	s.mu.Unlock()
	return s.Direct.Committed(rows)
}

// BenchmarkDirectLatency commits single-message transactions at a steady
// 2,000 messages per second (four producers, one commit every 2 ms each) and
// reports the time from each commit's return to the message's acceptance by
// the transport, as p50 and p99, with one and two workers.
func BenchmarkDirectLatency(b *testing.B) {
	for _, workers := range []int{1, 2} {
		b.Run(fmt.Sprintf("workers=%d", workers), func(b *testing.B) { benchLatency(b, workers) })
	}
}

func benchLatency(b *testing.B, workers int) {
	bu := setup(b, dispatch.DirectOptions{})
	tr := &stamped{Transport: bu.mem, seen: make(map[uuid.UUID]time.Time)}
	bu.outbox.Transports = map[string]relayer.Transport{"mem": tr}
	d, err := dispatch.NewDirect(bu.db, bu.outbox, dispatch.DirectOptions{Workers: workers})
	must(b, err)
	stamps := &stampCommits{Direct: d, at: make(map[uuid.UUID]time.Time)}
	w, err := enlist.NewWriter(bu.outbox, enlist.Options{Listener: stamps})
	must(b, err)
	ctx := context.Background()
	must(b, d.Start(ctx))
	defer d.Stop(ctx)
	const latencyProducers = 4
	const interval = 2 * time.Millisecond
	n := max(b.N, 2000) / latencyProducers
	var wg sync.WaitGroup
	for range latencyProducers {
		wg.Go(func() {
			tick := time.NewTicker(interval)
			defer tick.Stop()
			for range n {
				<-tick.C
				if err := w.RunInTx(ctx, bu.db, nil, func(tx *enlist.Tx) error {
					return tx.Publish(ctx, Placed{1})
				}); err != nil {
					b.Error(err)
					return
				}
			}
		})
	}
	wg.Wait()
	wctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	must(b, bu.mem.WaitFor(wctx, n*latencyProducers))
	var lat []time.Duration
	tr.mu.Lock()
	stamps.mu.Lock()
	for id, at := range stamps.at {
		lat = append(lat, tr.seen[id].Sub(at))
	}
	stamps.mu.Unlock()
	tr.mu.Unlock()
	slices.Sort(lat)
	b.ReportMetric(float64(lat[len(lat)/2].Microseconds())/1000, "p50-ms")
	b.ReportMetric(float64(lat[len(lat)*99/100].Microseconds())/1000, "p99-ms")
	b.ReportMetric(0, "ns/op")
}

const backlogRows = 200_000

// fillBacklog writes rows as a broker outage would leave them: committed,
// unsent, unordered.
func fillBacklog(b *testing.B, bu *bundle, n int) {
	st := bu.store
	body := make([]byte, 200)
	batch := make([]relayer.Message, 0, 5000)
	for i := 0; i < n; i++ {
		batch = append(batch, relayer.Message{ID: uuid.Must(relayer.NewID()), Type: "dispatch_test.Placed",
			Body: body, Transport: "mem", Destination: "orders.placed"})
		if len(batch) == cap(batch) || i == n-1 {
			must(b, st.Insert(context.Background(), batch))
			batch = batch[:0]
		}
	}
	_, err := bu.db.Exec(`VACUUM ANALYZE "` + bu.schema + `".ob_outbox`)
	must(b, err)
}

// BenchmarkRecoveryDrain drains a 200,000-row backlog through recovery to the
// in-memory transport with the default batch size (claim, send, delete per
// batch) and 1 or 2 workers; msgs/s is the drain rate. BenchmarkPlainDrain is the database's own limit: one
// statement deleting 1,000 rows at a time, sending nothing.
func BenchmarkRecoveryDrain(b *testing.B) {
	for _, workers := range []int{1, 2} {
		for _, plans := range []string{"generic", "custom"} {
			b.Run(fmt.Sprintf("workers=%d/plans=%s", workers, plans), func(b *testing.B) {
				defer dispatch.SetGenericTakePlans(dispatch.SetGenericTakePlans(plans == "generic"))
				benchRecoveryDrain(b, workers, 0, 0)
			})
		}
	}
	// A broker that takes 5 ms per batch of up to 1,000 messages: what a
	// second worker is for.
	for _, workers := range []int{1, 2} {
		b.Run(fmt.Sprintf("workers=%d/broker=5ms", workers), func(b *testing.B) {
			benchRecoveryDrain(b, workers, 5*time.Millisecond, 0)
		})
	}
}

// BenchmarkRecoveryDrainTakeSize is BenchmarkRecoveryDrain with two workers
// at take sizes (RecoveryOptions.BatchSize) of 1,000 and 5,000 rows, with an
// instant broker and one taking 5 ms per batch: what bounding the rows a
// take holds unrecorded (all of which a crash sends again) costs the drain.
func BenchmarkRecoveryDrainTakeSize(b *testing.B) {
	for _, delay := range []time.Duration{0, 5 * time.Millisecond} {
		for _, size := range []int{1000, 5000} {
			b.Run(fmt.Sprintf("broker=%s/take=%d", delay, size), func(b *testing.B) {
				benchRecoveryDrain(b, 2, delay, size)
			})
		}
	}
}

func benchRecoveryDrain(b *testing.B, workers int, sendDelay time.Duration, batchSize int) {
	for b.Loop() {
		bu := setup(b, dispatch.DirectOptions{})
		bu.mem.SetDelay(sendDelay)
		fillBacklog(b, bu, backlogRows)
		r := bu.recovery(b, dispatch.RecoveryOptions{PollInterval: 10 * time.Millisecond, Workers: workers, MinAge: time.Nanosecond, BatchSize: batchSize})
		start := time.Now()
		must(b, r.Start(context.Background()))
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
		must(b, bu.mem.WaitFor(ctx, backlogRows))
		cancel()
		waitFor(b, func() uint64 { return r.Stats().Deleted }, backlogRows)
		elapsed := time.Since(start)
		must(b, r.Stop(context.Background()))
		if n := bu.mem.Len(); n < backlogRows {
			b.Fatalf("sent %d of %d", n, backlogRows)
		}
		b.ReportMetric(backlogRows/elapsed.Seconds(), "msgs/s")
	}
	b.ReportMetric(0, "ns/op")
}

func BenchmarkPlainDrain(b *testing.B) {
	for b.Loop() {
		bu := setup(b, dispatch.DirectOptions{})
		fillBacklog(b, bu, backlogRows)
		q := `DELETE FROM "` + bu.schema + `".ob_outbox WHERE id = ANY(ARRAY(
			SELECT id FROM "` + bu.schema + `".ob_outbox WHERE lane IS NULL AND parked_at IS NULL ORDER BY id LIMIT 1000 FOR UPDATE SKIP LOCKED))`
		start := time.Now()
		for {
			res, err := bu.db.Exec(q)
			must(b, err)
			if n, _ := res.RowsAffected(); n == 0 {
				break
			}
		}
		b.ReportMetric(backlogRows/time.Since(start).Seconds(), "msgs/s")
	}
	b.ReportMetric(0, "ns/op")
}
