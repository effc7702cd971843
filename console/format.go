package console

import (
	"encoding/hex"
	"fmt"
	"html/template"
	"math"
	"slices"
	"strconv"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/relayer-go/relayer/store"
)

// funcs are the templates' helpers.
var funcs = template.FuncMap{
	"age":   age,
	"ts":    timestamp,
	"num":   num,
	"int64": func(n int) int64 { return int64(n) },
	"uncounted": func(keys []store.ParkedKey) bool {
		return slices.ContainsFunc(keys, func(k store.ParkedKey) bool { return k.Waiting < 0 })
	},
	"rate":    func(f float64) string { return strconv.FormatFloat(f, 'f', 1, 64) },
	"value":   headerValue,
	"headers": decodedHeaders,
	"query":   func(f listFilter) string { return f.query().Encode() },
	"pct":     func(f float64) string { return strconv.FormatFloat(f*100, 'g', 2, 64) + "%" },
}

// age is how long ago t was, in the largest fitting unit, or "-" for zero.
func age(now, t time.Time) string {
	if t.IsZero() {
		return "-"
	}
	d := now.Sub(t)
	future := d < 0
	if future {
		d = -d
	}
	var s string
	switch {
	case d < time.Second:
		s = strconv.FormatInt(d.Milliseconds(), 10) + " ms"
	case d < time.Minute:
		s = strconv.FormatFloat(d.Seconds(), 'f', 1, 64) + " s"
	case d < time.Hour:
		s = fmt.Sprintf("%dm %02ds", int(d.Minutes()), int(d.Seconds())%60)
	case d < 48*time.Hour:
		s = fmt.Sprintf("%dh %02dm", int(d.Hours()), int(d.Minutes())%60)
	default:
		s = fmt.Sprintf("%dd %02dh", int(d.Hours())/24, int(d.Hours())%24)
	}
	if future {
		return "in " + s
	}
	return s
}

func timestamp(t time.Time) string {
	if t.IsZero() {
		return "-"
	}
	return t.UTC().Format("2006-01-02 15:04:05.000Z")
}

// num formats a count with thousands separators.
func num(n int64) string {
	s := strconv.FormatInt(n, 10)
	neg := strings.HasPrefix(s, "-")
	s = strings.TrimPrefix(s, "-")
	var b strings.Builder
	for i, r := range s {
		if i > 0 && (len(s)-i)%3 == 0 {
			b.WriteByte(',')
		}
		b.WriteRune(r)
	}
	if neg {
		return "-" + b.String()
	}
	return b.String()
}

// headerValue shows a header value as text when it is printable UTF-8, and
// as hex otherwise.
func headerValue(v []byte) string {
	if utf8.Valid(v) && !strings.ContainsFunc(string(v), func(r rune) bool { return r < ' ' && r != '\t' }) {
		return string(v)
	}
	return "0x" + hex.EncodeToString(v)
}

// hexDump shows bytes as rows of 16, with their offset and printable
// characters.
func hexDump(b []byte) string {
	return hex.Dump(b)
}

// chart is the throughput chart: two polylines, in messages per second
// against time, in the plot area of a chartW×chartH box whose margins hold
// the axes' labels.
type chart struct {
	Written, Delivered string
	Max                float64
	Span               string
	LastWritten        float64
	LastDelivered      float64
	Points             int
	// YTicks are the rate axis's gridlines and labels (messages per
	// second), XTicks the time axis's (how long before the last sample).
	YTicks, XTicks []tick
}

// tick is an axis label at Pos (y for the rate axis, x for time).
type tick struct {
	Pos   string
	Label string
}

// The chart's box and its plot area.
const (
	chartW, chartH          = 640.0, 170.0
	plotLeft, plotRight     = 56.0, 628.0
	plotTop, plotBottom     = 24.0, 140.0
	plotWidth, plotHeight   = plotRight - plotLeft, plotBottom - plotTop
	rateTicks, timeTicks    = 4, 4
	minRateTop, minTimeSpan = 1.0, time.Second
)

// niceStep returns the least of 1, 2 and 5 times a power of ten that is at
// least x: the step of an axis whose labels read well.
func niceStep(x float64) float64 {
	if x <= 0 {
		return 1
	}
	p := math.Pow(10, math.Floor(math.Log10(x)))
	for _, m := range []float64{1, 2, 5, 10} {
		if m*p >= x {
			return m * p
		}
	}
	return 10 * p
}

func newChart(rates []rate) chart {
	var c chart
	c.Points = len(rates)
	if len(rates) == 0 {
		return c
	}
	for _, r := range rates {
		c.Max = max(c.Max, r.Written, r.Delivered)
	}
	step := niceStep(max(c.Max, minRateTop) / rateTicks)
	top := step * math.Ceil(max(c.Max, minRateTop)/step)
	for v := 0.0; v <= top+step/2; v += step {
		c.YTicks = append(c.YTicks, tick{Pos: fmt.Sprintf("%.1f", plotBottom-v/top*plotHeight), Label: rateLabel(v)})
	}
	first, last := rates[0].At, rates[len(rates)-1].At
	span := max(last.Sub(first), minTimeSpan)
	for i := timeTicks; i >= 0; i-- {
		before := span * time.Duration(i) / timeTicks
		label := "now"
		if i > 0 {
			label = "−" + shortDuration(before)
		}
		x := plotRight - float64(before)/float64(span)*plotWidth
		c.XTicks = append(c.XTicks, tick{Pos: fmt.Sprintf("%.1f", x), Label: label})
	}
	var w, d strings.Builder
	for i, r := range rates {
		x := plotRight - float64(last.Sub(r.At))/float64(span)*plotWidth
		if i > 0 {
			w.WriteByte(' ')
			d.WriteByte(' ')
		}
		fmt.Fprintf(&w, "%.1f,%.1f", x, plotBottom-r.Written/top*plotHeight)
		fmt.Fprintf(&d, "%.1f,%.1f", x, plotBottom-r.Delivered/top*plotHeight)
	}
	c.Written, c.Delivered = w.String(), d.String()
	c.LastWritten, c.LastDelivered = rates[len(rates)-1].Written, rates[len(rates)-1].Delivered
	c.Span = age(last, first)
	return c
}

// rateLabel writes a rate axis label: 2,500 as 2.5k.
func rateLabel(v float64) string {
	switch {
	case v >= 1e6:
		return strconv.FormatFloat(v/1e6, 'g', 3, 64) + "M"
	case v >= 1e3:
		return strconv.FormatFloat(v/1e3, 'g', 3, 64) + "k"
	}
	return strconv.FormatFloat(v, 'g', 3, 64)
}

// shortDuration writes a time axis label: 90s as 1m30s, 15m0s as 15m.
func shortDuration(d time.Duration) string {
	d = d.Round(time.Second)
	s := d.String()
	if strings.HasSuffix(s, "m0s") {
		s = strings.TrimSuffix(s, "0s")
	}
	if strings.HasSuffix(s, "h0m") {
		s = strings.TrimSuffix(s, "0m")
	}
	return s
}
