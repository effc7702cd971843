package relayerkafka_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/relayer-go/relayer"
	"github.com/relayer-go/relayer/headers"
	relayerkafka "github.com/relayer-go/relayer/transport/kafka"
)

// testTopic is the topic every test cluster is seeded with.
const testTopic = "outbox"

// testBundle is one isolated cluster with a producing client and the
// transport under test.
type testBundle struct {
	cluster *kfake.Cluster
	client  *kgo.Client
	tr      *relayerkafka.Transport
}

type setupOpts struct {
	partitions int32
	cluster    []kfake.Opt
	client     []kgo.Opt
}

// setup starts a one-broker cluster seeded with testTopic and a transport on a
// client with default producer settings plus o.client.
func setup(t *testing.T, o setupOpts) *testBundle {
	t.Helper()
	if o.partitions == 0 {
		o.partitions = 1
	}
	cluster, err := kfake.NewCluster(append([]kfake.Opt{kfake.NumBrokers(1), kfake.SeedTopics(o.partitions, testTopic)}, o.cluster...)...)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(cluster.Close)
	client := newClient(t, cluster, o.client...)
	tr, err := relayerkafka.New(client, relayerkafka.Options{})
	if err != nil {
		t.Fatal(err)
	}
	return &testBundle{cluster: cluster, client: client, tr: tr}
}

func newClient(t *testing.T, cluster *kfake.Cluster, opts ...kgo.Opt) *kgo.Client {
	t.Helper()
	client, err := kgo.NewClient(append([]kgo.Opt{kgo.SeedBrokers(cluster.ListenAddrs()...)}, opts...)...)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(client.Close)
	return client
}

// consume reads want records of topic from the start with a new client and
// then checks briefly that no more arrive.
func consume(t *testing.T, b *testBundle, topic string, want int) []*kgo.Record {
	t.Helper()
	client := newClient(t, b.cluster, kgo.ConsumeTopics(topic), kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()))
	defer client.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	var got []*kgo.Record
	for len(got) < want {
		fetches := client.PollFetches(ctx)
		if err := ctx.Err(); err != nil {
			t.Fatalf("consumed %d of %d records: %v", len(got), want, err)
		}
		fetches.EachError(func(topic string, p int32, err error) { t.Fatalf("fetch %s/%d: %v", topic, p, err) })
		got = append(got, fetches.Records()...)
	}
	extra, cancelExtra := context.WithTimeout(context.Background(), 300*time.Millisecond)
	defer cancelExtra()
	if more := client.PollFetches(extra).Records(); len(more) > 0 {
		t.Fatalf("consumed %d records more than the %d expected", len(more), want)
	}
	if len(got) > want {
		t.Fatalf("consumed %d records, want %d", len(got), want)
	}
	return got
}

func newMessage(t *testing.T, topic, key, body string, hs ...headers.Header) *relayer.Message {
	t.Helper()
	id, err := relayer.NewID()
	if err != nil {
		t.Fatal(err)
	}
	return &relayer.Message{
		ID:          id,
		Type:        "test.Event",
		Body:        []byte(body),
		Headers:     hs,
		Destination: topic,
		Key:         key,
	}
}

// byID indexes records by the message id the transport put on them.
func byID(t *testing.T, records []*kgo.Record) map[uuid.UUID]*kgo.Record {
	t.Helper()
	m := make(map[uuid.UUID]*kgo.Record, len(records))
	for _, r := range records {
		id, err := relayerkafka.MessageID(r)
		if err != nil {
			t.Fatalf("record at %d/%d: %v", r.Partition, r.Offset, err)
		}
		if _, dup := m[id]; dup {
			t.Fatalf("message %s stored twice", id)
		}
		m[id] = r
	}
	return m
}

func describe(r *kgo.Record) string {
	return fmt.Sprintf("%s/%d@%d key=%q", r.Topic, r.Partition, r.Offset, r.Key)
}
