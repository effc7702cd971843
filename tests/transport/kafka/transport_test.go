package relayerkafka_test

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/relayer-go/relayer"
	"github.com/relayer-go/relayer/headers"
	relayerkafka "github.com/relayer-go/relayer/transport/kafka"
)

// wantRecord checks that r carries m exactly: key, value, and the message's
// headers in order followed by the identity and type headers.
func wantRecord(t *testing.T, r *kgo.Record, m *relayer.Message) {
	t.Helper()
	if r.Topic != m.Destination {
		t.Errorf("%s: topic %q, want %q", describe(r), r.Topic, m.Destination)
	}
	switch {
	case m.Key == "" && r.Key != nil:
		t.Errorf("%s: unkeyed message got key %q, want a null key", describe(r), r.Key)
	case m.Key != "" && string(r.Key) != m.Key:
		t.Errorf("%s: key %q, want %q", describe(r), r.Key, m.Key)
	}
	if !bytes.Equal(r.Value, m.Body) || r.Value == nil {
		t.Errorf("%s: value %q, want %q (never null)", describe(r), r.Value, m.Body)
	}
	want := make([]kgo.RecordHeader, 0, len(m.Headers)+2)
	for _, h := range m.Headers {
		want = append(want, kgo.RecordHeader{Key: h.Name, Value: h.Value})
	}
	want = append(want,
		kgo.RecordHeader{Key: relayer.HeaderMessageID, Value: []byte(m.ID.String())},
		kgo.RecordHeader{Key: relayer.HeaderMessageType, Value: []byte(m.Type)})
	if !slices.EqualFunc(r.Headers, want, func(a, b kgo.RecordHeader) bool {
		return a.Key == b.Key && bytes.Equal(a.Value, b.Value)
	}) {
		t.Errorf("%s: headers\n got %q\nwant %q", describe(r), r.Headers, want)
	}
	if id, err := relayerkafka.MessageID(r); err != nil || id != m.ID {
		t.Errorf("%s: MessageID = %s, %v; want %s", describe(r), id, err, m.ID)
	}
}

func TestSendCarriesMessagesExactly(t *testing.T) {
	t.Parallel()
	b := setup(t, setupOpts{partitions: 3})
	ctx := context.Background()

	binary := []byte{0, 1, 2, 0xff, 0xfe, '\n', 0}
	msgs := []*relayer.Message{
		newMessage(t, testTopic, "order-1", `{"id":1}`,
			headers.Header{Name: "content-type", Value: []byte("application/json")},
			headers.Header{Name: "x-dup", Value: []byte("first")},
			headers.Header{Name: "x-binary", Value: binary},
			headers.Header{Name: "x-dup", Value: []byte("second")},
			headers.Header{Name: "x-empty", Value: []byte{}},
			headers.Header{Name: "x-dup", Value: []byte("first")},
			headers.Header{Name: "ünïcödé name", Value: []byte("ü")},
		),
		newMessage(t, testTopic, "", "unkeyed body"),
		newMessage(t, testTopic, "order-2", ""),
		// A header named like the identity header: the transport's own,
		// appended last, is the one MessageID reads.
		newMessage(t, testTopic, "order-3", string(binary),
			headers.Header{Name: relayer.HeaderMessageID, Value: []byte("not-a-uuid")}),
	}
	msgs[2].Type = ""

	if err := b.tr.Send(ctx, msgs[0]); err != nil {
		t.Fatalf("Send: %v", err)
	}
	if err := b.tr.SendBatch(ctx, msgs[1:]); err != nil {
		t.Fatalf("SendBatch: %v", err)
	}

	got := byID(t, consume(t, b, testTopic, len(msgs)))
	for _, m := range msgs {
		r, ok := got[m.ID]
		if !ok {
			t.Errorf("message %s (key %q) not stored", m.ID, m.Key)
			continue
		}
		wantRecord(t, r, m)
	}
}

// TestSendCopiesMessages checks that a message's memory may be reused once
// Send returns: the mutation after the call does not reach the broker.
func TestSendCopiesMessages(t *testing.T) {
	t.Parallel()
	b := setup(t, setupOpts{})
	m := newMessage(t, testTopic, "key", "body", headers.Header{Name: "h", Value: []byte("value")})
	want := *m
	want.Body = bytes.Clone(m.Body)
	want.Headers = []headers.Header{{Name: "h", Value: []byte("value")}}
	if err := b.tr.SendBatch(context.Background(), []*relayer.Message{m}); err != nil {
		t.Fatal(err)
	}
	copy(m.Body, "XXXX")
	copy(m.Headers[0].Value, "XXXXX")
	wantRecord(t, consume(t, b, testTopic, 1)[0], &want)
}

// orderedMessages returns n messages over keys keys; each body is
// "key/sequence", the sequence counting that key's messages from 0.
func orderedMessages(t *testing.T, topic string, n, keys int) []*relayer.Message {
	msgs := make([]*relayer.Message, n)
	seq := make([]int, keys)
	for i := range msgs {
		k := i * 7 % keys // interleave keys unevenly across batches
		msgs[i] = newMessage(t, topic, fmt.Sprintf("key-%02d", k), fmt.Sprintf("key-%02d/%d", k, seq[k]))
		seq[k]++
	}
	return msgs
}

// checkKeyOrder checks that every message arrived once, each key on one
// partition, and each key's messages in sequence.
func checkKeyOrder(t *testing.T, records []*kgo.Record, n, keys int) {
	t.Helper()
	partition := map[string]int32{}
	next := map[string]int{}
	partitions := map[int32]bool{}
	for _, r := range records { // in offset order within each partition
		key := string(r.Key)
		if p, ok := partition[key]; ok && p != r.Partition {
			t.Fatalf("key %s on partitions %d and %d", key, p, r.Partition)
		}
		partition[key] = r.Partition
		partitions[r.Partition] = true
		var k string
		var seq int
		if _, err := fmt.Sscanf(strings.Replace(string(r.Value), "/", " ", 1), "%s %d", &k, &seq); err != nil || k != key {
			t.Fatalf("%s: body %q does not match its key", describe(r), r.Value)
		}
		if seq != next[key] {
			t.Fatalf("%s: key %s sequence %d, want %d", describe(r), key, seq, next[key])
		}
		next[key]++
	}
	if len(records) != n || len(next) != keys {
		t.Fatalf("got %d records over %d keys, want %d over %d", len(records), len(next), n, keys)
	}
	if len(partitions) < 2 {
		t.Fatalf("all keys on %d partition(s): the test does not exercise partitioning", len(partitions))
	}
}

func TestKeyOrderSendBatch(t *testing.T) {
	t.Parallel()
	const n, keys, batchSize = 1000, 50, 100
	b := setup(t, setupOpts{partitions: 6})
	msgs := orderedMessages(t, testTopic, n, keys)
	for start := 0; start < n; start += batchSize {
		if err := b.tr.SendBatch(context.Background(), msgs[start:start+batchSize]); err != nil {
			t.Fatalf("batch at %d: %v", start, err)
		}
	}
	checkKeyOrder(t, consume(t, b, testTopic, n), n, keys)
}

func TestKeyOrderSend(t *testing.T) {
	t.Parallel()
	const n, keys = 1000, 50
	b := setup(t, setupOpts{partitions: 6})
	for i, m := range orderedMessages(t, testTopic, n, keys) {
		if err := b.tr.Send(context.Background(), m); err != nil {
			t.Fatalf("message %d: %v", i, err)
		}
	}
	checkKeyOrder(t, consume(t, b, testTopic, n), n, keys)
}

// TestKeyOrderSendBatchConcurrent sends one batch of all messages in one call
// while another goroutine sends to the same partitions, as two dispatcher
// workers on different lanes would.
func TestKeyOrderSendBatchConcurrent(t *testing.T) {
	t.Parallel()
	const n, keys = 1000, 50
	b := setup(t, setupOpts{partitions: 6})
	ctx := context.Background()
	mine := orderedMessages(t, testTopic, n, keys)
	other := orderedMessages(t, "other", 200, 10)
	for _, m := range other {
		m.Destination, m.Key = testTopic, "other-"+m.Key
	}
	errc := make(chan error, 1)
	go func() {
		for start := 0; start < len(other); start += 20 {
			if err := b.tr.SendBatch(ctx, other[start:start+20]); err != nil {
				errc <- err
				return
			}
		}
		errc <- nil
	}()
	if err := b.tr.SendBatch(ctx, mine); err != nil {
		t.Fatal(err)
	}
	if err := <-errc; err != nil {
		t.Fatal(err)
	}
	var records []*kgo.Record
	for _, r := range consume(t, b, testTopic, n+len(other)) {
		if !bytes.HasPrefix(r.Key, []byte("other-")) {
			records = append(records, r)
		}
	}
	checkKeyOrder(t, records, n, keys)
}

// TestSendBatchSharesProduceRequests checks the point of SendBatch: a batch
// travels in a few produce requests, where sending its messages one by one
// takes a request each.
func TestSendBatchSharesProduceRequests(t *testing.T) {
	t.Parallel()
	const n, keys = 1000, 50
	b := setup(t, setupOpts{partitions: 6})
	if err := b.tr.Send(context.Background(), newMessage(t, testTopic, "k", "warm-up")); err != nil {
		t.Fatal(err)
	}
	requests := b.cluster.Fault(kfake.Fault{Keys: []kmsg.Key{kmsg.Produce}, Observe: true, Count: -1})
	if err := b.tr.SendBatch(context.Background(), orderedMessages(t, testTopic, n, keys)); err != nil {
		t.Fatal(err)
	}
	// One broker: the client can put all six partitions in one request; a
	// few more cover a batch that is still being buffered when the first
	// request leaves.
	if got := requests.Hits(); got > 10 {
		t.Errorf("SendBatch of %d messages took %d produce requests", n, got)
	}
	t.Logf("SendBatch of %d messages: %d produce requests", n, requests.Hits())

	// The counter does count requests: one-by-one sends need one each.
	before := requests.Hits()
	for _, m := range orderedMessages(t, testTopic, 20, 5) {
		if err := b.tr.Send(context.Background(), m); err != nil {
			t.Fatal(err)
		}
	}
	if got := requests.Hits() - before; got < 20 {
		t.Errorf("20 sequential sends took %d produce requests, want 20", got)
	}
}

// checkBatchError checks that err reports exactly the failed indexes, each
// marked with mark and carrying cause.
func checkBatchError(t *testing.T, err error, n int, failed map[int]bool, mark, cause error) {
	t.Helper()
	var be *relayer.BatchError
	if !errors.As(err, &be) {
		t.Fatalf("err = %v, want a *relayer.BatchError", err)
	}
	if len(be.Errs) != n {
		t.Fatalf("BatchError has %d entries for %d messages", len(be.Errs), n)
	}
	for i, e := range be.Errs {
		switch {
		case !failed[i] && e != nil:
			t.Errorf("message %d failed: %v", i, e)
		case failed[i] && e == nil:
			t.Errorf("message %d succeeded, want a failure", i)
		case failed[i] && (!errors.Is(e, mark) || !errors.Is(e, cause)):
			t.Errorf("message %d: %v; want %v and %v", i, e, mark, cause)
		}
	}
}

// checkStored checks that exactly the messages not in failed were stored.
func checkStored(t *testing.T, b *testBundle, msgs []*relayer.Message, failed map[int]bool) {
	t.Helper()
	got := byID(t, consume(t, b, testTopic, len(msgs)-len(failed)))
	for i, m := range msgs {
		if failed[i] {
			continue
		}
		if r, ok := got[m.ID]; !ok {
			t.Errorf("message %d not stored", i)
		} else {
			wantRecord(t, r, m)
		}
	}
}

// TestSendBatchReportsBrokerRejection makes the broker reject one partition's
// produce. The test client routes the key "poison" alone to partition 1, so
// exactly one record is in the rejected batch.
func TestSendBatchReportsBrokerRejection(t *testing.T) {
	t.Parallel()
	poisonOwnPartition := kgo.RecordPartitioner(kgo.BasicConsistentPartitioner(func(string) func(*kgo.Record, int) int {
		return func(r *kgo.Record, _ int) int {
			if string(r.Key) == "poison" {
				return 1
			}
			return 0
		}
	}))
	tests := []struct {
		name    string
		cluster []kfake.Opt
		fault   *kerr.Error // injected on partition 1's produce
		body    int         // size of the poisoned message's body
		mark    error
		cause   error
	}{
		{name: "max.message.bytes", cluster: []kfake.Opt{kfake.BrokerConfigs(map[string]string{"message.max.bytes": "4096"})},
			body: 8192, mark: relayer.ErrPermanent, cause: kerr.MessageTooLarge},
		{name: "invalid record", fault: kerr.InvalidRecord, mark: relayer.ErrPermanent, cause: kerr.InvalidRecord},
		{name: "record list too large", fault: kerr.RecordListTooLarge, mark: relayer.ErrPermanent, cause: kerr.RecordListTooLarge},
		{name: "not authorized", fault: kerr.TopicAuthorizationFailed, mark: relayer.ErrUnavailable, cause: kerr.TopicAuthorizationFailed},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			b := setup(t, setupOpts{partitions: 2, cluster: tt.cluster, client: []kgo.Opt{poisonOwnPartition}})
			if tt.fault != nil {
				b.cluster.Fault(kfake.Fault{Keys: []kmsg.Key{kmsg.Produce}, Topic: testTopic, Partitions: []int32{1}, Err: tt.fault, Count: -1})
			}
			msgs := make([]*relayer.Message, 6)
			for i := range msgs {
				msgs[i] = newMessage(t, testTopic, "fine", fmt.Sprint("fine ", i))
			}
			// Random bytes, so that compression cannot shrink the record
			// below the broker's limit.
			poison := make([]byte, max(tt.body, 1))
			rng := rand.New(rand.NewPCG(1, 2))
			for i := range poison {
				poison[i] = byte(rng.Uint32())
			}
			msgs[3].Key, msgs[3].Body = "poison", poison
			failed := map[int]bool{3: true}

			err := b.tr.SendBatch(context.Background(), msgs)
			checkBatchError(t, err, len(msgs), failed, tt.mark, tt.cause)
			checkStored(t, b, msgs, failed)
		})
	}
}

func TestSendBatchRejectsUnsendableMessages(t *testing.T) {
	t.Parallel()
	b := setup(t, setupOpts{})
	msgs := []*relayer.Message{
		newMessage(t, testTopic, "k", "0"),
		nil,
		newMessage(t, "", "k", "2"),
		newMessage(t, "bad topic!", "k", "3"),
		newMessage(t, strings.Repeat("t", 250), "k", "4"),
		newMessage(t, "..", "k", "5"),
		newMessage(t, testTopic, "k", "6"),
	}
	failed := map[int]bool{1: true, 2: true, 3: true, 4: true, 5: true}
	start := time.Now()
	err := b.tr.SendBatch(context.Background(), msgs)
	checkBatchError(t, err, len(msgs), failed, relayer.ErrPermanent, relayer.ErrPermanent)
	var be *relayer.BatchError
	if errors.As(err, &be) && !errors.Is(be.Errs[3], kerr.InvalidTopicException) {
		t.Errorf("invalid topic name: %v, want kerr.InvalidTopicException", be.Errs[3])
	}
	if elapsed := time.Since(start); elapsed > 5*time.Second {
		t.Errorf("took %s: invalid messages must fail without asking the broker", elapsed)
	}
	checkStored(t, b, msgs, failed)

	if err := b.tr.Send(context.Background(), newMessage(t, "", "k", "x")); !errors.Is(err, relayer.ErrPermanent) {
		t.Errorf("Send without destination = %v, want ErrPermanent", err)
	}
}

func TestSendToUnknownTopicIsUnavailable(t *testing.T) {
	t.Parallel()
	// The client gives up on a topic after UnknownTopicRetries metadata
	// answers; with none, the first one fails the record.
	b := setup(t, setupOpts{client: []kgo.Opt{kgo.UnknownTopicRetries(0)}})
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	err := b.tr.Send(ctx, newMessage(t, "missing", "k", "x"))
	if !errors.Is(err, relayer.ErrUnavailable) || !errors.Is(err, kerr.UnknownTopicOrPartition) || errors.Is(err, relayer.ErrPermanent) {
		t.Fatalf("Send = %v, want ErrUnavailable with UNKNOWN_TOPIC_OR_PARTITION", err)
	}
	err = b.tr.SendBatch(ctx, []*relayer.Message{newMessage(t, testTopic, "k", "x"), newMessage(t, "missing-too", "k", "y")})
	checkBatchError(t, err, 2, map[int]bool{1: true}, relayer.ErrUnavailable, kerr.UnknownTopicOrPartition)
}

func TestSendBatchLimits(t *testing.T) {
	t.Parallel()
	b := setup(t, setupOpts{})
	if err := b.tr.SendBatch(context.Background(), nil); err != nil {
		t.Errorf("empty batch: %v", err)
	}
	tr, err := relayerkafka.New(b.client, relayerkafka.Options{MaxBatchSize: 2})
	if err != nil {
		t.Fatal(err)
	}
	msgs := []*relayer.Message{newMessage(t, testTopic, "", "1"), newMessage(t, testTopic, "", "2"), newMessage(t, testTopic, "", "3")}
	if err := tr.SendBatch(context.Background(), msgs); err == nil || errors.As(err, new(*relayer.BatchError)) {
		t.Errorf("batch over MaxBatchSize = %v, want a plain error", err)
	}
}

// dropProduce makes the cluster swallow every produce request without
// answering, as a broker that hangs would.
func dropProduce(c *kfake.Cluster) {
	c.ControlKey(int16(kmsg.Produce), func(kmsg.Request) (kmsg.Response, error, bool) {
		c.KeepControl()
		return nil, nil, true
	})
}

func TestSendReturnsAtDeadlineWhenBrokerHangs(t *testing.T) {
	t.Parallel()
	b := setup(t, setupOpts{partitions: 3})
	// Warm up so that metadata and the producer id are in place and the
	// deadline hits a produce request already on the wire.
	if err := b.tr.Send(context.Background(), newMessage(t, testTopic, "k", "warm-up")); err != nil {
		t.Fatal(err)
	}
	dropProduce(b.cluster)

	const timeout = 200 * time.Millisecond
	sends := map[string]func(context.Context) error{
		"Send": func(ctx context.Context) error {
			return b.tr.Send(ctx, newMessage(t, testTopic, "k", "x"))
		},
		"SendBatch": func(ctx context.Context) error {
			return b.tr.SendBatch(ctx, orderedMessages(t, testTopic, 100, 10))
		},
	}
	for name, send := range sends {
		ctx, cancel := context.WithTimeout(context.Background(), timeout)
		defer cancel()
		start := time.Now()
		// A send that ignores its deadline would hang the test; the client's
		// Close in the cleanup ends it.
		errc := make(chan error, 1)
		go func() { errc <- send(ctx) }()
		select {
		case err := <-errc:
			if !errors.Is(err, context.DeadlineExceeded) {
				t.Errorf("%s = %v, want context.DeadlineExceeded", name, err)
			}
			if elapsed := time.Since(start); elapsed > timeout+time.Second {
				t.Errorf("%s returned after %s, deadline %s", name, elapsed, timeout)
			}
		case <-time.After(timeout + 5*time.Second):
			t.Fatalf("%s still running %s after its deadline", name, 5*time.Second)
		}
	}
}

func TestSendWithCanceledContextProducesNothing(t *testing.T) {
	t.Parallel()
	b := setup(t, setupOpts{})
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if err := b.tr.Send(ctx, newMessage(t, testTopic, "k", "x")); !errors.Is(err, context.Canceled) {
		t.Errorf("Send = %v, want context.Canceled", err)
	}
	if err := b.tr.SendBatch(ctx, []*relayer.Message{newMessage(t, testTopic, "k", "y")}); !errors.Is(err, context.Canceled) {
		t.Errorf("SendBatch = %v, want context.Canceled", err)
	}
	// A later message shows the stream holds nothing before it.
	last := newMessage(t, testTopic, "k", "z")
	if err := b.tr.Send(context.Background(), last); err != nil {
		t.Fatal(err)
	}
	wantRecord(t, consume(t, b, testTopic, 1)[0], last)
}

// TestAbandonedSendMayStillDeliver shows the at-least-once edge documented on
// Send: a record already on the wire when the deadline hits is not recalled,
// and arrives with the bytes it had when Send was called although the caller
// reused the message's memory afterwards.
func TestAbandonedSendMayStillDeliver(t *testing.T) {
	t.Parallel()
	b := setup(t, setupOpts{client: []kgo.Opt{kgo.RequestTimeoutOverhead(500 * time.Millisecond), kgo.ProduceRequestTimeout(500 * time.Millisecond)}})
	if err := b.tr.Send(context.Background(), newMessage(t, testTopic, "k", "warm-up")); err != nil {
		t.Fatal(err)
	}
	// Swallow the next produce request only: the client times it out and
	// retries on a new connection.
	b.cluster.ControlKey(int16(kmsg.Produce), func(kmsg.Request) (kmsg.Response, error, bool) { return nil, nil, true })

	m := newMessage(t, testTopic, "k", "original body")
	want := *m
	want.Body = bytes.Clone(m.Body)
	ctx, cancel := context.WithTimeout(context.Background(), 100*time.Millisecond)
	defer cancel()
	if err := b.tr.Send(ctx, m); !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("Send = %v, want context.DeadlineExceeded", err)
	}
	copy(m.Body, "XXXXXXXXXXXXX")

	records := consume(t, b, testTopic, 2)
	wantRecord(t, records[1], &want)
}

func TestCapabilities(t *testing.T) {
	t.Parallel()
	b := setup(t, setupOpts{})
	for _, tc := range []struct {
		opts relayerkafka.Options
		want int
	}{
		{relayerkafka.Options{}, relayerkafka.MaxBatchSizeDefault},
		{relayerkafka.Options{MaxBatchSize: 1}, 1},
		{relayerkafka.Options{MaxBatchSize: relayerkafka.MaxBatchSizeMax}, relayerkafka.MaxBatchSizeMax},
	} {
		tr, err := relayerkafka.New(b.client, tc.opts)
		if err != nil {
			t.Fatal(err)
		}
		for _, dest := range []string{testTopic, "not-created-yet"} {
			got, err := tr.Capabilities(context.Background(), dest)
			want := relayer.Capabilities{OrderedByKey: true, MaxBatchSize: tc.want, NativeScheduling: false}
			if err != nil || got != want {
				t.Errorf("Capabilities(%q) with %+v = %+v, %v; want %+v", dest, tc.opts, got, err, want)
			}
		}
	}
}

func TestNewRejectsUnsafeClients(t *testing.T) {
	t.Parallel()
	cluster, err := kfake.NewCluster(kfake.NumBrokers(1))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(cluster.Close)
	tests := []struct {
		name string
		opts []kgo.Opt
		want string
	}{
		{"no idempotence", []kgo.Opt{kgo.DisableIdempotentWrite()}, "DisableIdempotentWrite"},
		{"leader acks", []kgo.Opt{kgo.DisableIdempotentWrite(), kgo.RequiredAcks(kgo.LeaderAck())}, "RequiredAcks"},
		{"no acks", []kgo.Opt{kgo.DisableIdempotentWrite(), kgo.RequiredAcks(kgo.NoAck())}, "RequiredAcks"},
		{"transactional", []kgo.Opt{kgo.TransactionalID("tx")}, "TransactionalID"},
		{"manual flushing", []kgo.Opt{kgo.ManualFlushing()}, "ManualFlushing"},
		{"default topic always", []kgo.Opt{kgo.DefaultProduceTopic("t"), kgo.DefaultProduceTopicAlways()}, "DefaultProduceTopicAlways"},
	}
	for _, tt := range tests {
		client := newClient(t, cluster, tt.opts...)
		_, err := relayerkafka.New(client, relayerkafka.Options{})
		if !errors.Is(err, relayerkafka.ErrUnsupportedClient) || !strings.Contains(err.Error(), tt.want) {
			t.Errorf("%s: New = %v, want ErrUnsupportedClient naming %s", tt.name, err, tt.want)
		}
	}
	if _, err := relayerkafka.New(nil, relayerkafka.Options{}); !errors.Is(err, relayerkafka.ErrUnsupportedClient) {
		t.Errorf("nil client: New = %v", err)
	}
	// Settings that keep the guarantees are accepted.
	client := newClient(t, cluster, kgo.ProducerLinger(0), kgo.AllowIdempotentProduceCancellation(), kgo.DefaultProduceTopic("t"))
	if _, err := relayerkafka.New(client, relayerkafka.Options{}); err != nil {
		t.Errorf("New with linger 0 and cancellable idempotence: %v", err)
	}
	for _, n := range []int{-1, relayerkafka.MaxBatchSizeMax + 1} {
		_, err := relayerkafka.New(client, relayerkafka.Options{MaxBatchSize: n})
		if !errors.Is(err, relayerkafka.ErrInvalidOptions) || !strings.Contains(err.Error(), "MaxBatchSize") {
			t.Errorf("MaxBatchSize %d: New = %v, want ErrInvalidOptions naming the field", n, err)
		}
	}
}

func TestMessageID(t *testing.T) {
	t.Parallel()
	id := uuid.MustParse("01929d5e-7b1a-7c3e-8f00-0123456789ab")
	other := uuid.MustParse("01929d5e-0000-7000-8000-000000000000")
	tests := []struct {
		name    string
		headers []kgo.RecordHeader
		want    uuid.UUID
		wantErr error
	}{
		{"present", []kgo.RecordHeader{{Key: "a", Value: []byte("b")}, {Key: relayer.HeaderMessageID, Value: []byte(id.String())}}, id, nil},
		{"last wins", []kgo.RecordHeader{{Key: relayer.HeaderMessageID, Value: []byte(other.String())}, {Key: relayer.HeaderMessageID, Value: []byte(id.String())}}, id, nil},
		{"missing", []kgo.RecordHeader{{Key: "a", Value: []byte("b")}}, uuid.Nil, relayerkafka.ErrNoMessageID},
		{"malformed", []kgo.RecordHeader{{Key: relayer.HeaderMessageID, Value: []byte("nope")}}, uuid.Nil, nil},
	}
	for _, tt := range tests {
		got, err := relayerkafka.MessageID(&kgo.Record{Headers: tt.headers})
		switch {
		case got != tt.want:
			t.Errorf("%s: id %s, want %s", tt.name, got, tt.want)
		case tt.wantErr != nil && !errors.Is(err, tt.wantErr):
			t.Errorf("%s: err %v, want %v", tt.name, err, tt.wantErr)
		case tt.want == uuid.Nil && err == nil:
			t.Errorf("%s: no error", tt.name)
		case tt.want != uuid.Nil && err != nil:
			t.Errorf("%s: %v", tt.name, err)
		}
	}
	if _, err := relayerkafka.MessageID(nil); !errors.Is(err, relayerkafka.ErrNoMessageID) {
		t.Errorf("nil record: %v", err)
	}
}
