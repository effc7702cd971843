package relayeramqp

import (
	"context"
	"errors"
	"fmt"
	"net"
	"sync"

	amqp "github.com/rabbitmq/amqp091-go"

	"github.com/relayer-go/relayer"
)

// Limits and defaults of [Options].
const (
	// MaxBatchSizeDefault is the batch size reported when Options.MaxBatchSize is zero.
	MaxBatchSizeDefault = 500
	// MaxBatchSizeMax is the largest Options.MaxBatchSize. Each channel buffers
	// as many returned messages as one batch can produce, so the bound also
	// bounds that memory.
	MaxBatchSizeMax = 10_000
	// ChannelsDefault is the number of channels used when Options.Channels is zero.
	ChannelsDefault = 4
	// ChannelsMax is the largest Options.Channels.
	ChannelsMax = 64
)

// shortstrMax is the longest AMQP short string: exchange names, routing keys,
// header names and most message properties are short strings.
const shortstrMax = 255

// Options configures a [Transport]. The zero value of every field means its
// default.
type Options struct {
	// Exchange is the exchange every message is published to; a message's
	// Destination is its routing key on this exchange. To publish to several
	// exchanges, make one Transport per exchange (they may share the
	// connection) and register each under its own name. At most 255 bytes.
	// Default: "", the default exchange, which routes a message to the queue
	// named by its routing key.
	Exchange string
	// MaxBatchSize is the largest number of messages SendBatch accepts, reported
	// by Capabilities. 1 to [MaxBatchSizeMax]. Default: [MaxBatchSizeDefault].
	MaxBatchSize int
	// Channels is the most AMQP channels the transport opens on the connection.
	// Each send uses one channel exclusively from its first publish to its
	// last confirm, so Channels bounds the sends in progress; further sends
	// wait for a channel (or for their context to end). A channel is opened
	// only when that many sends run at once: sends one after another reuse the
	// same channel. 1 to [ChannelsMax]. Default: [ChannelsDefault].
	Channels int
	// AllowUnroutable publishes without the mandatory flag: a message that no
	// queue is bound for is then confirmed and dropped by the broker (or goes to
	// the exchange's alternate exchange), and the send succeeds. Default: false,
	// messages are mandatory and an unroutable one fails its send with a
	// [*ReturnError], which wraps [relayer.ErrUnavailable].
	AllowUnroutable bool
	// Transient publishes with delivery mode 1, which a broker may keep in
	// memory only. Default: false, messages are persistent (delivery mode 2), so
	// that a durable queue keeps them across a broker restart.
	Transient bool
}

// Validate reports the first field outside its allowed range.
func (o Options) Validate() error {
	switch {
	case len(o.Exchange) > shortstrMax:
		return fmt.Errorf("relayeramqp: Exchange is %d bytes long, at most %d allowed", len(o.Exchange), shortstrMax)
	case o.MaxBatchSize < 0 || o.MaxBatchSize > MaxBatchSizeMax:
		return fmt.Errorf("relayeramqp: MaxBatchSize %d out of range: 1 to %d, or 0 for %d", o.MaxBatchSize, MaxBatchSizeMax, MaxBatchSizeDefault)
	case o.Channels < 0 || o.Channels > ChannelsMax:
		return fmt.Errorf("relayeramqp: Channels %d out of range: 1 to %d, or 0 for %d", o.Channels, ChannelsMax, ChannelsDefault)
	}
	return nil
}

// Transport publishes outbox messages to RabbitMQ with publisher confirms. It
// implements [relayer.Transport] and is safe for concurrent use. Make one with
// [New].
type Transport struct {
	conn         *amqp.Connection
	exchange     string
	maxBatch     int
	mandatory    bool
	deliveryMode uint8

	// busy holds a token per publisher in use, so its capacity is the
	// channel limit. A publisher serves one send at a time: confirms and
	// returns seen on its channel belong to that send only.
	busy chan struct{}
	mu   sync.Mutex
	// idle is a stack, so that sends one after another reuse the channel
	// opened first and the others are opened only under concurrency.
	idle []*publisher

	closeOnce sync.Once
	closing   chan struct{} // closed when Close starts
	closeErr  error
	// discards counts channels being closed in the background after a send
	// abandoned them.
	discards sync.WaitGroup
}

// New returns a transport that publishes on conn. The connection stays the
// caller's: the transport opens its own channels on it, puts them in confirm
// mode, and never closes the connection. New opens the first channel at once,
// so that an unusable connection or a broker without publisher confirms is
// reported here; it fails with an error wrapping [relayer.ErrUnavailable] then.
func New(conn *amqp.Connection, opts Options) (*Transport, error) {
	if conn == nil {
		return nil, errors.New("relayeramqp: connection is nil")
	}
	if err := opts.Validate(); err != nil {
		return nil, err
	}
	if opts.MaxBatchSize == 0 {
		opts.MaxBatchSize = MaxBatchSizeDefault
	}
	if opts.Channels == 0 {
		opts.Channels = ChannelsDefault
	}
	t := &Transport{
		conn:         conn,
		exchange:     opts.Exchange,
		maxBatch:     opts.MaxBatchSize,
		mandatory:    !opts.AllowUnroutable,
		deliveryMode: amqp.Persistent,
		busy:         make(chan struct{}, opts.Channels),
		idle:         make([]*publisher, opts.Channels),
		closing:      make(chan struct{}),
	}
	if opts.Transient {
		t.deliveryMode = amqp.Transient
	}
	for i := range t.idle {
		t.idle[i] = &publisher{}
	}
	if err := t.idle[len(t.idle)-1].open(conn, t.maxBatch); err != nil {
		return nil, err
	}
	return t, nil
}

// Capabilities implements [relayer.Transport]. It does no I/O and reports the
// same for every destination: key order (see the package documentation for
// what that promises and where it ends), the configured MaxBatchSize, and no
// native scheduling.
func (t *Transport) Capabilities(ctx context.Context, destination string) (relayer.Capabilities, error) {
	return relayer.Capabilities{
		OrderedByKey:     true,
		MaxBatchSize:     t.maxBatch,
		NativeScheduling: false,
	}, nil
}

// Send implements [relayer.Transport]: it publishes msg with its Destination as
// the routing key and returns nil once the broker has confirmed it. ctx bounds
// waiting for a free channel, the publish and the wait for the confirm; see
// the package documentation for the errors.
func (t *Transport) Send(ctx context.Context, msg *relayer.Message) error {
	errs, err := t.deliver(ctx, []*relayer.Message{msg})
	if err != nil {
		return err
	}
	return errs[0]
}

// SendBatch implements [relayer.Transport]. It publishes msgs in slice order on
// one channel, each with its own Destination as the routing key, and then
// waits for all their confirms together. When some messages fail it returns a
// [*relayer.BatchError] whose Errs line up with msgs; a failure that reaches
// every message before any is published (a cancelled ctx, no channel) is
// returned as a plain error. ctx bounds the whole call, as for Send. More than
// MaxBatchSize messages are refused without publishing any.
func (t *Transport) SendBatch(ctx context.Context, msgs []*relayer.Message) error {
	if len(msgs) == 0 {
		return nil
	}
	if len(msgs) > t.maxBatch {
		return fmt.Errorf("relayeramqp: batch of %d messages exceeds MaxBatchSize %d", len(msgs), t.maxBatch)
	}
	errs, err := t.deliver(ctx, msgs)
	if err != nil {
		return err
	}
	for _, err := range errs {
		if err != nil {
			return &relayer.BatchError{Errs: errs}
		}
	}
	return nil
}

// Close closes the channels the transport opened; the connection stays open.
// It waits for sends in progress, which their contexts bound. Sends after
// Close fail with [ErrClosed]. Close is idempotent and returns the same
// result every time.
func (t *Transport) Close() error {
	t.closeOnce.Do(func() {
		close(t.closing)
		var errs []error
		for range cap(t.busy) {
			t.busy <- struct{}{} // wait for the sends in progress
		}
		t.mu.Lock()
		defer t.mu.Unlock()
		for _, p := range t.idle {
			if p.ch != nil && !p.ch.IsClosed() && !t.conn.IsClosed() {
				if err := p.ch.Close(); err != nil && !errors.Is(err, amqp.ErrClosed) {
					errs = append(errs, err)
				}
			}
			p.reset()
		}
		t.discards.Wait()
		if err := errors.Join(errs...); err != nil {
			t.closeErr = fmt.Errorf("relayeramqp: closing channels: %w", err)
		}
	})
	return t.closeErr
}

// acquire takes an idle publisher, waiting until one is free, ctx ends or the
// transport closes.
func (t *Transport) acquire(ctx context.Context) (*publisher, error) {
	select {
	case <-t.closing:
		return nil, ErrClosed
	default:
	}
	select {
	case t.busy <- struct{}{}:
		select {
		case <-t.closing:
			<-t.busy
			return nil, ErrClosed
		default:
		}
		t.mu.Lock()
		defer t.mu.Unlock()
		p := t.idle[len(t.idle)-1]
		t.idle = t.idle[:len(t.idle)-1]
		return p, nil
	case <-t.closing:
		return nil, ErrClosed
	case <-ctx.Done():
		return nil, fmt.Errorf("relayeramqp: waiting for a free channel: %w", ctx.Err())
	}
}

func (t *Transport) release(p *publisher) {
	t.mu.Lock()
	t.idle = append(t.idle, p)
	t.mu.Unlock()
	<-t.busy
}

// deliver publishes msgs on one channel and waits for their confirms. errs is
// index-aligned with msgs, nil where the broker confirmed the message. err
// reports a failure that reached every message before any was published; errs
// is nil then.
func (t *Transport) deliver(ctx context.Context, msgs []*relayer.Message) (errs []error, err error) {
	if err := ctx.Err(); err != nil {
		return nil, fmt.Errorf("relayeramqp: not sent: %w", err)
	}
	errs = make([]error, len(msgs))
	pubs := make([]amqp.Publishing, len(msgs))
	valid := 0
	for i, m := range msgs {
		if pubs[i], errs[i] = t.publishing(m); errs[i] == nil {
			valid++
		}
	}
	if valid == 0 {
		return errs, nil
	}

	p, err := t.acquire(ctx)
	if err != nil {
		return nil, err
	}
	defer t.release(p)
	if err := t.ready(p); err != nil {
		return nil, err
	}
	p.drainReturns() // none are expected; see publisher.returns

	confirms, published, stopped := t.publishAll(ctx, p, msgs, pubs, errs)
	if published == 0 {
		if stopped != nil && valid == len(msgs) {
			return nil, stopped
		}
		return errs, nil
	}
	t.settle(ctx, p, msgs, confirms, errs)
	return errs, nil
}

// publishAll publishes the messages whose errs entry is nil, in order, until
// ctx ends or the channel fails; the messages not published then get the
// reason, which it also returns. It returns the confirms (nil where nothing
// was published) and how many were published.
func (t *Transport) publishAll(ctx context.Context, p *publisher, msgs []*relayer.Message, pubs []amqp.Publishing, errs []error) ([]*amqp.DeferredConfirmation, int, error) {
	confirms := make([]*amqp.DeferredConfirmation, len(msgs))
	published := 0
	var stopped error // why publishing stopped early
	for i, m := range msgs {
		if errs[i] != nil {
			continue
		}
		if stopped == nil {
			if err := ctx.Err(); err != nil {
				stopped = fmt.Errorf("relayeramqp: not sent: %w", err)
			}
		}
		if stopped == nil {
			dc, err := p.ch.PublishWithDeferredConfirm(t.exchange, m.Destination, t.mandatory, false, pubs[i])
			switch {
			case err != nil:
				stopped = unavailable("publishing", p.closeReason(err))
			case dc == nil: // the channel left confirm mode, which cannot happen
				stopped = unavailable("publishing", errors.New("channel is not in confirm mode"))
				p.closed = true // replace it
			default:
				confirms[i] = dc
				published++
				continue
			}
		}
		errs[i] = stopped
	}
	return confirms, published, stopped
}

// settle waits for the confirms of the published messages and records each
// message's outcome in errs: confirmed (or returned unroutable), nacked, lost
// with a closed channel, or abandoned when ctx ended first. A channel whose
// confirms may still arrive is discarded.
func (t *Transport) settle(ctx context.Context, p *publisher, msgs []*relayer.Message, confirms []*amqp.DeferredConfirmation, errs []error) {
	abandoned := awaitConfirms(ctx, p, confirms)
	returned := p.takeReturns(msgs, confirms)
	closed := p.closedError()
	var lost []int // messages whose confirm went with the channel
	for i, dc := range confirms {
		if dc == nil {
			continue
		}
		switch {
		case isDone(dc) && dc.Acked():
			if returned != nil {
				errs[i] = returned[i]
			}
		case closed != nil:
			// A channel that closes resolves its pending confirms as nacks (or,
			// under the client's automatic recovery, leaves them pending); its
			// state tells a lost confirm from a real nack.
			lost = append(lost, i)
		case isDone(dc):
			errs[i] = fmt.Errorf("%w: %w", ErrNacked, relayer.ErrUnavailable)
		default:
			errs[i] = fmt.Errorf("relayeramqp: abandoned before the broker confirmed: %w", abandoned)
		}
	}
	if len(lost) > 0 {
		err := lostError(closed, len(lost))
		for _, i := range lost {
			errs[i] = err
		}
	}
	if abandoned != nil || closed != nil {
		// Confirms and returns of an abandoned send may still arrive; a fresh
		// channel keeps them away from the next send.
		t.discard(p)
	}
}

// awaitConfirms waits for every non-nil confirm, until the channel closes, or until
// ctx ends; it returns ctx's error in the last case.
func awaitConfirms(ctx context.Context, p *publisher, confirms []*amqp.DeferredConfirmation) error {
	if p.closed {
		// A failed publish saw the close; the reason is no longer waiting.
		return nil
	}
	for _, dc := range confirms {
		if dc == nil {
			continue
		}
		select {
		case <-dc.Done():
		case reason := <-p.closes:
			p.noteClosed(reason)
			return nil
		case <-ctx.Done():
			return ctx.Err()
		}
	}
	return nil
}

func isDone(dc *amqp.DeferredConfirmation) bool {
	select {
	case <-dc.Done():
		return true
	default:
		return false
	}
}

// discard closes p's channel in the background and leaves p empty, so that
// its next send opens a fresh channel. Close waits for background closes.
func (t *Transport) discard(p *publisher) {
	ch := p.ch
	p.reset()
	if ch == nil {
		return
	}
	t.discards.Add(1)
	go func() {
		defer t.discards.Done()
		// With the client's automatic recovery enabled, a channel the broker
		// closed may be reopening; Close stops that, since this transport
		// replaces it.
		_ = ch.Close()
	}()
}

// MessagingSystem returns "rabbitmq", the OpenTelemetry semantic
// conventions' name of the broker, for instrumentation such as
// relayerotel.WrapTransport.
func (t *Transport) MessagingSystem() string { return "rabbitmq" }

// ServerAddress returns the host and port of the broker the connection is
// open to, for the server.address and server.port attributes of
// instrumentation; "" and 0 when it cannot tell.
func (t *Transport) ServerAddress() (host string, port int) {
	addr, ok := t.conn.RemoteAddr().(*net.TCPAddr)
	if !ok || addr == nil {
		return "", 0
	}
	return addr.IP.String(), addr.Port
}
