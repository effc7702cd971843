package relay

import (
	"context"
	"flag"
	"io"
	"os"
	"strings"

	"github.com/relayer-go/relayer/cmd/relayer/internal/command"
)

// runSummary is `relayer run -h`'s text.
const runSummary = "Run the outbox's delivery as a process of its own: recovery and the ordered lane workers (and\n" +
	"retention cleanup), sending each row through the transport its producer routed it to. Run as many\n" +
	"as you like against one outbox: they share recovery's lease and the lanes. Producers only write\n" +
	"(enlist.Writer, with enlist.Options.Wake so that a commit wakes the relays at once).\n\n" +
	"Workers' settings come from the environment, as dispatch.LoadRunnerOptions reads them with the\n" +
	"prefix RELAYER_: RELAYER_ORDERED_WORKERS, RELAYER_RECOVERY_WORKERS, RELAYER_ORDERED_BATCH_SIZE,\n" +
	"RELAYER_DISABLE_CLEANUP, RELAYER_LISTEN (default true here) and so on. Recovery takes rows at once\n" +
	"(unless RELAYER_RECOVERY_MIN_AGE is set), as no process sends them right after their commit. Failed\n" +
	"sends are retried as RELAYER_RETRY_MAX_ATTEMPTS, RELAYER_RETRY_BACKOFF and RELAYER_RETRY_MAX_BACKOFF\n" +
	"say (default: 10 attempts, 1s doubling up to 5m); the producers' per-route policies are theirs.\n" +
	"A RELAYER_ variable the relay does not read is refused, naming the nearest setting (names\n" +
	"starting RELAYER_TEST_ are the tests' and left alone).\n\n" +
	transportHelp + "\n\n" +
	"Endpoints (with --http ADDR): /healthz answers 200 while the process runs; /readyz 200 once the\n" +
	"workers started while the database answers, the schema is current, the wake-up listener is\n" +
	"subscribed and every transport is connected with no destination paused (503 with the failing\n" +
	"check otherwise, and from the first signal on); /metrics the\n" +
	"library's OpenTelemetry metrics in the Prometheus text format; with --console, the web console\n" +
	"under /console/, its token in $" + consoleTokenEnv + ". They answer to loopback names, IP addresses\n" +
	"and each --allowed-host; another host name gets 421.\n\n" +
	"SIGTERM or SIGINT stop the workers, which finish what they hold within --shutdown-timeout (the\n" +
	"endpoints answering until they have), and the relay exits 0 (1 when the deadline cut them short:\n" +
	"what they held is sent again by another relay); a second signal exits at once. A start that cannot\n" +
	"work exits with the reason on one line (with --log-format json, the log's last line):\n" +
	"2 for a wrong command line or setting (a transport's parameters included), 1 for the rest (an\n" +
	"outdated schema, a broker that does not answer)."

// runExample is `relayer run -h`'s example.
const runExample = "DATABASE_URL=postgres://relay@db:5432/app relayer run --schema messaging --transport nats=nats://nats:4222 --http :9090"

// stringList is a repeatable flag.
type stringList []string

func (s *stringList) String() string     { return strings.Join(*s, " ") }
func (s *stringList) Set(v string) error { *s = append(*s, v); return nil }

// Command is `relayer run`: it parses args into a [Config] and runs a
// [Relay] until ctx ends (the first SIGINT or SIGTERM) and its workers
// stopped. It returns flag.ErrHelp for -h, a command.UsageError for a
// wrong command line or setting, a command.LoggedError for an error the
// relay's JSON log reported already.
func Command(ctx context.Context, args []string, _, stderr io.Writer) error {
	cfg, err := parseFlags(args, stderr)
	if err != nil {
		return err
	}
	return New(cfg, stderr).Run(ctx)
}

// parseFlags returns the Config that `relayer run args` gives.
func parseFlags(args []string, stderr io.Writer) (Config, error) {
	var (
		c          Config
		transports stringList
		hosts      command.HostList
	)
	host, _ := os.Hostname()
	fs := command.NewFlagSet("run", runSummary, runExample, stderr)
	c.Outbox.Register(fs, true)
	fs.IntVar(&c.Lanes, "lanes", 0, "the outbox's lane count; default: the count the outbox records (32 when none is)")
	fs.Var(&transports, "transport", "NAME=URL, NAME=env:VAR or NAME=file:PATH, repeated: a transport the producers route to (default $RELAYER_TRANSPORTS)")
	fs.StringVar(&c.HTTP, "http", "", "address of the health, readiness and metrics endpoints, such as :9090 (default: none)")
	fs.Var(&hosts, "allowed-host", "a host name the endpoints answer to besides loopback names and IP addresses; repeatable")
	fs.BoolVar(&c.Console, "console", false, "serve the web console under /console/ on --http (token in $"+consoleTokenEnv+")")
	fs.DurationVar(&c.ShutdownTimeout, "shutdown-timeout", ShutdownTimeoutDefault, "how long the workers may take to finish what they hold at a stop")
	fs.StringVar(&c.LogFormat, "log-format", "text", "log format: text or json")
	fs.StringVar(&c.LogLevel, "log-level", "info", "lowest level logged: debug, info, warn or error")
	fs.StringVar(&c.Name, "name", "relayer-"+host, "this relay's name in broker connections and in the workers' leases")
	if err := command.Parse(fs, args); err != nil {
		return Config{}, err
	}
	fs.Visit(func(fl *flag.Flag) { c.LanesGiven = c.LanesGiven || fl.Name == "lanes" })
	c.Transports, c.AllowedHosts = transports, hosts
	return c, nil
}
