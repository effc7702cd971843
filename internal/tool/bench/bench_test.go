package bench_test

import (
	"context"
	"errors"
	"runtime"
	"strings"
	"testing"

	"github.com/relayer-go/relayer/internal/testkit/testdb"
	"github.com/relayer-go/relayer/internal/tool/bench"
)

// A quick run of every scenario gives figures for each, loses, duplicates
// and reorders nothing, and leaves no schema behind.
func TestQuickRun(t *testing.T) {
	db := testdb.Open(t, "pgx")
	db.SetMaxOpenConns(40)
	schema := testdb.NewSchema(t)
	var steps []string
	results, err := bench.Run(context.Background(), bench.Config{DB: db, Schema: schema + "_bench", Quick: true, Producers: 4,
		Progress: func(s string) { steps = append(steps, s) }})
	if err != nil {
		t.Fatal(err)
	}
	want := map[string]int{bench.ScenarioEnlist: 13, bench.ScenarioE2E: 5, bench.ScenarioLatency: 6, bench.ScenarioDrain: 3, bench.ScenarioOrdered: 3}
	got := map[string]int{}
	for _, r := range results {
		t.Logf("%-8s %-20s %-24s %9.0f msg/s %8.0f tx/s ratio %.2f vs loop %.2f cpu %s (db %s) produced %.0f backlog %d p50 %s p99 %s lost %d dup %d ooo %d",
			r.Scenario, r.Variant, r.Contender, r.MsgsPerSec, r.TxPerSec, r.Ratio, r.VsLoop, r.CPU, r.DBCPU, r.Produced, r.Backlog, r.P50, r.P99, r.Lost, r.Duplicates, r.OutOfOrder)
		got[r.Scenario]++
		if r.Lost != 0 || r.Duplicates != 0 || r.OutOfOrder != 0 {
			t.Errorf("%s %s: %d lost, %d duplicates, %d out of order", r.Scenario, r.Variant, r.Lost, r.Duplicates, r.OutOfOrder)
		}
		// Ordered workers find new rows when they next poll, which can be
		// after a quick run's one second.
		if r.Scenario != bench.ScenarioEnlist && r.MsgsPerSec <= 0 && r.Contender != bench.PathOrdered {
			t.Errorf("%s %s: no throughput", r.Scenario, r.Variant)
		}
		if runtime.GOOS != "windows" && (r.CPU <= 0 || r.DBCPU > r.CPU || r.CPUMin > r.CPU || r.CPUMax < r.CPU) {
			t.Errorf("%s %s %s: CPU %s (%s to %s), the database's %s", r.Scenario, r.Variant, r.Contender,
				r.CPU, r.CPUMin, r.CPUMax, r.DBCPU)
		}
		if r.Scenario != bench.ScenarioOrdered && r.Contender == bench.PathDirect && r.DBCPU > 0 && r.CPUVsMinimal <= 0 {
			t.Errorf("%s %s: no CPU ratio to the minimal loop", r.Variant, r.Contender)
		}
		if (r.Scenario == bench.ScenarioE2E || r.Scenario == bench.ScenarioLatency) && (r.P50 <= 0 || r.P99 < r.P50) {
			t.Errorf("%s: latencies p50 %s p99 %s", r.Scenario, r.P50, r.P99)
		}
		if (r.Scenario == bench.ScenarioE2E || r.Scenario == bench.ScenarioLatency) && r.Contender != bench.PathOrdered &&
			(r.LongestPause <= 0 || r.LongestPauseMax < r.LongestPause) {
			t.Errorf("%s %s: longest pause %s (at most %s)", r.Scenario, r.Contender, r.LongestPause, r.LongestPauseMax)
		}
	}
	for s, n := range want {
		if got[s] != n {
			t.Errorf("%d results of %s, want %d", got[s], s, n)
		}
	}
	if len(steps) == 0 || !strings.HasPrefix(steps[0], "enlist") || len(steps) != bench.Steps(bench.Config{Quick: true, Producers: 4}) {
		t.Errorf("progress steps = %q, want %d", steps, bench.Steps(bench.Config{Quick: true, Producers: 4}))
	}
	var exists bool
	if err := db.QueryRow(`SELECT EXISTS (SELECT 1 FROM pg_namespace WHERE nspname = $1)`, schema+"_bench").Scan(&exists); err != nil || exists {
		t.Errorf("schema left behind: %v, %v", exists, err)
	}
}

func TestConfigIsValidated(t *testing.T) {
	db := testdb.Open(t, "pgx")
	for _, c := range []bench.Config{
		{},
		{DB: db, Schema: "Bad-Name"},
		{DB: db, Producers: 65},
		{DB: db, Scenarios: []string{"nope"}},
		{DB: db, BodySize: 8},
		{DB: db, PerTx: 101},
		{DB: db, PerTx: -1},
		{DB: db, OrderedBacklog: -1},
		{DB: db, OrderedBacklog: 10_000_001},
		{DB: db, OrderedBatchSize: -1},
		{DB: db, OrderedBatchSize: 10_001},
		{DB: db, Only: []string{"relayer sideways"}},
	} {
		if _, err := bench.Run(context.Background(), c); !errors.Is(err, bench.ErrInvalidConfig) {
			t.Errorf("Run(%+v) = %v, want ErrInvalidConfig", c, err)
		}
	}
}

// The bloat scenario, named, delivers the backlog as is and with a snapshot
// held open, with nothing lost, duplicated or reordered, and rates the
// second against the first.
func TestBloatScenario(t *testing.T) {
	db := testdb.Open(t, "pgx")
	db.SetMaxOpenConns(40)
	schema := testdb.NewSchema(t)
	results, err := bench.Run(context.Background(), bench.Config{DB: db, Schema: schema + "_bench", Quick: true, Producers: 4,
		Scenarios: []string{bench.ScenarioBloat}})
	if err != nil {
		t.Fatal(err)
	}
	if len(results) != 4 || !strings.HasSuffix(results[1].Contender, "snapshot held") || !strings.HasSuffix(results[3].Contender, "snapshot held") ||
		!strings.HasPrefix(results[2].Variant, "stream") || !strings.HasPrefix(results[3].Variant, "stream") {
		t.Fatalf("results = %+v, want the backlog and the stream, each as is and with a snapshot held", results)
	}
	for _, r := range results {
		if r.Lost != 0 || r.Duplicates != 0 || r.OutOfOrder != 0 || r.MsgsPerSec <= 0 {
			t.Errorf("%s, %s: %.0f msg/s, %d lost, %d duplicates, %d out of order", r.Variant, r.Contender, r.MsgsPerSec, r.Lost, r.Duplicates, r.OutOfOrder)
		}
	}
	for _, r := range results[2:] {
		if r.P50 <= 0 || r.P99 < r.P50 {
			t.Errorf("%s, %s: p50 %s, p99 %s", r.Variant, r.Contender, r.P50, r.P99)
		}
	}
	if want := results[1].MsgsPerSec / results[0].MsgsPerSec; results[1].Ratio != want {
		t.Errorf("backlog ratio %.2f, want %.2f", results[1].Ratio, want)
	}
	if want := float64(results[3].P99) / float64(results[2].P99); results[3].Ratio != want {
		t.Errorf("stream ratio %.2f, want %.2f", results[3].Ratio, want)
	}
}
