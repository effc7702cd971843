package main

import (
	"context"
	"database/sql"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"os"
	"os/signal"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/relayer-go/relayer"
	"github.com/relayer-go/relayer/console"
	"github.com/relayer-go/relayer/dispatch"
	"github.com/relayer-go/relayer/dispatch/pgxlisten"
	"github.com/relayer-go/relayer/store"
)

// envPrefix prefixes the environment variables the relay reads its
// workers' settings from (dispatch.LoadRunnerOptions).
const envPrefix = "RELAYER_"

// consoleTokenEnv holds the token of the console the relay serves with
// --console: never a flag, which process listings show.
const consoleTokenEnv = "RELAYER_CONSOLE_TOKEN"

// shutdownTimeoutDefault is --shutdown-timeout's default: below the 30 s a
// container platform waits after SIGTERM by default.
const shutdownTimeoutDefault = 20 * time.Second

type runFlags struct {
	outboxFlags
	lanes      int
	transports stringList
	http       string
	hosts      hostList
	console    bool
	shutdown   time.Duration
	logFormat  string
	logLevel   string
	clientName string
}

// stringList is a repeatable flag.
type stringList []string

func (s *stringList) String() string     { return strings.Join(*s, " ") }
func (s *stringList) Set(v string) error { *s = append(*s, v); return nil }

func runRelay(ctx context.Context, args []string, stdout, stderr io.Writer) (err error) {
	var f runFlags
	host, _ := os.Hostname()
	fs := newFlagSet("run",
		"Run the outbox's delivery as a process of its own: recovery and the ordered lane workers (and\n"+
			"retention cleanup), sending each row through the transport its producer routed it to. Run as many\n"+
			"as you like against one outbox: they share recovery's lease and the lanes. Producers only write\n"+
			"(enlist.Writer, with enlist.Options.Wake so that a commit wakes the relays at once).\n\n"+
			"Workers' settings come from the environment, as dispatch.LoadRunnerOptions reads them with the\n"+
			"prefix RELAYER_: RELAYER_ORDERED_WORKERS, RELAYER_RECOVERY_WORKERS, RELAYER_ORDERED_BATCH_SIZE,\n"+
			"RELAYER_DISABLE_CLEANUP, RELAYER_LISTEN (default true here) and so on. Recovery takes rows at once\n"+
			"(unless RELAYER_RECOVERY_MIN_AGE is set), as no process sends them right after their commit. Failed\n"+
			"sends are retried as RELAYER_RETRY_MAX_ATTEMPTS, RELAYER_RETRY_BACKOFF and RELAYER_RETRY_MAX_BACKOFF\n"+
			"say (default: 10 attempts, 1s doubling up to 5m); the producers' per-route policies are theirs.\n"+
			"A RELAYER_ variable the relay does not read is refused, naming the nearest setting (names\n"+
			"starting RELAYER_TEST_ are the tests' and left alone).\n\n"+
			transportHelp+"\n\n"+
			"Endpoints (with --http ADDR): /healthz answers 200 while the process runs; /readyz 200 once the\n"+
			"workers started while the database answers, the schema is current, the wake-up listener is\n"+
			"subscribed and every transport is connected with no destination paused (503 with the failing\n"+
			"check otherwise, and from the first signal on); /metrics the\n"+
			"library's OpenTelemetry metrics in the Prometheus text format; with --console, the web console\n"+
			"under /console/, its token in $"+consoleTokenEnv+". They answer to loopback names, IP addresses\n"+
			"and each --allowed-host; another host name gets 421.\n\n"+
			"SIGTERM or SIGINT stop the workers, which finish what they hold within --shutdown-timeout (the\n"+
			"endpoints answering until they have), and the relay exits 0 (1 when the deadline cut them short:\n"+
			"what they held is sent again by another relay); a second signal exits at once. A start that cannot\n"+
			"work exits with the reason on one line (with --log-format json, the log's last line):\n"+
			"2 for a wrong command line or setting (a transport's parameters included), 1 for the rest (an\n"+
			"outdated schema, a broker that does not answer).",
		"DATABASE_URL=postgres://relay@db:5432/app relayer run --schema messaging --transport nats=nats://nats:4222 --http :9090", stderr)
	f.register(fs, true)
	fs.IntVar(&f.lanes, "lanes", 0, "the outbox's lane count; default: the count the outbox records (32 when none is)")
	fs.Var(&f.transports, "transport", "NAME=URL, NAME=env:VAR or NAME=file:PATH, repeated: a transport the producers route to (default $RELAYER_TRANSPORTS)")
	fs.StringVar(&f.http, "http", "", "address of the health, readiness and metrics endpoints, such as :9090 (default: none)")
	fs.Var(&f.hosts, "allowed-host", "a host name the endpoints answer to besides loopback names and IP addresses; repeatable")
	fs.BoolVar(&f.console, "console", false, "serve the web console under /console/ on --http (token in $"+consoleTokenEnv+")")
	fs.DurationVar(&f.shutdown, "shutdown-timeout", shutdownTimeoutDefault, "how long the workers may take to finish what they hold at a stop")
	fs.StringVar(&f.logFormat, "log-format", "text", "log format: text or json")
	fs.StringVar(&f.logLevel, "log-level", "info", "lowest level logged: debug, info, warn or error")
	fs.StringVar(&f.clientName, "name", "relayer-"+host, "this relay's name in broker connections and in the workers' leases")
	if err := parse(fs, args); err != nil {
		return err
	}
	logger, err := newLogger(stderr, f.logFormat, f.logLevel)
	if err != nil {
		return err
	}
	defer func() { err = logFinal(logger, f.logFormat, err) }()
	if f.shutdown <= 0 {
		return usagef("--shutdown-timeout must be positive, got %s", f.shutdown)
	}
	// --lanes 0 is refused like any count out of range; only a --lanes
	// not given reads the outbox's.
	lanesGiven := false
	fs.Visit(func(fl *flag.Flag) { lanesGiven = lanesGiven || fl.Name == "lanes" })
	if lanesGiven && (f.lanes < relayer.LanesMin || f.lanes > relayer.LanesMax) {
		return usagef("--lanes must be %d to %d, got %d", relayer.LanesMin, relayer.LanesMax, f.lanes)
	}
	if f.console && f.http == "" {
		return usagef("--console needs --http")
	}
	var consoleToken string
	if f.console {
		if consoleToken = os.Getenv(consoleTokenEnv); consoleToken == "" {
			return usagef("--console needs a token in $%s", consoleTokenEnv)
		}
	}
	if f.http != "" {
		if _, _, err := net.SplitHostPort(f.http); err != nil {
			return usagef("--http %q: %v", f.http, err)
		}
	}
	ropts, err := relayOptions(f.clientName, logger)
	if err != nil {
		return usagef("%v", err)
	}
	retry, err := dispatch.LoadRetry(dispatch.EnvSource(envPrefix + "RETRY_"))
	if err != nil {
		return usagef("the environment (%sRETRY_…): %v", envPrefix, err)
	}
	specs, err := transportEntries(f.transports)
	if err != nil {
		return usagef("%v", err)
	}
	if err := checkSettings(os.Environ(), specs); err != nil {
		return usagef("%v", err)
	}
	sopts, db, err := f.open(ctx)
	if err != nil {
		return err
	}
	defer db.Close()
	// Tables that are missing or lack a migration fail here, saying how
	// to migrate.
	st, err := checkedStore(ctx, db, sopts)
	if err != nil {
		return err
	}
	lanes := f.lanes
	if !lanesGiven {
		recorded, ok, err := st.LaneCount(ctx)
		switch {
		case err != nil:
			return fmt.Errorf("reading the lane count: %w", err)
		case ok:
			lanes = recorded
		default:
			lanes = relayer.LanesDefault
		}
	}
	open, err := openTransports(ctx, specs, f.clientName, logger)
	if err != nil {
		return startFailed(ctx, err)
	}
	defer closeTransports(open)
	obs, err := newObservability()
	if err != nil {
		return err
	}
	defer obs.shutdown()
	transports := map[string]relayer.Transport{}
	for _, o := range open {
		transports[o.name] = obs.wrap(o)
	}
	outbox := relayer.Outbox{Schema: sopts.Schema, TablePrefix: sopts.TablePrefix, Transports: transports, Lanes: lanes, Retry: retry}
	runner, err := dispatch.NewRunner(db, outbox, ropts)
	if err != nil {
		return usagef("%v", err)
	}
	// The workers' pool: what they pin and borrow, and the headroom they
	// leave (RELAYER_POOL_HEADROOM).
	pinned, borrowed := runner.Connections()
	headroom := ropts.PoolHeadroom
	if headroom == 0 {
		headroom = 2
	}
	db.SetMaxOpenConns(pinned + borrowed + headroom)
	db.SetMaxIdleConns(pinned + borrowed + headroom)

	var srv *endpoints
	state := &relayState{runner: runner, listen: ropts.Listen, transports: open}
	if f.http != "" {
		// The endpoints' pool, of their own: scrapes and probes, which
		// anyone who reaches the port may send, never take the workers'
		// connections.
		_, edb, err := f.open(ctx)
		if err != nil {
			return startFailed(ctx, err)
		}
		defer edb.Close()
		edb.SetMaxOpenConns(endpointConns)
		edb.SetMaxIdleConns(endpointConns)
		if state.store, err = st.With(edb); err != nil {
			return err
		}
		state.db = edb
		if err := obs.observe(state); err != nil {
			return err
		}
		var cons *console.Console
		if f.console {
			var cdb *sql.DB
			if cons, cdb, err = openConsole(ctx, f, sopts, consoleToken, logger); err != nil {
				return err
			}
			defer cdb.Close()
		}
		if srv, err = serveEndpoints(f.http, allowedHosts(f.http, f.hosts), state, obs, cons, logger); err != nil {
			return err
		}
		defer srv.close()
	}
	// The workers run until Stop, not until the first signal: a signal
	// stops them gracefully within --shutdown-timeout, below.
	if err := runner.Start(context.WithoutCancel(ctx)); err != nil {
		return startFailed(ctx, err)
	}
	state.setStarted()
	names := make([]string, len(open))
	for i, o := range open {
		names[i] = o.name + " (" + o.kind + ")"
	}
	s := runner.Stats()
	logger.Info("relayer run: delivering", slog.String("outbox", sopts.Label()), slog.Int("lanes", lanes),
		slog.String("transports", strings.Join(names, ", ")), slog.Bool("recovery", s.Recovery != nil),
		slog.Int("ordered_workers", len(s.Ordered)), slog.Bool("cleanup", s.Cleanup != nil), slog.Bool("listen", ropts.Listen),
		slog.String("endpoints", srv.address()))

	var cause error
	select {
	case <-ctx.Done():
		logger.Info("relayer run: stopping: the workers finish what they hold", slog.Duration("within", f.shutdown))
	case err := <-srv.failed():
		cause = fmt.Errorf("the endpoints failed: %w", err)
	case err := <-lostBroker(open):
		cause = err
	}
	if cause != nil {
		logger.Error("relayer run: stopping", slog.String("error", oneLine(cause.Error())))
	}
	state.setStopping()
	stopped := make(chan struct{})
	defer close(stopped)
	exitOnSecondSignal(stopped, func(sig os.Signal) {
		printFinal(logger, f.logFormat, stderr, fmt.Errorf("%v again: exiting at once (what the workers held is sent again by a relay)", sig))
	})
	sctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), f.shutdown)
	defer cancel()
	if err := runner.Stop(sctx); err != nil {
		return fmt.Errorf("the workers did not finish within --shutdown-timeout %s (what they held is sent again by a relay): %w", f.shutdown, distinct(err))
	}
	logger.Info("relayer run: stopped")
	return cause
}

// startFailed is the error of a start that failed with err: none when a
// signal ended the start (the relay was told to stop before it ran).
func startFailed(ctx context.Context, err error) error {
	if ctx.Err() != nil {
		return nil
	}
	return err
}

// relayOptions reads the workers' settings from the environment and sets
// what a relay needs: no direct dispatch (nothing commits in this process),
// recovery taking rows at once, one ordered worker, the wake-up listener.
func relayOptions(name string, logger *slog.Logger) (dispatch.RunnerOptions, error) {
	o, err := dispatch.LoadRunnerOptions(dispatch.EnvSource(envPrefix))
	if err != nil {
		return o, fmt.Errorf("the environment (%s…): %w", envPrefix, err)
	}
	o.DisableDirect = true
	if _, set := os.LookupEnv(envPrefix + "RECOVERY_MIN_AGE"); !set {
		o.Recovery.MinAge = time.Nanosecond
	}
	if o.OrderedWorkers == 0 {
		o.OrderedWorkers = 1
	}
	if _, set := os.LookupEnv(envPrefix + "LISTEN"); !set {
		o.Listen = true
	}
	if o.Listen {
		o.Notifications = pgxlisten.Waiter{}
	}
	if o.Recovery.Owner == "" {
		o.Recovery.Owner = name
	}
	if o.Ordered.Name == "" {
		o.Ordered.Name = name
	}
	if o.Cleanup.Owner == "" {
		o.Cleanup.Owner = name
	}
	o.Logger = logger
	return o, o.Validate()
}

// newLogger returns the relay's logger: text or JSON on stderr.
func newLogger(w io.Writer, format, level string) (*slog.Logger, error) {
	var lv slog.Level
	if err := lv.UnmarshalText([]byte(level)); err != nil {
		return nil, usagef("--log-level %q: want debug, info, warn or error", level)
	}
	ho := &slog.HandlerOptions{Level: lv}
	switch format {
	case "text":
		return slog.New(slog.NewTextHandler(w, ho)), nil
	case "json":
		return slog.New(slog.NewJSONHandler(w, ho)), nil
	}
	return nil, usagef("--log-format %q: want text or json", format)
}

// lostBroker returns a channel that receives an error when the connection
// of a broker whose client does not reconnect closes: the relay then
// stops, and exits non-zero for its supervisor to start it again.
func lostBroker(open []openedTransport) <-chan error {
	out := make(chan error, 1)
	for _, o := range open {
		if o.lost == nil {
			continue
		}
		go func() {
			err := <-o.lost // a value, or the channel closed
			if o.closing.Load() {
				return // the relay closed it
			}
			select {
			case out <- fmt.Errorf("transport %s: the broker connection closed: %v", o.name, err):
			default:
			}
		}()
	}
	return out
}

// exitOnSecondSignal exits the process at once on a SIGINT or SIGTERM that
// comes before stopped is closed, after report.
func exitOnSecondSignal(stopped <-chan struct{}, report func(os.Signal)) {
	second := make(chan os.Signal, 1)
	signal.Notify(second, os.Interrupt, syscall.SIGTERM)
	go func() {
		defer signal.Stop(second)
		select {
		case sig := <-second:
			report(sig)
			os.Exit(exitFail)
		case <-stopped:
		}
	}()
}

// openConsole opens the console's own pool, so that its pages never take
// the workers' connections.
func openConsole(ctx context.Context, f runFlags, sopts store.Tables, token string, logger *slog.Logger) (*console.Console, *sql.DB, error) {
	_, cdb, err := f.open(ctx)
	if err != nil {
		return nil, nil, err
	}
	cdb.SetMaxOpenConns(console.MaxConcurrentDefault)
	cdb.SetMaxIdleConns(console.MaxConcurrentDefault)
	c, err := console.New(cdb, sopts, console.Options{Token: token, AllowedHosts: allowedHosts(f.http, f.hosts), Logger: logger})
	if err != nil {
		cdb.Close()
		return nil, nil, usagef("%v", err)
	}
	return c, cdb, nil
}

// relayState is what /readyz reports.
type relayState struct {
	db     *sql.DB
	store  *store.Store
	runner *dispatch.Runner
	listen bool
	// transports are the relay's, whose connections and paused
	// destinations the readiness reports (see transportChecks).
	transports []openedTransport

	mu       sync.Mutex
	started  bool
	stopping bool
}

func (s *relayState) setStarted() {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.started = true
}

func (s *relayState) setStopping() {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.stopping = true
}

// endpointConns is the size of the endpoints' pool.
const endpointConns = 2

// readinessTimeout bounds the database checks of one /readyz.
const readinessTimeout = 2 * time.Second

// check is one line of /readyz's answer.
type check struct {
	Name string `json:"name"`
	OK   bool   `json:"ok"`
	// Detail says why a check failed, or what it found.
	Detail string `json:"detail,omitempty"`
	// Paused lists a transport's paused destinations.
	Paused []pausedDestination `json:"paused,omitempty"`
}

// ready runs the readiness checks, in order, and reports whether all
// passed.
func (s *relayState) ready(ctx context.Context) (bool, []check) {
	s.mu.Lock()
	started, stopping := s.started, s.stopping
	s.mu.Unlock()
	var checks []check
	add := func(name string, ok bool, detail string) { checks = append(checks, check{name, ok, detail, nil}) }
	switch {
	case stopping:
		add("workers", false, "stopping")
	case !started:
		add("workers", false, "starting")
	default:
		add("workers", true, "started")
	}
	ctx, cancel := context.WithTimeout(ctx, readinessTimeout)
	defer cancel()
	if err := s.db.PingContext(ctx); err != nil {
		add("database", false, err.Error())
	} else {
		add("database", true, "")
		if _, err := s.store.CheckSchema(ctx); err != nil && !errors.Is(err, store.ErrSchemaNewer) {
			add("schema", false, err.Error())
		} else {
			add("schema", true, "")
		}
	}
	if s.listen {
		if s.runner.Stats().Listening {
			add("listener", true, "subscribed")
		} else {
			add("listener", false, "not subscribed: the workers poll until it reconnects")
		}
	}
	checks = append(checks, transportChecks(s.transports, s.runner.Paused())...)
	for _, c := range checks {
		if !c.OK {
			return false, checks
		}
	}
	return true, checks
}

// serve is http.Server.Serve on ln until srv shuts down, reporting any
// other end on the returned channel.
func serve(srv *http.Server, ln net.Listener) <-chan error {
	done := make(chan error, 1)
	go func() {
		if err := srv.Serve(ln); !errors.Is(err, http.ErrServerClosed) {
			done <- err
		}
		close(done)
	}()
	return done
}
