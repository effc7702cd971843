package relayernats

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/relayer-go/relayer"
	"github.com/relayer-go/relayer/consume"
	"github.com/relayer-go/relayer/headers"
)

// Headers a dead letter carries besides the message's own: why it left
// delivery and which consumer gave up on it (package consume's names, on
// every broker), and the subject it was consumed from.
const (
	HeaderDeadReason   = consume.HeaderDeadReason
	HeaderDeadConsumer = consume.HeaderDeadConsumer
	HeaderDeadSubject  = "relayer-dead-subject"
)

// ConsumeOptions configure [Consume]. DeadLetterSubject is required; zero
// fields take their defaults.
type ConsumeOptions struct {
	// DeadLetterSubject is the subject a message that leaves delivery for
	// good is published to, with its headers and body and the headers
	// HeaderDeadReason, HeaderDeadConsumer and HeaderDeadSubject; a stream
	// must capture it. The message is then terminated in its own stream
	// (Term). Required: a message given up on is kept where
	// operators find it, never only dropped.
	DeadLetterSubject string
	// Concurrency is how many messages are handled at once, 1 to 1,000.
	// With 1, the default, messages are handled one at a time in the order
	// the consumer delivers them, and the consume.Consumer holds the key of
	// a failing message (consume.HoldKeysAuto), so that the key's later
	// messages take effect after it; a failing message without a key comes
	// back behind the messages delivered meanwhile. With more, messages of
	// one subject may be handled out of order.
	Concurrency int
	// Prefetch is how many messages are pulled ahead of the handlers
	// (jetstream.PullMaxMessages), 1 to 10,000. A message pulled ahead
	// waits for a handler while its AckWait runs, and JetStream delivers it
	// again if the wait outlasts it (the redelivery is then a duplicate): a
	// higher Prefetch saves pull round trips for short handlers, and costs
	// redeliveries for long ones. Default: twice Concurrency.
	Prefetch int
	// DrainTimeout bounds how long Consume waits, once its context has
	// ended, for the messages being handled to commit and be acknowledged;
	// then their handlers' context ends, and what did not commit is
	// delivered again. Default: 10s.
	DrainTimeout time.Duration
	// Logger receives the adapter's logs. Default: slog.Default().
	Logger *slog.Logger
}

// Validate reports the first field that cannot work, wrapping
// [ErrInvalidOptions].
func (o ConsumeOptions) Validate() error {
	if o.DeadLetterSubject == "" {
		return fmt.Errorf("%w: ConsumeOptions.DeadLetterSubject is required", ErrInvalidOptions)
	}
	if reason := checkSubject(o.DeadLetterSubject); reason != "" {
		return fmt.Errorf("%w: ConsumeOptions.DeadLetterSubject %q: %s", ErrInvalidOptions, o.DeadLetterSubject, reason)
	}
	return consume.CheckLimits(ErrInvalidOptions,
		consume.Limit{Name: "ConsumeOptions.Concurrency", Value: int64(o.Concurrency), Min: 1, Max: 1000, Zero: "1"},
		consume.Limit{Name: "ConsumeOptions.Prefetch", Value: int64(o.Prefetch), Min: 1, Max: 10_000, Zero: "twice Concurrency"},
		consume.Limit{Name: "ConsumeOptions.DrainTimeout", Value: int64(o.DrainTimeout), Min: 1, Duration: true, Zero: "10s"})
}

// withDefaults validates o and fills in its defaults.
func (o ConsumeOptions) withDefaults() (ConsumeOptions, error) {
	if err := o.Validate(); err != nil {
		return o, err
	}
	if o.Concurrency == 0 {
		o.Concurrency = 1
	}
	if o.Prefetch == 0 {
		o.Prefetch = 2 * o.Concurrency
	}
	if o.DrainTimeout == 0 {
		o.DrainTimeout = 10 * time.Second
	}
	if o.Logger == nil {
		o.Logger = slog.Default()
	}
	return o, nil
}

// Consume hands the messages of the JetStream consumer cons to c, one
// [consume.Delivery] each, until ctx ends; then it stops fetching, waits up
// to DrainTimeout for the messages being handled, and returns nil. The
// caller owns js and its connection, which Consume never closes. It
// returns an error at once for options or a consumer that cannot work, and for a consume.Consumer whose database is not ready
// (consume.ErrNotReady: its inbox table does not exist, naming the
// migration to run); a database that does not answer yet is waited for
// (consume.Consumer.AwaitDatabase).
//
// cons must acknowledge explicitly (jetstream.AckExplicitPolicy). While
// JetStream cannot be reached, its client reconnects by itself: Consume
// waits, and says so once in its log, and once when fetching works again.
// When js's connection is closed for good, Consume returns an error
// wrapping relayer.ErrUnavailable: dial again and call it again, as with
// every adapter. Each
// message is settled once its transaction ended: acknowledged when it was
// handled and committed, or was a duplicate; negatively acknowledged with
// the consumer's backoff (NakWithDelay) when its handler failed; published
// to DeadLetterSubject and terminated (Term) when it failed for good. The consumer
// counts attempts with the deliveries JetStream reports (NumDelivered), so
// its MaxDeliver, when set, must be at least c's Retry.MaxAttempts:
// otherwise JetStream would stop delivering a failing message before it
// reached the dead letters. While a handler runs past half the consumer's
// AckWait, the message is reported in progress, so that JetStream does not
// deliver it again meanwhile.
//
// js publishes the dead letters. Pull a durable consumer the application
// created, for example:
//
//	cons, err := js.CreateOrUpdateConsumer(ctx, "ORDERS", jetstream.ConsumerConfig{
//		Durable:       "billing",
//		AckPolicy:     jetstream.AckExplicitPolicy,
//		FilterSubject: "orders.>",
//	})
func Consume(ctx context.Context, c *consume.Consumer, js jetstream.JetStream, cons jetstream.Consumer, opts ConsumeOptions) error {
	if js == nil || cons == nil || c == nil {
		return fmt.Errorf("%w: Consume needs a consume.Consumer, a JetStream context and a consumer", ErrInvalidOptions)
	}
	opts, err := opts.withDefaults()
	if err != nil {
		return err
	}
	ackWait, err := checkConsumer(cons, c)
	if err != nil {
		return err
	}
	// One at a time, JetStream hands a subject's messages over in order:
	// keys are then held by default (consume.HoldKeysAuto).
	stopHeld, err := c.Start(ctx, consume.HeldKeysOptions{Ordered: opts.Concurrency == 1,
		DeadLetters: &deadLetters{js: js, subject: opts.DeadLetterSubject, consumer: c.Options().Name}})
	if err != nil {
		if ctx.Err() != nil {
			return nil
		}
		return fmt.Errorf("relayernats: consume: %w", err)
	}
	defer stopHeld()
	// A short pull expiry bounds a stall of the client's iterator: it asks
	// for more messages only from Next, and skips the request while the
	// previous one is still being published, which a loaded machine can
	// stretch past the delivery and handling of the whole batch (seen with
	// Prefetch 2); Next then waits with no request open until it misses two
	// heartbeats, half the expiry each, and asks again.
	it, err := cons.Messages(jetstream.PullMaxMessages(opts.Prefetch), jetstream.PullExpiry(pullExpiry))
	if err != nil {
		return fmt.Errorf("relayernats: consume: %w", err)
	}
	r := &receiver{c: c, js: js, opts: opts, ackWait: ackWait, name: c.Options().Name}
	return r.receive(ctx, it)
}

// checkConsumer refuses a JetStream consumer Consume cannot keep its
// promises with, and returns its AckWait.
func checkConsumer(cons jetstream.Consumer, c *consume.Consumer) (ackWait time.Duration, err error) {
	cfg := cons.CachedInfo().Config
	if cfg.AckPolicy != jetstream.AckExplicitPolicy {
		return 0, fmt.Errorf("%w: consumer %q acknowledges with %s; Consume needs AckExplicitPolicy", ErrInvalidOptions, cfg.Durable, cfg.AckPolicy)
	}
	if attempts := c.Options().Retry.MaxAttempts; cfg.MaxDeliver > 0 && cfg.MaxDeliver < attempts {
		return 0, fmt.Errorf("%w: consumer %q delivers a message at most %d times, fewer than the %d attempts of the consume.Consumer's Retry: a failing message would stop short of the dead letters",
			ErrInvalidOptions, cfg.Durable, cfg.MaxDeliver, attempts)
	}
	if cfg.AckWait <= 0 {
		return 30 * time.Second, nil
	}
	return cfg.AckWait, nil
}

// receiver is one run of Consume: it hands what it fetches to a pool.
type receiver struct {
	c       *consume.Consumer
	js      jetstream.JetStream
	opts    ConsumeOptions
	ackWait time.Duration
	name    string
	// failing is set while fetching fails, so that an outage is logged
	// once when it begins and once when it ends.
	failing bool
}

// receive fetches until ctx ends or the connection closes for good, then
// lets the messages being handled commit and be acknowledged within the
// drain timeout.
func (r *receiver) receive(ctx context.Context, it jetstream.MessagesContext) error {
	stopped := make(chan struct{})
	go func() {
		select {
		case <-ctx.Done():
		case <-stopped:
		}
		it.Stop()
	}()
	// The handlers outlive ctx by up to DrainTimeout, so that a stop lets
	// the messages being handled commit and be acknowledged.
	pool := consume.NewPool(ctx, r.opts.Concurrency, r.opts.DrainTimeout)
	var lost error
	for {
		msg, err := it.Next()
		if err != nil {
			if lost = r.fetchFailed(ctx, err); lost != nil || errors.Is(err, jetstream.ErrMsgIteratorClosed) || ctx.Err() != nil {
				break
			}
			continue
		}
		r.fetched()
		if !r.hand(ctx, pool, msg) {
			break
		}
	}
	close(stopped)
	pool.Stop() // nothing uncommitted is acknowledged: it is delivered again
	return lost
}

// hand runs msg's handling on the pool, and reports false when the pool
// took nothing more because ctx ended.
func (r *receiver) hand(ctx context.Context, pool *consume.Pool, msg jetstream.Msg) bool {
	// In progress from the fetch on: a message waits here for a worker
	// while every worker waits, say, for the consumer's database.
	keepAlive := inProgress(msg, r.ackWait/2)
	taken := pool.Go(ctx, func(hctx context.Context) {
		defer keepAlive()
		d := &delivery{msg: msg, js: r.js, dead: r.opts.DeadLetterSubject, consumer: r.name}
		if _, err := r.c.Handle(hctx, d); err != nil && hctx.Err() == nil {
			r.opts.Logger.Warn("relayernats: consume: a message was not settled; JetStream delivers it again",
				slog.String("subject", msg.Subject()), slog.String("error", err.Error()))
		}
	})
	if !taken {
		keepAlive()
		_ = msg.Nak() // fetched but not handled: delivered again at once
	}
	return taken
}

// fetchFailed logs the first failure of an outage, and returns an error
// wrapping relayer.ErrUnavailable once the connection is closed for good.
func (r *receiver) fetchFailed(ctx context.Context, err error) error {
	if ctx.Err() != nil {
		return nil
	}
	if nc := r.js.Conn(); nc != nil && nc.IsClosed() {
		return fmt.Errorf("relayernats: consume: the connection is closed: %w: %w", relayer.ErrUnavailable, err)
	}
	if errors.Is(err, jetstream.ErrMsgIteratorClosed) {
		return nil
	}
	if !r.failing {
		r.failing = true
		r.opts.Logger.Warn("relayernats: consume: fetching fails; waiting for JetStream", slog.String("consumer", r.name),
			slog.String("error", err.Error()))
	}
	return nil
}

// fetched logs the end of an outage.
func (r *receiver) fetched() {
	if r.failing {
		r.failing = false
		r.opts.Logger.Info("relayernats: consume: fetching works again", slog.String("consumer", r.name))
	}
}

// pullExpiry is how long a pull request of Consume waits on the server.
const pullExpiry = 5 * time.Second

// inProgress reports msg in progress every interval until the returned
// function is called. It holds a timer, not a goroutine, while it waits.
func inProgress(msg jetstream.Msg, every time.Duration) (stop func()) {
	var mu sync.Mutex
	stopped := false
	var t *time.Timer
	mu.Lock() // the callback, even an early one, finds t set
	defer mu.Unlock()
	t = time.AfterFunc(every, func() {
		_ = msg.InProgress()
		mu.Lock()
		defer mu.Unlock()
		if !stopped {
			t.Reset(every)
		}
	})
	return func() {
		mu.Lock()
		defer mu.Unlock()
		stopped = true
		t.Stop()
	}
}

// delivery is a JetStream message as a consume.Delivery.
type delivery struct {
	msg      jetstream.Msg
	js       jetstream.JetStream
	dead     string
	consumer string
}

func (d *delivery) Message() (relayer.Message, error) { return ReceivedMessage(d.msg) }

func (d *delivery) Attempt() int {
	md, err := d.msg.Metadata()
	if err != nil {
		return 0
	}
	return int(md.NumDelivered)
}

func (d *delivery) Ack(context.Context) error { return d.msg.Ack() }

func (d *delivery) Retry(_ context.Context, delay time.Duration) error {
	return d.msg.NakWithDelay(delay)
}

// DeadLetter publishes the message, as it arrived, to the dead-letter
// subject with why and by whom it was given up, then terminates it. Its
// Nats-Msg-Id is "dead:" and the message's id, so that a dead letter
// published twice (the termination lost) is stored once within the
// dead-letter stream's duplicate window, even when that stream holds the
// message itself too.
func (d *delivery) DeadLetter(ctx context.Context, cause error) error {
	reason := consume.DeadReason(cause.Error())
	out := &nats.Msg{Subject: d.dead, Data: d.msg.Data(), Header: nats.Header{}}
	for name, vs := range d.msg.Headers() {
		if len(name) >= len(reservedPrefix) && strings.EqualFold(name[:len(reservedPrefix)], reservedPrefix) {
			continue // publish directives of the original publish (Nats-Msg-Id, Nats-Expected-Stream, …)
		}
		out.Header[name] = slices.Clone(vs)
	}
	if id, err := MessageID(d.msg.Headers()); err == nil {
		// Deduplicated as a dead letter, apart from the message itself,
		// which the dead-letter subject's stream may hold too.
		out.Header[jetstream.MsgIDHeader] = []string{"dead:" + id.String()}
	}
	out.Header[HeaderDeadReason] = []string{reason}
	out.Header[HeaderDeadConsumer] = []string{consume.DeadReason(d.consumer)}
	out.Header[HeaderDeadSubject] = []string{d.msg.Subject()}
	if _, err := d.js.PublishMsg(ctx, out); err != nil {
		return fmt.Errorf("relayernats: dead letter to %s: %w", d.dead, err)
	}
	// Term, not TermWithReason, which servers before 2.10.4 ignore,
	// leaving the message to be delivered again: the reason is in the
	// dead letter.
	return d.msg.Term()
}

// deadLetters publishes the held messages a consumer gives up on to the
// dead-letter subject, as a delivery's DeadLetter does: the message with
// the transport's headers, and why and by whom it was given up.
type deadLetters struct {
	js       jetstream.JetStream
	subject  string
	consumer string
}

func (dl *deadLetters) DeadLetter(ctx context.Context, m *relayer.Message, cause error) error {
	h, err := natsHeader(m, "")
	if err != nil {
		// Headers NATS cannot carry: the dead letter keeps the message's
		// identity, type and key, and says why the rest is missing.
		bare := *m
		bare.Headers = nil
		if h, err = natsHeader(&bare, ""); err != nil {
			return fmt.Errorf("relayernats: dead letter to %s: %w", dl.subject, err)
		}
	}
	h[jetstream.MsgIDHeader] = []string{"dead:" + m.ID.String()}
	h[HeaderDeadReason] = []string{consume.DeadReason(cause.Error())}
	h[HeaderDeadConsumer] = []string{consume.DeadReason(dl.consumer)}
	h[HeaderDeadSubject] = []string{m.Destination}
	if _, err := dl.js.PublishMsg(ctx, &nats.Msg{Subject: dl.subject, Data: m.Body, Header: h}); err != nil {
		return fmt.Errorf("relayernats: dead letter to %s: %w", dl.subject, err)
	}
	return nil
}

// ReceivedMessage returns the relayer.Message a [Transport] published as
// msg: its id (MessageID), type (MessageType), key (the relayer-key
// header, decoded), body, and headers, those the transport added left out;
// its Destination is msg's subject. The headers come name by name in
// sorted order, each name's values in the order sent (NATS keeps no order
// between names). The message's Transport, creation time and trace context
// are not carried. A message without a relayer-message-id header fails with
// [ErrNoMessageID].
func ReceivedMessage(msg jetstream.Msg) (relayer.Message, error) {
	h := msg.Headers()
	id, err := MessageID(h)
	if err != nil {
		return relayer.Message{}, err
	}
	m := relayer.Message{ID: id, Type: MessageType(h), Destination: msg.Subject(), Body: msg.Data()}
	if vs := h[relayer.HeaderKey]; len(vs) > 0 {
		if m.Key, err = decodeKey(vs[len(vs)-1]); err != nil {
			return relayer.Message{}, err
		}
	}
	names := make([]string, 0, len(h))
	for name := range h {
		names = append(names, name)
	}
	slices.Sort(names)
	for _, name := range names {
		vs := h[name]
		switch {
		case name == relayer.HeaderMessageID || name == relayer.HeaderMessageType || name == relayer.HeaderKey:
			vs = vs[:len(vs)-1] // the transport's own value is the last
		case len(name) >= len(reservedPrefix) && strings.EqualFold(name[:len(reservedPrefix)], reservedPrefix):
			continue // publish directives (Nats-Msg-Id, …)
		}
		for _, v := range vs {
			m.Headers = append(m.Headers, headers.Header{Name: name, Value: []byte(v)})
		}
	}
	return m, nil
}
