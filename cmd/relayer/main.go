// Command relayer runs the Relayer demo and the operator commands of an
// outbox in PostgreSQL.
//
// # Demo
//
//	go run ./cmd/relayer demo
//
// starts a throwaway PostgreSQL cluster and an embedded NATS JetStream server
// (or uses --database-url and --nats-url), writes orders and their messages
// through all five entry points (database/sql, sqlx, bun, GORM and pgx), delivers
// them with direct dispatch, ordered lane workers and recovery, consumes them
// back from JetStream and checks that every message arrived and that each
// customer's ordered messages arrived in order. It prints live progress (a
// redrawn bar on a terminal, plain lines otherwise) and a summary: messages
// written and delivered per entry point and route, per-key order, duplicates,
// throughput and commit-to-broker latency. It exits non-zero when a message is
// missing or out of order. Flags: --messages (default 2000), --workers
// (ordered workers, default 2), --duration (a cap, default 2m), --schema
// (default relayer_demo, emptied at start).
//
// # Operator commands
//
// Against an existing outbox (--database-url, --schema, --prefix):
//
//	relayer schema              print the DDL
//	relayer migrate             create or upgrade the tables (--check: exit 1 while steps
//	                            are pending or the tables are newer than the command)
//	relayer stats [--json] [--watch]
//	                            backlog, retries, parked keys, dead letters by reason,
//	                            paused destinations, members and lane owners
//	relayer lanes               the current lane assignment by member
//	relayer dead list           dead letters and why they died (filters: --id, --type,
//	                            --destination, --key, --reason, --older-than)
//	relayer dead show ID        one dead letter in full: headers and body
//	relayer dead requeue        move dead letters back into the outbox (filters or --all)
//	relayer dead purge          delete dead letters, such as --older-than 720h (filters or --all)
//	relayer parked list         parked keys: the parked head, its last error, rows waiting
//	relayer parked retry        release parked keys; each resumes at its head (--key, filters or --all)
//	relayer parked skip --key K move a key's parked head to the dead letters, breaking its order
//	relayer console             the web console: backlog, lanes, parked keys, dead letters,
//	                            messages, and their actions (--listen, --token, --read-only,
//	                            --show-bodies, --allowed-host, --max-conns, --query-timeout)
//
// # Relay
//
//	relayer run --transport nats=nats://nats:4222 --http :9090
//
// delivers an outbox's messages as a process of its own: recovery, the
// ordered lane workers and retention cleanup, configured by flags and
// RELAYER_* environment variables, with /healthz, /readyz and /metrics (see
// docs/relay.md).
//
// # Benchmarks
//
//	relayer bench [--database-url URL] [--scenario enlist,e2e,latency,drain,ordered] [--quick] [--json]
//
// measures, in a schema of its own (dropped afterwards unless --keep): what
// enlistment costs a business transaction, end-to-end throughput and
// commit-to-send latency, latency at a fixed rate (--rate), the drain of a
// backlog (--backlog) through recovery, and ordered dispatch with 1, 2 and 4
// workers, each counting lost, duplicate and out-of-order messages. Messages
// go to an in-process sink, or to NATS JetStream with --sink nats. Without
// --database-url it starts a throwaway PostgreSQL cluster.
//
// relayer version (or --version) prints the versions of the command and of
// the library it was built with, and the commit.
//
// --database-url defaults to the DATABASE_URL environment variable. Every
// command has -h with an example.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/signal"
	"strconv"
	"strings"
	"syscall"
	"unicode"
	"unicode/utf8"
)

// Exit statuses.
const (
	exitOK    = 0
	exitFail  = 1 // the command ran and failed
	exitUsage = 2 // the command line is wrong
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	code := run(ctx, os.Args[1:], os.Stdout, os.Stderr)
	stop()
	os.Exit(code)
}

// command is one subcommand: its name, a one-line summary for the usage text,
// and the function that parses its flags and runs it.
type command struct {
	name    string
	summary string
	run     func(ctx context.Context, args []string, stdout, stderr io.Writer) error
}

func commands() []command {
	return []command{
		{"demo", "run the end-to-end demo (throwaway PostgreSQL and embedded NATS)", runDemo},
		{"schema", "print the DDL of an outbox", runSchema},
		{"migrate", "create or upgrade the tables of an outbox", runMigrate},
		{"stats", "show backlog, parked and dead rows, members and lane owners", runStats},
		{"lanes", "show the lane assignment by member", runLanes},
		{"dead", "list, show, requeue or purge dead letters", runDead},
		{"parked", "list parked keys, retry them or skip their head", runParked},
		{"held", "list the keys consumers hold, retry them or skip their first message", runHeld},
		{"run", "deliver an outbox's messages as a process of its own (a relay)", runRelay},
		{"console", "serve the operator's web console of an outbox", runConsole},
		{"bench", "measure enlistment, throughput, latency, drain and ordered dispatch on a database", runBench},
		{"version", "print the version of the command and its library", runVersion},
	}
}

func usage(w io.Writer) {
	fmt.Fprintln(w, "usage: relayer <command> [flags]")
	fmt.Fprintln(w)
	fmt.Fprintln(w, "commands:")
	for _, c := range commands() {
		fmt.Fprintf(w, "  %-8s %s\n", c.name, c.summary)
	}
	fmt.Fprintln(w)
	fmt.Fprintln(w, `Run "relayer <command> -h" for the flags of a command.`)
}

// run runs the command line args (without the program name) and returns the
// exit status. ctx ends on Ctrl-C.
func run(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	if len(args) == 0 {
		usage(stderr)
		return exitUsage
	}
	name := args[0]
	if name == "-h" || name == "--help" || name == "help" {
		usage(stdout)
		return exitOK
	}
	if name == "--version" || name == "-version" {
		fmt.Fprintln(stdout, versionInfo())
		return exitOK
	}
	for _, c := range commands() {
		if c.name != name {
			continue
		}
		err := c.run(ctx, args[1:], stdout, stderr)
		switch {
		case err == nil, errors.Is(err, flag.ErrHelp):
			return exitOK
		case !errors.As(err, new(loggedError)):
			fmt.Fprintf(stderr, "relayer %s: %s\n", name, oneLine(err.Error()))
		}
		return exitStatus(err)
	}
	fmt.Fprintf(stderr, "relayer: unknown command %q\n\n", name)
	usage(stderr)
	return exitUsage
}

// exitStatus is the exit status of a command that failed with err.
func exitStatus(err error) int {
	if errors.As(err, new(usageError)) {
		return exitUsage
	}
	return exitFail
}

// loggedError is an error a command has reported already, as the last line
// of its log: run exits with its status and prints nothing more.
type loggedError struct{ err error }

func (e loggedError) Error() string { return e.err.Error() }
func (e loggedError) Unwrap() error { return e.err }

// usageError is a wrong command line: a bad flag value, a missing argument.
type usageError struct{ msg string }

func (e usageError) Error() string { return e.msg }

func usagef(format string, args ...any) error { return usageError{fmt.Sprintf(format, args...)} }

// oneLine returns s fit for a table cell: runs of white space become one
// space, and whatever a terminal would act on instead of printing (control
// characters such as ESC, other non-printing runes, invalid UTF-8) is written
// as a Go escape such as \x1b, so that a key, a type or an error cannot
// retitle, clear or recolour the operator's terminal.
func oneLine(s string) string {
	s = strings.Join(strings.Fields(s), " ")
	clean := true
	for _, r := range s {
		if r == utf8.RuneError || !unicode.IsPrint(r) {
			clean = false
			break
		}
	}
	if clean {
		return s
	}
	var b strings.Builder
	for i := 0; i < len(s); {
		r, size := utf8.DecodeRuneInString(s[i:])
		switch {
		case r == utf8.RuneError && size <= 1:
			fmt.Fprintf(&b, `\x%02x`, s[i])
		case !unicode.IsPrint(r):
			q := strconv.QuoteRune(r)
			b.WriteString(q[1 : len(q)-1])
		default:
			b.WriteString(s[i : i+size])
		}
		i += size
	}
	return b.String()
}

// newFlagSet returns a flag set whose -h prints the summary, an example and
// the flags. Parse errors are returned, not printed twice.
func newFlagSet(name, summary, example string, stderr io.Writer) *flag.FlagSet {
	fs := flag.NewFlagSet("relayer "+name, flag.ContinueOnError)
	fs.SetOutput(stderr) // its Output is where the command warns (see parseArgs)
	fs.Usage = func() {
		fs.SetOutput(stderr)
		fmt.Fprintf(stderr, "usage: relayer %s [flags]\n\n%s\n\nexample:\n  %s\n\nflags:\n", name, summary, example)
		fs.PrintDefaults()
	}
	return fs
}

// parse parses args and turns flag errors into usage errors; -h returns
// flag.ErrHelp. Positional arguments are refused.
func parse(fs *flag.FlagSet, args []string) error {
	rest, err := parseArgs(fs, args)
	if err != nil {
		return err
	}
	if len(rest) > 0 {
		return usagef("unexpected argument %q", rest[0])
	}
	return nil
}

// parseArgs is parse for commands that take positional arguments: flags may
// come before, between and after them, up to a "--" that ends the flags. It
// returns the positional arguments in order.
func parseArgs(fs *flag.FlagSet, args []string) ([]string, error) {
	// The flag package prints the error and the whole usage on a bad flag; the
	// error is reported once, by run, and the usage only on -h.
	help, out := fs.Usage, fs.Output()
	fs.Usage = func() {}
	fs.SetOutput(io.Discard)
	defer func() { fs.Usage = help; fs.SetOutput(out) }()
	var positional []string
	for {
		err := fs.Parse(args)
		if errors.Is(err, flag.ErrHelp) {
			help()
			return nil, err
		}
		if err != nil {
			return nil, usageError{err.Error()}
		}
		rest := fs.Args()
		if len(rest) == 0 {
			return positional, nil
		}
		if consumed := len(args) - len(rest); consumed > 0 && args[consumed-1] == "--" {
			return append(positional, rest...), nil
		}
		positional = append(positional, rest[0])
		args = rest[1:]
	}
}
