package relayernats_test

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"os"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"go.uber.org/goleak"

	"github.com/relayer-go/relayer"
	relayernats "github.com/relayer-go/relayer/transport/nats"
)

func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m)
}

// localURL is where a developer's or CI's NATS server with JetStream usually
// listens; RELAYER_TEST_NATS_URL overrides it.
const localURL = "nats://127.0.0.1:4222"

var local struct {
	once sync.Once
	url  string // "" when no usable server was found
}

// serverURL returns the server a test should use: the configured or local one
// when it answers with JetStream enabled, otherwise a fresh embedded server
// for this test.
func serverURL(t *testing.T) string {
	t.Helper()
	local.once.Do(func() {
		url := os.Getenv("RELAYER_TEST_NATS_URL")
		if url == "" {
			url = localURL
		}
		nc, err := nats.Connect(url, nats.Timeout(time.Second), nats.MaxReconnects(0))
		if err != nil {
			return
		}
		defer nc.Close()
		js, err := jetstream.New(nc)
		if err != nil {
			return
		}
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
		defer cancel()
		if _, err := js.AccountInfo(ctx); err == nil {
			local.url = url
		}
	})
	if local.url != "" {
		return local.url
	}
	return startEmbedded(t)
}

// startEmbedded runs an in-process nats-server with JetStream on a random
// port for the rest of the test and returns its URL.
func startEmbedded(t *testing.T) string {
	t.Helper()
	s, err := server.NewServer(&server.Options{
		Host:      "127.0.0.1",
		Port:      server.RANDOM_PORT,
		JetStream: true,
		StoreDir:  t.TempDir(),
		NoLog:     true,
		NoSigs:    true,
	})
	if err != nil {
		t.Fatalf("embedded nats-server: %v", err)
	}
	s.Start()
	t.Cleanup(func() {
		s.Shutdown()
		s.WaitForShutdown()
	})
	if !s.ReadyForConnections(10 * time.Second) {
		t.Fatal("embedded nats-server did not get ready")
	}
	return s.ClientURL()
}

// testBundle is one test's connection, stream and transport. The stream and
// its subjects are unique to the test, so tests run in parallel and repeat.
type testBundle struct {
	url    string
	nc     *nats.Conn
	js     jetstream.JetStream
	stream jetstream.Stream
	prefix string // the stream captures prefix + ">"
	tr     *relayernats.Transport
}

// subject returns a subject the test's stream captures.
func (b *testBundle) subject(name string) string { return b.prefix + name }

type setupOpts struct {
	url       string // default: serverURL(t)
	transport relayernats.Options
	stream    func(*jetstream.StreamConfig)
}

func setup(t *testing.T, o setupOpts) *testBundle {
	t.Helper()
	if o.url == "" {
		o.url = serverURL(t)
	}
	nc, err := nats.Connect(o.url, nats.MaxReconnects(0))
	if err != nil {
		t.Fatalf("connect %s: %v", o.url, err)
	}
	t.Cleanup(nc.Close)
	js, err := jetstream.New(nc)
	if err != nil {
		t.Fatal(err)
	}
	token := uniqueToken(t)
	cfg := jetstream.StreamConfig{
		Name:     "RELAYER_TEST_" + strings.ToUpper(token),
		Subjects: []string{"relayer-test." + token + ".>"},
		Storage:  jetstream.MemoryStorage,
	}
	if o.stream != nil {
		o.stream(&cfg)
	}
	ctx := testContext(t)
	stream, err := js.CreateStream(ctx, cfg)
	if err != nil {
		t.Fatalf("create stream %s: %v", cfg.Name, err)
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		if err := js.DeleteStream(ctx, cfg.Name); err != nil {
			t.Errorf("delete stream %s: %v", cfg.Name, err)
		}
	})
	if o.transport.Stream == "-" {
		o.transport.Stream = cfg.Name
	}
	tr, err := relayernats.New(js, o.transport)
	if err != nil {
		t.Fatal(err)
	}
	return &testBundle{url: o.url, nc: nc, js: js, stream: stream, prefix: "relayer-test." + token + ".", tr: tr}
}

// uniqueToken returns a fresh subject token.
func uniqueToken(t *testing.T) string {
	t.Helper()
	var b [6]byte
	if _, err := rand.Read(b[:]); err != nil {
		t.Fatal(err)
	}
	return hex.EncodeToString(b[:])
}

func testContext(t *testing.T) context.Context {
	ctx, cancel := context.WithTimeout(t.Context(), 30*time.Second)
	t.Cleanup(cancel)
	return ctx
}

// stored returns how many messages the test's stream holds.
func (b *testBundle) stored(t *testing.T) uint64 {
	t.Helper()
	info, err := b.stream.Info(testContext(t))
	if err != nil {
		t.Fatal(err)
	}
	return info.State.Msgs
}

// fetch consumes n messages from the start of the test's stream, in stream
// order, and fails the test if fewer arrive.
func (b *testBundle) fetch(t *testing.T, n int) []jetstream.Msg {
	t.Helper()
	ctx := testContext(t)
	cons, err := b.stream.OrderedConsumer(ctx, jetstream.OrderedConsumerConfig{})
	if err != nil {
		t.Fatal(err)
	}
	return drain(t, cons, n)
}

// drain fetches n messages from cons and fails the test if fewer arrive.
func drain(t *testing.T, cons jetstream.Consumer, n int) []jetstream.Msg {
	t.Helper()
	var msgs []jetstream.Msg
	for len(msgs) < n {
		batch, err := cons.Fetch(n-len(msgs), jetstream.FetchMaxWait(5*time.Second))
		if err != nil {
			t.Fatal(err)
		}
		before := len(msgs)
		for m := range batch.Messages() {
			msgs = append(msgs, m)
		}
		if err := batch.Error(); err != nil {
			t.Fatalf("fetch after %d of %d messages: %v", len(msgs), n, err)
		}
		if len(msgs) == before {
			t.Fatalf("fetched %d of %d messages", len(msgs), n)
		}
	}
	return msgs
}

// newMessage returns a message with a fresh id.
func newMessage(t *testing.T, subject, typ string, body []byte, hs ...string) *relayer.Message {
	t.Helper()
	id, err := relayer.NewID()
	if err != nil {
		t.Fatal(err)
	}
	msg := &relayer.Message{ID: id, Type: typ, Body: body, Destination: subject, Transport: "nats"}
	for i := 0; i+1 < len(hs); i += 2 {
		msg.Headers = append(msg.Headers, headerOf(hs[i], hs[i+1]))
	}
	return msg
}
