package relayeramqp_test

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/google/uuid"
	amqp "github.com/rabbitmq/amqp091-go"

	"github.com/relayer-go/relayer"
	"github.com/relayer-go/relayer/headers"
	"github.com/relayer-go/relayer/internal/testkit"
	relayeramqp "github.com/relayer-go/relayer/transport/amqp"
)

// envURL names the environment variable with the broker the tests use.
const envURL = "RELAYER_TEST_RABBITMQ_URL"

const defaultURL = "amqp://guest:guest@127.0.0.1:5672/"

// connect dials the test broker for one test and closes the connection when
// the test ends. Without a reachable broker the test is skipped, or fails
// when CI is "true": CI starts RabbitMQ on its machine, so a CI run must
// never pass by skipping.
func connect(t testing.TB) *amqp.Connection {
	t.Helper()
	url := brokerURL()
	conn, err := dial(t, url)
	if err != nil {
		if ci, _ := strconv.ParseBool(os.Getenv("CI")); ci {
			t.Fatalf("RabbitMQ is required when CI=true (CI starts it on its machine), but %s is not reachable: %v", redact(url), err)
		}
		t.Skipf("RabbitMQ is not reachable at %s (start it, or set %s): %v", redact(url), envURL, err)
	}
	t.Cleanup(func() { _ = conn.Close() })
	return conn
}

// brokerURL is the URL of the test broker.
func brokerURL() string {
	if url := os.Getenv(envURL); url != "" {
		return url
	}
	return defaultURL
}

// dial opens a connection to url named after the test, for the broker's
// list of connections.
func dial(t testing.TB, url string) (*amqp.Connection, error) {
	return amqp.DialConfig(url, amqp.Config{
		Dial:       amqp.DefaultDial(5 * time.Second),
		Properties: amqp.Table{"connection_name": "relayeramqp test " + t.Name()},
	})
}

func redact(url string) string {
	if at := strings.LastIndex(url, "@"); at >= 0 {
		if scheme := strings.Index(url, "://"); scheme >= 0 && scheme < at {
			return url[:scheme+3] + "…" + url[at:]
		}
	}
	return url
}

// testBundle is one test's broker state: its own connection, a transport on
// it, a channel for the test's own AMQP work and a queue of its own.
type testBundle struct {
	conn  *amqp.Connection
	tr    *relayeramqp.Transport
	ch    *amqp.Channel
	queue string
}

func setup(t testing.TB, opts relayeramqp.Options) *testBundle {
	t.Helper()
	conn := connect(t)
	tr, err := relayeramqp.New(conn, opts)
	if err != nil {
		t.Fatalf("New: %v", err)
	}
	t.Cleanup(func() {
		if err := tr.Close(); err != nil {
			t.Errorf("Close: %v", err)
		}
	})
	ch, err := conn.Channel()
	if err != nil {
		t.Fatal(err)
	}
	b := &testBundle{conn: conn, tr: tr, ch: ch}
	b.queue = b.declareQueue(t, nil)
	return b
}

// uniqueName returns a name no other test or run uses.
func uniqueName(t testing.TB, kind string) string {
	name := strings.NewReplacer("/", ".", " ", "_").Replace(t.Name())
	return fmt.Sprintf("relayer-test.%s.%s.%s", kind, name, uuid.NewString()[:8])
}

// declareQueue declares an exclusive queue, deleted with the connection.
func (b *testBundle) declareQueue(t testing.TB, args amqp.Table) string {
	t.Helper()
	q, err := b.ch.QueueDeclare(uniqueName(t, "queue"), false, true, true, false, args)
	if err != nil {
		t.Fatalf("declaring a queue: %v", err)
	}
	return q.Name
}

// count returns the number of ready messages in queue.
func (b *testBundle) count(t testing.TB, queue string) int {
	t.Helper()
	q, err := b.ch.QueueDeclarePassive(queue, false, true, true, false, nil)
	if err != nil {
		t.Fatalf("inspecting queue %s: %v", queue, err)
	}
	return q.Messages
}

// receive takes n messages from queue, failing the test when they do not
// arrive within ten seconds.
func (b *testBundle) receive(t testing.TB, queue string, n int) []amqp.Delivery {
	t.Helper()
	var out []amqp.Delivery
	testkit.Eventually(t, 10*time.Second, func() bool {
		for len(out) < n {
			d, ok, err := b.ch.Get(queue, true)
			if err != nil {
				t.Fatalf("getting from %s: %v", queue, err)
			}
			if !ok {
				return false
			}
			out = append(out, d)
		}
		return true
	}, "%d messages from %s", n, queue)
	return out
}

func newMessage(t testing.TB, destination string) *relayer.Message {
	t.Helper()
	id, err := relayer.NewID()
	if err != nil {
		t.Fatal(err)
	}
	return &relayer.Message{
		ID:          id,
		Type:        "test.Message",
		Body:        []byte(`{"n":1}`),
		Transport:   "rabbitmq",
		Destination: destination,
		CreatedAt:   time.Now().UTC().Truncate(time.Microsecond),
	}
}

func equalHeaders(a, b []headers.Header) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if a[i].Name != b[i].Name || !bytes.Equal(a[i].Value, b[i].Value) {
			return false
		}
	}
	return true
}

func formatHeaders(hs []headers.Header) string {
	var sb strings.Builder
	for _, h := range hs {
		fmt.Fprintf(&sb, "%s=%q ", h.Name, h.Value)
	}
	return sb.String()
}

// BenchmarkSendBatch measures a full batch against the test broker: publish,
// confirm, and what the mapping allocates per message.
func BenchmarkSendBatch(b *testing.B) {
	bundle := setup(b, relayeramqp.Options{AllowUnroutable: true})
	msgs := make([]*relayer.Message, relayeramqp.MaxBatchSizeDefault)
	for i := range msgs {
		msgs[i] = newMessage(b, bundle.queue)
		msgs[i].Key = fmt.Sprintf("key-%d", i%16)
		msgs[i].Headers = []headers.Header{
			{Name: "content-type", Value: []byte("application/json")},
			{Name: "traceparent", Value: []byte("00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01")},
			{Name: "x-tenant-id", Value: []byte("acme-eu-1")},
		}
	}
	if _, err := bundle.ch.QueuePurge(bundle.queue, false); err != nil {
		b.Fatal(err)
	}
	b.ReportAllocs()
	for b.Loop() {
		if err := bundle.tr.SendBatch(context.Background(), msgs); err != nil {
			b.Fatal(err)
		}
		if _, err := bundle.ch.QueuePurge(bundle.queue, false); err != nil {
			b.Fatal(err)
		}
	}
	b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N*len(msgs)), "ns/msg")
}
