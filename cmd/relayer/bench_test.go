package main

import (
	"bytes"
	"encoding/json"
	"strings"
	"testing"

	"github.com/relayer-go/relayer/cmd/relayer/internal/command"
	"github.com/relayer-go/relayer/internal/testkit/testdb"
)

// relayer bench --quick runs every scenario on the test database and prints a
// table, or JSON lines, with nothing lost, duplicated or out of order.
func TestBenchQuick(t *testing.T) {
	t.Parallel()
	url := testdb.URL(t)
	schema := testdb.NewSchema(t) + "_b"
	var out, errOut bytes.Buffer
	code := run(t.Context(), []string{"bench", "--database-url", url, "--schema", schema, "--quick", "--producers", "4", "--json"}, &out, &errOut)
	if code != command.ExitOK {
		t.Fatalf("code %d, stderr:\n%s", code, errOut.String())
	}
	lines := strings.Split(strings.TrimSpace(out.String()), "\n")
	if len(lines) != 33 { // 27, and the enlist scenario's pgx writer and minimal loop on database/sql at 1, 10 and 100 per tx
		t.Fatalf("%d JSON lines, want 33:\n%s", len(lines), out.String())
	}
	if n := strings.Count(out.String(), `"contender":"relayer direct (pgx)"`); n != 3 {
		t.Errorf("%d results of the pgx writer, want 3 (enlist at 1, 10 and 100 per tx)", n)
	}
	for _, l := range lines {
		var r struct {
			Scenario   string  `json:"scenario"`
			Variant    string  `json:"variant"`
			Contender  string  `json:"contender"`
			MsgsPerSec float64 `json:"msgs_per_sec"`
			Lost       int     `json:"lost"`
			Duplicates int     `json:"duplicates"`
			OutOfOrder int     `json:"out_of_order"`
		}
		if err := json.Unmarshal([]byte(l), &r); err != nil {
			t.Fatalf("%q: %v", l, err)
		}
		// Ordered workers find new rows when they next poll, which can be
		// after a quick run's one second.
		if r.Lost+r.Duplicates+r.OutOfOrder != 0 || (r.Scenario != "enlist" && r.Contender != "relayer ordered" && r.MsgsPerSec <= 0) {
			t.Errorf("result %+v", r)
		}
	}
	if !strings.Contains(errOut.String(), "step 33/33") {
		t.Errorf("progress lines missing:\n%s", errOut.String())
	}
	// The table form, one scenario, on NATS.
	out.Reset()
	errOut.Reset()
	code = run(t.Context(), []string{"bench", "--database-url", url, "--schema", schema + "2", "--quick", "--scenario", "drain", "--backlog", "2000", "--sink", "nats"}, &out, &errOut)
	if code != command.ExitOK || !strings.Contains(out.String(), "sink nats") || !strings.Contains(out.String(), "relayer recovery") || !strings.Contains(out.String(), "2000 rows") {
		t.Errorf("code %d, stdout:\n%s\nstderr:\n%s", code, out.String(), errOut.String())
	}
	// Bad flags are usage errors naming the flag.
	for _, args := range [][]string{{"--scenario", "nope"}, {"--producers", "0"}, {"--per-tx", "0"}, {"--per-tx", "101"}, {"--sink", "kafka-ish"}, {"--schema", "Bad"}} {
		errOut.Reset()
		if code := run(t.Context(), append([]string{"bench", "--database-url", url}, args...), &out, &errOut); code != command.ExitUsage {
			t.Errorf("bench %v: code %d, stderr %q", args, code, errOut.String())
		}
	}
}
