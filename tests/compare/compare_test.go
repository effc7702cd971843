package compare_test

import (
	"bytes"
	"context"
	"image/png"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/relayer-go/relayer/internal/testkit/testdb"
	"github.com/relayer-go/relayer/internal/tool/bench"
	"github.com/relayer-go/relayer/tests/compare"
)

func TestMain(m *testing.M) { testdb.Main(m) }

// A brief comparison runs Watermill beside the hand-written loop and Relayer
// in every scenario it takes part in, loses and duplicates nothing, and
// gives the tables and charts of the benchmarks page.
func TestQuickComparison(t *testing.T) {
	db := testdb.Open(t, "pgx")
	db.SetMaxOpenConns(40)
	schema := testdb.NewSchema(t) + "_cmp"
	results, err := bench.Run(context.Background(), bench.Config{DB: db, Schema: schema, Quick: true, Producers: 4,
		Duration: 700 * time.Millisecond, Backlog: 3000,
		Scenarios:  []string{bench.ScenarioEnlist, bench.ScenarioE2E, bench.ScenarioLatency, bench.ScenarioDrain},
		Contenders: []bench.Contender{compare.Watermill(false), compare.Watermill(true)}})
	if err != nil {
		t.Fatal(err)
	}
	seen := map[string]int{}
	for _, r := range results {
		seen[r.Scenario+"/"+r.Contender]++
		if r.Lost != 0 || r.Duplicates != 0 || r.OutOfOrder != 0 {
			t.Errorf("%s %s %s: %d lost, %d duplicates, %d out of order", r.Scenario, r.Variant, r.Contender, r.Lost, r.Duplicates, r.OutOfOrder)
		}
		if r.Contender == compare.NameWatermillTuned && r.Scenario != bench.ScenarioEnlist && r.MsgsPerSec <= 0 {
			t.Errorf("%s %s: nothing delivered", r.Scenario, r.Contender)
		}
	}
	for key, want := range map[string]int{
		"enlist/" + compare.NameWatermill: 3, "enlist/" + compare.NameWatermillTuned: 0,
		"e2e/" + compare.NameWatermill: 1, "e2e/" + compare.NameWatermillTuned: 1,
		"latency/" + compare.NameWatermillTuned: 1, "drain/" + compare.NameWatermill: 1, "drain/" + compare.NameWatermillTuned: 1,
		"drain/" + bench.PathRecovery: 1, "drain/" + (bench.Loop{}).Name(): 1,
	} {
		if seen[key] != want {
			t.Errorf("%d results for %s, want %d", seen[key], key, want)
		}
	}

	var md bytes.Buffer
	if err := compare.WriteMarkdown(&md, results); err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{"| enlist | 10 per tx | watermill |", "| drain | 3000 rows | watermill tuned |", "| e2e | 10 per tx | relayer direct |"} {
		if !strings.Contains(md.String(), want) {
			t.Errorf("markdown lacks %q:\n%s", want, md.String())
		}
	}

	files, err := compare.WriteCharts(t.TempDir(), results)
	if err != nil {
		t.Fatal(err)
	}
	if len(files) != 4 {
		t.Errorf("charts %q, want enlist, e2e, latency and drain", files)
	}
	for _, f := range files {
		fh, err := os.Open(f)
		if err != nil {
			t.Fatal(err)
		}
		img, err := png.Decode(fh)
		fh.Close()
		if err != nil || img.Bounds().Dx() < 500 {
			t.Errorf("%s: %v, %v", f, err, img)
		}
	}
}
