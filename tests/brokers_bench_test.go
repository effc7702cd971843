package tests

import (
	"context"
	"fmt"
	"os"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	amqp "github.com/rabbitmq/amqp091-go"
	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/relayer-go/relayer"
	"github.com/relayer-go/relayer/dispatch"
	"github.com/relayer-go/relayer/enlist"
	"github.com/relayer-go/relayer/internal/testkit/testdb"
	"github.com/relayer-go/relayer/store"
	relayeramqp "github.com/relayer-go/relayer/transport/amqp"
	relayerkafka "github.com/relayer-go/relayer/transport/kafka"
	"github.com/relayer-go/relayer/transport/memory"
	relayernats "github.com/relayer-go/relayer/transport/nats"
)

func TestMain(m *testing.M) { testdb.Main(m) }

// OrderPlaced is the benchmark's message.
type OrderPlaced struct {
	ID       int
	Customer string
}

const (
	perTx     = 100
	producers = 4
)

// counting counts what the broker acknowledged.
type counting struct {
	relayer.Transport
	acked atomic.Int64
}

func (c *counting) Send(ctx context.Context, m *relayer.Message) error {
	err := c.Transport.Send(ctx, m)
	if err == nil {
		c.acked.Add(1)
	}
	return err
}

func (c *counting) SendBatch(ctx context.Context, ms []*relayer.Message) error {
	err := c.Transport.SendBatch(ctx, ms)
	if err == nil {
		c.acked.Add(int64(len(ms)))
	}
	return err
}

// BenchmarkBrokers measures commit to broker acknowledgement through direct
// dispatch, transactions of 100 messages, for each transport side by side
// with the in-memory one: msgs/s is acknowledged messages over the time from
// the first commit to the last acknowledgement. Brokers: an embedded NATS
// JetStream server, kfake (an in-process Kafka cluster) and the local
// RabbitMQ (skipped when absent).
func BenchmarkBrokers(b *testing.B) {
	b.Run("memory", func(b *testing.B) { runBroker(b, memory.New()) })
	b.Run("nats", func(b *testing.B) { runBroker(b, natsTransport(b)) })
	b.Run("kafka", func(b *testing.B) { runBroker(b, kafkaTransport(b)) })
	b.Run("rabbitmq", func(b *testing.B) { runBroker(b, amqpTransport(b)) })
}

func runBroker(b *testing.B, tr relayer.Transport) {
	ctx := context.Background()
	db := testdb.Open(b, "pgx")
	schema := testdb.NewSchema(b)
	if _, err := store.Migrate(ctx, db, store.Tables{Schema: schema}); err != nil {
		b.Fatal(err)
	}
	var routes relayer.Routes
	if err := relayer.AddType[OrderPlaced](&routes, relayer.Route{Transport: "broker", Destination: "orders.placed"}); err != nil {
		b.Fatal(err)
	}
	ct := &counting{Transport: tr}
	outbox := relayer.Outbox{Schema: schema, Routes: &routes, Transports: map[string]relayer.Transport{"broker": ct}}
	d, err := dispatch.NewRunner(db, outbox, dispatch.RunnerOptions{Direct: dispatch.DirectOptions{QueueCapacity: 4096},
		DisableRecovery: true, DisableOrdered: true, DisableCleanup: true})
	if err != nil {
		b.Fatal(err)
	}
	w, err := enlist.NewWriter(outbox, enlist.Options{Listener: d})
	if err != nil {
		b.Fatal(err)
	}
	if err := d.Start(ctx); err != nil {
		b.Fatal(err)
	}
	defer d.Stop(ctx)
	txs := max(1, b.N/perTx)
	var next atomic.Int64
	start := time.Now()
	var wg sync.WaitGroup
	for range producers {
		wg.Go(func() {
			msgs := make([]relayer.Outgoing, perTx)
			for n := next.Add(1); n <= int64(txs); n = next.Add(1) {
				for i := range msgs {
					msgs[i] = relayer.NewOutgoing(OrderPlaced{ID: int(n)*perTx + i, Customer: fmt.Sprint(i % 10)})
				}
				if err := w.RunInTx(ctx, db, nil, func(tx *enlist.Tx) error { return tx.PublishAll(ctx, msgs...) }); err != nil {
					b.Error(err)
					return
				}
			}
		})
	}
	wg.Wait()
	total := int64(txs * perTx)
	deadline := time.Now().Add(2 * time.Minute)
	for ct.acked.Load() < total {
		if time.Now().After(deadline) {
			b.Fatalf("acknowledged %d of %d", ct.acked.Load(), total)
		}
		time.Sleep(time.Millisecond)
	}
	b.ReportMetric(float64(total)/time.Since(start).Seconds(), "msgs/s")
	b.ReportMetric(0, "ns/op")
}

// startNATS runs an embedded nats-server with JetStream for the rest of tb
// and returns its URL.
func startNATS(tb testing.TB) string {
	s, err := server.NewServer(&server.Options{Host: "127.0.0.1", Port: server.RANDOM_PORT, JetStream: true,
		StoreDir: tb.TempDir(), NoLog: true, NoSigs: true})
	if err != nil {
		tb.Fatal(err)
	}
	s.Start()
	tb.Cleanup(func() { s.Shutdown(); s.WaitForShutdown() })
	if !s.ReadyForConnections(10 * time.Second) {
		tb.Fatal("embedded nats-server did not get ready")
	}
	return s.ClientURL()
}

func natsTransport(b *testing.B) relayer.Transport {
	nc, err := nats.Connect(startNATS(b))
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(nc.Close)
	js, err := jetstream.New(nc)
	if err != nil {
		b.Fatal(err)
	}
	if _, err := js.CreateStream(context.Background(), jetstream.StreamConfig{Name: "ORDERS", Subjects: []string{"orders.>"}}); err != nil {
		b.Fatal(err)
	}
	tr, err := relayernats.New(js, relayernats.Options{})
	if err != nil {
		b.Fatal(err)
	}
	return tr
}

func kafkaTransport(b *testing.B) relayer.Transport {
	cluster, err := kfake.NewCluster(kfake.NumBrokers(1), kfake.SeedTopics(6, "orders.placed"))
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(cluster.Close)
	client, err := kgo.NewClient(kgo.SeedBrokers(cluster.ListenAddrs()...))
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(client.Close)
	tr, err := relayerkafka.New(client, relayerkafka.Options{})
	if err != nil {
		b.Fatal(err)
	}
	return tr
}

func amqpTransport(b *testing.B) relayer.Transport {
	url := os.Getenv("RELAYER_TEST_RABBITMQ_URL")
	if url == "" {
		url = "amqp://guest:guest@127.0.0.1:5672/"
	}
	conn, err := amqp.Dial(url)
	if err != nil {
		b.Skipf("no RabbitMQ at %s: %v", url, err)
	}
	b.Cleanup(func() { conn.Close() })
	ch, err := conn.Channel()
	if err != nil {
		b.Fatal(err)
	}
	defer ch.Close()
	// Exclusive: the queue goes with the connection.
	if _, err := ch.QueueDeclare("orders.placed", false, false, true, false, nil); err != nil {
		b.Fatal(err)
	}
	tr, err := relayeramqp.New(conn, relayeramqp.Options{})
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { tr.Close() })
	return tr
}
