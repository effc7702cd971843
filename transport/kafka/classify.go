package relayerkafka

import (
	"context"
	"errors"
	"fmt"
	"net"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/relayer-go/relayer"
)

// classify translates the client's verdict on one record into the error a
// dispatcher acts on: marked relayer.ErrPermanent when no retry can succeed,
// relayer.ErrUnavailable when the destination or cluster is the problem, and
// unmarked otherwise. ctx is the send's own context.
func classify(ctx context.Context, topic string, err error) error {
	if err == nil {
		return nil
	}
	if errors.Is(err, context.Canceled) || errors.Is(err, context.DeadlineExceeded) {
		if ctx.Err() != nil {
			return err // the caller's own cancellation, as is
		}
		// The client fails a partition's buffered records together, judging
		// by the context of the oldest one, which may belong to another
		// send. This send was not canceled, so it must not look like it.
		return fmt.Errorf("relayerkafka: produce to %q: record failed with another send's canceled records: %v", topic, err)
	}
	switch {
	case permanent(err):
		return fmt.Errorf("relayerkafka: produce to %q: %w: %w", topic, relayer.ErrPermanent, err)
	case unavailable(err):
		return fmt.Errorf("relayerkafka: produce to %q: %w: %w", topic, relayer.ErrUnavailable, err)
	}
	return fmt.Errorf("relayerkafka: produce to %q: %w", topic, err)
}

// permanent reports errors that say the record itself is unacceptable. The
// client raises kerr.MessageTooLarge itself for a record larger than
// kgo.ProducerBatchMaxBytes; the broker raises it against max.message.bytes.
func permanent(err error) bool {
	return errors.Is(err, kerr.MessageTooLarge) ||
		errors.Is(err, kerr.RecordListTooLarge) ||
		errors.Is(err, kerr.InvalidRecord) ||
		errors.Is(err, kerr.InvalidTopicException)
}

// unavailable reports errors that say the destination or the cluster cannot
// take records now, whatever they hold.
//
// An unknown topic counts as unavailable rather than permanent: the message
// is fine and the topic may yet be created (by an operator, a deployment that
// runs late, or auto-creation), while a permanent mark would give up on every
// message of the route at once. Authorization failures are an operator's fix
// in the same way.
func unavailable(err error) bool {
	switch {
	case errors.Is(err, kerr.UnknownTopicOrPartition),
		errors.Is(err, kerr.UnknownTopicID),
		errors.Is(err, kerr.TopicAuthorizationFailed),
		errors.Is(err, kerr.ClusterAuthorizationFailed),
		errors.Is(err, kerr.SaslAuthenticationFailed),
		errors.Is(err, kgo.ErrClientClosed),
		errors.Is(err, kgo.ErrRecordTimeout),
		errors.Is(err, kgo.ErrRecordRetries),
		kgo.IsRetryableBrokerErr(err):
		return true
	case errors.Is(err, kerr.CorruptMessage):
		// Retriable by Kafka's table, but it reports a damaged request (a
		// CRC mismatch), not a destination that is down.
		return false
	}
	var ke *kerr.Error
	if errors.As(err, &ke) {
		return ke.Retriable // leader elections, too few replicas, timeouts
	}
	var op *net.OpError
	if errors.As(err, &op) {
		return true // dial failures, which IsRetryableBrokerErr leaves out
	}
	var eof *kgo.ErrFirstReadEOF
	return errors.As(err, &eof)
}
