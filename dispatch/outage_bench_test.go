package dispatch_test

import (
	"context"
	"log/slog"
	"os"
	"testing"
	"time"

	"github.com/google/uuid"

	"github.com/relayer-go/relayer"
	"github.com/relayer-go/relayer/dispatch"
)

// BenchmarkOutage is a broker outage under a backlog: 20,000 unordered and
// 2,000 ordered rows (200 keys) wait while every send fails with
// relayer.ErrUnavailable for RELAYER_BENCH_OUTAGE (default 10s), under a
// runner with default options. It reports what the outage cost the database
// (rows written during it, WAL) and the messages (attempts spent), how many
// messages the broker was handed (refused), and then, the broker back, how
// long the backlog took to drain, with lost and duplicate messages (both must
// be 0). Run it alone, with -benchtime 1x.
func BenchmarkOutage(b *testing.B) {
	outage := 10 * time.Second
	if v := os.Getenv("RELAYER_BENCH_OUTAGE"); v != "" {
		d, err := time.ParseDuration(v)
		must(b, err)
		outage = d
	}
	for range b.N {
		benchOutage(b, outage)
	}
}

func benchOutage(b *testing.B, length time.Duration) {
	b.StopTimer()
	bu := setup(b, dispatch.DirectOptions{})
	const unordered, ordered, keys = 20000, 2000, 200
	for start := 0; start < unordered; start += 1000 {
		msgs := make([]relayer.Outgoing, 1000)
		for i := range msgs {
			msgs[i] = relayer.NewOutgoing(Placed{start + i})
		}
		bu.enlistOnly(b, msgs...)
	}
	keyNames := make([]string, keys)
	for i := range keyNames {
		keyNames[i] = "k" + uuid.NewString()[:8]
	}
	bu.shipped(b, keyNames, ordered/keys, 1000)
	tr := &outage{Transport: bu.mem}
	tr.down.Store(true)
	outbox := bu.outbox
	outbox.Transports = map[string]relayer.Transport{"mem": tr}
	r, err := dispatch.NewRunner(bu.db, outbox, dispatch.RunnerOptions{DisableCleanup: true, Logger: benchLogger()})
	must(b, err)
	var startXID int64
	var startLSN string
	must(b, bu.db.QueryRow(`SELECT txid_current(), pg_current_wal_lsn()::text`).Scan(&startXID, &startLSN))
	b.StartTimer()
	must(b, r.Start(context.Background()))
	defer r.Stop(context.Background())
	time.Sleep(length)

	var rewritten, maxAttempts int
	var walBytes float64
	must(b, bu.db.QueryRow(`SELECT count(*) FILTER (WHERE xmin::text::bigint > $1), coalesce(max(attempts), 0),
		pg_wal_lsn_diff(pg_current_wal_lsn(), $2::pg_lsn) FROM "`+bu.schema+`".ob_outbox`, startXID, startLSN).
		Scan(&rewritten, &maxAttempts, &walBytes))
	refused := tr.refused.Load()
	probes := r.Stats().Recovery.Probes

	tr.down.Store(false)
	back := time.Now()
	total := unordered + ordered
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	if os.Getenv("RELAYER_BENCH_LOG") != "" {
		go func() {
			for ctx.Err() == nil {
				time.Sleep(time.Second)
				b.Logf("%s after: placed %d shipped %d; paused %+v; recovery %+v", time.Since(back).Round(time.Second),
					len(bu.mem.Messages("orders.placed")), len(bu.mem.Messages("orders.shipped")), r.Paused(), *r.Stats().Recovery)
			}
		}()
	}
	must(b, bu.mem.WaitFor(ctx, total))
	drain := time.Since(back)
	seen := map[uuid.UUID]int{}
	for _, m := range bu.mem.All() {
		seen[m.ID]++
	}
	b.ReportMetric(float64(rewritten), "rows_written_in_outage")
	b.ReportMetric(float64(maxAttempts), "max_attempts")
	b.ReportMetric(walBytes/1e6, "WAL_MB")
	b.ReportMetric(float64(refused), "refused_sends")
	b.ReportMetric(float64(probes), "recovery_probes")
	b.ReportMetric(drain.Seconds(), "drain_s")
	b.ReportMetric(float64(total-len(seen)), "lost")
	b.ReportMetric(float64(bu.mem.Len()-len(seen)), "duplicates")
}

func benchLogger() *slog.Logger {
	if os.Getenv("RELAYER_BENCH_LOG") != "" {
		return slog.New(slog.NewTextHandler(os.Stderr, nil))
	}
	return slog.New(slog.DiscardHandler)
}
