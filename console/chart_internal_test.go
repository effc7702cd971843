package console

import (
	"context"
	"fmt"
	"log/slog"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/relayer-go/relayer"
	"github.com/relayer-go/relayer/dispatch"
	"github.com/relayer-go/relayer/enlist"
	"github.com/relayer-go/relayer/internal/testkit"
	"github.com/relayer-go/relayer/internal/testkit/testdb"
	"github.com/relayer-go/relayer/store"
	"github.com/relayer-go/relayer/transport/memory"
)

// The chart has a rate axis in messages per second from 0 to above the
// peak, a time axis back from now over the samples' span, and every point
// inside the plot area.
func TestChartHasAxesAndUnits(t *testing.T) {
	t0 := time.Date(2030, 1, 2, 3, 4, 0, 0, time.UTC)
	var rates []rate
	for i := range 10 {
		rates = append(rates, rate{At: t0.Add(time.Duration(i) * 10 * time.Second), Written: float64(i) * 250, Delivered: float64(i) * 240})
	}
	c := newChart(rates)
	var ys []string
	for _, tk := range c.YTicks {
		ys = append(ys, tk.Label)
	}
	if got := strings.Join(ys, " "); got != "0 1k 2k 3k" {
		t.Errorf("rate axis labels %q, want 0 1k 2k 3k (the peak is 2,250)", got)
	}
	var xs []string
	for _, tk := range c.XTicks {
		xs = append(xs, tk.Label)
	}
	if got := strings.Join(xs, " "); got != "−1m30s −1m8s −45s −23s now" {
		t.Errorf("time axis labels %q", got)
	}
	for _, line := range []string{c.Written, c.Delivered} {
		for _, pt := range strings.Fields(line) {
			x, y, _ := strings.Cut(pt, ",")
			fx, _ := strconv.ParseFloat(x, 64)
			fy, _ := strconv.ParseFloat(y, 64)
			if fx < plotLeft || fx > plotRight || fy < plotTop || fy > plotBottom {
				t.Errorf("point %s is outside the plot area", pt)
			}
		}
	}
	for d, want := range map[time.Duration]string{15 * time.Minute: "15m", 2 * time.Hour: "2h", 90 * time.Minute: "1h30m", 0: "0s"} {
		if got := shortDuration(d); got != want {
			t.Errorf("shortDuration(%v) = %q, want %q", d, got, want)
		}
	}
	if one := newChart(rates[:1]); len(one.XTicks) == 0 || one.XTicks[len(one.XTicks)-1].Label != "now" {
		t.Errorf("a chart of one sample has time labels %v", one.XTicks)
	}
}

// Run samples the outbox's activity with no page open, so that the chart
// has history when the overview is first opened.
func TestRunSamplesWithoutAPageOpen(t *testing.T) {
	t.Parallel()
	db := testdb.Open(t, "pgx")
	opts := store.Tables{Schema: testdb.NewSchema(t)}
	if _, err := store.Migrate(context.Background(), db, opts); err != nil {
		t.Fatal(err)
	}
	c, err := New(db, opts, Options{SampleEvery: time.Second, Logger: slog.New(slog.DiscardHandler)})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- c.Run(ctx) }()
	testkit.Within(30*time.Second, func() bool { return len(c.samples.rates()) >= 2 })
	cancel()
	if err := <-done; err != context.Canceled {
		t.Errorf("Run after its context ended = %v, want context.Canceled", err)
	}
	if n := len(c.samples.rates()); n < 2 {
		t.Errorf("Run took %d rates in its time, want at least 2", n)
	}
}

// Typed messages of the delivery-rate test.
type (
	chartShipped struct{ N int }
	chartRefused struct{ N int }
)

func (chartShipped) MessageType() string { return "charttest.Shipped" }
func (chartRefused) MessageType() string { return "charttest.Refused" }

// The chart's delivery rate counts the messages delivered, as the runners
// record them: not the rows moved to the dead letters, nor the deletes of
// transactions that rolled back, which the server's table statistics count
// as deleted rows all the same.
func TestChartCountsDeliveriesOnly(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	db := testdb.Open(t, "pgx")
	opts := store.Tables{Schema: testdb.NewSchema(t)}
	if _, err := store.Migrate(ctx, db, opts); err != nil {
		t.Fatal(err)
	}
	st, err := store.New(db, opts)
	if err != nil {
		t.Fatal(err)
	}
	tr := memory.New()
	tr.FailWith(func(m *relayer.Message) error {
		if m.Type == "charttest.Refused" {
			return fmt.Errorf("refused: %w", relayer.ErrPermanent)
		}
		return nil
	})
	var routes relayer.Routes
	for _, err := range []error{
		relayer.AddType[chartShipped](&routes, relayer.Route{Transport: "mem", Destination: "shipped"}),
		relayer.AddType[chartRefused](&routes, relayer.Route{Transport: "mem", Destination: "refused"}),
	} {
		if err != nil {
			t.Fatal(err)
		}
	}
	outbox := relayer.Outbox{Schema: opts.Schema, Routes: &routes, Transports: map[string]relayer.Transport{"mem": tr}}
	w, err := enlist.NewWriter(outbox, enlist.Options{})
	if err != nil {
		t.Fatal(err)
	}
	const shipped, refused = 30, 20
	err = w.RunInTx(ctx, db, nil, func(tx *enlist.Tx) error {
		for i := range shipped {
			if err := tx.Publish(ctx, chartShipped{i}); err != nil {
				return err
			}
		}
		for i := range refused {
			if err := tx.Publish(ctx, chartRefused{i}); err != nil {
				return err
			}
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	c, err := New(db, opts, Options{SampleEvery: time.Second, Logger: slog.New(slog.DiscardHandler)})
	if err != nil {
		t.Fatal(err)
	}
	c.sample(ctx, st)
	if len(c.samples.ring) != 1 {
		t.Fatalf("%d samples before the deliveries, want 1", len(c.samples.ring))
	}
	deletedBefore := c.samples.ring[0].deleted

	// A delete that rolls back delivers nothing.
	tx, err := db.BeginTx(ctx, nil)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := tx.ExecContext(ctx, `DELETE FROM "`+opts.Schema+`".outbox`); err != nil {
		t.Fatal(err)
	}
	if err := tx.Rollback(); err != nil {
		t.Fatal(err)
	}
	runner, err := dispatch.NewRunner(db, outbox, dispatch.RunnerOptions{DisableCleanup: true,
		Recovery: dispatch.RecoveryOptions{MinAge: time.Nanosecond, PollInterval: 20 * time.Millisecond}, Logger: slog.New(slog.DiscardHandler)})
	if err != nil {
		t.Fatal(err)
	}
	if err := runner.Start(ctx); err != nil {
		t.Fatal(err)
	}
	testkit.Eventually(t, 20*time.Second, func() bool {
		var left int
		if err := db.QueryRowContext(ctx, `SELECT count(*) FROM "`+opts.Schema+`".outbox`).Scan(&left); err != nil {
			t.Fatal(err)
		}
		return left == 0
	}, "the outbox emptied")
	if err := runner.Stop(ctx); err != nil {
		t.Fatal(err)
	}
	// The server's statistics take the deletes in late: wait until they
	// count one of the two sets (the rolled-back delete's, the runner's;
	// a session gone idle reports its own up to ten seconds later), so that
	// the chart, were it to count them, would count more than the shipped;
	// and until the next sample is due.
	testkit.Eventually(t, 20*time.Second, func() bool {
		_, del, err := st.Activity(ctx)
		return err == nil && del-deletedBefore >= shipped+refused && c.samples.due(time.Now())
	}, "the table statistics counting the deletes, and the next sample due")
	c.sample(ctx, st)
	ring := c.samples.ring
	if len(ring) != 2 {
		t.Fatalf("%d samples, want 2", len(ring))
	}
	if got := deliveredSince(ring[0], ring[1]); got != shipped {
		t.Errorf("the chart counts %d messages delivered, want the %d shipped (the table statistics count %d rows deleted)",
			got, shipped, ring[1].deleted-ring[0].deleted)
	}
}
