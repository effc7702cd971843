package relayeramqp

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"log/slog"
	"strconv"
	"sync"
	"time"

	amqp "github.com/rabbitmq/amqp091-go"

	"github.com/relayer-go/relayer"
	"github.com/relayer-go/relayer/consume"
)

// Headers the consumer adds: to a message it hands back for another
// delivery (HeaderAttempts, HeaderDestination) and to a dead letter
// (package consume's HeaderDeadReason and HeaderDeadConsumer, and
// HeaderDeadQueue). [ReceivedMessage] leaves the first two out of the
// message's headers.
const (
	// HeaderAttempts counts the failed deliveries of a message handed back
	// through a retry queue: its next delivery is attempt HeaderAttempts+1.
	HeaderAttempts = "relayer-attempts"
	// HeaderDestination keeps the routing key a retried message was first
	// published with, which its way back through a retry queue replaces.
	HeaderDestination = "relayer-destination"
	// HeaderDeadReason holds why a dead letter left delivery.
	HeaderDeadReason = consume.HeaderDeadReason
	// HeaderDeadConsumer holds the name of the consumer that gave up on it.
	HeaderDeadConsumer = consume.HeaderDeadConsumer
	// HeaderDeadQueue holds the queue it was consumed from.
	HeaderDeadQueue = "relayer-dead-queue"
)

// Limits and defaults of [ConsumeOptions].
const (
	// ConcurrencyMax is the largest ConsumeOptions.Concurrency.
	ConcurrencyMax = 1000
	// retryQueueSuffixMax is the most bytes a retry queue's name adds to
	// its queue's: ".retry-" and up to 11 digits of milliseconds and "ms".
	retryQueueSuffixMax = len(".retry-") + 11 + len("ms")
)

// ConsumeOptions configure [Consume]. A dead-letter destination is
// required; zero fields take their defaults.
type ConsumeOptions struct {
	// DeadLetterExchange and DeadLetterRoutingKey are where a message that
	// leaves delivery for good is published, with its properties, headers
	// and body, and the headers HeaderDeadReason, HeaderDeadConsumer and
	// HeaderDeadQueue; it is then acknowledged in its queue. The publish is
	// mandatory and confirmed: while no queue takes the dead letter, the
	// message stays in its queue. Set the exchange, the routing key or
	// both; with the exchange alone, the routing key is the message's own;
	// with the routing key alone, the default exchange delivers to the
	// queue it names.
	DeadLetterExchange   string
	DeadLetterRoutingKey string
	// Concurrency is how many messages are handled at once, 1 to
	// ConcurrencyMax. With 1, the default, messages are handled one at a
	// time in the order the queue delivers them, and the consume.Consumer
	// holds the key of a failing message (consume.HoldKeysAuto), so that
	// the key's later messages take effect after it; a failing message
	// without a key comes back at the end of the queue, behind the messages
	// published meanwhile. With more, messages of one queue may be handled
	// out of order.
	Concurrency int
	// Prefetch is how many unacknowledged messages the broker hands the
	// consumer ahead of its handlers (the channel's QoS prefetch count), 1
	// to 65,535. Default: twice Concurrency.
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
	switch {
	case o.DeadLetterExchange == "" && o.DeadLetterRoutingKey == "":
		return fmt.Errorf("%w: ConsumeOptions.DeadLetterExchange or DeadLetterRoutingKey is required: a message given up on is kept where operators find it", ErrInvalidOptions)
	case len(o.DeadLetterExchange) > shortstrMax:
		return fmt.Errorf("%w: ConsumeOptions.DeadLetterExchange is %d bytes, AMQP allows %d", ErrInvalidOptions, len(o.DeadLetterExchange), shortstrMax)
	case len(o.DeadLetterRoutingKey) > shortstrMax:
		return fmt.Errorf("%w: ConsumeOptions.DeadLetterRoutingKey is %d bytes, AMQP allows %d", ErrInvalidOptions, len(o.DeadLetterRoutingKey), shortstrMax)
	}
	return consume.CheckLimits(ErrInvalidOptions,
		consume.Limit{Name: "ConsumeOptions.Concurrency", Value: int64(o.Concurrency), Min: 1, Max: ConcurrencyMax, Zero: "1"},
		consume.Limit{Name: "ConsumeOptions.Prefetch", Value: int64(o.Prefetch), Min: 1, Max: 65535, Zero: "twice Concurrency"},
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
		o.Prefetch = min(2*o.Concurrency, 65535)
	}
	if o.DrainTimeout == 0 {
		o.DrainTimeout = 10 * time.Second
	}
	if o.Logger == nil {
		o.Logger = slog.Default()
	}
	return o, nil
}

// Consume hands the messages of queue to c, one [consume.Delivery] each,
// until ctx ends; then it stops consuming, waits up to DrainTimeout for the
// messages being handled, and returns nil. It returns an error at once for
// options that cannot work, a missing queue or dead-letter exchange, or a
// consumer whose database is not ready, and an error wrapping
// relayer.ErrUnavailable when conn or its channel closes; conn stays the
// caller's. The package documentation's sections "Consuming", "Settling a
// message", "Retry queues" and "Order when consuming" say the rest.
func Consume(ctx context.Context, c *consume.Consumer, conn *amqp.Connection, queue string, opts ConsumeOptions) error {
	if conn == nil || c == nil {
		return fmt.Errorf("%w: Consume needs a consume.Consumer and a connection", ErrInvalidOptions)
	}
	opts, err := opts.withDefaults()
	if err != nil {
		return err
	}
	if err := checkQueue(conn, queue, opts.DeadLetterExchange); err != nil {
		return err
	}
	pub := &settler{conn: conn}
	defer pub.close()
	s := &session{queue: queue, opts: opts, consumer: c, retry: c.Options().Retry, pub: pub}
	// One at a time, a queue hands its messages over in order: keys are
	// then held by default (consume.HoldKeysAuto).
	stopHeld, err := c.Start(ctx, consume.HeldKeysOptions{Ordered: opts.Concurrency == 1, DeadLetters: &deadLetters{s: s}})
	if err != nil {
		if ctx.Err() != nil {
			return nil
		}
		return fmt.Errorf("relayeramqp: consume: %w", err)
	}
	defer stopHeld()
	ch, deliveries, closed, err := openConsumer(conn, queue, c.Options().Name, opts.Prefetch)
	if err != nil {
		return err
	}
	defer ch.Close() // hands back to the queue what was delivered but not acknowledged
	return s.receive(ctx, deliveries, closed)
}

// checkQueue refuses a queue name Consume cannot use, and a queue or
// dead-letter exchange that does not exist.
func checkQueue(conn *amqp.Connection, queue, deadExchange string) error {
	switch {
	case queue == "":
		return fmt.Errorf("%w: Consume needs a queue's name", ErrInvalidOptions)
	case len(queue) > shortstrMax-retryQueueSuffixMax:
		return fmt.Errorf("%w: queue name is %d bytes; its retry queues' names need it at most %d", ErrInvalidOptions, len(queue), shortstrMax-retryQueueSuffixMax)
	}
	return checkTopology(conn, queue, deadExchange)
}

// openConsumer opens the channel that consumes queue with manual
// acknowledgements and the prefetch QoS.
func openConsumer(conn *amqp.Connection, queue, name string, prefetch int) (*amqp.Channel, <-chan amqp.Delivery, <-chan *amqp.Error, error) {
	ch, err := conn.Channel()
	if err != nil {
		return nil, nil, nil, unavailable("consume: opening a channel", err)
	}
	closed := ch.NotifyClose(make(chan *amqp.Error, 1))
	if err := ch.Qos(prefetch, 0, false); err != nil {
		ch.Close()
		return nil, nil, nil, unavailable("consume: setting the prefetch", err)
	}
	deliveries, err := ch.Consume(queue, consumerTag(name), false, false, false, false, nil)
	if err != nil {
		ch.Close()
		return nil, nil, nil, unavailable("consume: consuming "+queue, err)
	}
	return ch, deliveries, closed, nil
}

// receive hands the deliveries to a pool until ctx ends or the channel
// closes, then lets the messages being handled commit and be settled
// within the drain timeout. A message delivered but not handled stays
// unacknowledged until the channel closes, after the drain, which hands it
// back to the queue in its place: cancelling the consumer first would let
// a single active consumer's successor overtake it.
func (s *session) receive(ctx context.Context, deliveries <-chan amqp.Delivery, closed <-chan *amqp.Error) error {
	// The handlers outlive ctx by up to DrainTimeout, so that a stop lets
	// the messages being handled commit and be acknowledged.
	pool := consume.NewPool(ctx, s.opts.Concurrency, s.opts.DrainTimeout)
	defer pool.Stop() // nothing uncommitted is acknowledged: it is delivered again
	for {
		select {
		case <-ctx.Done():
			return nil
		case d, ok := <-deliveries:
			if !ok {
				return closeReason(closed, "consume: the channel of "+s.queue+" closed")
			}
			taken := pool.Go(ctx, func(hctx context.Context) {
				if _, err := s.consumer.Handle(hctx, s.delivery(d)); err != nil && hctx.Err() == nil {
					s.opts.Logger.Warn("relayeramqp: consume: a message was not settled; the broker delivers it again",
						slog.String("queue", s.queue), slog.String("error", err.Error()))
				}
			})
			if !taken {
				return nil
			}
		}
	}
}

// checkTopology fails when queue or the dead-letter exchange does not
// exist, on a channel of its own, which the broker closes when either is
// missing.
func checkTopology(conn *amqp.Connection, queue, deadExchange string) error {
	ch, err := conn.Channel()
	if err != nil {
		return unavailable("consume: opening a channel", err)
	}
	defer ch.Close()
	if _, err := ch.QueueDeclarePassive(queue, false, false, false, false, nil); err != nil {
		return fmt.Errorf("%w: queue %q: %w", ErrInvalidOptions, queue, err)
	}
	if deadExchange != "" {
		if err := ch.ExchangeDeclarePassive(deadExchange, "", false, false, false, false, nil); err != nil {
			return fmt.Errorf("%w: DeadLetterExchange %q: %w", ErrInvalidOptions, deadExchange, err)
		}
	}
	return nil
}

// closeReason returns why a channel closed, once its deliveries ended.
func closeReason(closed <-chan *amqp.Error, what string) error {
	select {
	case reason, ok := <-closed:
		if ok && reason != nil {
			return unavailable(what, reason)
		}
	case <-time.After(time.Second):
	}
	return unavailable(what, amqp.ErrClosed)
}

// consumerTag names a consumer in the broker's management views: the
// consume.Consumer's name and a random part.
func consumerTag(name string) string {
	var b [6]byte
	_, _ = rand.Read(b[:])
	const room = shortstrMax - len("relayer..") - 12
	if len(name) > room {
		name = name[:room]
	}
	return "relayer." + name + "." + hex.EncodeToString(b[:])
}

// session is what the deliveries of one Consume share.
type session struct {
	queue    string
	opts     ConsumeOptions
	consumer *consume.Consumer
	retry    relayer.Retry
	pub      *settler
}

func (s *session) delivery(d amqp.Delivery) *delivery { return &delivery{d: d, s: s} }

// delivery is an AMQP delivery as a consume.Delivery.
type delivery struct {
	d amqp.Delivery
	s *session
}

func (d *delivery) Message() (relayer.Message, error) { return ReceivedMessage(d.d) }

// Attempt is 1 plus the failures HeaderAttempts counts.
func (d *delivery) Attempt() int { return attemptsOf(d.d.Headers) + 1 }

func (d *delivery) Ack(context.Context) error { return d.d.Ack(false) }

// Retry publishes the message to the retry queue of its attempt's backoff,
// to come back to its queue after delay, then acknowledges it.
func (d *delivery) Retry(ctx context.Context, delay time.Duration) error {
	attempt := d.Attempt()
	level := d.s.retry.Delay(attempt)
	retryQueue := d.s.queue + ".retry-" + strconv.FormatInt(level.Milliseconds(), 10) + "ms"
	pub := republished(d.d)
	pub.Headers[HeaderAttempts] = int64(attempt)
	if _, ok := pub.Headers[HeaderDestination]; !ok {
		pub.Headers[HeaderDestination] = d.d.RoutingKey
	}
	pub.Expiration = strconv.FormatInt(max(delay.Milliseconds(), 1), 10)
	declare := func(ch *amqp.Channel) error {
		// Declared at each retry, which also renews its x-expires lease.
		_, err := ch.QueueDeclare(retryQueue, true, false, false, false, amqp.Table{
			"x-dead-letter-exchange":    "",
			"x-dead-letter-routing-key": d.s.queue,
			"x-expires":                 (level + time.Hour).Milliseconds(),
		})
		return err
	}
	if err := d.s.pub.publish(ctx, "", retryQueue, pub, declare); err != nil {
		return fmt.Errorf("relayeramqp: retry through %s: %w", retryQueue, d.backToQueue(err))
	}
	return d.d.Ack(false)
}

// DeadLetter publishes the message, as it arrived, to the dead-letter
// destination with why and by whom it was given up, then acknowledges it.
func (d *delivery) DeadLetter(ctx context.Context, cause error) error {
	pub := republished(d.d)
	pub.Headers[HeaderDeadReason] = consume.DeadReason(cause.Error())
	pub.Headers[HeaderDeadConsumer] = consume.DeadReason(d.s.consumer.Options().Name)
	pub.Headers[HeaderDeadQueue] = d.s.queue
	exchange, key := d.s.opts.DeadLetterExchange, d.s.opts.DeadLetterRoutingKey
	if key == "" {
		key = d.d.RoutingKey
		if s, ok := d.d.Headers[HeaderDestination].(string); ok {
			key = s
		}
	}
	if err := d.s.pub.publish(ctx, exchange, key, pub, nil); err != nil {
		return fmt.Errorf("relayeramqp: dead letter to exchange %q, routing key %q: %w", exchange, key, d.backToQueue(err))
	}
	return d.d.Ack(false)
}

// deadLetters publishes the held messages a consumer gives up on where a
// delivery's DeadLetter publishes: the message with the transport's
// properties and headers, and why and by whom it was given up.
type deadLetters struct{ s *session }

func (dl *deadLetters) DeadLetter(ctx context.Context, m *relayer.Message, cause error) error {
	table, contentType, err := headerTable(m.Headers, m.Key)
	if err != nil {
		// Headers AMQP cannot carry: the dead letter keeps the message's
		// identity, type and key.
		table, contentType, _ = headerTable(nil, m.Key)
	}
	if table == nil {
		table = amqp.Table{}
	}
	table[HeaderDeadReason] = consume.DeadReason(cause.Error())
	table[HeaderDeadConsumer] = consume.DeadReason(dl.s.consumer.Options().Name)
	table[HeaderDeadQueue] = dl.s.queue
	pub := amqp.Publishing{Headers: table, ContentType: contentType, DeliveryMode: amqp.Persistent,
		MessageId: m.ID.String(), Type: m.Type, Body: m.Body}
	exchange, key := dl.s.opts.DeadLetterExchange, dl.s.opts.DeadLetterRoutingKey
	if key == "" {
		key = m.Destination
	}
	if err := dl.s.pub.publish(ctx, exchange, key, pub, nil); err != nil {
		return fmt.Errorf("relayeramqp: dead letter to exchange %q, routing key %q: %w", exchange, key, err)
	}
	return nil
}

// backToQueue hands the message back to its queue after a retry or dead
// letter could not be published, so that it is not held until the channel
// closes; it returns err.
func (d *delivery) backToQueue(err error) error {
	if nackErr := d.d.Nack(false, true); nackErr != nil {
		return errors.Join(err, nackErr)
	}
	return err
}

// republished copies what a delivery carries into a publishing: its
// properties, headers and body. The user id is left out: the broker checks
// it against the publishing connection's user.
func republished(d amqp.Delivery) amqp.Publishing {
	h := make(amqp.Table, len(d.Headers)+3)
	for k, v := range d.Headers {
		h[k] = v
	}
	mode := d.DeliveryMode
	if mode == 0 {
		mode = amqp.Persistent
	}
	return amqp.Publishing{
		Headers: h, ContentType: d.ContentType, ContentEncoding: d.ContentEncoding, DeliveryMode: mode,
		Priority: d.Priority, CorrelationId: d.CorrelationId, ReplyTo: d.ReplyTo, MessageId: d.MessageId,
		Timestamp: d.Timestamp, Type: d.Type, AppId: d.AppId, Body: d.Body,
	}
}

// attemptsOf reads HeaderAttempts, 0 when absent or not a count.
func attemptsOf(t amqp.Table) int {
	switch v := t[HeaderAttempts].(type) {
	case int64:
		return int(max(v, 0))
	case int32:
		return int(max(v, 0))
	case int16:
		return int(max(v, 0))
	case int8:
		return int(max(v, 0))
	case int:
		return max(v, 0)
	}
	return 0
}

// settler publishes retries and dead letters on a channel of its own, one
// at a time, mandatory and confirmed; it reopens the channel the broker
// closed after a failure.
type settler struct {
	conn    *amqp.Connection
	mu      sync.Mutex
	ch      *amqp.Channel
	returns chan amqp.Return
}

// publish declares what declare declares, when not nil, then publishes pub
// and waits for the broker's confirm. A message no queue took fails with a
// *ReturnError.
func (p *settler) publish(ctx context.Context, exchange, key string, pub amqp.Publishing, declare func(*amqp.Channel) error) error {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.ch == nil || p.ch.IsClosed() {
		ch, err := p.conn.Channel()
		if err != nil {
			return unavailable("opening a channel", err)
		}
		if err := ch.Confirm(false); err != nil {
			_ = ch.Close()
			return unavailable("putting a channel in confirm mode", err)
		}
		p.ch, p.returns = ch, ch.NotifyReturn(make(chan amqp.Return, 1))
	}
	if declare != nil {
		if err := declare(p.ch); err != nil {
			return err
		}
	}
	dc, err := p.ch.PublishWithDeferredConfirmWithContext(ctx, exchange, key, true, false, pub)
	if err != nil {
		return unavailable("publishing", err)
	}
	acked, err := dc.WaitContext(ctx)
	if err != nil {
		// The confirm may still come; this channel is not used again, so
		// that a later return is not taken for another publish's.
		_ = p.ch.Close()
		return err
	}
	// The broker sends a mandatory message's return before its confirm,
	// and the client hands it over before the confirm: it is here if any.
	select {
	case r := <-p.returns:
		return &ReturnError{Exchange: r.Exchange, RoutingKey: r.RoutingKey, Code: r.ReplyCode, Text: r.ReplyText}
	default:
	}
	if !acked {
		return fmt.Errorf("%w: %w", ErrNacked, relayer.ErrUnavailable)
	}
	return nil
}

func (p *settler) close() {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.ch != nil {
		_ = p.ch.Close()
	}
}
