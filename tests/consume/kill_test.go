package consume_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"math/rand/v2"
	"os"
	"os/exec"
	"os/signal"
	"strconv"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	amqp "github.com/rabbitmq/amqp091-go"
	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/relayer-go/relayer"
	"github.com/relayer-go/relayer/consume"
	"github.com/relayer-go/relayer/internal/testkit/syncbuf"
	"github.com/relayer-go/relayer/internal/testkit/testdb"
	"github.com/relayer-go/relayer/store"
	relayeramqp "github.com/relayer-go/relayer/transport/amqp"
	relayerkafka "github.com/relayer-go/relayer/transport/kafka"
	relayernats "github.com/relayer-go/relayer/transport/nats"
)

func TestMain(m *testing.M) { testdb.Main(m) }

// Consumers in processes of their own: the test binary runs itself again
// as a consumer (TestConsumerProcess, selected by the environment variable
// below), which kills itself with SIGKILL right after a message's
// transaction committed and before the broker was acknowledged (after a
// number of commits drawn for each process): the one moment the inbox is
// there for.

// consumerProcessEnv carries a consumer process's configuration, as JSON.
const consumerProcessEnv = "RELAYER_CONSUMER_PROCESS"

// processConfig is what a consumer process needs.
type processConfig struct {
	Broker string `json:"broker"` // "nats", "rabbitmq" or "kafka"
	// Addr is the broker's URL (NATS, RabbitMQ) or seed address (Kafka).
	Addr string `json:"addr"`
	// Source is the stream's durable consumer (NATS), the queue (RabbitMQ)
	// or the topic (Kafka) consumed.
	Source string       `json:"source"`
	Stream string       `json:"stream,omitempty"`
	Dead   string       `json:"dead"`
	Tables store.Tables `json:"tables"`
	// KillAfter is the commit after which the process kills itself; 0:
	// never.
	KillAfter int `json:"kill_after"`
	// FailPercent is how often, in percent, the handler fails after
	// writing its effect (the transaction then rolls back).
	FailPercent int `json:"fail_percent,omitempty"`
	// Concurrency is the adapter's: 0 for 4; 1 hands a key's messages over
	// in order, and the consumer then holds keys.
	Concurrency int `json:"concurrency,omitempty"`
	// Ordered records each effect's key and step with its commit order
	// (orderedEffects) instead of the plain effects table.
	Ordered bool `json:"ordered,omitempty"`
}

// TestConsumerProcess is a consumer process's body; it is skipped in a
// normal run. It consumes until it kills itself or is sent SIGTERM.
func TestConsumerProcess(t *testing.T) {
	raw := os.Getenv(consumerProcessEnv)
	if raw == "" {
		t.Skip("runs only as a consumer process of TestKillBetweenCommitAndAcknowledgement")
	}
	var cfg processConfig
	if err := json.Unmarshal([]byte(raw), &cfg); err != nil {
		t.Fatal(err)
	}
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM)
	defer stop()
	db := testdb.Open(t, "pgx")
	var commits atomic.Int64
	c, err := consume.New(db, func(ctx context.Context, tx *consume.Tx, m *relayer.Message) error {
		var err error
		if cfg.Ordered {
			var s step
			if err := json.Unmarshal(m.Body, &s); err != nil {
				return consume.Permanent(err)
			}
			_, err = tx.ExecContext(ctx, `INSERT INTO `+orderedEffects(cfg.Tables)+` (message_id, key, n, pid) VALUES ($1, $2, $3, $4)`,
				m.ID, m.Key, s.N, os.Getpid())
		} else {
			_, err = tx.ExecContext(ctx, `INSERT INTO `+effects(cfg.Tables)+` (message_id, pid) VALUES ($1, $2)`, m.ID, os.Getpid())
		}
		if err != nil {
			return err
		}
		if cfg.FailPercent > 0 && rand.IntN(100) < cfg.FailPercent {
			return errors.New("the ledger is busy") // after the effect: it rolls back
		}
		tx.OnCommit(func() {
			if cfg.KillAfter > 0 && commits.Add(1) == int64(cfg.KillAfter) {
				_ = syscall.Kill(os.Getpid(), syscall.SIGKILL)
				select {} // the signal is on its way: acknowledge nothing
			}
		})
		return nil
	}, consume.Options{Name: "billing", Tables: cfg.Tables, Retry: relayer.Retry{MaxAttempts: 50, Backoff: 10 * time.Millisecond, MaxBackoff: 50 * time.Millisecond}})
	if err != nil {
		t.Fatal(err)
	}
	concurrency := cfg.Concurrency
	if concurrency == 0 {
		concurrency = 4
	}
	var runErr error
	switch cfg.Broker {
	case "nats":
		nc, err := nats.Connect(cfg.Addr)
		if err != nil {
			t.Fatal(err)
		}
		defer nc.Close()
		js, err := jetstream.New(nc)
		if err != nil {
			t.Fatal(err)
		}
		cons, err := js.Consumer(ctx, cfg.Stream, cfg.Source)
		if err != nil {
			t.Fatal(err)
		}
		runErr = relayernats.Consume(ctx, c, js, cons, relayernats.ConsumeOptions{DeadLetterSubject: cfg.Dead, Concurrency: concurrency})
	case "rabbitmq":
		conn, err := amqp.Dial(cfg.Addr)
		if err != nil {
			t.Fatal(err)
		}
		defer conn.Close()
		runErr = relayeramqp.Consume(ctx, c, conn, cfg.Source, relayeramqp.ConsumeOptions{DeadLetterRoutingKey: cfg.Dead, Concurrency: concurrency})
	case "kafka":
		// A static member: a process started after a killed one takes its
		// partitions over at once, rather than after the session timeout.
		runErr = relayerkafka.Consume(ctx, c,
			[]kgo.Opt{kgo.SeedBrokers(cfg.Addr), kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()), kgo.InstanceID("consumer")},
			relayerkafka.ConsumeOptions{Group: "billing", Topics: []string{cfg.Source}, DeadLetterTopic: cfg.Dead})
	default:
		runErr = fmt.Errorf("unknown broker %q", cfg.Broker)
	}
	if runErr != nil {
		t.Fatal(runErr)
	}
}

// effects names the consumer's effects table.
func effects(tables store.Tables) string { return `"` + tables.Schema + `".effects` }

// rig is a broker under the kill test: its transport, and the process
// configuration of its consumer.
type rig struct {
	tr  relayer.Transport
	dst string // where the transport sends
	cfg processConfig
}

// Consumer processes killed right after a commit, before the
// acknowledgement, again and again: the broker delivers those messages
// again, to the next process, which acknowledges them as duplicates. In
// the end every message sent has exactly one effect row, whatever the
// broker.
func TestKillBetweenCommitAndAcknowledgement(t *testing.T) {
	t.Parallel()
	for _, broker := range []struct {
		name string
		rig  func(t testing.TB) rig
	}{
		{"nats", natsRig},
		{"rabbitmq", rabbitRig},
		{"kafka", kafkaRig},
	} {
		t.Run(broker.name, func(t *testing.T) {
			t.Parallel()
			killBetweenCommitAndAcknowledgement(t, broker.rig(t))
		})
	}
}

func killBetweenCommitAndAcknowledgement(t *testing.T, r rig) {
	const n, minKills = 300, 8
	db := testdb.Open(t, "pgx")
	tables := store.Tables{Schema: testdb.NewSchema(t), TablePrefix: "c_"}
	ctx := context.Background()
	if _, err := store.Migrate(ctx, db, tables); err != nil {
		t.Fatal(err)
	}
	if _, err := db.ExecContext(ctx, `CREATE TABLE `+effects(tables)+` (message_id uuid NOT NULL, pid int NOT NULL)`); err != nil {
		t.Fatal(err)
	}
	sent := make(map[uuid.UUID]bool, n)
	for i := range n {
		id := uuid.Must(relayer.NewID())
		sent[id] = true
		m := &relayer.Message{ID: id, Type: "kill.Event", Destination: r.dst, Key: "k" + strconv.Itoa(i%7), Body: []byte(strconv.Itoa(i))}
		if err := r.tr.Send(ctx, m); err != nil {
			t.Fatal(err)
		}
	}
	r.cfg.Tables = tables
	handled := func() (n int) {
		if err := db.QueryRow(`SELECT count(DISTINCT message_id) FROM ` + effects(tables)).Scan(&n); err != nil {
			t.Fatal(err)
		}
		return n
	}
	kills := 0
	deadline := time.Now().Add(2 * time.Minute)
	for handled() < n {
		if time.Now().After(deadline) {
			t.Fatalf("after %d kills, %d of %d messages handled", kills, handled(), n)
		}
		// Each process handles 5 to 25 new messages, then dies between a
		// commit and its acknowledgement: 8 kills take at most 200 of the
		// 300 messages, whatever the draws. Then the last one finishes.
		r.cfg.KillAfter = 5 + rand.IntN(21)
		if kills >= minKills {
			r.cfg.KillAfter = 0
		}
		killed := runConsumer(t, r.cfg, deadline, func() bool { return handled() >= n })
		if killed {
			kills++
		}
	}
	rows, err := db.Query(`SELECT message_id, count(*) FROM ` + effects(tables) + ` GROUP BY message_id`)
	if err != nil {
		t.Fatal(err)
	}
	defer rows.Close()
	effected := 0
	for rows.Next() {
		var id uuid.UUID
		var count int
		if err := rows.Scan(&id, &count); err != nil {
			t.Fatal(err)
		}
		effected++
		if !sent[id] || count != 1 {
			t.Errorf("message %v: %d effect rows (sent: %v), want 1", id, count, sent[id])
		}
	}
	if err := rows.Err(); err != nil {
		t.Fatal(err)
	}
	if effected != n || kills < minKills {
		t.Errorf("%d of %d messages have effects, after %d kills between commit and acknowledgement (want at least %d)", effected, n, kills, minKills)
	}
	t.Logf("%d messages, %d processes killed between a commit and its acknowledgement", n, kills)
}

// runConsumer runs a consumer process until it kills itself (true) or done
// reports the work done, when it is stopped with SIGTERM (false). Past the
// deadline, it kills the process and fails t.
func runConsumer(t *testing.T, cfg processConfig, deadline time.Time, done func() bool) (killed bool) {
	t.Helper()
	raw, err := json.Marshal(cfg)
	if err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(os.Args[0], "-test.run=^TestConsumerProcess$", "-test.count=1")
	cmd.Env = append(os.Environ(), consumerProcessEnv+"="+string(raw))
	out := &syncbuf.Buffer{}
	cmd.Stdout, cmd.Stderr = out, out
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	exited := make(chan error, 1)
	go func() { exited <- cmd.Wait() }()
	tick := time.NewTicker(20 * time.Millisecond)
	defer tick.Stop()
	for {
		select {
		case err := <-exited:
			var exit *exec.ExitError
			if errors.As(err, &exit) {
				if ws, ok := exit.Sys().(syscall.WaitStatus); ok && ws.Signaled() && ws.Signal() == syscall.SIGKILL {
					return true
				}
			}
			t.Fatalf("the consumer process ended on its own (%v):\n%s", err, out)
		case <-tick.C:
			if time.Now().After(deadline) {
				_ = cmd.Process.Kill()
				<-exited
				t.Fatalf("the work was not done in time:\n%s", out)
			}
			if done() {
				_ = cmd.Process.Signal(syscall.SIGTERM)
				if err := <-exited; err != nil {
					var exit *exec.ExitError
					if errors.As(err, &exit) {
						if ws, ok := exit.Sys().(syscall.WaitStatus); ok && ws.Signaled() && ws.Signal() == syscall.SIGKILL {
							return true // it killed itself on its last commit
						}
					}
					t.Fatalf("the consumer process failed to stop (%v):\n%s", err, out)
				}
				return false
			}
		}
	}
}

// natsRig is a stream of the test's own, on the local server or an
// embedded one, with a durable consumer whose unacknowledged messages come
// back after a second.
func natsRig(t testing.TB) rig { return natsRigWith(t, 0) }

// natsRigWith is natsRig whose durable consumer has at most maxAckPending
// messages unacknowledged (0: the server's default). With 1, a message a
// killed consumer left unacknowledged comes back before any later one.
func natsRigWith(t testing.TB, maxAckPending int) rig {
	url := natsURL(t)
	nc, err := nats.Connect(url)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(nc.Close)
	js, err := jetstream.New(nc)
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	token := strconv.FormatUint(rand.Uint64(), 36)
	stream := "KILL_" + token
	if _, err := js.CreateStream(ctx, jetstream.StreamConfig{Name: stream, Subjects: []string{"kill." + token + ".>"}}); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = js.DeleteStream(context.Background(), stream) })
	if _, err := js.CreateOrUpdateConsumer(ctx, stream, jetstream.ConsumerConfig{Durable: "billing", AckPolicy: jetstream.AckExplicitPolicy,
		FilterSubject: "kill." + token + ".orders", AckWait: time.Second, MaxAckPending: maxAckPending}); err != nil {
		t.Fatal(err)
	}
	tr, err := relayernats.New(js, relayernats.Options{})
	if err != nil {
		t.Fatal(err)
	}
	return rig{tr: tr, dst: "kill." + token + ".orders", cfg: processConfig{Broker: "nats", Addr: url, Source: "billing", Stream: stream, Dead: "kill." + token + ".dead"}}
}

// natsURL is the local server's URL when it answers with JetStream, or an
// embedded server's for this test.
func natsURL(t testing.TB) string {
	url := os.Getenv("RELAYER_TEST_NATS_URL")
	if url == "" {
		url = "nats://127.0.0.1:4222"
	}
	if nc, err := nats.Connect(url, nats.Timeout(time.Second), nats.MaxReconnects(0)); err == nil {
		defer nc.Close()
		if js, err := jetstream.New(nc); err == nil {
			ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
			defer cancel()
			if _, err := js.AccountInfo(ctx); err == nil {
				return url
			}
		}
	}
	s, err := server.NewServer(&server.Options{Host: "127.0.0.1", Port: server.RANDOM_PORT, JetStream: true, StoreDir: t.TempDir(), NoLog: true, NoSigs: true})
	if err != nil {
		t.Fatal(err)
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

// rabbitRig is a durable queue of the test's own on the local RabbitMQ,
// and its dead-letter queue; without RabbitMQ the test is skipped, or
// fails when CI is "true".
func rabbitRig(t testing.TB) rig {
	url := os.Getenv("RELAYER_TEST_RABBITMQ_URL")
	if url == "" {
		url = "amqp://guest:guest@127.0.0.1:5672/"
	}
	conn, err := amqp.Dial(url)
	if err != nil {
		if ci, _ := strconv.ParseBool(os.Getenv("CI")); ci {
			t.Fatalf("RabbitMQ is required when CI=true: %v", err)
		}
		t.Skipf("RabbitMQ is not reachable: %v", err)
	}
	t.Cleanup(func() { _ = conn.Close() })
	ch, err := conn.Channel()
	if err != nil {
		t.Fatal(err)
	}
	token := strconv.FormatUint(rand.Uint64(), 36)
	queue, dead := "relayer-test.kill."+token, "relayer-test.kill."+token+".dead"
	for _, q := range []string{queue, dead} {
		if _, err := ch.QueueDeclare(q, true, false, false, false, amqp.Table{"x-expires": int64(10 * time.Minute / time.Millisecond)}); err != nil {
			t.Fatal(err)
		}
	}
	t.Cleanup(func() {
		_, _ = ch.QueueDelete(queue, false, false, false)
		_, _ = ch.QueueDelete(dead, false, false, false)
	})
	tr, err := relayeramqp.New(conn, relayeramqp.Options{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = tr.Close() })
	return rig{tr: tr, dst: queue, cfg: processConfig{Broker: "rabbitmq", Addr: url, Source: queue, Dead: dead}}
}

// kafkaRig is a fake Kafka cluster in this process, which the consumer
// processes reach over TCP, with a three-partition topic.
func kafkaRig(t testing.TB) rig { return kafkaRigOf(t, 3) }

// kafkaRigOf is kafkaRig with a topic of partitions partitions.
func kafkaRigOf(t testing.TB, partitions int32) rig {
	cluster, err := kfake.NewCluster(kfake.NumBrokers(1), kfake.SeedTopics(partitions, "orders"), kfake.SeedTopics(1, "orders.dead"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(cluster.Close)
	client, err := kgo.NewClient(kgo.SeedBrokers(cluster.ListenAddrs()...))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(client.Close)
	tr, err := relayerkafka.New(client, relayerkafka.Options{})
	if err != nil {
		t.Fatal(err)
	}
	return rig{tr: tr, dst: "orders", cfg: processConfig{Broker: "kafka", Addr: cluster.ListenAddrs()[0], Source: "orders", Dead: "orders.dead"}}
}
