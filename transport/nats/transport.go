package relayernats

import (
	"context"
	"errors"
	"fmt"
	"net/url"
	"strconv"
	"strings"
	"time"

	"github.com/google/uuid"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/relayer-go/relayer"
)

// stallWait bounds each wait for a free slot when the JetStream context
// already has its maximum of unacknowledged asynchronous publishes in flight;
// SendBatch checks its context between waits.
const stallWait = 50 * time.Millisecond

// Transport publishes outbox messages to NATS JetStream. The destination of a
// message is the subject it is published to. Create it with [New]; it is safe
// for concurrent use.
type Transport struct {
	js             jetstream.JetStream
	opts           Options
	defaultTimeout time.Duration
	syncOpts       []jetstream.PublishOpt
	asyncOpts      []jetstream.PublishOpt
}

var _ relayer.Transport = (*Transport)(nil)

// New returns a transport publishing through js. The caller owns js and its
// connection: the transport never drains or closes them, and they must stay
// open while the transport is in use. opts is validated; see [Options].
func New(js jetstream.JetStream, opts Options) (*Transport, error) {
	if js == nil {
		return nil, fmt.Errorf("%w: the JetStream context is nil", ErrInvalidOptions)
	}
	if err := opts.Validate(); err != nil {
		return nil, err
	}
	// No client-side retries after "no responders": the dispatcher owns the
	// retry policy, and an asynchronous retry would republish a message
	// behind the ones published after it.
	return &Transport{
		js:             js,
		opts:           opts.withDefaults(),
		defaultTimeout: js.Options().DefaultTimeout,
		syncOpts:       []jetstream.PublishOpt{jetstream.WithRetryAttempts(0)},
		asyncOpts:      []jetstream.PublishOpt{jetstream.WithRetryAttempts(0), jetstream.WithStallWait(stallWait)},
	}, nil
}

// Options returns the options in effect, defaults filled in.
func (t *Transport) Options() Options { return t.opts }

// Capabilities implements [relayer.Transport]. Every valid subject is ordered
// by key (see the package documentation), takes batches of up to
// Options.MaxBatchSize and has no native scheduling. ctx bounds the stream
// lookup made when Options.Stream is set; without it Capabilities does no
// I/O. A subject that cannot be published to fails with an error wrapping
// [relayer.ErrPermanent], a subject not bound to Options.Stream with one
// wrapping [relayer.ErrUnavailable].
func (t *Transport) Capabilities(ctx context.Context, destination string) (relayer.Capabilities, error) {
	if reason := checkSubject(destination); reason != "" {
		return relayer.Capabilities{}, fmt.Errorf("relayernats: subject %q: %s: %w", destination, reason, relayer.ErrPermanent)
	}
	if t.opts.Stream != "" {
		stream, err := t.js.StreamNameBySubject(ctx, destination)
		if errors.Is(err, jetstream.ErrStreamNotFound) {
			return relayer.Capabilities{}, fmt.Errorf("relayernats: subject %q: no stream captures it, expected stream %q: %w",
				destination, t.opts.Stream, relayer.ErrUnavailable)
		}
		if err != nil {
			if mark := classify(err); mark != nil {
				return relayer.Capabilities{}, fmt.Errorf("relayernats: stream of subject %q: %w: %w", destination, mark, err)
			}
			return relayer.Capabilities{}, fmt.Errorf("relayernats: stream of subject %q: %w", destination, err)
		}
		if stream != t.opts.Stream {
			return relayer.Capabilities{}, fmt.Errorf("relayernats: subject %q: captured by stream %q, expected stream %q: %w",
				destination, stream, t.opts.Stream, relayer.ErrUnavailable)
		}
	}
	return relayer.Capabilities{
		OrderedByKey:     true,
		MaxBatchSize:     t.opts.MaxBatchSize,
		NativeScheduling: false,
	}, nil
}

// Send implements [relayer.Transport]: it publishes msg to the subject
// msg.Destination and returns once JetStream acknowledged storing it. An
// acknowledgement marked duplicate is success too: the stream already holds
// the message from an earlier send (see the package documentation on
// deduplication). ctx bounds the whole send; without a deadline, the JetStream
// context's default timeout applies. When ctx ends first, the message may or
// may not have been stored.
func (t *Transport) Send(ctx context.Context, msg *relayer.Message) error {
	m, err := t.natsMsg(msg)
	if err != nil {
		return err
	}
	if _, err := t.js.PublishMsg(ctx, m, t.syncOpts...); err != nil {
		return publishError(msg.Destination, err)
	}
	return nil
}

// SendBatch implements [relayer.Transport]. It publishes every message
// asynchronously, in slice order on the one connection, then awaits all
// acknowledgements together, so a batch costs about one round trip instead of
// one per message. Messages may have different subjects.
//
// When some messages fail, the error is a *[relayer.BatchError] whose Errs[i]
// is nil exactly when JetStream acknowledged message i. A message NATS cannot
// carry (see [HeaderError]) fails alone and is not published; the others
// are. When ctx ends, SendBatch stops publishing and waiting at once:
// acknowledgements already received count as success, every other message
// fails with ctx's error (it may still be stored; a later retry is then
// dropped as a duplicate within the stream's window). Without a deadline on
// ctx, the JetStream context's default timeout bounds the batch.
//
// A batch larger than Options.MaxBatchSize fails whole, before publishing.
//
// SendBatch keeps no order promise once a message fails: the messages after
// it are still published and may be stored, so a retry of the failed one
// lands behind them. Dispatchers use SendBatch for unordered routes only.
func (t *Transport) SendBatch(ctx context.Context, msgs []*relayer.Message) error {
	if len(msgs) == 0 {
		return nil
	}
	if len(msgs) > t.opts.MaxBatchSize {
		return fmt.Errorf("relayernats: batch of %d messages exceeds MaxBatchSize %d", len(msgs), t.opts.MaxBatchSize)
	}
	if err := ctx.Err(); err != nil {
		return fmt.Errorf("relayernats: batch not sent: %w", err)
	}
	if _, ok := ctx.Deadline(); !ok && t.defaultTimeout > 0 {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, t.defaultTimeout)
		defer cancel()
	}

	errs := make([]error, len(msgs))
	futures := make([]jetstream.PubAckFuture, len(msgs))
	for i, msg := range msgs {
		if ctx.Err() != nil {
			errs[i] = publishError(msg.Destination, fmt.Errorf("not published: %w", ctx.Err()))
			continue
		}
		m, err := t.natsMsg(msg)
		if err != nil {
			errs[i] = err
			continue
		}
		f, err := t.publishAsync(ctx, m)
		if err != nil {
			errs[i] = publishError(msg.Destination, err)
			continue
		}
		futures[i] = f
	}

	for i, f := range futures {
		if f == nil {
			continue
		}
		var err error
		if ctx.Err() == nil {
			select {
			case <-f.Ok():
			case err = <-f.Err():
			case <-ctx.Done():
				err = ackOrPending(ctx, f)
			}
		} else {
			err = ackOrPending(ctx, f)
		}
		if err != nil {
			errs[i] = publishError(msgs[i].Destination, err)
		}
	}

	for _, err := range errs {
		if err != nil {
			return &relayer.BatchError{Errs: errs}
		}
	}
	return nil
}

// ackOrPending returns the outcome f already has, or ctx's error when its
// acknowledgement has not arrived.
func ackOrPending(ctx context.Context, f jetstream.PubAckFuture) error {
	select {
	case <-f.Ok():
		return nil
	case err := <-f.Err():
		return err
	default:
		return fmt.Errorf("no acknowledgement yet: %w", ctx.Err())
	}
}

// publishAsync publishes m without waiting for its acknowledgement. While the
// JetStream context has its maximum of acknowledgements pending it waits, in
// steps of stallWait so that it notices the end of ctx; nothing is sent
// before a slot is free, so trying again never duplicates.
func (t *Transport) publishAsync(ctx context.Context, m *nats.Msg) (jetstream.PubAckFuture, error) {
	for {
		f, err := t.js.PublishMsgAsync(m, t.asyncOpts...)
		if !errors.Is(err, jetstream.ErrTooManyStalledMsgs) {
			if err != nil && classify(err) == nil {
				err = withConnState(t.js.Conn(), err)
			}
			return f, err
		}
		if ctx.Err() != nil {
			return nil, fmt.Errorf("%w (%w)", err, ctx.Err())
		}
	}
}

// withConnState adds to err, a failed asynchronous publish, the error of
// nc's state when nc is closed or draining. The first asynchronous publish
// of a JetStream context subscribes for the acknowledgements, and nats.go
// reports that subscription's failure as text only ("error creating async
// reply handler"), losing nats.ErrConnectionClosed or
// nats.ErrConnectionDraining, which classify marks relayer.ErrUnavailable.
func withConnState(nc *nats.Conn, err error) error {
	switch {
	case nc == nil:
		return err
	case nc.IsClosed():
		return fmt.Errorf("%w (%w)", err, nats.ErrConnectionClosed)
	case nc.IsDraining():
		return fmt.Errorf("%w (%w)", err, nats.ErrConnectionDraining)
	}
	return err
}

// natsMsg builds the NATS message for msg, or refuses msg with an error
// wrapping relayer.ErrPermanent.
func (t *Transport) natsMsg(msg *relayer.Message) (*nats.Msg, error) {
	if msg.ID == uuid.Nil {
		// Every nil id would share one Nats-Msg-Id, and JetStream would drop
		// all but the first as duplicates.
		return nil, fmt.Errorf("relayernats: message has the nil id: %w", relayer.ErrPermanent)
	}
	if reason := checkSubject(msg.Destination); reason != "" {
		return nil, fmt.Errorf("relayernats: subject %q: %s: %w", msg.Destination, reason, relayer.ErrPermanent)
	}
	h, err := natsHeader(msg, t.opts.Stream)
	if err != nil {
		return nil, err
	}
	return &nats.Msg{Subject: msg.Destination, Header: h, Data: msg.Body}, nil
}

// checkSubject returns why subject cannot be published to, or "": NATS
// publish subjects are dot-separated non-empty tokens without whitespace, and
// a token of only '*' or '>' is a wildcard, which matches subjects but names
// none.
func checkSubject(subject string) string {
	if subject == "" {
		return "the subject is empty"
	}
	if strings.ContainsAny(subject, " \t\r\n") {
		return "the subject contains whitespace"
	}
	for tok := range strings.SplitSeq(subject, ".") {
		switch tok {
		case "":
			return "the subject has an empty token"
		case "*", ">":
			return "the subject has a wildcard token"
		}
	}
	return ""
}

// MessagingSystem returns "nats", the OpenTelemetry semantic conventions'
// name of the broker, for instrumentation such as relayerotel.WrapTransport.
func (t *Transport) MessagingSystem() string { return "nats" }

// ServerAddress returns the host and port of the NATS server the connection
// is connected to now, for the server.address and server.port attributes of
// instrumentation; "" and 0 while it is not connected.
func (t *Transport) ServerAddress() (host string, port int) {
	nc := t.js.Conn()
	if nc == nil {
		return "", 0
	}
	return hostPort(nc.ConnectedUrl())
}

// hostPort splits the host and port out of a server URL, "" and 0 when it
// has none.
func hostPort(raw string) (string, int) {
	u, err := url.Parse(raw)
	if err != nil || u.Hostname() == "" {
		return "", 0
	}
	port, _ := strconv.Atoi(u.Port())
	return u.Hostname(), port
}
