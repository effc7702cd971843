package main

import (
	"bytes"
	"context"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"go.uber.org/goleak"

	"github.com/relayer-go/relayer/cmd/relayer/internal/command"
	"github.com/relayer-go/relayer/internal/testkit/testdb"
)

// TestDemo is not parallel: it runs before the parallel tests start, so the
// leak check sees only the demo's goroutines.
func TestDemo(t *testing.T) {
	defer goleak.VerifyNone(t, goleak.IgnoreCurrent())
	url, schema := testdb.URL(t), testdb.NewSchema(t)
	r := runCmd(t, "demo", "--messages", "200", "--workers", "2", "--database-url", url, "--schema", schema)
	if r.Code != command.ExitOK {
		t.Fatalf("code %d\nstdout:\n%s\nstderr:\n%s", r.Code, r.Stdout, r.Stderr)
	}
	for _, want := range []string{
		"result: OK, all 200 messages delivered",
		"per-key order: verified over 20 customers",
		"duplicates seen: 0",
		"exactly-once effects: verified: 90 invoices for 90 orders placed, written by 2 billing consumers",
		"commit-to-broker latency: p50",
	} {
		if !strings.Contains(r.Stdout, want) {
			t.Errorf("summary lacks %q:\n%s", want, r.Stdout)
		}
	}
	// Every entry point wrote and delivered its share, and every route was used.
	for _, row := range []string{"database/sql", "sqlx", "bun", "gorm", "total", "unordered", "ordered by customer", "scheduled"} {
		re := regexp.MustCompile(`(?m)^  ` + regexp.QuoteMeta(row) + `[^\n]*?\s+(\d+)\s+(\d+)$`)
		m := re.FindStringSubmatch(r.Stdout)
		if m == nil {
			t.Errorf("no %q row in the summary:\n%s", row, r.Stdout)
			continue
		}
		if m[1] != m[2] || m[1] == "0" {
			t.Errorf("%s: written %s, delivered %s", row, m[1], m[2])
		}
	}
	if !strings.Contains(r.Stdout, "progress: ") {
		t.Errorf("no plain progress lines when stdout is not a terminal:\n%s", r.Stdout)
	}
	if strings.Contains(r.Stdout, "\r") {
		t.Errorf("a progress bar was drawn on a non-terminal")
	}
	if r.Stderr != "" {
		t.Logf("stderr (dispatcher warnings):\n%s", r.Stderr)
	}
}

// TestDemoInterrupted cancels the run as Ctrl-C does: the demo reports what
// it saw, exits non-zero and leaves no goroutine behind.
func TestDemoInterrupted(t *testing.T) {
	defer goleak.VerifyNone(t, goleak.IgnoreCurrent())
	url, schema := testdb.URL(t), testdb.NewSchema(t)
	ctx, cancel := context.WithTimeout(t.Context(), 1500*time.Millisecond)
	defer cancel()
	var stdout, stderr bytes.Buffer
	code := run(ctx, []string{"demo", "--messages", "1000000", "--database-url", url, "--schema", schema}, &stdout, &stderr)
	if code != command.ExitFail {
		t.Errorf("code %d, want %d", code, command.ExitFail)
	}
	if !strings.Contains(stdout.String(), "result: FAILED: interrupted") {
		t.Errorf("summary:\n%s", stdout.String())
	}
	if !strings.Contains(stderr.String(), "relayer demo: interrupted") {
		t.Errorf("stderr:\n%s", stderr.String())
	}
}

// TestDemoWithNATSURL brings its own NATS server, as --nats-url does with a
// real one; the demo's stream is removed afterwards.
func TestDemoWithNATSURL(t *testing.T) {
	t.Parallel()
	url := startNATSServer(t)
	r := runCmd(t, "demo", "--messages", "41", "--workers", "1", "--database-url", testdb.URL(t),
		"--schema", testdb.NewSchema(t), "--nats-url", url)
	if r.Code != command.ExitOK || !strings.Contains(r.Stdout, "result: OK, all 41 messages delivered") {
		t.Fatalf("code %d\nstdout:\n%s\nstderr:\n%s", r.Code, r.Stdout, r.Stderr)
	}
	nc, err := nats.Connect(url)
	if err != nil {
		t.Fatal(err)
	}
	defer nc.Close()
	js, err := jetstream.New(nc)
	if err != nil {
		t.Fatal(err)
	}
	info, err := js.AccountInfo(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	if info.Streams != 0 {
		t.Errorf("%d streams left on the server, want 0", info.Streams)
	}
}

func TestPercentile(t *testing.T) {
	t.Parallel()
	ds := make([]time.Duration, 100)
	for i := range ds {
		ds[i] = time.Duration(100-i) * time.Millisecond
	}
	if p := percentile(ds, 50); p != 50*time.Millisecond {
		t.Errorf("p50 = %s", p)
	}
	if p := percentile(ds, 99); p != 99*time.Millisecond {
		t.Errorf("p99 = %s", p)
	}
	if p := percentile(nil, 99); p != 0 {
		t.Errorf("p99 of nothing = %s", p)
	}
}
