package cli

import (
	"bytes"
	"context"
	"encoding/json"
	"io"
	"strings"
	"testing"

	"github.com/relayer-go/relayer/cmd/relayer/internal/command"
	"github.com/relayer-go/relayer/cmd/relayer/internal/commandtest"
	"github.com/relayer-go/relayer/cmd/relayer/internal/relay"
	"github.com/relayer-go/relayer/internal/testkit/testdb"
)

func TestMain(m *testing.M) { testdb.Main(m) }

// run runs the command line args in-process as the deployable relayer
// does.
func run(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	return Run(ctx, Commands(relay.Command), args, stdout, stderr)
}

// result is the outcome of one in-process run of the command.
type result = commandtest.Result

// runCmd runs the command line args in-process.
func runCmd(t *testing.T, args ...string) result { return commandtest.Run(t, run, args...) }

func TestUsage(t *testing.T) {
	t.Parallel()
	r := runCmd(t)
	if r.Code != command.ExitUsage || !strings.Contains(r.Stderr, "usage: relayer <command>") {
		t.Errorf("no arguments: code %d, stderr %q", r.Code, r.Stderr)
	}
	r = runCmd(t, "frobnicate")
	if r.Code != command.ExitUsage || !strings.Contains(r.Stderr, `unknown command "frobnicate"`) {
		t.Errorf("unknown command: code %d, stderr %q", r.Code, r.Stderr)
	}
	r = runCmd(t, "help")
	if r.Code != command.ExitOK || !strings.Contains(r.Stdout, "run") || !strings.Contains(r.Stdout, "parked") {
		t.Errorf("help: code %d, stdout %q", r.Code, r.Stdout)
	}
}

func TestHelpHasExample(t *testing.T) {
	t.Parallel()
	for _, args := range [][]string{
		{"console", "-h"}, {"schema", "-h"}, {"migrate", "-h"}, {"stats", "-h"},
		{"lanes", "-h"}, {"dead", "list", "-h"}, {"parked", "list", "-h"}, {"dead", "-h"},
	} {
		r := runCmd(t, args...)
		if r.Code != command.ExitOK {
			t.Errorf("%v: code %d, stderr %q", args, r.Code, r.Stderr)
		}
		if !strings.Contains(r.Stderr, "example:\n  relayer "+args[0]) || !strings.Contains(r.Stderr, "-") {
			t.Errorf("%v: help without an example:\n%s", args, r.Stderr)
		}
	}
}

func TestBadFlagsNameTheFlag(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"schema", "--schema", "Bad-Name"}, `--schema "Bad-Name"`},
		{[]string{"schema", "--prefix", "x y"}, `--prefix "x y"`},
		{[]string{"stats", "--database-url", "postgres://x@127.0.0.1/db", "--schema", "pg_x"}, `--schema "pg_x"`},
		{[]string{"stats", "--bogus"}, "-bogus"},
		{[]string{"stats", "--database-url", ""}, "--database-url is required"},
		{[]string{"stats", "--database-url", "postgres://x@127.0.0.1/db?sslmode=bogus"}, "--database-url"},
		{[]string{"dead"}, "missing subcommand"},
		{[]string{"dead", "redrive"}, `unknown subcommand "redrive"`},
		{[]string{"parked", "list", "--limit", "0"}, "--limit 0"},
		{[]string{"schema", "extra"}, `unexpected argument "extra"`},
	} {
		r := runCmd(t, tc.args...)
		if r.Code != command.ExitUsage {
			t.Errorf("%v: code %d, want %d; stderr %q", tc.args, r.Code, command.ExitUsage, r.Stderr)
		}
		if !strings.Contains(r.Stderr, tc.want) {
			t.Errorf("%v: stderr %q does not contain %q", tc.args, r.Stderr, tc.want)
		}
	}
}

func TestBadDatabaseURLIsOneLine(t *testing.T) {
	t.Parallel()
	// Nothing listens on port 1.
	r := runCmd(t, "stats", "--database-url", "postgres://nobody@127.0.0.1:1/nothing?connect_timeout=2")
	if r.Code != command.ExitFail {
		t.Errorf("code %d, want %d", r.Code, command.ExitFail)
	}
	if !strings.HasPrefix(r.Stderr, "relayer stats: --database-url: cannot connect") {
		t.Errorf("stderr %q does not name the flag", r.Stderr)
	}
	if n := strings.Count(r.Stderr, "\n"); n != 1 {
		t.Errorf("stderr has %d lines, want 1: %q", n, r.Stderr)
	}
	if strings.Contains(r.Stderr, "goroutine") || strings.Contains(r.Stderr, "panic") {
		t.Errorf("stderr looks like a stack trace: %q", r.Stderr)
	}
}

// A password in --database-url, which the process list shows, is warned of
// once, without printing it; a URL without one is not.
func TestDatabaseURLPasswordIsWarnedOf(t *testing.T) {
	t.Parallel()
	const warning = "relayer stats: warning: --database-url carries a password"
	for _, url := range []string{
		"postgres://nobody:s3cret@127.0.0.1:1/nothing?connect_timeout=2",
		"postgresql://nobody@127.0.0.1:1/nothing?connect_timeout=2&password=s3cret",
		"host=127.0.0.1 port=1 user=nobody password=s3cret connect_timeout=2",
	} {
		r := runCmd(t, "stats", "--database-url", url)
		if r.Code != command.ExitFail || !strings.HasPrefix(r.Stderr, warning) || strings.Count(r.Stderr, "warning") != 1 {
			t.Errorf("%s: code %d, stderr %q; want exit %d after one warning", url, r.Code, r.Stderr, command.ExitFail)
		}
		if strings.Contains(r.Stderr+r.Stdout, "s3cret") {
			t.Errorf("%s: the password is printed: %q", url, r.Stderr)
		}
	}
	r := runCmd(t, "stats", "--database-url", "postgres://nobody@127.0.0.1:1/nothing?connect_timeout=2")
	if strings.Contains(r.Stderr, "warning") {
		t.Errorf("a URL without a password is warned of: %q", r.Stderr)
	}
}

// relayer version and --version print the command's and the library's
// versions from the build information.
func TestVersion(t *testing.T) {
	t.Parallel()
	for _, args := range [][]string{{"version"}, {"--version"}} {
		r := runCmd(t, args...)
		if r.Code != command.ExitOK || !strings.HasPrefix(r.Stdout, "relayer ") || !strings.Contains(r.Stdout, "library ") || !strings.Contains(r.Stdout, "go1.") {
			t.Errorf("%v: code %d, stdout %q", args, r.Code, r.Stdout)
		}
	}
	if r := runCmd(t, "version", "extra"); r.Code != command.ExitUsage {
		t.Errorf("version with an argument: code %d, want %d", r.Code, command.ExitUsage)
	}
	// --json, as every other command takes it.
	r := runCmd(t, "version", "--json")
	var v struct{ Command, Library, Go string }
	if err := json.Unmarshal([]byte(r.Stdout), &v); r.Code != command.ExitOK || err != nil || v.Library == "" || !strings.HasPrefix(v.Go, "go1.") {
		t.Errorf("version --json: code %d, stdout %q, %v", r.Code, r.Stdout, err)
	}
}

// JSON output escapes what a terminal would act on (a bidirectional
// override reorders a line that jq -r prints), and decodes to the same
// strings.
func TestJSONOutputEscapesNonPrintingRunes(t *testing.T) {
	t.Parallel()
	in := map[string]string{"type": "orders.\u202eflipped", "key": "k\u2066x\U000E0001", "plain": "é ok"}
	var buf bytes.Buffer
	if err := command.NewJSONEncoder(&buf).Encode(in); err != nil {
		t.Fatal(err)
	}
	out := buf.String()
	for _, r := range []string{"\u202e", "\u2066", "\U000E0001"} {
		if strings.Contains(out, r) {
			t.Errorf("output %q holds %U raw", out, []rune(r)[0])
		}
	}
	if !strings.Contains(out, `\u202e`) || !strings.Contains(out, `\udb40\udc01`) || !strings.Contains(out, "é ok") {
		t.Errorf("output %q: want \\u202e, a surrogate pair, and printable text as is", out)
	}
	var back map[string]string
	if err := json.Unmarshal(buf.Bytes(), &back); err != nil || back["type"] != in["type"] || back["key"] != in["key"] || back["plain"] != in["plain"] {
		t.Errorf("decoded %q, %v; want %q", back, err, in)
	}
}
