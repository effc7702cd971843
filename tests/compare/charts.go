package compare

import (
	"errors"
	"fmt"
	"image/color"
	"math"
	"os"
	"path/filepath"
	"slices"
	"time"

	"gonum.org/v1/plot"
	"gonum.org/v1/plot/plotter"
	"gonum.org/v1/plot/plotutil"
	"gonum.org/v1/plot/vg"

	"github.com/relayer-go/relayer/internal/tool/bench"
)

// Chart file names WriteCharts writes, for the scenarios the results hold.
const (
	ChartEnlist  = "enlist.png"
	ChartE2E     = "e2e.png"
	ChartLatency = "latency.png"
	ChartDrain   = "drain.png"
	ChartOrdered = "ordered.png"
)

// WriteCharts draws the results as PNG charts in dir: a bar per contender
// and variant with its range over the rounds as an error bar for throughput
// (enlist, e2e, drain, ordered), and commit-to-send percentiles per
// contender on a logarithmic scale for latency. It returns the files it
// wrote.
func WriteCharts(dir string, results []bench.Result) ([]string, error) {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return nil, err
	}
	var written []string
	var errs []error
	save := func(name string, p *plot.Plot, err error) {
		if err == nil {
			path := filepath.Join(dir, name)
			if err = p.Save(8*vg.Inch, 4.5*vg.Inch, path); err == nil {
				written = append(written, path)
			}
		}
		errs = append(errs, err)
	}
	of := func(scenario string) []bench.Result {
		var rs []bench.Result
		for _, r := range results {
			if r.Scenario == scenario && r.Contender != "" {
				rs = append(rs, r)
			}
		}
		return rs
	}
	if rs := of(bench.ScenarioEnlist); len(rs) > 0 {
		p, err := bars("Enlistment: messages committed per second (8 producers)", "msg/s", rs,
			func(r bench.Result) (float64, float64, float64) {
				return r.MsgsPerSec, r.TxPerSecMin * r.MsgsPerSec / r.TxPerSec, r.TxPerSecMax * r.MsgsPerSec / r.TxPerSec
			})
		save(ChartEnlist, p, err)
	}
	delivered := func(r bench.Result) (float64, float64, float64) {
		return r.MsgsPerSec, r.MsgsPerSecMin, r.MsgsPerSecMax
	}
	if rs := of(bench.ScenarioE2E); len(rs) > 0 {
		p, err := bars("End to end: messages delivered per second (producers as fast as they go)", "msg/s", rs, delivered)
		save(ChartE2E, p, err)
	}
	if rs := of(bench.ScenarioDrain); len(rs) > 0 {
		p, err := bars("Drain of a backlog: messages delivered per second", "msg/s", rs, delivered)
		save(ChartDrain, p, err)
	}
	if rs := of(bench.ScenarioOrdered); len(rs) > 0 {
		p, err := bars("Ordered backlog over 1,000 keys: messages delivered per second", "msg/s", rs, delivered)
		save(ChartOrdered, p, err)
	}
	if rs := of(bench.ScenarioLatency); len(rs) > 0 {
		p, err := percentiles(fmt.Sprintf("Commit-to-send latency, %s", rs[0].Variant), rs)
		save(ChartLatency, p, err)
	}
	return written, errors.Join(errs...)
}

// bars draws one bar per result, grouped by variant and coloured by
// contender, with an error bar from low to high.
func bars(title, unit string, rs []bench.Result, value func(bench.Result) (v, low, high float64)) (*plot.Plot, error) {
	var variants, contenders []string
	for _, r := range rs {
		if !slices.Contains(variants, r.Variant) {
			variants = append(variants, r.Variant)
		}
		if !slices.Contains(contenders, r.Contender) {
			contenders = append(contenders, r.Contender)
		}
	}
	p := plot.New()
	p.Title.Text = title
	p.Y.Label.Text = unit
	p.Y.Min = 0
	p.Legend.Top = true
	p.Legend.Left = true
	stride := len(contenders) + 1 // a gap between groups
	var ticks []plot.Tick
	for g, v := range variants {
		ticks = append(ticks, plot.Tick{Value: float64(g*stride) + float64(len(contenders)-1)/2, Label: v})
	}
	p.X.Tick.Marker = plot.ConstantTicks(ticks)
	var errs plotter.YErrorBars
	top := 0.0
	for c, name := range contenders {
		col := plotutil.Color(c)
		first := true
		for g, v := range variants {
			i := slices.IndexFunc(rs, func(r bench.Result) bool { return r.Variant == v && r.Contender == name })
			if i < 0 {
				continue
			}
			val, low, high := value(rs[i])
			top = max(top, val, high)
			x := float64(g*stride + c)
			b, err := plotter.NewBarChart(plotter.Values{val}, 0.18*vg.Inch)
			if err != nil {
				return nil, err
			}
			b.XMin, b.Color, b.LineStyle.Width = x, col, 0
			p.Add(b)
			if first {
				p.Legend.Add(name, b)
				first = false
			}
			if high > low {
				errs.XYs = append(errs.XYs, plotter.XY{X: x, Y: val})
				errs.YErrors = append(errs.YErrors, struct{ Low, High float64 }{val - low, high - val})
			}
		}
	}
	if len(errs.XYs) > 0 {
		errs.LineStyle, errs.CapWidth = plotter.DefaultLineStyle, 4
		errs.LineStyle.Color = color.Gray{Y: 40}
		p.Add(&errs)
	}
	p.X.Min, p.X.Max = -1, float64(len(variants)*stride-1)
	p.Y.Max = top * (1.15 + 0.07*float64(len(contenders))) // room for the legend
	return p, nil
}

// percentiles draws each contender's p50, p95 and p99 as a line on a
// logarithmic scale of milliseconds.
func percentiles(title string, rs []bench.Result) (*plot.Plot, error) {
	p := plot.New()
	p.Title.Text = title
	p.Y.Label.Text = "ms (log scale)"
	p.Y.Scale = plot.LogScale{}
	p.Y.Tick.Marker = plot.LogTicks{Prec: -1}
	p.Legend.Top = true
	p.Legend.Left = true
	p.X.Tick.Marker = plot.ConstantTicks{{Value: 0, Label: "p50"}, {Value: 1, Label: "p95"}, {Value: 2, Label: "p99"}}
	p.X.Min, p.X.Max = -0.2, 2.2
	ms := func(d time.Duration) float64 { return max(float64(d)/float64(time.Millisecond), 0.01) }
	top := 0.0
	for i, r := range rs {
		top = max(top, ms(r.P99), ms(r.P95))
		xys := plotter.XYs{{X: 0, Y: ms(r.P50)}, {X: 1, Y: ms(r.P95)}, {X: 2, Y: ms(r.P99)}}
		line, points, err := plotter.NewLinePoints(xys)
		if err != nil {
			return nil, err
		}
		line.Color, points.Color = plotutil.Color(i), plotutil.Color(i)
		points.Shape = plotutil.Shape(i)
		line.Width = vg.Points(1.5)
		p.Add(line, points)
		p.Legend.Add(r.Contender, line, points)
	}
	p.Y.Max = top * math.Pow(10, 0.25*float64(len(rs))) // room for the legend
	return p, nil
}
