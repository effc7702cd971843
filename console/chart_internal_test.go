package console

import (
	"context"
	"log/slog"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/relayer-go/relayer/internal/testkit/testdb"
	"github.com/relayer-go/relayer/store"
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
	opts := store.Options{Schema: testdb.NewSchema(t)}
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
	deadline := time.Now().Add(30 * time.Second)
	for len(c.samples.rates()) < 2 && time.Now().Before(deadline) {
		time.Sleep(100 * time.Millisecond)
	}
	cancel()
	if err := <-done; err != context.Canceled {
		t.Errorf("Run after its context ended = %v, want context.Canceled", err)
	}
	if n := len(c.samples.rates()); n < 2 {
		t.Errorf("Run took %d rates in its time, want at least 2", n)
	}
}
