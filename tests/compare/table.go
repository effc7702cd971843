package compare

import (
	"cmp"
	"fmt"
	"io"
	"strings"
	"time"

	"github.com/relayer-go/relayer/internal/tool/bench"
)

// WriteMarkdown writes the results as one Markdown table per scenario: the
// median of the rounds with the range over them, the ratio to the
// hand-written loop, and what was lost, duplicated or reordered.
func WriteMarkdown(w io.Writer, results []bench.Result) error {
	var b strings.Builder
	scenario := ""
	for _, r := range results {
		if r.Scenario != scenario {
			scenario = r.Scenario
			b.WriteString("\n" + header(scenario))
		}
		b.WriteString(row(r))
	}
	_, err := io.WriteString(w, strings.TrimPrefix(b.String(), "\n"))
	return err
}

const lossColumns = " lost | dup | out of order |"

func header(scenario string) string {
	var cols string
	switch scenario {
	case bench.ScenarioEnlist:
		cols = "| scenario | variant | contender | tx/s (range) | msg/s | ÷ business insert alone | ÷ loop |"
	case bench.ScenarioLatency:
		cols = "| scenario | variant | contender | p50 | p95 | p99 (range) | delivered msg/s |"
	case bench.ScenarioE2E:
		cols = "| scenario | variant | contender | delivered msg/s (range) | produced msg/s | backlog at end | p50 | p99 | server tx per msg | ÷ loop |"
	default:
		cols = "| scenario | variant | contender | msg/s (range) | ÷ loop |"
	}
	cols += lossColumns
	return "\n" + cols + "\n" + strings.Repeat("| --- ", strings.Count(cols, "|")-1) + "|\n"
}

func row(r bench.Result) string {
	var cols string
	c := cmp.Or(r.Contender, "-")
	switch r.Scenario {
	case bench.ScenarioEnlist:
		cols = fmt.Sprintf("| %s | %s | %s | %s | %s | %s | %s |", r.Scenario, r.Variant, c,
			withRange(r.TxPerSec, r.TxPerSecMin, r.TxPerSecMax, r.Rounds), num(r.MsgsPerSec), ratio(r.Ratio), ratio(r.VsLoop))
	case bench.ScenarioLatency:
		p99 := ms(r.P99)
		if r.Rounds > 1 {
			p99 += fmt.Sprintf(" (%s–%s)", ms(r.P99Min), ms(r.P99Max))
		}
		cols = fmt.Sprintf("| %s | %s | %s | %s | %s | %s | %s |", r.Scenario, r.Variant, c, ms(r.P50), ms(r.P95), p99, num(r.MsgsPerSec))
	case bench.ScenarioE2E:
		cols = fmt.Sprintf("| %s | %s | %s | %s | %s | %d | %s | %s | %.2f | %s |", r.Scenario, r.Variant, c,
			withRange(r.MsgsPerSec, r.MsgsPerSecMin, r.MsgsPerSecMax, r.Rounds), num(r.Produced), r.Backlog, ms(r.P50), ms(r.P99), r.ServerTxPerMsg, ratio(r.VsLoop))
	default:
		cols = fmt.Sprintf("| %s | %s | %s | %s | %s |", r.Scenario, r.Variant, c,
			withRange(r.MsgsPerSec, r.MsgsPerSecMin, r.MsgsPerSecMax, r.Rounds), ratio(r.VsLoop))
	}
	return cols + fmt.Sprintf(" %d | %d | %d |\n", r.Lost, r.Duplicates, r.OutOfOrder)
}

// num formats a rate with thousands separators.
func num(v float64) string {
	if v == 0 {
		return "-"
	}
	s := fmt.Sprintf("%.0f", v)
	for i := len(s) - 3; i > 0; i -= 3 {
		s = s[:i] + "," + s[i:]
	}
	return s
}

func withRange(v, low, high float64, rounds int) string {
	if rounds < 2 {
		return num(v)
	}
	return fmt.Sprintf("%s (%s–%s)", num(v), num(low), num(high))
}

func ratio(v float64) string {
	if v == 0 {
		return "-"
	}
	return fmt.Sprintf("%.2f", v)
}

func ms(d time.Duration) string {
	if d == 0 {
		return "-"
	}
	return fmt.Sprintf("%.2f ms", float64(d)/float64(time.Millisecond))
}
