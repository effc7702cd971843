package main

import (
	"context"
	"io"
	"strings"
	"testing"

	"github.com/relayer-go/relayer/cmd/relayer/internal/cli"
	"github.com/relayer-go/relayer/cmd/relayer/internal/command"
	"github.com/relayer-go/relayer/cmd/relayer/internal/commandtest"
	"github.com/relayer-go/relayer/internal/testkit/testdb"
)

func TestMain(m *testing.M) { testdb.Main(m) }

// run runs the command line args in-process.
func run(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	return cli.Run(ctx, commands(), args, stdout, stderr)
}

// result is the outcome of one in-process run of the command.
type result = commandtest.Result

// runCmd runs the command line args in-process.
func runCmd(t *testing.T, args ...string) result { return commandtest.Run(t, run, args...) }

// The development command has the deployable's commands, and the demo and
// the benchmark besides.
func TestUsageListsTheDemoAndTheBenchmark(t *testing.T) {
	t.Parallel()
	r := runCmd(t, "help")
	for _, name := range []string{"demo", "bench", "run", "migrate", "parked", "console"} {
		if r.Code != command.ExitOK || !strings.Contains(r.Stdout, "\n  "+name+" ") {
			t.Errorf("help: code %d, no %s in stdout %q", r.Code, name, r.Stdout)
		}
	}
	r = runCmd(t, "demo", "-h")
	if r.Code != command.ExitOK || !strings.Contains(r.Stderr, "example:\n  relayer demo") {
		t.Errorf("demo -h: code %d, stderr %q", r.Code, r.Stderr)
	}
}

func TestDemoBadFlagsNameTheFlag(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"demo", "--messages", "0"}, "--messages 0"},
		{[]string{"demo", "--workers", "99"}, "--workers 99"},
		{[]string{"demo", "--schema", "Nope"}, `--schema "Nope"`},
	} {
		r := runCmd(t, tc.args...)
		if r.Code != command.ExitUsage || !strings.Contains(r.Stderr, tc.want) {
			t.Errorf("%v: code %d, want %d; stderr %q does not contain %q", tc.args, r.Code, command.ExitUsage, r.Stderr, tc.want)
		}
	}
}

// startNATSServer runs the demo's embedded JetStream server for the rest of
// the test and returns its URL.
func startNATSServer(t testing.TB) string {
	t.Helper()
	s, err := startEmbeddedNATS(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { stopEmbeddedNATS(s) })
	return s.ClientURL()
}
