package console

import (
	"encoding/hex"
	"fmt"
	"html/template"
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

// chart is the throughput chart: two polylines in a 600×120 box.
type chart struct {
	Written, Delivered string
	Max                float64
	Span               string
	LastWritten        float64
	LastDelivered      float64
	Points             int
}

const chartW, chartH = 600.0, 120.0

func newChart(rates []rate) chart {
	var c chart
	c.Points = len(rates)
	if len(rates) == 0 {
		return c
	}
	for _, r := range rates {
		c.Max = max(c.Max, r.Written, r.Delivered)
	}
	top := c.Max * 1.15 // headroom above the peak
	if top == 0 {
		top = 1
	}
	first, last := rates[0].At, rates[len(rates)-1].At
	span := last.Sub(first).Seconds()
	var w, d strings.Builder
	for i, r := range rates {
		x := chartW
		if span > 0 {
			x = r.At.Sub(first).Seconds() / span * chartW
		}
		if i > 0 {
			w.WriteByte(' ')
			d.WriteByte(' ')
		}
		fmt.Fprintf(&w, "%.1f,%.1f", x, chartH-r.Written/top*chartH)
		fmt.Fprintf(&d, "%.1f,%.1f", x, chartH-r.Delivered/top*chartH)
	}
	c.Written, c.Delivered = w.String(), d.String()
	c.LastWritten, c.LastDelivered = rates[len(rates)-1].Written, rates[len(rates)-1].Delivered
	c.Span = age(last, first)
	return c
}
