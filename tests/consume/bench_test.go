package consume_test

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	amqp "github.com/rabbitmq/amqp091-go"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/relayer-go/relayer"
	"github.com/relayer-go/relayer/consume"
	"github.com/relayer-go/relayer/internal/testkit/testdb"
	"github.com/relayer-go/relayer/internal/tool/proccpu"
	"github.com/relayer-go/relayer/store"
	relayeramqp "github.com/relayer-go/relayer/transport/amqp"
	relayerkafka "github.com/relayer-go/relayer/transport/kafka"
	relayernats "github.com/relayer-go/relayer/transport/nats"
)

// BenchmarkConsume measures consuming b.N messages already on the broker,
// one at a time (one partition, one handler), three ways side by side per
// broker:
//
//   - plain: the broker client's own loop, acknowledging each message; no
//     database;
//   - handwritten: the same loop with what a consumer writes by hand for
//     effectively-once processing: per message a transaction that records
//     the id in the inbox table (INSERT … ON CONFLICT DO NOTHING), writes
//     the effect row when the id is new, commits, then acknowledges;
//   - relayer: the broker's consume adapter with a consume.Consumer whose
//     handler writes the same effect row, holding keys (the default: the
//     messages carry keys and come one at a time);
//   - relayer-nohold: the same with consume.HoldKeysOff, the record a
//     plain inbox insert;
//   - relayer-1pct-failing: relayer, whose handler fails the first attempt
//     of one message in a hundred, over 200 keys: each failure holds its
//     key while the others flow, and takes effect from the consumer's
//     database once tried again; free-keys-msgs/s is the rate of the keys
//     that never held.
//
// msgs/s is messages over the wall time; cpu-µs/msg is this process's CPU
// (user and system) per message, the broker's and PostgreSQL's not
// included (kfake runs in this process, and is counted).
func BenchmarkConsume(b *testing.B) {
	for _, broker := range []struct {
		name string
		rig  func(testing.TB) rig
		loop func(ctx context.Context, b *testing.B, r rig, work func(ctx context.Context, id func() (uuid.UUID, error)) error)
	}{
		{"nats", natsRig, natsLoop},
		{"rabbitmq", rabbitRig, rabbitLoop},
		{"kafka", func(tb testing.TB) rig { return kafkaRigOf(tb, 1) }, kafkaLoop},
	} {
		for _, variant := range []string{"plain", "handwritten", "relayer", "relayer-nohold", "relayer-1pct-failing"} {
			b.Run(broker.name+"/"+variant, func(b *testing.B) {
				r := broker.rig(b)
				db, tables := benchDatabase(b)
				// The failing variant spreads its messages over more keys, so
				// that most keys never hold: their rate is what it measures.
				keys := 7
				if variant == "relayer-1pct-failing" {
					keys = 200
				}
				publish(b, r, b.N, keys)
				var freeMu sync.Mutex
				heldKeys := map[string]bool{}
				var freeDone int
				var freeLast time.Time
				var done atomic.Int64
				ctx, cancel := context.WithCancel(context.Background())
				defer cancel()
				finished := make(chan struct{})
				count := func() {
					if done.Add(1) == int64(b.N) {
						close(finished)
					}
				}
				before := proccpu.Self()
				b.ResetTimer()
				start := time.Now()
				stopped := make(chan struct{})
				go func() {
					defer close(stopped)
					switch variant {
					case "plain":
						broker.loop(ctx, b, r, func(context.Context, func() (uuid.UUID, error)) error { count(); return nil })
					case "handwritten":
						broker.loop(ctx, b, r, func(ctx context.Context, id func() (uuid.UUID, error)) error {
							mid, err := id()
							if err != nil {
								return err
							}
							if err := handwritten(ctx, db, tables, mid); err != nil {
								return err
							}
							count()
							return nil
						})
					default:
						opts := consume.Options{Name: "billing", Tables: tables,
							Retry: relayer.Retry{MaxAttempts: 5, Backoff: 10 * time.Millisecond, MaxBackoff: 10 * time.Millisecond}}
						if variant == "relayer-nohold" {
							opts.HoldKeys = consume.HoldKeysOff
						}
						var seen atomic.Int64
						var failed sync.Map // the messages failed once: the held keys' drain runs handlers too
						c, err := consume.New(db, func(ctx context.Context, tx *consume.Tx, m *relayer.Message) error {
							if variant == "relayer-1pct-failing" && seen.Add(1)%100 == 0 {
								if _, again := failed.LoadOrStore(m.ID, true); !again {
									freeMu.Lock()
									heldKeys[m.Key] = true
									freeMu.Unlock()
									return errors.New("the ledger is busy")
								}
							}
							_, err := tx.ExecContext(ctx, `INSERT INTO `+effects(tables)+` (message_id, pid) VALUES ($1, 0)`, m.ID)
							tx.OnCommit(func() {
								freeMu.Lock()
								if !heldKeys[m.Key] {
									freeDone++
									freeLast = time.Now()
								}
								freeMu.Unlock()
								count()
							})
							return err
						}, opts)
						if err != nil {
							b.Error(err)
							return
						}
						if err := adapterConsume(ctx, r, c); err != nil {
							b.Error(err)
						}
					}
				}()
				select {
				case <-finished:
				case <-time.After(5 * time.Minute):
					b.Fatalf("consumed %d of %d", done.Load(), b.N)
				}
				elapsed := time.Since(start)
				b.StopTimer()
				used := proccpu.Self() - before
				cancel()
				<-stopped
				b.ReportMetric(float64(b.N)/elapsed.Seconds(), "msgs/s")
				if variant == "relayer-1pct-failing" {
					// The keys that never held: how fast they flowed while the
					// others were held.
					freeMu.Lock()
					b.ReportMetric(float64(freeDone)/freeLast.Sub(start).Seconds(), "free-keys-msgs/s")
					freeMu.Unlock()
				}
				b.ReportMetric(float64(used.Microseconds())/float64(b.N), "cpu-µs/msg")
			})
		}
	}
}

// benchDatabase is a schema of the benchmark's own with the outbox tables
// (the inbox among them) and the effects table.
func benchDatabase(b *testing.B) (*sql.DB, store.Tables) {
	db := testdb.Open(b, "pgx")
	tables := store.Tables{Schema: testdb.NewSchema(b), TablePrefix: "c_"}
	ctx := context.Background()
	if _, err := store.Migrate(ctx, db, tables); err != nil {
		b.Fatal(err)
	}
	if _, err := db.ExecContext(ctx, `CREATE TABLE `+effects(tables)+` (message_id uuid NOT NULL, pid int NOT NULL)`); err != nil {
		b.Fatal(err)
	}
	return db, tables
}

// publish puts n messages on the rig's destination.
func publish(b *testing.B, r rig, n, keys int) {
	ctx := context.Background()
	batch := make([]*relayer.Message, 0, 200)
	flush := func() {
		if err := r.tr.SendBatch(ctx, batch); err != nil {
			b.Fatal(err)
		}
		batch = batch[:0]
	}
	for i := range n {
		batch = append(batch, &relayer.Message{ID: uuid.Must(relayer.NewID()), Type: "bench.Event", Destination: r.dst,
			Key: "k" + strconv.Itoa(i%keys), Body: []byte(`{"order":"o-` + strconv.Itoa(i) + `"}`)})
		if len(batch) == cap(batch) {
			flush()
		}
	}
	if len(batch) > 0 {
		flush()
	}
}

// handwritten is the transaction a consumer writes by hand: the inbox
// record, the effect when the id is new, the commit.
func handwritten(ctx context.Context, db *sql.DB, tables store.Tables, id uuid.UUID) error {
	tx, err := db.BeginTx(ctx, nil)
	if err != nil {
		return err
	}
	defer tx.Rollback() //nolint:errcheck // after a commit, a no-op
	res, err := tx.ExecContext(ctx, `INSERT INTO "`+tables.Schema+`".c_inbox (consumer, message_id) VALUES ($1, $2) ON CONFLICT DO NOTHING`, "billing", id)
	if err != nil {
		return err
	}
	if n, _ := res.RowsAffected(); n == 1 {
		if _, err := tx.ExecContext(ctx, `INSERT INTO `+effects(tables)+` (message_id, pid) VALUES ($1, 0)`, id); err != nil {
			return err
		}
	}
	return tx.Commit()
}

// adapterConsume runs the rig's consume adapter until ctx ends.
func adapterConsume(ctx context.Context, r rig, c *consume.Consumer) error {
	switch r.cfg.Broker {
	case "nats":
		nc, err := nats.Connect(r.cfg.Addr)
		if err != nil {
			return err
		}
		defer nc.Close()
		js, err := jetstream.New(nc)
		if err != nil {
			return err
		}
		cons, err := js.Consumer(ctx, r.cfg.Stream, r.cfg.Source)
		if err != nil {
			return err
		}
		return relayernats.Consume(ctx, c, js, cons, relayernats.ConsumeOptions{DeadLetterSubject: r.cfg.Dead})
	case "rabbitmq":
		conn, err := amqp.Dial(r.cfg.Addr)
		if err != nil {
			return err
		}
		defer conn.Close()
		return relayeramqp.Consume(ctx, c, conn, r.cfg.Source, relayeramqp.ConsumeOptions{DeadLetterRoutingKey: r.cfg.Dead})
	case "kafka":
		return relayerkafka.Consume(ctx, c, []kgo.Opt{kgo.SeedBrokers(r.cfg.Addr), kgo.ConsumeResetOffset(kgo.NewOffset().AtStart())},
			relayerkafka.ConsumeOptions{Group: "billing", Topics: []string{r.cfg.Source}, DeadLetterTopic: r.cfg.Dead})
	}
	return fmt.Errorf("unknown broker %q", r.cfg.Broker)
}

// natsLoop is the plain JetStream loop: the durable consumer's messages,
// each acknowledged after work.
func natsLoop(ctx context.Context, b *testing.B, r rig, work func(context.Context, func() (uuid.UUID, error)) error) {
	nc, err := nats.Connect(r.cfg.Addr)
	if err != nil {
		b.Error(err)
		return
	}
	defer nc.Close()
	js, err := jetstream.New(nc)
	if err != nil {
		b.Error(err)
		return
	}
	cons, err := js.Consumer(ctx, r.cfg.Stream, r.cfg.Source)
	if err != nil {
		b.Error(err)
		return
	}
	it, err := cons.Messages()
	if err != nil {
		b.Error(err)
		return
	}
	go func() {
		<-ctx.Done()
		it.Stop()
	}()
	for {
		msg, err := it.Next()
		if err != nil {
			return
		}
		if err := work(ctx, func() (uuid.UUID, error) { return relayernats.MessageID(msg.Headers()) }); err != nil {
			_ = msg.Nak()
			continue
		}
		_ = msg.Ack()
	}
}

// rabbitLoop is the plain AMQP loop: manual acknowledgements, the
// adapter's default prefetch (2).
func rabbitLoop(ctx context.Context, b *testing.B, r rig, work func(context.Context, func() (uuid.UUID, error)) error) {
	conn, err := amqp.Dial(r.cfg.Addr)
	if err != nil {
		b.Error(err)
		return
	}
	defer conn.Close()
	ch, err := conn.Channel()
	if err != nil {
		b.Error(err)
		return
	}
	if err := ch.Qos(2, 0, false); err != nil {
		b.Error(err)
		return
	}
	deliveries, err := ch.Consume(r.cfg.Source, "", false, false, false, false, nil)
	if err != nil {
		b.Error(err)
		return
	}
	for {
		select {
		case <-ctx.Done():
			return
		case d, ok := <-deliveries:
			if !ok {
				return
			}
			if err := work(ctx, func() (uuid.UUID, error) { return relayeramqp.MessageID(d) }); err != nil {
				_ = d.Nack(false, true)
				continue
			}
			_ = d.Ack(false)
		}
	}
}

// kafkaLoop is the plain franz-go group loop: poll, work through the
// records, commit what was polled.
func kafkaLoop(ctx context.Context, b *testing.B, r rig, work func(context.Context, func() (uuid.UUID, error)) error) {
	cl, err := kgo.NewClient(kgo.SeedBrokers(r.cfg.Addr), kgo.ConsumerGroup("plain"), kgo.ConsumeTopics(r.cfg.Source),
		kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()), kgo.DisableAutoCommit())
	if err != nil {
		b.Error(err)
		return
	}
	defer cl.Close()
	for {
		fetches := cl.PollFetches(ctx)
		if ctx.Err() != nil {
			return
		}
		for _, rec := range fetches.Records() {
			if err := work(ctx, func() (uuid.UUID, error) { return relayerkafka.MessageID(rec) }); err != nil {
				b.Error(err)
				return
			}
		}
		if err := cl.CommitUncommittedOffsets(ctx); err != nil && ctx.Err() == nil {
			b.Error(err)
			return
		}
	}
}
