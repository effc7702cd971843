package relayerkafka

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"strconv"
	"sync"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/relayer-go/relayer"
	"github.com/relayer-go/relayer/consume"
	"github.com/relayer-go/relayer/headers"
)

// Headers a dead letter carries after the record's own: why it left
// delivery and which consumer gave up on it (package consume's names, on
// every broker), and where it was consumed from.
const (
	HeaderDeadReason    = consume.HeaderDeadReason
	HeaderDeadConsumer  = consume.HeaderDeadConsumer
	HeaderDeadTopic     = "relayer-dead-topic"
	HeaderDeadPartition = "relayer-dead-partition"
	HeaderDeadOffset    = "relayer-dead-offset"
)

// The flow of records to a partition's handler: polls take up to
// pollRecords records; a partition whose handler has pauseAt records
// waiting stops being fetched until it is down to resumeAt.
const (
	pollRecords = 500
	pauseAt     = 1000
	resumeAt    = 200
)

// settleBackoff bounds the wait before a record whose dead letter could not
// be produced is handled again.
var settleBackoff = relayer.Retry{MaxAttempts: relayer.RetryMaxAttemptsMax, Backoff: 500 * time.Millisecond, MaxBackoff: 30 * time.Second}

// ConsumeOptions configure [Consume]. Group, Topics and DeadLetterTopic are
// required; zero fields take their defaults.
type ConsumeOptions struct {
	// Group is the consumer group: the consumers of one group share the
	// topics' partitions, each partition read by one of them at a time,
	// and the group's committed offsets say where each partition resumes.
	Group string
	// Topics are the topics consumed.
	Topics []string
	// DeadLetterTopic is the topic a record that leaves delivery for good
	// is produced to, with its key, value and headers and the headers
	// HeaderDeadReason, HeaderDeadConsumer, HeaderDeadTopic,
	// HeaderDeadPartition and HeaderDeadOffset; only then is its offset
	// committed. While the dead letter cannot be produced, the record is
	// handled again after a pause, and its partition waits.
	DeadLetterTopic string
	// DrainTimeout bounds how long Consume waits, once its context has
	// ended, for the records being handled to commit; then their handlers'
	// context ends, and what did not commit is consumed again by the
	// partition's next owner. Default: 10s.
	DrainTimeout time.Duration
	// Logger receives the adapter's logs. Default: slog.Default().
	Logger *slog.Logger
}

// Validate reports the first field that cannot work, wrapping
// [ErrInvalidOptions].
func (o ConsumeOptions) Validate() error {
	switch {
	case o.Group == "":
		return fmt.Errorf("%w: ConsumeOptions.Group is required", ErrInvalidOptions)
	case len(o.Topics) == 0:
		return fmt.Errorf("%w: ConsumeOptions.Topics is empty", ErrInvalidOptions)
	case o.DeadLetterTopic == "":
		return fmt.Errorf("%w: ConsumeOptions.DeadLetterTopic is required: a record given up on is kept where operators find it", ErrInvalidOptions)
	case !validTopic(o.DeadLetterTopic):
		return fmt.Errorf("%w: ConsumeOptions.DeadLetterTopic %q is not a valid topic name", ErrInvalidOptions, o.DeadLetterTopic)
	}
	if err := consume.CheckLimits(ErrInvalidOptions,
		consume.Limit{Name: "ConsumeOptions.DrainTimeout", Value: int64(o.DrainTimeout), Min: 1, Duration: true, Zero: "10s"}); err != nil {
		return err
	}
	for _, t := range o.Topics {
		if !validTopic(t) {
			return fmt.Errorf("%w: ConsumeOptions.Topics: %q is not a valid topic name", ErrInvalidOptions, t)
		}
		if t == o.DeadLetterTopic {
			return fmt.Errorf("%w: ConsumeOptions.Topics holds the DeadLetterTopic %q: dead letters would be consumed again", ErrInvalidOptions, t)
		}
	}
	return nil
}

// Consume joins the consumer group opts.Group on a client it makes from
// clientOpts and closes at the end, and hands the records of opts.Topics to
// c, one [consume.Delivery] each, until ctx ends; then it stops fetching,
// waits up to DrainTimeout for the records being handled, commits the
// offsets of what committed, leaves the group and returns nil. It returns
// an error at once for options that cannot work, a client that cannot be
// made, or a consumer whose database is not ready. The package
// documentation's sections "Consuming", "Offsets" and "Failing records" say
// the rest, including the client options Consume sets itself.
func Consume(ctx context.Context, c *consume.Consumer, clientOpts []kgo.Opt, opts ConsumeOptions) error {
	if c == nil {
		return fmt.Errorf("%w: Consume needs a consume.Consumer", ErrInvalidOptions)
	}
	if err := opts.Validate(); err != nil {
		return err
	}
	if opts.DrainTimeout == 0 {
		opts.DrainTimeout = 10 * time.Second
	}
	if opts.Logger == nil {
		opts.Logger = slog.Default()
	}
	if err := c.AwaitDatabase(ctx); err != nil {
		if ctx.Err() != nil {
			return nil
		}
		return fmt.Errorf("relayerkafka: consume: %w", err)
	}
	// The handlers' context outlives ctx by up to DrainTimeout, so that a
	// stop lets the records being handled commit.
	hctx, endHandlers := context.WithCancel(context.WithoutCancel(ctx))
	defer endHandlers()
	g := &group{opts: opts, consumer: c, retry: c.Options().Retry, hctx: hctx, parts: map[topicPartition]*partition{}}
	if err := g.join(clientOpts); err != nil {
		return err
	}
	// A partition hands its records over in order: keys are then held by
	// default (consume.HoldKeysAuto), so that a failing record holds its
	// key alone instead of its partition.
	stopHeld, err := c.StartHeldKeys(ctx, consume.HeldKeysOptions{Ordered: true, DeadLetters: &deadLetters{g: g}})
	if err != nil {
		g.cl.Close()
		return fmt.Errorf("relayerkafka: consume: %w", err)
	}
	g.poll(ctx)
	// The drain stops before the client closes: it may be producing a
	// dead letter.
	stopHeld()
	g.leave(ctx, endHandlers)
	return nil
}

// join makes the group's client, which joins the consumer group.
func (g *group) join(clientOpts []kgo.Opt) error {
	cl, err := kgo.NewClient(append(slices.Clip(clientOpts),
		kgo.ConsumerGroup(g.opts.Group),
		kgo.ConsumeTopics(g.opts.Topics...),
		kgo.AutoCommitMarks(),
		kgo.BlockRebalanceOnPoll(),
		kgo.OnPartitionsRevoked(g.revoked),
		kgo.OnPartitionsLost(g.lost),
	)...)
	if err != nil {
		return fmt.Errorf("%w: the consumer's client: %w", ErrInvalidOptions, err)
	}
	g.cl = cl
	return nil
}

// poll hands the records it fetches to their partitions until ctx ends or
// the client closes. While fetching fails the client tries again by itself;
// the log says so once, and once when fetching works again.
func (g *group) poll(ctx context.Context) {
	failing := false
	for {
		fetches := g.cl.PollRecords(ctx, pollRecords)
		if ctx.Err() != nil || fetches.IsClientClosed() {
			g.cl.AllowRebalance()
			return
		}
		var failure error
		fetches.EachError(func(topic string, p int32, err error) {
			if !errors.Is(err, context.Canceled) && failure == nil {
				failure = fmt.Errorf("topic %s, partition %d: %w", topic, p, err)
			}
		})
		switch {
		case failure != nil && !failing:
			failing = true
			g.opts.Logger.Warn("relayerkafka: consume: fetching fails; the client tries again", slog.String("group", g.opts.Group),
				slog.String("error", failure.Error()))
		case failure == nil && failing:
			failing = false
			g.opts.Logger.Info("relayerkafka: consume: fetching works again", slog.String("group", g.opts.Group))
		}
		fetches.EachPartition(func(p kgo.FetchTopicPartition) {
			if len(p.Records) > 0 {
				g.partition(topicPartition{p.Topic, p.Partition}).add(p.Records)
			}
		})
		g.cl.AllowRebalance()
	}
}

// leave stops every partition after the record it is handling, within the
// drain's deadline (then endHandlers ends their context), commits what
// committed and leaves the group.
func (g *group) leave(ctx context.Context, endHandlers context.CancelFunc) {
	drained := make(chan struct{})
	go func() {
		g.stop(nil)
		close(drained)
	}()
	select {
	case <-drained:
	case <-time.After(g.opts.DrainTimeout):
		endHandlers() // nothing uncommitted is marked: it is consumed again
		<-drained
	}
	cctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 10*time.Second)
	defer cancel()
	if err := g.cl.CommitMarkedOffsets(cctx); err != nil {
		g.opts.Logger.Warn("relayerkafka: consume: committing offsets at the end failed; the partitions' next owners handle some records again, as duplicates",
			slog.String("error", err.Error()))
	}
	g.cl.CloseAllowingRebalance()
}

// topicPartition names a partition.
type topicPartition struct {
	topic string
	id    int32
}

// group is one Consume's partitions and what they share.
type group struct {
	opts     ConsumeOptions
	consumer *consume.Consumer
	retry    relayer.Retry
	hctx     context.Context
	cl       *kgo.Client

	mu    sync.Mutex
	parts map[topicPartition]*partition
	wg    sync.WaitGroup
}

// partition returns the handler of tp's records, starting it at its first
// records since the partition was assigned.
func (g *group) partition(tp topicPartition) *partition {
	g.mu.Lock()
	defer g.mu.Unlock()
	p := g.parts[tp]
	if p == nil {
		p = &partition{tp: tp, g: g, wake: make(chan struct{}, 1), quit: make(chan struct{}), done: make(chan struct{})}
		g.parts[tp] = p
		g.wg.Go(p.run)
	}
	return p
}

// revoked stops the partitions taken away after the record each is
// handling, then commits the offsets of what they committed, before the
// rebalance hands them to another consumer.
func (g *group) revoked(ctx context.Context, cl *kgo.Client, revoked map[string][]int32) {
	g.stop(revoked)
	if err := cl.CommitMarkedOffsets(ctx); err != nil {
		g.opts.Logger.Warn("relayerkafka: consume: committing offsets at a rebalance failed; the partitions' next owners handle some records again, as duplicates",
			slog.String("error", err.Error()))
	}
}

// lost stops the partitions lost: another consumer may be handling them
// already, and their offsets can no longer be committed by this one.
func (g *group) lost(_ context.Context, _ *kgo.Client, lost map[string][]int32) { g.stop(lost) }

// stop stops the partitions in which (all of them when nil) after the
// record each is handling, and waits for them.
func (g *group) stop(which map[string][]int32) {
	g.mu.Lock()
	var stopping []*partition
	for tp, p := range g.parts {
		if which == nil || containsPartition(which[tp.topic], tp.id) {
			stopping = append(stopping, p)
			delete(g.parts, tp)
		}
	}
	g.mu.Unlock()
	for _, p := range stopping {
		p.stop()
	}
	for _, p := range stopping {
		<-p.done
	}
}

func containsPartition(ps []int32, id int32) bool {
	for _, p := range ps {
		if p == id {
			return true
		}
	}
	return false
}

// partition handles one partition's records in offset order.
type partition struct {
	tp       topicPartition
	g        *group
	mu       sync.Mutex
	queue    []*kgo.Record
	paused   bool
	wake     chan struct{}
	quit     chan struct{}
	stopOnce sync.Once
	done     chan struct{}
}

// add queues records, pausing the partition's fetches when its handler is
// far behind.
func (p *partition) add(records []*kgo.Record) {
	p.mu.Lock()
	p.queue = append(p.queue, records...)
	if len(p.queue) >= pauseAt && !p.paused {
		p.paused = true
		p.g.cl.PauseFetchPartitions(map[string][]int32{p.tp.topic: {p.tp.id}})
	}
	p.mu.Unlock()
	select {
	case p.wake <- struct{}{}:
	default:
	}
}

// next returns the next record, or nil once the partition is stopped.
func (p *partition) next() *kgo.Record {
	for {
		select {
		case <-p.quit:
			return nil
		default:
		}
		p.mu.Lock()
		if len(p.queue) > 0 {
			r := p.queue[0]
			p.queue[0] = nil
			p.queue = p.queue[1:]
			if p.paused && len(p.queue) <= resumeAt {
				p.paused = false
				p.g.cl.ResumeFetchPartitions(map[string][]int32{p.tp.topic: {p.tp.id}})
			}
			p.mu.Unlock()
			return r
		}
		p.mu.Unlock()
		select {
		case <-p.wake:
		case <-p.quit:
			return nil
		}
	}
}

func (p *partition) stop() {
	p.stopOnce.Do(func() {
		close(p.quit)
		p.mu.Lock()
		if p.paused {
			p.paused = false
			p.g.cl.ResumeFetchPartitions(map[string][]int32{p.tp.topic: {p.tp.id}})
		}
		p.mu.Unlock()
	})
}

// run handles the partition's records until it is stopped.
func (p *partition) run() {
	defer close(p.done)
	for r := p.next(); r != nil; r = p.next() {
		if !p.handle(r) {
			return
		}
	}
}

// handle handles r until it is settled: handled, a duplicate or
// dead-lettered, and marked for commit. It reports false when the
// partition stopped, or the handlers' context ended, first.
func (p *partition) handle(r *kgo.Record) bool {
	g := p.g
	d := &delivery{r: r, g: g, attempt: 1}
	settleFailures := 0
	for {
		out, err := g.consumer.Handle(g.hctx, d)
		var wait time.Duration
		switch {
		case g.hctx.Err() != nil:
			return false
		case err != nil:
			settleFailures++
			wait = settleBackoff.Delay(settleFailures)
			g.opts.Logger.Warn("relayerkafka: consume: a record was not settled; it is handled again",
				slog.String("topic", r.Topic), slog.Int("partition", int(r.Partition)), slog.Int64("offset", r.Offset),
				slog.Duration("after", wait), slog.String("error", err.Error()))
		case out == consume.Retried:
			d.attempt++
			wait = d.delay
		default:
			return true
		}
		t := time.NewTimer(wait)
		select {
		case <-t.C:
		case <-p.quit:
			t.Stop()
			return false
		}
	}
}

// delivery is a record as a consume.Delivery.
type delivery struct {
	r       *kgo.Record
	g       *group
	attempt int
	delay   time.Duration
}

func (d *delivery) Message() (relayer.Message, error) { return ReceivedMessage(d.r) }

// Attempt counts the deliveries of the record in this consumer.
func (d *delivery) Attempt() int { return d.attempt }

// Ack marks the record's offset for commit.
func (d *delivery) Ack(context.Context) error {
	d.g.cl.MarkCommitRecords(d.r)
	return nil
}

// Retry has the partition handle the record again after delay.
func (d *delivery) Retry(_ context.Context, delay time.Duration) error {
	d.delay = delay
	return nil
}

// DeadLetter produces the record, as it arrived, to the dead-letter topic
// with why and by whom it was given up, then marks its offset for commit.
func (d *delivery) DeadLetter(ctx context.Context, cause error) error {
	r := d.r
	dead := &kgo.Record{Topic: d.g.opts.DeadLetterTopic, Key: r.Key, Value: r.Value, Headers: make([]kgo.RecordHeader, 0, len(r.Headers)+5)}
	if dead.Value == nil {
		dead.Value = []byte{} // a null value is a tombstone
	}
	dead.Headers = append(dead.Headers, r.Headers...)
	dead.Headers = append(dead.Headers,
		kgo.RecordHeader{Key: HeaderDeadReason, Value: []byte(consume.DeadReason(cause.Error()))},
		kgo.RecordHeader{Key: HeaderDeadConsumer, Value: []byte(consume.DeadReason(d.g.consumer.Options().Name))},
		kgo.RecordHeader{Key: HeaderDeadTopic, Value: []byte(r.Topic)},
		kgo.RecordHeader{Key: HeaderDeadPartition, Value: strconv.AppendInt(nil, int64(r.Partition), 10)},
		kgo.RecordHeader{Key: HeaderDeadOffset, Value: strconv.AppendInt(nil, r.Offset, 10)},
	)
	if err := d.g.cl.ProduceSync(ctx, dead).FirstErr(); err != nil {
		return fmt.Errorf("relayerkafka: dead letter to %s: %w", d.g.opts.DeadLetterTopic, err)
	}
	d.g.cl.MarkCommitRecords(r)
	return nil
}

// deadLetters produces the held messages a consumer gives up on to the
// dead-letter topic, as a delivery's DeadLetter does: the message's key,
// value and headers with its identity and type, and why and by whom it
// was given up, and the topic it came from.
type deadLetters struct{ g *group }

func (dl *deadLetters) DeadLetter(ctx context.Context, m *relayer.Message, cause error) error {
	dead := &kgo.Record{Topic: dl.g.opts.DeadLetterTopic, Key: []byte(m.Key), Value: m.Body,
		Headers: make([]kgo.RecordHeader, 0, len(m.Headers)+5)}
	if dead.Value == nil {
		dead.Value = []byte{} // a null value is a tombstone
	}
	for _, h := range m.Headers {
		dead.Headers = append(dead.Headers, kgo.RecordHeader{Key: h.Name, Value: h.Value})
	}
	dead.Headers = append(dead.Headers,
		kgo.RecordHeader{Key: relayer.HeaderMessageID, Value: []byte(m.ID.String())},
		kgo.RecordHeader{Key: relayer.HeaderMessageType, Value: []byte(m.Type)},
		kgo.RecordHeader{Key: HeaderDeadReason, Value: []byte(consume.DeadReason(cause.Error()))},
		kgo.RecordHeader{Key: HeaderDeadConsumer, Value: []byte(consume.DeadReason(dl.g.consumer.Options().Name))},
		kgo.RecordHeader{Key: HeaderDeadTopic, Value: []byte(m.Destination)},
	)
	if err := dl.g.cl.ProduceSync(ctx, dead).FirstErr(); err != nil {
		return fmt.Errorf("relayerkafka: dead letter to %s: %w", dl.g.opts.DeadLetterTopic, err)
	}
	return nil
}

// ReceivedMessage returns the relayer.Message a [Transport] produced as r:
// its id ([MessageID]), type (the last relayer.HeaderMessageType header),
// key (the record key), body (the value) and headers in their order, the
// transport's own id and type headers left out; its Destination is r's
// topic. The message's Transport, creation time and trace context are not
// carried. A record without a relayer.HeaderMessageID header fails with
// [ErrNoMessageID].
func ReceivedMessage(r *kgo.Record) (relayer.Message, error) {
	id, err := MessageID(r)
	if err != nil {
		return relayer.Message{}, err
	}
	m := relayer.Message{ID: id, Destination: r.Topic, Key: string(r.Key), Body: r.Value}
	idAt, typeAt := lastHeader(r.Headers, relayer.HeaderMessageID), lastHeader(r.Headers, relayer.HeaderMessageType)
	if typeAt >= 0 {
		m.Type = string(r.Headers[typeAt].Value)
	}
	for i, h := range r.Headers {
		if i != idAt && i != typeAt {
			m.Headers = append(m.Headers, headers.Header{Name: h.Key, Value: h.Value})
		}
	}
	return m, nil
}

// lastHeader returns the index of the last header named name, or -1.
func lastHeader(hs []kgo.RecordHeader, name string) int {
	for i := len(hs) - 1; i >= 0; i-- {
		if hs[i].Key == name {
			return i
		}
	}
	return -1
}
