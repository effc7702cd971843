package cli

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"sync"
	"time"

	"github.com/relayer-go/relayer/cmd/relayer/internal/command"
	"github.com/relayer-go/relayer/console"
	"github.com/relayer-go/relayer/store"
)

type consoleFlags struct {
	command.OutboxFlags
	listen     string
	token      string
	readOnly   bool
	showBodies bool
	refresh    time.Duration
	hosts      command.HostList
	maxConns   int
	timeout    time.Duration
	sample     time.Duration
}

func runConsole(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	f, err := parseConsoleFlags(args, stderr)
	if err != nil {
		return err
	}
	copts, err := f.consoleOptions(stderr)
	if err != nil {
		return err
	}
	opts, db, err := f.Open(ctx)
	if err != nil {
		return err
	}
	defer db.Close()
	db.SetMaxOpenConns(f.maxConns)
	db.SetMaxIdleConns(f.maxConns)
	c, err := console.New(db, opts, copts)
	if err != nil {
		return command.Usagef("%v", err)
	}
	ln, err := net.Listen("tcp", f.listen)
	if err != nil {
		return err
	}
	srv := command.NewServer(c)
	fresh := trackFresh(srv)
	f.announce(stdout, stderr, opts, ln.Addr().String())
	return serveConsole(ctx, srv, ln, c, fresh)
}

// parseConsoleFlags returns the flags of `relayer console args`.
func parseConsoleFlags(args []string, stderr io.Writer) (consoleFlags, error) {
	var f consoleFlags
	fs := command.NewFlagSet("console",
		"Serve the operator's web console of an outbox: backlog by destination, lanes and their owners,\n"+
			"parked keys and dead letters with their retry, skip, requeue and purge actions, and any message\n"+
			"by id. It listens on loopback unless --listen names another address, which needs --token.\n\n"+
			"It answers only to the host names browsers are expected to use: localhost, 127.0.0.1 and [::1],\n"+
			"the host of --listen unless it is a wildcard (0.0.0.0, ::), and each --allowed-host. A request\n"+
			"for any other name gets 421, which defeats DNS rebinding (a page of another site whose name\n"+
			"resolves to this address).\n\n"+
			"It holds at most --max-conns database connections (4), one per request using the database, and\n"+
			"ends the database work of a request at --query-timeout (5s), its wait for a connection included:\n"+
			"a locked table or a busy database gets an error page (503), not the application's connections.\n"+
			"Filter fields over 1 KiB and request bodies over 64 KiB get 400.",
		"relayer console --database-url postgres://ops@db:5432/app --schema messaging --listen 127.0.0.1:8080", stderr)
	f.Register(fs, true)
	fs.StringVar(&f.listen, "listen", "127.0.0.1:8080", "address to serve on; any but loopback needs --token")
	fs.StringVar(&f.token, "token", "", "access token every request must carry (open the console once with ?token=…)")
	fs.BoolVar(&f.readOnly, "read-only", false, "hide and refuse every action")
	fs.BoolVar(&f.showBodies, "show-bodies", false, "show message bodies (they may hold personal data)")
	fs.DurationVar(&f.refresh, "refresh", console.RefreshDefault, "how often pages reload themselves, 1s to 1h")
	fs.IntVar(&f.maxConns, "max-conns", console.MaxConcurrentDefault, fmt.Sprintf("database connections the console opens at most, one per request using the database, 1 to %d", console.MaxConcurrentMax))
	fs.DurationVar(&f.timeout, "query-timeout", console.QueryTimeoutDefault, "how long the database work of one page or action may take, 100ms to 10m")
	fs.DurationVar(&f.sample, "sample-every", console.SampleEveryDefault, "how often the throughput chart samples the outbox's activity, in the background, 1s to 1m")
	fs.Var(&f.hosts, "allowed-host", "a host name (or name:port) browsers use to reach the console, besides loopback and --listen's;\nrepeat it or separate names with commas, such as ops.example.com,ops.internal:8080")
	return f, command.Parse(fs, args)
}

// consoleOptions checks the flags and returns the console's options. A
// listener off loopback needs a token.
func (f *consoleFlags) consoleOptions(stderr io.Writer) (console.Options, error) {
	host, _, err := net.SplitHostPort(f.listen)
	if err != nil {
		return console.Options{}, command.Usagef("--listen %q: %v", f.listen, err)
	}
	if !command.Loopback(host) && f.token == "" {
		return console.Options{}, command.Usagef("--listen %q is not a loopback address: give --token, so that nobody else on the network can use the console", f.listen)
	}
	copts := console.Options{Token: f.token, ReadOnly: f.readOnly, ShowBodies: f.showBodies, Refresh: f.refresh,
		QueryTimeout: f.timeout, MaxConcurrent: f.maxConns, SampleEvery: f.sample, AllowedHosts: command.AllowedHosts(f.listen, f.hosts),
		Logger: slog.New(slog.NewTextHandler(stderr, nil))}
	// Zero would mean the default to console.Options: refused here.
	if f.maxConns < 1 || f.maxConns > console.MaxConcurrentMax {
		return console.Options{}, command.Usagef("--max-conns must be 1 to %d, got %d", console.MaxConcurrentMax, f.maxConns)
	}
	if f.timeout < console.QueryTimeoutMin || f.timeout > console.QueryTimeoutMax {
		return console.Options{}, command.Usagef("--query-timeout must be %s to %s, got %s", console.QueryTimeoutMin, console.QueryTimeoutMax, f.timeout)
	}
	if f.sample < console.SampleEveryMin || f.sample > console.SampleEveryMax {
		return console.Options{}, command.Usagef("--sample-every must be %s to %s, got %s", console.SampleEveryMin, console.SampleEveryMax, f.sample)
	}
	if err := copts.Validate(); err != nil {
		return console.Options{}, command.Usagef("%v", err)
	}
	return copts, nil
}

// announce says where the console serves the outbox of opts, listening on
// addr, and warns of a wildcard listener that answers to no name.
func (f *consoleFlags) announce(stdout, stderr io.Writer, opts store.Tables, addr string) {
	url := "http://" + addr + "/"
	if f.token != "" {
		url += "?token=…"
	}
	mode := ""
	if f.readOnly {
		mode = ", read-only"
	}
	fmt.Fprintf(stdout, "relayer console: the outbox %s, on %s%s\n", describe(opts), url, mode)
	host, _, _ := net.SplitHostPort(f.listen)
	if ip := net.ParseIP(host); (host == "" || ip != nil && ip.IsUnspecified()) && len(f.hosts) == 0 {
		fmt.Fprintf(stderr, "relayer console: listening on every interface, but answering only to localhost, 127.0.0.1 and [::1]: "+
			"give the names browsers use to reach it with --allowed-host\n")
	}
}

// serveConsole serves c on ln, its sampler running, until ctx ends (then
// it shuts down within command.ServerShutdown) or the server fails.
func serveConsole(ctx context.Context, srv *http.Server, ln net.Listener, c *console.Console, fresh *freshConns) error {
	done := make(chan error, 1)
	go func() { done <- srv.Serve(ln) }()
	sampling, stopSampling := context.WithCancel(ctx)
	var sampler sync.WaitGroup
	sampler.Go(func() { c.Run(sampling) })
	defer sampler.Wait()
	defer stopSampling()
	select {
	case err := <-done:
		return err
	case <-ctx.Done():
	}
	sctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), command.ServerShutdown)
	defer cancel()
	fresh.close()
	if err := srv.Shutdown(sctx); err != nil {
		return err
	}
	if err := <-done; !errors.Is(err, http.ErrServerClosed) {
		return err
	}
	return nil
}

// freshConns are a server's connections that have not sent a request yet,
// such as those a browser or an HTTP client opens ahead of need. Shutdown
// would wait up to 5 s for each before counting it idle; the console closes
// them at once instead.
type freshConns struct {
	mu    sync.Mutex
	conns map[net.Conn]bool
}

// trackFresh follows srv's connections until they send their first request.
func trackFresh(srv *http.Server) *freshConns {
	f := &freshConns{conns: map[net.Conn]bool{}}
	srv.ConnState = func(c net.Conn, s http.ConnState) {
		f.mu.Lock()
		defer f.mu.Unlock()
		if s == http.StateNew {
			f.conns[c] = true
		} else {
			delete(f.conns, c)
		}
	}
	return f
}

// close closes the connections that have not sent a request.
func (f *freshConns) close() {
	f.mu.Lock()
	defer f.mu.Unlock()
	for c := range f.conns {
		c.Close()
	}
}
