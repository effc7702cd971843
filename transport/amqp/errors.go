package relayeramqp

import (
	"errors"
	"fmt"

	amqp "github.com/rabbitmq/amqp091-go"

	"github.com/relayer-go/relayer"
)

var (
	// ErrClosed is returned by sends on a transport after [Transport.Close].
	ErrClosed = errors.New("relayeramqp: transport closed")
	// ErrNacked is the cause of a send that the broker negatively
	// acknowledged. RabbitMQ nacks a message it could not enqueue — a queue
	// process that failed, a quorum queue without a quorum, a queue full under
	// the reject-publish overflow policy — so the error also wraps
	// [relayer.ErrUnavailable]: the message is fine, the destination is not.
	ErrNacked = errors.New("relayeramqp: the broker nacked the message")
	// ErrNoMessageID is returned by [MessageID] for a delivery that carries
	// no message id.
	ErrNoMessageID = errors.New("relayeramqp: delivery has no message id")
	// ErrHeaderType is returned by [Headers] for a header value of a type the
	// transport never writes, such as the table RabbitMQ puts in x-death.
	ErrHeaderType = errors.New("relayeramqp: header value is neither bytes nor a string")
	// ErrInvalidOptions is returned by [Consume] and
	// [ConsumeOptions.Validate] for options, a queue or a dead-letter
	// exchange that cannot work; the message names which.
	ErrInvalidOptions = errors.New("relayeramqp: invalid options")
)

// ReturnError reports a mandatory message that the broker returned because no
// queue was bound for its routing key on the exchange (reply 312 NO_ROUTE).
// It wraps [relayer.ErrUnavailable]: the message is fine, and a queue or
// binding declared later makes the same message routable.
type ReturnError struct {
	Exchange   string
	RoutingKey string
	// Code and Text are the broker's reply code and text.
	Code uint16
	Text string
}

// Error describes the return.
func (e *ReturnError) Error() string {
	return fmt.Sprintf("relayeramqp: the broker returned the message as unroutable (%d %s): no queue is bound for routing key %q on exchange %q",
		e.Code, e.Text, e.RoutingKey, e.Exchange)
}

// Unwrap returns [relayer.ErrUnavailable].
func (e *ReturnError) Unwrap() error { return relayer.ErrUnavailable }

// unavailable marks a failure of the channel or connection during what.
func unavailable(what string, err error) error {
	return fmt.Errorf("relayeramqp: %s: %w: %w", what, err, relayer.ErrUnavailable)
}

// lostError is the failure of messages whose confirms went with a channel that
// closed for reason. RabbitMQ closes a channel with PRECONDITION_FAILED when
// it refuses a message outright (one larger than its max_message_size): that
// is permanent when only one message was waiting, and otherwise retryable
// without a mark, since any of them may be the one refused. Every other
// reason — a missing exchange, refused access, a closed connection — leaves
// the messages sound and the destination unavailable.
func lostError(reason error, lost int) error {
	var amqpErr *amqp.Error
	if errors.As(reason, &amqpErr) && amqpErr.Code == amqp.PreconditionFailed {
		if lost == 1 {
			return fmt.Errorf("relayeramqp: the broker refused the message: %w: %w", reason, relayer.ErrPermanent)
		}
		return fmt.Errorf("relayeramqp: the broker closed the channel refusing one of %d unconfirmed messages: %w", lost, reason)
	}
	return unavailable("the channel closed before the broker confirmed", reason)
}
