package relay

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"strings"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/prometheus/client_golang/prometheus/promhttp"
	"go.opentelemetry.io/otel/attribute"
	otelprom "go.opentelemetry.io/otel/exporters/prometheus"
	"go.opentelemetry.io/otel/metric"
	sdkmetric "go.opentelemetry.io/otel/sdk/metric"
	"go.opentelemetry.io/otel/sdk/resource"

	"github.com/relayer-go/relayer"
	"github.com/relayer-go/relayer/cmd/relayer/internal/command"
	"github.com/relayer-go/relayer/console"
	relayerotel "github.com/relayer-go/relayer/otel"
)

// observability is the relay's metrics: the library's OpenTelemetry
// instruments, read by a Prometheus exporter into a registry of its own,
// which also carries the Go runtime's and the process's collectors.
type observability struct {
	registry *prometheus.Registry
	provider *sdkmetric.MeterProvider
	meter    metric.Meter
	version  command.BuildVersion
	regs     []metric.Registration
}

// serviceName is the OpenTelemetry service.name of the relay's metrics.
const serviceName = "relayer"

func newObservability() (*observability, error) {
	v, _ := command.ReadVersion()
	if v.Command == "" {
		v.Command = "(devel)"
	}
	reg := prometheus.NewRegistry()
	if err := errors.Join(reg.Register(collectors.NewGoCollector()),
		reg.Register(collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))); err != nil {
		return nil, fmt.Errorf("metrics: %w", err)
	}
	// Scope labels (otel_scope_name, …) on every series say only which
	// package made it, which the names already say.
	exporter, err := otelprom.New(otelprom.WithRegisterer(reg), otelprom.WithoutScopeInfo())
	if err != nil {
		return nil, fmt.Errorf("metrics: %w", err)
	}
	res, err := resource.Merge(resource.Default(), resource.NewSchemaless(
		attribute.String("service.name", serviceName), attribute.String("service.version", v.Command)))
	if err != nil {
		return nil, fmt.Errorf("metrics: %w", err)
	}
	provider := sdkmetric.NewMeterProvider(sdkmetric.WithReader(exporter), sdkmetric.WithResource(res))
	meter := provider.Meter("github.com/relayer-go/relayer/cmd/relayer", metric.WithInstrumentationVersion(v.Command))
	return &observability{registry: reg, provider: provider, meter: meter, version: v}, nil
}

// wrap returns o's transport measured: sends, their durations and
// failures, by transport and destination.
func (obs *observability) wrap(o openedTransport) relayer.Transport {
	return relayerotel.WrapTransport(o.tr, relayerotel.WithMeterProvider(obs.provider), relayerotel.WithTransportName(o.name),
		relayerotel.WithMessagingSystem(messagingSystem(o.kind)))
}

// messagingSystem is the OpenTelemetry messaging.system of a transport
// kind.
func messagingSystem(kind string) string {
	if kind == "amqp" {
		return "rabbitmq"
	}
	return kind
}

// observe registers the workers' counters, the outbox's gauges, the
// relay's readiness (relayer_ready, 1 or 0, from the checks of /readyz) and
// its build (relayer_build_info, always 1, its labels the versions).
func (obs *observability) observe(state *relayState) error {
	reg, err := relayerotel.ObserveRunner(obs.meter, state.runner)
	if err != nil {
		return fmt.Errorf("metrics: %w", err)
	}
	obs.regs = append(obs.regs, reg)
	if reg, err = relayerotel.ObserveStore(obs.meter, state.store, ""); err != nil {
		return fmt.Errorf("metrics: %w", err)
	}
	obs.regs = append(obs.regs, reg)
	ready, err := obs.meter.Int64ObservableGauge("relayer.ready",
		metric.WithDescription("1 while the relay's readiness checks (those of /readyz) pass, 0 otherwise."))
	if err != nil {
		return fmt.Errorf("metrics: %w", err)
	}
	build, err := obs.meter.Int64ObservableGauge("relayer.build_info",
		metric.WithDescription("Always 1; its labels are the versions of the relay, of the library it was built with, and of Go."))
	if err != nil {
		return fmt.Errorf("metrics: %w", err)
	}
	buildAttrs := metric.WithAttributes(attribute.String("version", obs.version.Command),
		attribute.String("library_version", obs.version.Library), attribute.String("go_version", obs.version.Go))
	reg, err = obs.meter.RegisterCallback(func(ctx context.Context, o metric.Observer) error {
		o.ObserveInt64(build, 1, buildAttrs)
		var up int64
		if ok, _ := state.ready(ctx); ok {
			up = 1
		}
		o.ObserveInt64(ready, up)
		return nil
	}, ready, build)
	if err != nil {
		return fmt.Errorf("metrics: %w", err)
	}
	obs.regs = append(obs.regs, reg)
	return nil
}

func (obs *observability) shutdown() {
	for _, r := range obs.regs {
		_ = r.Unregister()
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Second)
	defer cancel()
	_ = obs.provider.Shutdown(ctx)
}

// endpoints is the relay's HTTP listener.
type endpoints struct {
	srv  *http.Server
	ln   net.Listener
	done <-chan error
	// stopSampling ends the console's sampler, which sampling waits for.
	stopSampling context.CancelFunc
	sampling     sync.WaitGroup
}

// serveEndpoints listens on addr and serves /healthz, /readyz, /metrics and,
// when cons is not nil, the console under /console/, whose sampler then runs
// until the endpoints close, so that its chart covers the relay's life and
// not only the moments a page was open.
func serveEndpoints(addr string, hosts []string, state *relayState, obs *observability, cons *console.Console, logger *slog.Logger) (*endpoints, error) {
	mux := http.NewServeMux()
	mux.HandleFunc("GET /healthz", func(w http.ResponseWriter, _ *http.Request) {
		w.Header().Set("Content-Type", "text/plain; charset=utf-8")
		fmt.Fprintln(w, "ok")
	})
	mux.HandleFunc("GET /readyz", func(w http.ResponseWriter, r *http.Request) {
		ok, checks := state.ready(r.Context())
		w.Header().Set("Content-Type", "application/json")
		w.Header().Set("Cache-Control", "no-store")
		if !ok {
			w.WriteHeader(http.StatusServiceUnavailable)
		}
		_ = json.NewEncoder(w).Encode(struct {
			Ready  bool    `json:"ready"`
			Checks []check `json:"checks"`
		}{ok, checks})
	})
	mux.Handle("GET /metrics", promhttp.HandlerFor(obs.registry, promhttp.HandlerOpts{ErrorLog: slog.NewLogLogger(logger.Handler(), slog.LevelWarn)}))
	if cons != nil {
		mux.Handle("/console/", http.StripPrefix("/console", cons))
		mux.Handle("GET /console", http.RedirectHandler("/console/", http.StatusMovedPermanently))
	}
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return nil, fmt.Errorf("--http: %w", err)
	}
	srv := command.NewServer(hostCheck(mux, hosts, logger))
	e := &endpoints{srv: srv, ln: ln, done: serve(srv, ln), stopSampling: func() {}}
	if cons != nil {
		var ctx context.Context
		ctx, e.stopSampling = context.WithCancel(context.Background())
		e.sampling.Go(func() { _ = cons.Run(ctx) })
	}
	return e, nil
}

// address is where the endpoints listen, "" without them.
func (e *endpoints) address() string {
	if e == nil {
		return ""
	}
	return "http://" + e.ln.Addr().String()
}

// failed receives the error that ended the listener; never for no
// listener.
func (e *endpoints) failed() <-chan error {
	if e == nil {
		return nil
	}
	return e.done
}

func (e *endpoints) close() {
	ctx, cancel := context.WithTimeout(context.Background(), command.ServerShutdown)
	defer cancel()
	_ = e.srv.Shutdown(ctx)
	e.stopSampling()
	e.sampling.Wait()
}

// hostCheck answers 421 to a request whose Host header is a name other
// than loopback's or the allowed ones: a page of another site whose name
// was made to resolve to this address (DNS rebinding) sends its own name.
// IP addresses pass, as probes and scrapers send the pod's or host's.
func hostCheck(next http.Handler, allowed []string, logger *slog.Logger) http.Handler {
	names := map[string]bool{}
	for _, h := range allowed {
		names[normalHost(h)] = true
	}
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		host := normalHost(r.Host)
		if host == "localhost" || net.ParseIP(host) != nil || names[host] {
			next.ServeHTTP(w, r)
			return
		}
		logger.Warn("relayer run: refused a request for another host name", slog.String("host", command.OneLine(r.Host)), slog.String("remote", r.RemoteAddr))
		http.Error(w, "421 misdirected request: this relay does not answer to this host name (allow it with --allowed-host)", http.StatusMisdirectedRequest)
	})
}

// normalHost is a Host header's or an --allowed-host's host, without port
// or brackets, in lower case, without a final dot.
func normalHost(s string) string {
	if h, _, err := net.SplitHostPort(s); err == nil {
		s = h
	}
	s = strings.TrimSuffix(strings.TrimPrefix(s, "["), "]")
	return strings.TrimSuffix(strings.ToLower(s), ".")
}

// openConsole opens the console, when the relay serves it, on a pool of its
// own, so that its pages never take the workers' connections; nil without
// it.
func (r *Relay) openConsole(ctx context.Context) (*console.Console, error) {
	if !r.cfg.Console {
		return nil, nil
	}
	_, cdb, err := r.cfg.Outbox.Open(ctx)
	if err != nil {
		return nil, err
	}
	r.onClose(func() { cdb.Close() })
	cdb.SetMaxOpenConns(console.MaxConcurrentDefault)
	cdb.SetMaxIdleConns(console.MaxConcurrentDefault)
	c, err := console.New(cdb, r.sopts, console.Options{Token: r.consoleToken,
		AllowedHosts: command.AllowedHosts(r.cfg.HTTP, r.cfg.AllowedHosts), Logger: r.logger})
	if err != nil {
		return nil, command.Usagef("%v", err)
	}
	return c, nil
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
