package relayernats

import (
	"context"
	"errors"
	"fmt"
	"strconv"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/relayer-go/relayer"
)

// Sentinel errors of the package. Errors returned by it wrap them with detail;
// test with [errors.Is].
var (
	// ErrInvalidOptions is returned by [New] and [Options.Validate] for an
	// option out of range.
	ErrInvalidOptions = errors.New("relayernats: invalid options")
	// ErrNoMessageID is returned by [MessageID] for headers without a
	// relayer-message-id value.
	ErrNoMessageID = errors.New("relayernats: no message id header")
)

// HeaderError reports a header that NATS cannot carry with its exact bytes.
// Nothing of the message is published. It matches [relayer.ErrPermanent]:
// the stored message never changes, so no retry can succeed.
type HeaderError struct {
	// Name is the header name as stored.
	Name string
	// Index is the header's position in [relayer.Message.Headers], or -1 for
	// the relayer-message-type header the transport builds from
	// [relayer.Message.Type].
	Index int
	// Reason says which rule the header breaks.
	Reason string
}

func (e *HeaderError) Error() string {
	where := "message type header"
	if e.Index >= 0 {
		where = "header " + strconv.Itoa(e.Index)
	}
	return fmt.Sprintf("relayernats: %s %q cannot be carried by NATS: %s", where, e.Name, e.Reason)
}

// Unwrap returns [relayer.ErrPermanent].
func (e *HeaderError) Unwrap() error { return relayer.ErrPermanent }

// publishError describes a failed publish to subject, marked with
// relayer.ErrPermanent or relayer.ErrUnavailable where the cause is known to
// be one or the other.
func publishError(subject string, err error) error {
	if mark := classify(err); mark != nil {
		return fmt.Errorf("relayernats: publish to %q: %w: %w", subject, mark, err)
	}
	return fmt.Errorf("relayernats: publish to %q: %w", subject, err)
}

// classify returns the relayer mark for err, or nil for a failure that may
// succeed when simply repeated.
func classify(err error) error {
	var apiErr *jetstream.APIError
	switch {
	// The message as stored can never pass: larger than the server's
	// max_payload or the stream's max_msg_size, a subject the client refuses,
	// a header block the client cannot encode.
	case errors.Is(err, nats.ErrMaxPayload),
		errors.Is(err, nats.ErrBadSubject),
		errors.Is(err, nats.ErrBadHeaderMsg),
		errors.Is(err, errMessageTooLarge):
		return relayer.ErrPermanent

	// Nobody stored it or nobody answered: no stream captures the subject
	// (no responders), the stream or its leader did not answer in time, or
	// the connection is not there.
	case errors.Is(err, jetstream.ErrNoStreamResponse),
		errors.Is(err, nats.ErrNoResponders),
		errors.Is(err, nats.ErrTimeout),
		errors.Is(err, jetstream.ErrAsyncPublishTimeout),
		errors.Is(err, context.DeadlineExceeded),
		errors.Is(err, jetstream.ErrTooManyStalledMsgs),
		errors.Is(err, nats.ErrConnectionClosed),
		errors.Is(err, nats.ErrConnectionDraining),
		errors.Is(err, nats.ErrDisconnected),
		errors.Is(err, nats.ErrReconnectBufExceeded),
		errors.Is(err, nats.ErrStaleConnection),
		errors.Is(err, nats.ErrInvalidConnection),
		errors.Is(err, jetstream.ErrJetStreamPublisherClosed),
		errors.Is(err, jetstream.ErrJetStreamNotEnabled),
		errors.Is(err, jetstream.ErrJetStreamNotEnabledForAccount),
		errors.Is(err, errStreamNotMatch):
		return relayer.ErrUnavailable
	case errors.As(err, &apiErr) && apiErr.Code == 503:
		// JetStream's "temporarily unavailable" family: no cluster quorum,
		// insufficient resources, a full stream that discards new messages.
		return relayer.ErrUnavailable
	}
	return nil
}

// errStreamNotMatch matches the server's refusal of a message whose subject
// belongs to another stream than Options.Stream; the message is fine, the
// destination is not where it was expected.
var errStreamNotMatch = &jetstream.APIError{ErrorCode: 10060}

// errMessageTooLarge matches the server's refusal of a message larger than
// the stream's max_msg_size (error code 10054, which nats.go names
// jetstream.ErrStreamMessageExceedsMaximum from v1.54 on; matched by code so
// that older clients work too).
var errMessageTooLarge = &jetstream.APIError{ErrorCode: 10054}
