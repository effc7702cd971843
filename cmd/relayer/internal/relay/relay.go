// Package relay is `relayer run`: an outbox's delivery as a process of its
// own. A [Relay] goes through named steps, in order: it configures itself
// (its [Config] and the RELAYER_* environment, validated), opens the
// database and the transports, builds the runner of the workers, serves its
// endpoints (/healthz, /readyz, /metrics and the console), runs until told
// to stop or until something it cannot do without is lost, and shuts down:
// the first signal lets the workers finish what they hold, a second exits
// at once.
//
// [Command] is the `run` command of the relayer programs: its flags become
// a Config, and a Relay runs it.
package relay

import (
	"context"
	"database/sql"
	"fmt"
	"io"
	"log/slog"
	"net"
	"os"
	"os/signal"
	"strings"
	"syscall"
	"time"

	"github.com/relayer-go/relayer"
	"github.com/relayer-go/relayer/cmd/relayer/internal/command"
	"github.com/relayer-go/relayer/dispatch"
	"github.com/relayer-go/relayer/store"
)

// envPrefix prefixes the environment variables the relay reads its
// workers' settings from (dispatch.LoadRunnerOptions).
const envPrefix = "RELAYER_"

// consoleTokenEnv holds the token of the console the relay serves with
// --console: never a flag, which process listings show.
const consoleTokenEnv = "RELAYER_CONSOLE_TOKEN"

// ShutdownTimeoutDefault is Config.ShutdownTimeout's default: below the
// 30 s a container platform waits after SIGTERM by default.
const ShutdownTimeoutDefault = 20 * time.Second

// Config is what a relay is told on its command line; the rest of its
// settings come from the environment (RELAYER_*), read when it configures
// itself.
type Config struct {
	// Outbox is the outbox's database and tables: --database-url (default
	// $DATABASE_URL), --schema and --prefix.
	Outbox command.OutboxFlags
	// Lanes is the outbox's lane count, relayer.LanesMin to
	// relayer.LanesMax, when LanesGiven; otherwise the relay reads the
	// count the outbox records (relayer.LanesDefault when none is).
	Lanes int
	// LanesGiven says that Lanes was given (--lanes).
	LanesGiven bool
	// Transports are the --transport entries, NAME=URL, NAME=env:VAR or
	// NAME=file:PATH; none: those of $RELAYER_TRANSPORTS.
	Transports []string
	// HTTP is the address of the endpoints, such as ":9090"; "" serves
	// none.
	HTTP string
	// AllowedHosts are the host names the endpoints answer to besides
	// loopback names and IP addresses.
	AllowedHosts []string
	// Console serves the web console under /console/ on HTTP, its token
	// in $RELAYER_CONSOLE_TOKEN.
	Console bool
	// ShutdownTimeout bounds the workers' finishing what they hold at a
	// stop; must be positive. ShutdownTimeoutDefault when set by Command.
	ShutdownTimeout time.Duration
	// LogFormat is "text" or "json".
	LogFormat string
	// LogLevel is the lowest level logged: "debug", "info", "warn" or
	// "error".
	LogLevel string
	// Name is the relay's name in broker connections and in the workers'
	// leases.
	Name string
}

// Relay is one relay: New makes it, Run runs it once.
type Relay struct {
	cfg    Config
	stderr io.Writer

	// notifyAgain subscribes to the signals that end a stop at once, and
	// returns the function that unsubscribes; exit ends the process. The
	// tests replace both.
	notifyAgain func() (<-chan os.Signal, func())
	exit        func(code int)

	// Set by configure.
	logger       *slog.Logger
	consoleToken string
	ropts        dispatch.RunnerOptions
	retry        relayer.Retry
	specs        []transportSpec
	// Set by the steps that open them.
	sopts  store.Tables
	db     *sql.DB
	st     *store.Store
	lanes  int
	open   []openedTransport
	obs    *observability
	runner *dispatch.Runner
	state  *relayState
	srv    *endpoints
	// closers close what the steps opened, in reverse order.
	closers []func()
}

// New returns a relay that runs as cfg says, logging to stderr. Its stop
// on a second SIGINT or SIGTERM exits the process.
func New(cfg Config, stderr io.Writer) *Relay {
	return &Relay{cfg: cfg, stderr: stderr, notifyAgain: notifySignals, exit: os.Exit}
}

// notifySignals subscribes to SIGINT and SIGTERM.
func notifySignals() (<-chan os.Signal, func()) {
	c := make(chan os.Signal, 1)
	signal.Notify(c, os.Interrupt, syscall.SIGTERM)
	return c, func() { signal.Stop(c) }
}

// Run runs the relay until ctx ends (the first signal) and its workers
// finished what they held, or until it loses what it cannot deliver
// without (its endpoints' listener, a broker connection that does not come
// back): then it returns the cause. Errors of its configuration are
// command.UsageError; with the json log format, the final error is logged
// as the log's last line and returned as a command.LoggedError. A start
// that ctx ends returns nil.
func (r *Relay) Run(ctx context.Context) (err error) {
	if r.logger, err = newLogger(r.stderr, r.cfg.LogFormat, r.cfg.LogLevel); err != nil {
		return err
	}
	defer func() { err = logFinal(r.logger, r.cfg.LogFormat, err) }()
	defer r.close()
	if err := r.configure(); err != nil {
		return err
	}
	if err := r.openDatabase(ctx); err != nil {
		return err
	}
	if err := r.openTransports(ctx); err != nil {
		return startFailed(ctx, err)
	}
	if err := r.buildRunner(); err != nil {
		return err
	}
	if err := r.serveEndpoints(ctx); err != nil {
		return err
	}
	if err := r.start(ctx); err != nil {
		return startFailed(ctx, err)
	}
	return r.shutdown(ctx, r.wait(ctx))
}

// configure validates the configuration and reads the environment: the
// workers' settings, the retry policy, the transports' entries, the
// console's token; a RELAYER_* variable the relay does not read is
// refused.
func (r *Relay) configure() error {
	c := r.cfg
	if c.ShutdownTimeout <= 0 {
		return command.Usagef("--shutdown-timeout must be positive, got %s", c.ShutdownTimeout)
	}
	// --lanes 0 is refused like any count out of range; only a --lanes
	// not given reads the outbox's.
	if c.LanesGiven && (c.Lanes < relayer.LanesMin || c.Lanes > relayer.LanesMax) {
		return command.Usagef("--lanes must be %d to %d, got %d", relayer.LanesMin, relayer.LanesMax, c.Lanes)
	}
	if c.Console && c.HTTP == "" {
		return command.Usagef("--console needs --http")
	}
	if c.Console {
		if r.consoleToken = os.Getenv(consoleTokenEnv); r.consoleToken == "" {
			return command.Usagef("--console needs a token in $%s", consoleTokenEnv)
		}
	}
	if c.HTTP != "" {
		if _, _, err := net.SplitHostPort(c.HTTP); err != nil {
			return command.Usagef("--http %q: %v", c.HTTP, err)
		}
	}
	return r.readEnvironment()
}

// readEnvironment reads the workers' settings, the retry policy and the
// transports' entries, and refuses the RELAYER_* variables it did not read.
func (r *Relay) readEnvironment() error {
	var err error
	if r.ropts, err = relayOptions(r.cfg.Name, r.logger); err != nil {
		return command.Usagef("%v", err)
	}
	if r.retry, err = dispatch.LoadRetry(dispatch.EnvSource(envPrefix + "RETRY_")); err != nil {
		return command.Usagef("the environment (%sRETRY_…): %v", envPrefix, err)
	}
	if r.specs, err = transportEntries(r.cfg.Transports); err != nil {
		return command.Usagef("%v", err)
	}
	if err := checkSettings(os.Environ(), r.specs); err != nil {
		return command.Usagef("%v", err)
	}
	return nil
}

// openDatabase opens the workers' pool and the outbox's store, and settles
// the lane count. Tables that are missing or lack a migration fail here,
// saying how to migrate.
func (r *Relay) openDatabase(ctx context.Context) error {
	sopts, db, err := r.cfg.Outbox.Open(ctx)
	if err != nil {
		return err
	}
	r.sopts, r.db = sopts, db
	r.onClose(func() { db.Close() })
	if r.st, err = command.CheckedStore(ctx, db, sopts); err != nil {
		return err
	}
	r.lanes = r.cfg.Lanes
	if r.cfg.LanesGiven {
		return nil
	}
	recorded, ok, err := r.st.LaneCount(ctx)
	switch {
	case err != nil:
		return fmt.Errorf("reading the lane count: %w", err)
	case ok:
		r.lanes = recorded
	default:
		r.lanes = relayer.LanesDefault
	}
	return nil
}

// openTransports connects every transport's broker.
func (r *Relay) openTransports(ctx context.Context) error {
	open, err := openTransports(ctx, r.specs, r.cfg.Name, r.logger)
	if err != nil {
		return err
	}
	r.open = open
	r.onClose(func() { closeTransports(open) })
	return nil
}

// buildRunner builds the metrics and the workers' runner on the outbox and
// its transports, their sends measured, and sizes the workers' pool: what they pin and borrow, and the
// headroom they leave (RELAYER_POOL_HEADROOM).
func (r *Relay) buildRunner() error {
	var err error
	if r.obs, err = newObservability(); err != nil {
		return err
	}
	r.onClose(r.obs.shutdown)
	transports := map[string]relayer.Transport{}
	for _, o := range r.open {
		transports[o.name] = r.obs.wrap(o)
	}
	outbox := relayer.Outbox{Schema: r.sopts.Schema, TablePrefix: r.sopts.TablePrefix, Transports: transports, Lanes: r.lanes, Retry: r.retry}
	if r.runner, err = dispatch.NewRunner(r.db, outbox, r.ropts); err != nil {
		return command.Usagef("%v", err)
	}
	pinned, borrowed := r.runner.Connections()
	headroom := r.ropts.PoolHeadroom
	if headroom == 0 {
		headroom = 2
	}
	r.db.SetMaxOpenConns(pinned + borrowed + headroom)
	r.db.SetMaxIdleConns(pinned + borrowed + headroom)
	r.state = &relayState{runner: r.runner, listen: r.ropts.Listen, transports: r.open}
	return nil
}

// serveEndpoints serves /healthz, /readyz, /metrics and the console, when
// the relay has an HTTP address, each on a pool of its own: scrapes and
// probes, which anyone who reaches the port may send, never take the
// workers' connections.
func (r *Relay) serveEndpoints(ctx context.Context) error {
	if r.cfg.HTTP == "" {
		return nil
	}
	_, edb, err := r.cfg.Outbox.Open(ctx)
	if err != nil {
		return startFailed(ctx, err)
	}
	r.onClose(func() { edb.Close() })
	edb.SetMaxOpenConns(endpointConns)
	edb.SetMaxIdleConns(endpointConns)
	if r.state.store, err = r.st.With(edb); err != nil {
		return err
	}
	r.state.db = edb
	if err := r.obs.observe(r.state); err != nil {
		return err
	}
	cons, err := r.openConsole(ctx)
	if err != nil {
		return err
	}
	hosts := command.AllowedHosts(r.cfg.HTTP, r.cfg.AllowedHosts)
	if r.srv, err = serveEndpoints(r.cfg.HTTP, hosts, r.state, r.obs, cons, r.logger); err != nil {
		return err
	}
	r.onClose(r.srv.close)
	return nil
}

// start starts the workers and says so. They run until Stop, not until the
// first signal: a signal stops them gracefully within the shutdown
// timeout (see shutdown).
func (r *Relay) start(ctx context.Context) error {
	if err := r.runner.Start(context.WithoutCancel(ctx)); err != nil {
		return err
	}
	r.state.setStarted()
	names := make([]string, len(r.open))
	for i, o := range r.open {
		names[i] = o.name + " (" + o.kind + ")"
	}
	s := r.runner.Stats()
	r.logger.Info("relayer run: delivering", slog.String("outbox", r.sopts.Label()), slog.Int("lanes", r.lanes),
		slog.String("transports", strings.Join(names, ", ")), slog.Bool("recovery", s.Recovery != nil),
		slog.Int("ordered_workers", len(s.Ordered)), slog.Bool("cleanup", s.Cleanup != nil), slog.Bool("listen", r.ropts.Listen),
		slog.String("endpoints", r.srv.address()))
	return nil
}

// wait waits for the first signal (ctx's end), the end of the endpoints'
// listener or the loss of a broker connection, and returns the cause of
// the stop: nil for a signal.
func (r *Relay) wait(ctx context.Context) error {
	var cause error
	select {
	case <-ctx.Done():
		r.logger.Info("relayer run: stopping: the workers finish what they hold", slog.Duration("within", r.cfg.ShutdownTimeout))
	case err := <-r.srv.failed():
		cause = fmt.Errorf("the endpoints failed: %w", err)
	case err := <-lostBroker(r.open):
		cause = err
	}
	if cause != nil {
		r.logger.Error("relayer run: stopping", slog.String("error", command.OneLine(cause.Error())))
	}
	return cause
}

// shutdown stops the workers within the shutdown timeout, /readyz failing
// from its start and the endpoints answering until its end, and returns
// cause, the stop's, unless the deadline cut the workers short. A second
// signal meanwhile exits at once.
func (r *Relay) shutdown(ctx context.Context, cause error) error {
	r.state.setStopping()
	stopped := make(chan struct{})
	defer close(stopped)
	r.exitOnSecondSignal(stopped)
	sctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), r.cfg.ShutdownTimeout)
	defer cancel()
	if err := r.runner.Stop(sctx); err != nil {
		return fmt.Errorf("the workers did not finish within --shutdown-timeout %s (what they held is sent again by a relay): %w", r.cfg.ShutdownTimeout, distinct(err))
	}
	r.logger.Info("relayer run: stopped")
	return cause
}

// exitOnSecondSignal exits at once, with the relay's last line, on a SIGINT
// or SIGTERM that comes before stopped is closed.
func (r *Relay) exitOnSecondSignal(stopped <-chan struct{}) {
	second, unsubscribe := r.notifyAgain()
	go func() {
		defer unsubscribe()
		select {
		case sig := <-second:
			printFinal(r.logger, r.cfg.LogFormat, r.stderr, fmt.Errorf("%v again: exiting at once (what the workers held is sent again by a relay)", sig))
			r.exit(command.ExitFail)
		case <-stopped:
		}
	}()
}

// onClose adds f to what close calls.
func (r *Relay) onClose(f func()) { r.closers = append(r.closers, f) }

// close closes what the steps opened, the last first: the endpoints answer
// until the workers stopped, and the transports close after them.
func (r *Relay) close() {
	for i := len(r.closers) - 1; i >= 0; i-- {
		r.closers[i]()
	}
	r.closers = nil
}

// startFailed is the error of a start that failed with err: none when a
// signal ended the start (the relay was told to stop before it ran).
func startFailed(ctx context.Context, err error) error {
	if ctx.Err() != nil {
		return nil
	}
	return err
}
