// Package cli is the relayer programs' command line: the table of their
// commands and the operator commands against an existing outbox (schema,
// migrate, stats, lanes, dead, parked, held, console, version). The
// programs add their own: the relay's run (package relay) in both, the demo
// and the benchmark in the development command only.
package cli

import (
	"context"
	"fmt"
	"io"
	"os"
	"os/signal"
	"syscall"

	"github.com/relayer-go/relayer/cmd/relayer/internal/command"
)

// Command is one subcommand: its name, a one-line summary for the usage
// text, and the function that parses its flags and runs it. Run returns
// flag.ErrHelp for -h, a command.UsageError for a wrong command line, and a
// command.LoggedError for an error it reported itself.
type Command struct {
	Name    string
	Summary string
	Run     RunFunc
}

// RunFunc is the function of a command.
type RunFunc = func(ctx context.Context, args []string, stdout, stderr io.Writer) error

// Commands returns the operator commands, in the order the usage lists
// them, with run among them: the relay, relay.Command, which this package
// leaves to the programs so that its tests may run the commands here.
func Commands(run RunFunc) []Command {
	return []Command{
		{"schema", "print the DDL of an outbox", runSchema},
		{"migrate", "create or upgrade the tables of an outbox", runMigrate},
		{"stats", "show backlog, parked and dead rows, members and lane owners", runStats},
		{"lanes", "show the lane assignment by member", runLanes},
		{"dead", "list, show, requeue or purge dead letters", runDead},
		{"parked", "list parked keys, retry them or skip their head", runParked},
		{"held", "list the keys consumers hold, retry them or skip their first message", runHeld},
		{"run", "deliver an outbox's messages as a process of its own (a relay)", run},
		{"console", "serve the operator's web console of an outbox", runConsole},
		{"version", "print the version of the command and its library", runVersion},
	}
}

// Main runs the program whose commands are cmds: it runs os.Args, ending
// the context on the first SIGINT or SIGTERM, and exits with the
// command's status.
func Main(cmds []Command) {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	code := Run(ctx, cmds, os.Args[1:], os.Stdout, os.Stderr)
	stop()
	os.Exit(code)
}

// Run runs the command line args (without the program name) against cmds
// and returns the exit status. ctx ends on Ctrl-C.
func Run(ctx context.Context, cmds []Command, args []string, stdout, stderr io.Writer) int {
	if len(args) == 0 {
		usage(stderr, cmds)
		return command.ExitUsage
	}
	name := args[0]
	if name == "-h" || name == "--help" || name == "help" {
		usage(stdout, cmds)
		return command.ExitOK
	}
	if name == "--version" || name == "-version" {
		fmt.Fprintln(stdout, command.VersionInfo())
		return command.ExitOK
	}
	for _, c := range cmds {
		if c.Name == name {
			return command.Exit(name, c.Run(ctx, args[1:], stdout, stderr), stderr)
		}
	}
	fmt.Fprintf(stderr, "relayer: unknown command %q\n\n", name)
	usage(stderr, cmds)
	return command.ExitUsage
}

func usage(w io.Writer, cmds []Command) {
	fmt.Fprintln(w, "usage: relayer <command> [flags]")
	fmt.Fprintln(w)
	fmt.Fprintln(w, "commands:")
	for _, c := range cmds {
		fmt.Fprintf(w, "  %-8s %s\n", c.Name, c.Summary)
	}
	fmt.Fprintln(w)
	fmt.Fprintln(w, `Run "relayer <command> -h" for the flags of a command.`)
}
