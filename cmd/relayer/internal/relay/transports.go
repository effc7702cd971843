package relay

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"log/slog"
	"net/url"
	"os"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"sync/atomic"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	amqp "github.com/rabbitmq/amqp091-go"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/sasl/plain"
	"github.com/twmb/franz-go/pkg/sasl/scram"

	"github.com/relayer-go/relayer"
	"github.com/relayer-go/relayer/cmd/relayer/internal/command"
	relayeramqp "github.com/relayer-go/relayer/transport/amqp"
	relayerkafka "github.com/relayer-go/relayer/transport/kafka"
	relayernats "github.com/relayer-go/relayer/transport/nats"
)

// transportSpec is one --transport: the name the producers' routes give,
// and where its broker is, as a URL whose scheme says which broker it is.
type transportSpec struct {
	name string
	url  *url.URL
	// source is where the URL came from, for error messages: "--transport",
	// "$VAR" or a file's path.
	source string
}

// transportsEnv holds the transports' entries when no --transport is
// given.
const transportsEnv = "RELAYER_TRANSPORTS"

// transportName is what a --transport name may be: the names routes use.
var transportName = regexp.MustCompile(`^[A-Za-z0-9][A-Za-z0-9_.-]{0,63}$`)

// transportQuery lists, per scheme, the URL parameters the relay reads;
// any other is refused, so that a misspelt option is not ignored.
var transportQuery = map[string][]string{
	"nats":  {"stream", "max_batch", "creds", "nkey", "token_file", "ca", "cert", "key"},
	"tls":   {"stream", "max_batch", "creds", "nkey", "token_file", "ca", "cert", "key"},
	"kafka": {"max_batch", "tls", "ca", "cert", "key", "sasl", "client_id", "delivery_timeout"},
	"amqp":  {"exchange", "max_batch", "channels", "allow_unroutable", "transient", "ca", "cert", "key"},
	"amqps": {"exchange", "max_batch", "channels", "allow_unroutable", "transient", "ca", "cert", "key"},
}

// transportHelp is the part of `relayer run -h` that tells how to write a
// --transport.
const transportHelp = `Transports: --transport NAME=VALUE, repeated, one per transport name the producers' routes use;
without --transport, $RELAYER_TRANSPORTS holds the same entries separated by white space. VALUE
is a broker URL, or env:VAR (the URL is in the environment variable VAR), or file:PATH (the URL
is the file's content): credentials (user info in the URL) are refused on the command line,
where process listings show them, and belong in the environment or a file.
  nats://host:4222[,nats://host2:4222][?stream=S&max_batch=N&creds=FILE&nkey=FILE&token_file=FILE]
      NATS JetStream; tls:// (or ca=, cert=, key=) for TLS
  kafka://host:9092[,host2:9092][?tls=true&sasl=plain|scram-sha-256|scram-sha-512&client_id=ID
      &max_batch=N&delivery_timeout=20s]   SASL user and password are the URL's user info
  amqp://user:pass@host:5672/vhost[?exchange=E&channels=N&max_batch=N&allow_unroutable=true
      &transient=true]   RabbitMQ; amqps:// (with ca=, cert=, key=) for TLS`

// parseTransport reads one NAME=VALUE entry of from: "--transport" or
// "$RELAYER_TRANSPORTS".
func parseTransport(entry, from string) (transportSpec, error) {
	name, value, ok := strings.Cut(entry, "=")
	if !ok || name == "" || value == "" || strings.ContainsAny(name, ":/@") {
		// Nothing of the entry is printed: it may be a URL with its
		// password, written without its NAME=.
		return transportSpec{}, fmt.Errorf("an entry of %s is not NAME=URL, NAME=env:VAR or NAME=file:PATH", from)
	}
	if !transportName.MatchString(name) {
		return transportSpec{}, fmt.Errorf("transport name %q: want letters, digits, '_', '.' or '-', at most 64", name)
	}
	raw, source, err := transportValue(name, value, from)
	if err != nil {
		return transportSpec{}, err
	}
	u, err := transportURL(name, raw, source)
	if err != nil {
		return transportSpec{}, err
	}
	return transportSpec{name: name, url: u, source: source}, nil
}

// transportValue returns the URL an entry's value gives, read from the
// environment for env:VAR or from a file for file:PATH, and where it came
// from: from itself, "$VAR" or the file's path.
func transportValue(name, value, from string) (raw, source string, err error) {
	switch {
	case strings.HasPrefix(value, "env:"):
		v := strings.TrimPrefix(value, "env:")
		s, ok := os.LookupEnv(v)
		if !ok || strings.TrimSpace(s) == "" {
			return "", "", fmt.Errorf("transport %s: the environment variable %s is not set", name, v)
		}
		return strings.TrimSpace(s), "$" + v, nil
	case strings.HasPrefix(value, "file:"):
		path := strings.TrimPrefix(value, "file:")
		b, err := os.ReadFile(path)
		if err != nil {
			return "", "", fmt.Errorf("transport %s: %w", name, err)
		}
		return strings.TrimSpace(string(b)), path, nil
	}
	return value, from, nil
}

// transportURL parses raw, a transport's URL from source, and checks its
// scheme, its host and its parameters; credentials are refused on the
// command line.
func transportURL(name, raw, source string) (*url.URL, error) {
	u, err := url.Parse(raw)
	if err != nil {
		// url's error repeats the URL, password included.
		return nil, fmt.Errorf("transport %s: the URL from %s does not parse", name, source)
	}
	known, ok := transportQuery[u.Scheme]
	if !ok {
		return nil, fmt.Errorf("transport %s: scheme %q: want nats, tls, kafka, amqp or amqps", name, u.Scheme)
	}
	if (u.User != nil || strings.Contains(raw, "@")) && source == "--transport" {
		// A user alone may be a token (nats://TOKEN@host).
		return nil, fmt.Errorf("transport %s: credentials on the command line show in process listings: "+
			"give the URL as %s=env:VAR or %s=file:PATH", name, name, name)
	}
	if u.Host == "" {
		return nil, fmt.Errorf("transport %s: the URL names no host", name)
	}
	for k := range u.Query() {
		if !slices.Contains(known, k) {
			return nil, fmt.Errorf("transport %s: unknown parameter %q for %s (known: %s)", name, k, u.Scheme, strings.Join(known, ", "))
		}
	}
	return u, nil
}

// transportEntries returns the --transport entries, or those of
// $RELAYER_TRANSPORTS when none was given, each parsed, names unique.
func transportEntries(flags []string) ([]transportSpec, error) {
	entries, from := flags, "--transport"
	if len(entries) == 0 {
		entries, from = strings.Fields(os.Getenv(transportsEnv)), "$"+transportsEnv
	}
	if len(entries) == 0 {
		return nil, errors.New("no transport: give --transport NAME=URL (or $RELAYER_TRANSPORTS) for each transport name the producers route to")
	}
	var specs []transportSpec
	for _, e := range entries {
		spec, err := parseTransport(e, from)
		if err != nil {
			return nil, err
		}
		if slices.ContainsFunc(specs, func(s transportSpec) bool { return s.name == spec.name }) {
			return nil, fmt.Errorf("transport %s is given twice", spec.name)
		}
		specs = append(specs, spec)
	}
	return specs, nil
}

// query reads a spec's URL parameters, keeping the first error.
type query struct {
	spec transportSpec
	v    url.Values
	err  error
}

func (q *query) fail(key, format string, args ...any) {
	if q.err == nil {
		q.err = fmt.Errorf("transport %s: %s: %s", q.spec.name, key, fmt.Sprintf(format, args...))
	}
}

func (q *query) str(key string) string { return q.v.Get(key) }

func (q *query) int(key string) int {
	s := q.v.Get(key)
	if s == "" {
		return 0
	}
	n, err := strconv.Atoi(s)
	if err != nil || n < 1 {
		q.fail(key, "%q is not a positive whole number", s)
	}
	return n
}

func (q *query) bool(key string) bool {
	s := q.v.Get(key)
	if s == "" {
		return false
	}
	b, err := strconv.ParseBool(s)
	if err != nil {
		q.fail(key, "%q is not true or false", s)
	}
	return b
}

func (q *query) duration(key string) time.Duration {
	s := q.v.Get(key)
	if s == "" {
		return 0
	}
	d, err := time.ParseDuration(s)
	if err != nil || d <= 0 {
		q.fail(key, "%q is not a positive duration such as 20s", s)
	}
	return d
}

// tlsConfig returns the TLS settings the URL's ca, cert and key name (nil
// when it names none and TLS is not asked for by on).
func (q *query) tlsConfig(on bool) *tls.Config {
	ca, cert, key := q.str("ca"), q.str("cert"), q.str("key")
	if !on && ca == "" && cert == "" && key == "" {
		return nil
	}
	cfg := &tls.Config{MinVersion: tls.VersionTLS12}
	if ca != "" {
		pem, err := os.ReadFile(ca)
		if err != nil {
			q.fail("ca", "%v", err)
			return nil
		}
		cfg.RootCAs = x509.NewCertPool()
		if !cfg.RootCAs.AppendCertsFromPEM(pem) {
			q.fail("ca", "%s holds no PEM certificate", ca)
		}
	}
	if (cert == "") != (key == "") {
		q.fail("cert", "cert and key go together")
		return nil
	}
	if cert != "" {
		pair, err := tls.LoadX509KeyPair(cert, key)
		if err != nil {
			q.fail("cert", "%v", err)
			return nil
		}
		cfg.Certificates = []tls.Certificate{pair}
	}
	return cfg
}

// openedTransport is a transport the relay connected, with what closes its
// connection once the workers stopped.
type openedTransport struct {
	name  string
	kind  string
	tr    relayer.Transport
	close func()
	// lost receives the error that closed the broker connection for good,
	// for a client that does not reconnect by itself (RabbitMQ's); nil
	// for the others.
	lost <-chan *amqp.Error
	// closing is set once the relay closes the connection itself (nil for
	// the clients without lost).
	closing *atomic.Bool
	// connection reports whether the broker connection is up and, in a
	// word, its state; nil for a client that keeps no one connection
	// (Kafka's talks to each broker of the cluster as it needs).
	connection func() (up bool, state string)
}

// openTransports connects every spec's broker; on an error it closes those
// already open.
func openTransports(ctx context.Context, specs []transportSpec, clientName string, logger *slog.Logger) ([]openedTransport, error) {
	var open []openedTransport
	for _, spec := range specs {
		o, err := openTransport(ctx, spec, clientName, logger)
		if err != nil {
			closeTransports(open)
			return nil, err
		}
		open = append(open, o)
	}
	return open, nil
}

func closeTransports(open []openedTransport) {
	for _, o := range open {
		o.close()
	}
}

func openTransport(ctx context.Context, spec transportSpec, clientName string, logger *slog.Logger) (openedTransport, error) {
	q := &query{spec: spec, v: spec.url.Query()}
	switch spec.url.Scheme {
	case "nats", "tls":
		return openNATS(ctx, q, clientName, logger)
	case "kafka":
		return openKafka(ctx, q, clientName)
	default:
		return openAMQP(ctx, q, clientName)
	}
}

// userInfo matches the user info of every URL in a text, such as each
// server of a NATS server list.
var userInfo = regexp.MustCompile(`//[^/@,\s]*@`)

// redacted returns text (a URL, a server list, a client's error) with the
// user info of every URL in it replaced by "…@": a password or a token
// never reaches a log or an error.
func redacted(text string) string { return userInfo.ReplaceAllString(text, "//…@") }

// withoutQuery returns u's text without its parameters, which are the
// relay's, not the client's.
func withoutQuery(u *url.URL) string {
	c := *u
	c.RawQuery = ""
	return c.String()
}

// The NATS connection's liveness: a server that stops answering (frozen, or
// cut off without a reset) is found out after natsPingInterval times
// natsPingsOut, and the client reconnects.
const (
	natsPingInterval = 5 * time.Second
	natsPingsOut     = 2
)

func openNATS(ctx context.Context, q *query, clientName string, logger *slog.Logger) (openedTransport, error) {
	spec := q.spec
	closing := new(atomic.Bool)
	// While the client reconnects, a publish fails at once (no reconnect
	// buffer) instead of waiting for its deadline: the workers see the
	// destination unavailable, pause it, and probe it every few seconds.
	opts := []nats.Option{nats.Name(clientName), nats.MaxReconnects(-1), nats.Timeout(command.ConnectTimeout), nats.ReconnectBufSize(-1),
		nats.PingInterval(natsPingInterval), nats.MaxPingsOutstanding(natsPingsOut),
		nats.DisconnectErrHandler(func(_ *nats.Conn, err error) {
			if closing.Load() {
				return
			}
			reason := "closed"
			if err != nil {
				reason = redacted(err.Error())
			}
			logger.Warn("relayer run: transport "+spec.name+": broker connection lost; reconnecting, its destinations wait",
				slog.String("transport", spec.name), slog.String("error", reason))
		}),
		nats.ReconnectHandler(func(nc *nats.Conn) {
			logger.Info("relayer run: transport "+spec.name+": broker connection back",
				slog.String("transport", spec.name), slog.String("server", redacted(nc.ConnectedUrlRedacted())))
		})}
	if cfg := q.tlsConfig(spec.url.Scheme == "tls"); cfg != nil {
		opts = append(opts, nats.Secure(cfg))
	}
	if f := q.str("creds"); f != "" {
		opts = append(opts, nats.UserCredentials(f))
	}
	if f := q.str("nkey"); f != "" {
		o, err := nats.NkeyOptionFromSeed(f)
		if err != nil {
			q.fail("nkey", "%v", err)
		}
		opts = append(opts, o)
	}
	if f := q.str("token_file"); f != "" {
		b, err := os.ReadFile(f)
		if err != nil {
			q.fail("token_file", "%v", err)
		}
		opts = append(opts, nats.Token(strings.TrimSpace(string(b))))
	}
	topts := relayernats.Options{Stream: q.str("stream"), MaxBatchSize: q.int("max_batch")}
	if q.err != nil {
		return openedTransport{}, command.Usagef("%v", q.err)
	}
	if err := topts.Validate(); err != nil {
		return openedTransport{}, command.Usagef("transport %s: %v", spec.name, err)
	}
	// The comma-separated servers of one URL go to the client as they are.
	nc, err := nats.Connect(withoutQuery(spec.url), opts...)
	if err != nil {
		return openedTransport{}, fmt.Errorf("transport %s: connecting to NATS at %s: %s", spec.name, redacted(withoutQuery(spec.url)), redacted(err.Error()))
	}
	js, err := jetstream.New(nc)
	if err == nil {
		actx, cancel := context.WithTimeout(ctx, command.ConnectTimeout)
		_, err = js.AccountInfo(actx)
		cancel()
	}
	if err != nil {
		nc.Close()
		return openedTransport{}, fmt.Errorf("transport %s: JetStream at %s: %s", spec.name, redacted(withoutQuery(spec.url)), redacted(err.Error()))
	}
	tr, err := relayernats.New(js, topts)
	if err != nil {
		nc.Close()
		return openedTransport{}, fmt.Errorf("transport %s: %w", spec.name, err)
	}
	return openedTransport{name: spec.name, kind: "nats", tr: tr, close: func() { closing.Store(true); _ = nc.Drain() },
		connection: func() (bool, string) {
			st := nc.Status()
			return st == nats.CONNECTED, strings.ToLower(st.String())
		}}, nil
}

func openKafka(ctx context.Context, q *query, clientName string) (openedTransport, error) {
	spec := q.spec
	seeds := strings.Split(spec.url.Host, ",")
	opts := []kgo.Opt{kgo.SeedBrokers(seeds...), kgo.ClientID(clientName)}
	if id := q.str("client_id"); id != "" {
		opts[1] = kgo.ClientID(id)
	}
	if cfg := q.tlsConfig(q.bool("tls")); cfg != nil {
		opts = append(opts, kgo.DialTLSConfig(cfg))
	}
	if d := q.duration("delivery_timeout"); d > 0 {
		opts = append(opts, kgo.RecordDeliveryTimeout(d))
	} else {
		// Below the dispatchers' claim (30 s), as the transport asks.
		opts = append(opts, kgo.RecordDeliveryTimeout(20*time.Second))
	}
	user := spec.url.User.Username()
	password, _ := spec.url.User.Password()
	switch mech := q.str("sasl"); mech {
	case "":
		if user != "" {
			q.fail("sasl", "the URL has a user: name its mechanism, plain, scram-sha-256 or scram-sha-512")
		}
	case "plain":
		opts = append(opts, kgo.SASL(plain.Auth{User: user, Pass: password}.AsMechanism()))
	case "scram-sha-256":
		opts = append(opts, kgo.SASL(scram.Auth{User: user, Pass: password}.AsSha256Mechanism()))
	case "scram-sha-512":
		opts = append(opts, kgo.SASL(scram.Auth{User: user, Pass: password}.AsSha512Mechanism()))
	default:
		q.fail("sasl", "%q: want plain, scram-sha-256 or scram-sha-512", mech)
	}
	topts := relayerkafka.Options{MaxBatchSize: q.int("max_batch")}
	if q.err != nil {
		return openedTransport{}, command.Usagef("%v", q.err)
	}
	if err := topts.Validate(); err != nil {
		return openedTransport{}, command.Usagef("transport %s: %v", spec.name, err)
	}
	client, err := kgo.NewClient(opts...)
	if err != nil {
		return openedTransport{}, fmt.Errorf("transport %s: %w", spec.name, err)
	}
	pctx, cancel := context.WithTimeout(ctx, command.ConnectTimeout)
	err = client.Ping(pctx)
	cancel()
	if err != nil {
		client.Close()
		return openedTransport{}, fmt.Errorf("transport %s: connecting to Kafka at %s: %s", spec.name, strings.Join(seeds, ","), redacted(err.Error()))
	}
	tr, err := relayerkafka.New(client, topts)
	if err != nil {
		client.Close()
		return openedTransport{}, fmt.Errorf("transport %s: %w", spec.name, err)
	}
	return openedTransport{name: spec.name, kind: "kafka", tr: tr, close: client.Close}, nil
}

func openAMQP(_ context.Context, q *query, clientName string) (openedTransport, error) {
	spec := q.spec
	var lost chan *amqp.Error
	topts := relayeramqp.Options{Exchange: q.str("exchange"), MaxBatchSize: q.int("max_batch"), Channels: q.int("channels"),
		AllowUnroutable: q.bool("allow_unroutable"), Transient: q.bool("transient")}
	if spec.url.Scheme == "amqp" && (q.str("ca") != "" || q.str("cert") != "" || q.str("key") != "") {
		q.fail("ca", "TLS settings need an amqps:// URL; amqp:// connects in plain text")
	}
	cfg := amqp.Config{Dial: amqp.DefaultDial(command.ConnectTimeout), Properties: amqp.Table{"connection_name": clientName},
		TLSClientConfig: q.tlsConfig(spec.url.Scheme == "amqps")}
	if q.err != nil {
		return openedTransport{}, command.Usagef("%v", q.err)
	}
	if err := topts.Validate(); err != nil {
		return openedTransport{}, command.Usagef("transport %s: %v", spec.name, err)
	}
	conn, err := amqp.DialConfig(withoutQuery(spec.url), cfg)
	if err == nil {
		// Before anything else, so that a connection that closes at once
		// is seen too.
		lost = conn.NotifyClose(make(chan *amqp.Error, 1))
	}
	if err != nil {
		return openedTransport{}, fmt.Errorf("transport %s: connecting to RabbitMQ at %s: %s", spec.name, redacted(withoutQuery(spec.url)), redacted(err.Error()))
	}
	tr, err := relayeramqp.New(conn, topts)
	if err != nil {
		conn.Close()
		return openedTransport{}, fmt.Errorf("transport %s: %w", spec.name, err)
	}
	closing := new(atomic.Bool)
	return openedTransport{name: spec.name, kind: "amqp", tr: tr, lost: lost, closing: closing,
		close: func() { closing.Store(true); _ = tr.Close(); _ = conn.Close() },
		connection: func() (bool, string) {
			if conn.IsClosed() {
				return false, "closed"
			}
			return true, "connected"
		}}, nil
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
