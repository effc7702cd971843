package relay

import (
	"context"
	"database/sql"
	"encoding/json"
	"io"
	"net"
	"net/http"
	"net/http/cookiejar"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"
	amqp "github.com/rabbitmq/amqp091-go"
	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/relayer-go/relayer"
	"github.com/relayer-go/relayer/cmd/relayer/internal/command"
	"github.com/relayer-go/relayer/enlist"
	"github.com/relayer-go/relayer/internal/testkit"
	"github.com/relayer-go/relayer/internal/testkit/syncbuf"
	"github.com/relayer-go/relayer/internal/testkit/testdb"
)

// The relay's messages, one type per route of the tests.
type (
	relayPlaced   struct{ N int }
	relayActivity struct{ Seq int }
	relayBilled   struct{ N int }
	relayMailed   struct{ N int }
	relayLost     struct{ N int }
)

func (relayPlaced) MessageType() string   { return "relaytest.Placed" }
func (relayActivity) MessageType() string { return "relaytest.Activity" }
func (relayBilled) MessageType() string   { return "relaytest.Billed" }
func (relayMailed) MessageType() string   { return "relaytest.Mailed" }
func (relayLost) MessageType() string     { return "relaytest.Lost" }

// natsStream connects to url and makes a stream capturing subjects.
func natsStream(t testing.TB, url, name string, subjects ...string) jetstream.JetStream {
	t.Helper()
	nc, err := nats.Connect(url)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(nc.Close)
	js, err := jetstream.New(nc)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := js.CreateStream(t.Context(), jetstream.StreamConfig{Name: name, Subjects: subjects, Storage: jetstream.MemoryStorage}); err != nil {
		t.Fatal(err)
	}
	return js
}

// runningRelay is a "relayer run" in this process.
type runningRelay struct {
	base           string // http://127.0.0.1:port, "" without --http
	stdout, stderr *syncbuf.Buffer
	cancel         context.CancelFunc // the first signal
	code           chan int
}

var endpointsAt = regexp.MustCompile(`endpoints"?[=:]"?(http://[0-9.:]+)`)

// startRelay runs "relayer run" with args and waits until it delivers.
func startRelay(t *testing.T, args ...string) *runningRelay {
	t.Helper()
	ctx, cancel := context.WithCancel(t.Context())
	t.Cleanup(cancel)
	rr := &runningRelay{stdout: new(syncbuf.Buffer), stderr: new(syncbuf.Buffer), cancel: cancel, code: make(chan int, 1)}
	go func() { rr.code <- run(ctx, append([]string{"run"}, args...), rr.stdout, rr.stderr) }()
	testkit.Eventually(t, 30*time.Second, func() bool {
		select {
		case code := <-rr.code:
			t.Fatalf("relayer run exited with %d: %s", code, rr.stderr.String())
		default:
		}
		return strings.Contains(rr.stderr.String(), "relayer run: delivering")
	}, "relayer run to start: %s", rr.stderr)
	if m := endpointsAt.FindStringSubmatch(rr.stderr.String()); m != nil {
		rr.base = m[1]
	}
	return rr
}

// stop signals the relay and checks that it exits 0.
func (rr *runningRelay) stop(t *testing.T) {
	t.Helper()
	rr.cancel()
	select {
	case c := <-rr.code:
		if c != command.ExitOK {
			t.Errorf("exit code %d after the signal, stderr %s", c, rr.stderr.String())
		}
	case <-time.After(30 * time.Second):
		t.Fatal("the relay did not stop after the signal")
	}
}

// get fetches url with the Host header host ("" for the URL's), returning
// the status and body.
func get(t *testing.T, host, url string) (int, string) {
	t.Helper()
	req, err := http.NewRequestWithContext(t.Context(), http.MethodGet, url, nil)
	if err != nil {
		t.Fatal(err)
	}
	if host != "" {
		req.Host = host
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(b)
}

// relayWriter returns a writer of the outbox in schema with lanes and routes, waking
// relays at each commit.
func relayWriter(t *testing.T, db *sql.DB, schema string, lanes int, add func(*relayer.Routes) error) *enlist.Writer {
	t.Helper()
	var routes relayer.Routes
	if err := add(&routes); err != nil {
		t.Fatal(err)
	}
	w, err := enlist.NewWriter(relayer.Outbox{Schema: schema, Routes: &routes, Lanes: lanes}, enlist.Options{Wake: db})
	if err != nil {
		t.Fatal(err)
	}
	return w
}

func rabbitURL() string {
	c, err := net.DialTimeout("tcp", "127.0.0.1:5672", time.Second)
	if err != nil {
		return ""
	}
	c.Close()
	return "amqp://guest:guest@127.0.0.1:5672/"
}

// The relay delivers what producers route to each of its transports (NATS,
// Kafka, and RabbitMQ when one runs here), leaves a row whose transport it
// lacks in the outbox, serves its endpoints, and stops on the signal.
//
// It sets environment variables, so it does not run in parallel.
func TestRunDeliversThroughEveryTransport(t *testing.T) {
	dbURL, schema := migrated(t)
	db := testdb.Open(t, "pgx")
	natsURL := startNATSServer(t)
	token := strings.ToLower(strings.TrimPrefix(schema, "t_"))
	js := natsStream(t, natsURL, "RELAY", "relay.>")
	cluster, err := kfake.NewCluster(kfake.NumBrokers(1), kfake.SeedTopics(1, "relay-billed"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(cluster.Close)
	kafkaURL := "kafka://" + strings.Join(cluster.ListenAddrs(), ",")
	rabbit := rabbitURL()
	queue := "relay-mailed-" + token
	args := []string{"--database-url", dbURL, "--schema", schema, "--http", "127.0.0.1:0",
		"--transport", "events=" + natsURL + "?stream=RELAY", "--transport", "ledger=" + kafkaURL}
	var ch *amqp.Channel
	if rabbit != "" {
		t.Setenv("RELAYER_TEST_RABBIT_URL", rabbit) // with its password: never on the command line
		conn, err := amqp.Dial(rabbit)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { conn.Close() })
		if ch, err = conn.Channel(); err != nil {
			t.Fatal(err)
		}
		if _, err := ch.QueueDeclare(queue, false, true, false, false, nil); err != nil {
			t.Fatal(err)
		}
		args = append(args, "--transport", "mail=env:RELAYER_TEST_RABBIT_URL")
	} else {
		t.Log("RabbitMQ is not on 127.0.0.1:5672: its transport is not tried")
	}
	t.Setenv("RELAYER_CONSOLE_TOKEN", "s3cret")
	rr := startRelay(t, append(args, "--console", "--log-format", "json")...)

	w := relayWriter(t, db, schema, relayer.LanesDefault, func(r *relayer.Routes) error {
		for _, err := range []error{
			relayer.AddType[relayPlaced](r, relayer.Route{Transport: "events", Destination: "relay.placed"}),
			relayer.AddType[relayActivity](r, relayer.Route{Transport: "events", Destination: "relay.activity", Ordered: true}),
			relayer.AddType[relayBilled](r, relayer.Route{Transport: "ledger", Destination: "relay-billed"}),
			relayer.AddType[relayMailed](r, relayer.Route{Transport: "mail", Destination: queue}),
			relayer.AddType[relayLost](r, relayer.Route{Transport: "ghost", Destination: "nowhere"}),
		} {
			if err != nil {
				return err
			}
		}
		return nil
	})
	const n = 20
	err = w.RunInTx(t.Context(), db, nil, func(tx *enlist.Tx) error {
		for i := range n {
			msgs := []relayer.Outgoing{relayer.NewOutgoing(relayPlaced{i}), relayer.NewOutgoing(relayActivity{i}, relayer.Key("customer-1")),
				relayer.NewOutgoing(relayBilled{i})}
			if rabbit != "" {
				msgs = append(msgs, relayer.NewOutgoing(relayMailed{i}))
			}
			if err := tx.PublishAll(t.Context(), msgs...); err != nil {
				return err
			}
		}
		return tx.Publish(t.Context(), relayLost{1})
	})
	if err != nil {
		t.Fatal(err)
	}

	// NATS: every message, the ordered ones in order.
	cons, err := js.CreateOrUpdateConsumer(t.Context(), "RELAY", jetstream.ConsumerConfig{Durable: "check", AckPolicy: jetstream.AckNonePolicy})
	if err != nil {
		t.Fatal(err)
	}
	var activity []int
	placed := 0
	for placed+len(activity) < 2*n {
		batch, err := cons.Fetch(2*n, jetstream.FetchMaxWait(20*time.Second))
		if err != nil {
			t.Fatal(err)
		}
		got := 0
		for m := range batch.Messages() {
			got++
			if m.Subject() == "relay.placed" {
				placed++
				continue
			}
			var a relayActivity
			if err := json.Unmarshal(m.Data(), &a); err != nil {
				t.Fatal(err)
			}
			activity = append(activity, a.Seq)
		}
		if got == 0 {
			t.Fatalf("NATS: %d placed and %d activity messages of %d each; stderr %s", placed, len(activity), n, rr.stderr.String())
		}
	}
	for i, seq := range activity {
		if seq != i {
			t.Fatalf("ordered messages arrived as %v, want 0 to %d in order", activity, n-1)
		}
	}

	// Kafka.
	kc, err := kgo.NewClient(kgo.SeedBrokers(cluster.ListenAddrs()...), kgo.ConsumeTopics("relay-billed"))
	if err != nil {
		t.Fatal(err)
	}
	defer kc.Close()
	billed := 0
	for billed < n {
		ctx, cancel := context.WithTimeout(t.Context(), 20*time.Second)
		fetches := kc.PollFetches(ctx)
		timedOut := ctx.Err() != nil
		cancel()
		if timedOut {
			t.Fatalf("Kafka: %d billed messages of %d; stderr %s", billed, n, rr.stderr.String())
		}
		billed += fetches.NumRecords()
	}

	// RabbitMQ.
	if ch != nil {
		mailed := 0
		if !testkit.Within(20*time.Second, func() bool {
			for mailed < n {
				_, ok, err := ch.Get(queue, true)
				if err != nil {
					t.Fatal(err)
				}
				if !ok {
					return false
				}
				mailed++
			}
			return true
		}) {
			t.Fatalf("RabbitMQ: %d mailed messages of %d", mailed, n)
		}
	}

	// The row for a transport the relay lacks stays, and the log says why.
	var left int
	testkit.Eventually(t, 10*time.Second, func() bool {
		return db.QueryRow(`SELECT count(*) FROM "`+schema+`".outbox`).Scan(&left) == nil && left == 1
	}, "one row left in the outbox, the one for the transport ghost")
	testkit.Eventually(t, 10*time.Second, func() bool {
		return strings.Contains(rr.stderr.String(), `"transport":"ghost"`)
	}, "the log to name the missing transport: %s", rr.stderr)

	// The endpoints.
	if code, body := get(t, "", rr.base+"/healthz"); code != http.StatusOK {
		t.Errorf("/healthz: %d %s", code, body)
	}
	code, body := get(t, "", rr.base+"/readyz")
	if code != http.StatusOK || !strings.Contains(body, `"ready":true`) || !strings.Contains(body, `"listener"`) {
		t.Errorf("/readyz: %d %s", code, body)
	}
	code, body = get(t, "", rr.base+"/metrics")
	if code != http.StatusOK {
		t.Fatalf("/metrics: %d %s", code, body)
	}
	parser := expfmt.NewTextParser(model.UTF8Validation)
	families, err := parser.TextToMetricFamilies(strings.NewReader(body))
	if err != nil {
		t.Fatalf("/metrics does not parse: %v\n%s", err, body)
	}
	for _, name := range []string{"relayer_outbox_backlog", "relayer_outbox_dead"} {
		if _, ok := families[name]; !ok {
			t.Errorf("/metrics lacks %s; it has %v", name, keys(families))
		}
	}
	if !hasPrefix(families, "relayer_worker_") && !hasPrefix(families, "relayer_dispatch_") && !hasPrefix(families, "relayer_messages_") {
		t.Errorf("/metrics lacks the workers' counters; it has %v", keys(families))
	}
	if code, _ := get(t, "evil.example.com", rr.base+"/readyz"); code != http.StatusMisdirectedRequest {
		t.Errorf("/readyz for another host name: %d, want 421", code)
	}
	if code, _ := get(t, "10.1.2.3:9090", rr.base+"/readyz"); code != http.StatusOK {
		t.Errorf("/readyz for an IP address (a probe's): %d, want 200", code)
	}
	if code, _ := get(t, "", rr.base+"/console/"); code != http.StatusUnauthorized && code != http.StatusForbidden {
		t.Errorf("/console/ without its token: %d", code)
	}
	jar, err := cookiejar.New(nil)
	if err != nil {
		t.Fatal(err)
	}
	resp, err := (&http.Client{Jar: jar}).Get(rr.base + "/console/?token=s3cret")
	if err != nil {
		t.Fatal(err)
	}
	page, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK || resp.Request.URL.Path != "/console/" || !strings.Contains(string(page), schema) {
		t.Errorf("/console/ with its token: %d at %s", resp.StatusCode, resp.Request.URL)
	}
	rr.stop(t)
	if !strings.Contains(rr.stderr.String(), "relayer run: stopped") {
		t.Errorf("no stop in the log: %s", rr.stderr.String())
	}
}

func keys[V any](m map[string]V) []string {
	var out []string
	for k := range m {
		out = append(out, k)
	}
	return out
}

func hasPrefix[V any](m map[string]V, prefix string) bool {
	for k := range m {
		if strings.HasPrefix(k, prefix) {
			return true
		}
	}
	return false
}

// What cannot work is refused before the relay starts, naming what is
// wrong, and a password given on the command line is neither used nor
// echoed.
func TestRunRefusesWhatCannotWork(t *testing.T) {
	dbURL, schema := migrated(t)
	_, unmigrated := migrated(t)
	unmigrated += "_none"
	t.Setenv("RELAYER_TRANSPORTS", "")
	t.Setenv("RELAYER_TEST_EMPTY", "")
	base := []string{"run", "--database-url", dbURL, "--schema", schema}
	for _, tc := range []struct {
		name string
		env  [2]string
		args []string
		code int
		want string
	}{
		{name: "no transport", code: command.ExitUsage, want: "no transport"},
		{name: "a password on the command line", args: []string{"--transport", "mail=amqp://guest:hunter2@127.0.0.1:5672/"}, code: command.ExitUsage, want: "process listings"},
		{name: "a token on the command line", args: []string{"--transport", "events=nats://s3cr3t-token@127.0.0.1:4222"}, code: command.ExitUsage, want: "process listings"},
		{name: "TLS files on a plain-text URL", args: []string{"--transport", "mail=amqp://127.0.0.1:5672/?ca=/etc/ssl/ca.pem"}, code: command.ExitUsage, want: "amqps://"},
		{name: "a bad parameter value", args: []string{"--transport", "events=nats://127.0.0.1:4222?max_batch=x"}, code: command.ExitUsage, want: "max_batch"},
		{name: "credentials of a second server on the command line", args: []string{"--transport", "events=nats://127.0.0.1:4222,nats://u:hunter2@127.0.0.1:4223"}, code: command.ExitUsage, want: "process listings"},
		{name: "a token reaching an unreachable server", env: [2]string{"RELAYER_TEST_TOKEN_URL", "nats://s3cr3t-token@127.0.0.1:1"}, args: []string{"--transport", "events=env:RELAYER_TEST_TOKEN_URL"}, code: command.ExitFail, want: "//…@127.0.0.1:1"},
		{name: "a URL without its name", env: [2]string{"RELAYER_TRANSPORTS", "amqp://guest:hunter2@127.0.0.1/?exchange=x"}, code: command.ExitUsage, want: "not NAME=URL"},
		{name: "a bad retry setting", env: [2]string{"RELAYER_RETRY_MAX_ATTEMPTS", "0x"}, args: []string{"--transport", "a=nats://h:1"}, code: command.ExitUsage, want: "MaxAttempts"},
		{name: "an unknown scheme", args: []string{"--transport", "x=http://127.0.0.1:1"}, code: command.ExitUsage, want: `scheme "http"`},
		{name: "a misspelt parameter", args: []string{"--transport", "events=nats://127.0.0.1:4222?strem=S"}, code: command.ExitUsage, want: `unknown parameter "strem"`},
		{name: "an unset variable", args: []string{"--transport", "events=env:RELAYER_TEST_EMPTY"}, code: command.ExitUsage, want: "RELAYER_TEST_EMPTY is not set"},
		{name: "a missing file", args: []string{"--transport", "events=file:/nonexistent/url"}, code: command.ExitUsage, want: "/nonexistent/url"},
		{name: "a name twice", args: []string{"--transport", "a=nats://h:1", "--transport", "a=nats://h:2"}, code: command.ExitUsage, want: "given twice"},
		{name: "a bad name", args: []string{"--transport", "a b=nats://h:1"}, code: command.ExitUsage, want: "transport name"},
		{name: "a bad log format", args: []string{"--log-format", "xml"}, code: command.ExitUsage, want: "--log-format"},
		{name: "a console without a listener", args: []string{"--console", "--transport", "a=nats://h:1"}, code: command.ExitUsage, want: "--console needs --http"},
		{name: "a console without a token", args: []string{"--console", "--http", "127.0.0.1:0", "--transport", "a=nats://h:1"}, code: command.ExitUsage, want: "RELAYER_CONSOLE_TOKEN"},
		{name: "a bad worker setting", env: [2]string{"RELAYER_ORDERED_WORKERS", "many"}, args: []string{"--transport", "a=nats://h:1"}, code: command.ExitUsage, want: "OrderedWorkers"},
		{name: "a broker that does not answer", args: []string{"--transport", "events=nats://127.0.0.1:1"}, code: command.ExitFail, want: "transport events: connecting to NATS"},
		{name: "an outbox without tables", args: []string{"--schema", unmigrated, "--transport", "events=" + startNATSServer(t)}, code: command.ExitFail, want: "migrate"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if tc.env[0] != "" {
				t.Setenv(tc.env[0], tc.env[1])
			}
			r := runCmd(t, append(base, tc.args...)...)
			if r.Code != tc.code || !strings.Contains(r.Stderr, tc.want) {
				t.Errorf("code %d, stderr %q; want code %d naming %q", r.Code, r.Stderr, tc.code, tc.want)
			}
			if strings.Contains(r.Stderr, "hunter2") || strings.Contains(r.Stderr, "s3cr3t-token") {
				t.Errorf("the password is echoed: %q", r.Stderr)
			}
			if lines := strings.Count(strings.TrimSpace(r.Stderr), "\n"); r.Code == command.ExitUsage && lines > 0 {
				t.Errorf("the reason takes %d lines, want one: %q", lines+1, r.Stderr)
			}
		})
	}
}

// Credentials may come in $RELAYER_TRANSPORTS, which process listings do
// not show; the entries there are read when no --transport is given.
func TestTransportEntriesFromTheEnvironment(t *testing.T) {
	t.Setenv("RELAYER_TRANSPORTS", "mail=amqp://guest:guest@127.0.0.1:5672/?exchange=orders  events=nats://127.0.0.1:4222")
	specs, err := transportEntries(nil)
	if err != nil {
		t.Fatal(err)
	}
	if len(specs) != 2 || specs[0].name != "mail" || specs[1].name != "events" || specs[0].source != "$RELAYER_TRANSPORTS" {
		t.Fatalf("specs %+v", specs)
	}
	if _, err := transportEntries([]string{"events=nats://127.0.0.1:4222"}); err != nil {
		t.Errorf("--transport given: %v", err)
	}
}
