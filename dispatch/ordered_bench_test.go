package dispatch_test

import (
	"context"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/relayer-go/relayer"
	"github.com/relayer-go/relayer/dispatch"
	"github.com/relayer-go/relayer/enlist"
	"github.com/relayer-go/relayer/internal/testkit/testdb"
	"github.com/relayer-go/relayer/store"
)

const (
	orderedRows = 20_000
	orderedKeys = 1_000
)

// BenchmarkOrderedThroughput drains 20,000 ordered rows over 1,000 keys and 32
// lanes with 1, 2 and 4 workers to the in-memory transport; direct=… drains
// the same number of unordered rows through the direct dispatcher, in the
// same run, for the ratio. round-trips/msg counts the workers' flushes to the
// database per message.
//
// concurrency=… is OrderedOptions.Concurrency, the lanes one worker runs at
// once.
func BenchmarkOrderedThroughput(b *testing.B) {
	for _, run := range []struct{ workers, concurrency int }{{1, 1}, {1, 2}, {2, 1}, {2, 2}, {4, 2}} {
		workers := run.workers
		b.Run(fmt.Sprintf("workers=%d/concurrency=%d", workers, run.concurrency), func(b *testing.B) {
			for b.Loop() {
				bu := setup(b, dispatch.DirectOptions{})
				msgs := make([]relayer.Outgoing, 0, 1000)
				for i := range orderedRows {
					msgs = append(msgs, relayer.NewOutgoing(Shipped{i}, relayer.Key(fmt.Sprintf("k%d", i%orderedKeys))))
					if len(msgs) == cap(msgs) {
						bu.enlistOnly(b, msgs...)
						msgs = msgs[:0]
					}
				}
				db, writes := testdb.OpenCounting(b)
				start := time.Now()
				var ws []*dispatch.Ordered
				for range workers {
					ws = append(ws, bu.orderedWorker(b, db, bu.mem, dispatch.OrderedOptions{PollInterval: 10 * time.Millisecond, Concurrency: run.concurrency}))
				}
				ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
				must(b, bu.mem.WaitFor(ctx, orderedRows))
				cancel()
				waitFor(b, func() uint64 {
					var n uint64
					for _, w := range ws {
						n += w.Stats().Deleted
					}
					return n
				}, orderedRows)
				elapsed := time.Since(start)
				b.ReportMetric(orderedRows/elapsed.Seconds(), "msgs/s")
				b.ReportMetric(float64(writes.Load())/orderedRows, "round-trips/msg")
			}
			b.ReportMetric(0, "ns/op")
		})
	}
	b.Run("direct", func(b *testing.B) {
		for b.Loop() {
			bu := setup(b, dispatch.DirectOptions{})
			db, writes := testdb.OpenCounting(b)
			d, err := dispatch.NewDirect(db, bu.outbox, dispatch.DirectOptions{QueueCapacity: orderedRows})
			must(b, err)
			// Write first, notify afterwards, so that only dispatch is timed.
			rec := &recorder{opts: bu.store.Tables()}
			w, err := enlist.NewWriter(bu.outbox, enlist.Options{Listener: rec})
			must(b, err)
			for range orderedRows / 100 {
				msgs := make([]relayer.Outgoing, 100)
				for i := range msgs {
					msgs[i] = relayer.NewOutgoing(Placed{i})
				}
				must(b, w.RunInTx(context.Background(), bu.db, nil, func(tx *enlist.Tx) error { return tx.PublishAll(context.Background(), msgs...) }))
			}
			start := time.Now()
			must(b, d.Start(context.Background()))
			for _, batch := range rec.batches {
				must(b, d.Committed(batch))
			}
			waitFor(b, func() uint64 { return d.Stats().Deleted }, orderedRows)
			elapsed := time.Since(start)
			must(b, d.Stop(context.Background()))
			b.ReportMetric(orderedRows/elapsed.Seconds(), "msgs/s")
			b.ReportMetric(float64(writes.Load())/orderedRows, "round-trips/msg")
		}
		b.ReportMetric(0, "ns/op")
	})
}

// recorder keeps commit notifications to replay them later.
type recorder struct {
	opts    store.Tables
	batches [][]relayer.Message
}

func (r *recorder) Tables() store.Tables { return r.opts }

func (r *recorder) Committed(rows []relayer.Message) error {
	r.batches = append(r.batches, rows)
	return nil
}

// BenchmarkOrderedKeepsUp runs producers of ordered messages (8 of them, 10
// messages per transaction over 1,000 keys) for 5 seconds next to 2 ordered
// workers, after the outbox's statistics were taken while it held only
// unordered rows (autovacuum off, so they stay that way). It reports what the
// producers committed and what the workers delivered per second, and their
// ratio: a claim whose plan walks the lane index instead of probing ids falls
// far behind here.
func BenchmarkOrderedKeepsUp(b *testing.B) {
	const (
		perTx  = 10
		runFor = 5 * time.Second
	)
	for b.Loop() {
		bu := setup(b, dispatch.DirectOptions{})
		table := `"` + bu.schema + `".ob_outbox`
		for _, q := range []string{
			`ALTER TABLE ` + table + ` SET (autovacuum_enabled = false)`,
		} {
			_, err := bu.db.Exec(q)
			must(b, err)
		}
		for range 20 {
			unordered := make([]relayer.Outgoing, 1000)
			for i := range unordered {
				unordered[i] = relayer.NewOutgoing(Placed{i})
			}
			bu.enlistOnly(b, unordered...)
		}
		for _, q := range []string{`ANALYZE ` + table, `DELETE FROM ` + table} {
			_, err := bu.db.Exec(q)
			must(b, err)
		}
		w, err := enlist.NewWriter(bu.outbox, enlist.Options{})
		must(b, err)
		var ws []*dispatch.Ordered
		for range 2 {
			ws = append(ws, bu.orderedWorker(b, bu.db, bu.mem, dispatch.OrderedOptions{}))
		}
		ctx, cancel := context.WithTimeout(context.Background(), runFor)
		var produced atomic.Int64
		var wg sync.WaitGroup
		for p := range producers {
			wg.Go(func() {
				msgs := make([]relayer.Outgoing, perTx)
				for n := 0; ctx.Err() == nil; n++ {
					for i := range msgs {
						msgs[i] = relayer.NewOutgoing(Shipped{n}, relayer.Key(fmt.Sprintf("k%d", (p*perTx+i+n)%orderedKeys)))
					}
					if err := w.RunInTx(context.Background(), bu.db, nil, func(tx *enlist.Tx) error {
						return tx.PublishAll(ctx, msgs...)
					}); err != nil {
						if ctx.Err() == nil {
							b.Error(err)
						}
						return
					}
					produced.Add(perTx)
				}
			})
		}
		wg.Wait()
		cancel()
		var delivered uint64
		for _, o := range ws {
			delivered += o.Stats().Deleted
		}
		secs := runFor.Seconds()
		b.ReportMetric(float64(produced.Load())/secs, "produced/s")
		b.ReportMetric(float64(delivered)/secs, "delivered/s")
		b.ReportMetric(float64(delivered)/float64(produced.Load()), "delivered/produced")
	}
	b.ReportMetric(0, "ns/op")
}
