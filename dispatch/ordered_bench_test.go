package dispatch_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/relayer-go/relayer"
	"github.com/relayer-go/relayer/dispatch"
	"github.com/relayer-go/relayer/enlist"
	"github.com/relayer-go/relayer/internal/testdb"
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
func BenchmarkOrderedThroughput(b *testing.B) {
	for _, workers := range []int{1, 2, 4} {
		b.Run(fmt.Sprintf("workers=%d", workers), func(b *testing.B) {
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
					ws = append(ws, bu.orderedWorker(b, db, bu.mem, dispatch.OrderedOptions{PollInterval: 10 * time.Millisecond}))
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
			rec := &recorder{opts: bu.store.Options()}
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
	opts    store.Options
	batches [][]relayer.Message
}

func (r *recorder) StoreOptions() store.Options { return r.opts }

func (r *recorder) Committed(rows []relayer.Message) error {
	r.batches = append(r.batches, rows)
	return nil
}
