package relayerkafka_test

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"syscall"
	"testing"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/relayer-go/relayer"
	relayerkafka "github.com/relayer-go/relayer/transport/kafka"
)

func TestClassify(t *testing.T) {
	t.Parallel()
	dialRefused := &net.OpError{Op: "dial", Net: "tcp", Err: os.NewSyscallError("connect", syscall.ECONNREFUSED)}
	reset := &net.OpError{Op: "read", Net: "tcp", Err: os.NewSyscallError("read", syscall.ECONNRESET)}
	tests := []struct {
		err  error
		want error // relayer.ErrPermanent, relayer.ErrUnavailable, or nil for unmarked
	}{
		{fmt.Errorf("%w (uncompressed_bytes=2000000)", kerr.MessageTooLarge), relayer.ErrPermanent},
		{kerr.RecordListTooLarge, relayer.ErrPermanent},
		{kerr.InvalidRecord, relayer.ErrPermanent},
		{kerr.InvalidTopicException, relayer.ErrPermanent},

		{kerr.UnknownTopicOrPartition, relayer.ErrUnavailable},
		{kerr.UnknownTopicID, relayer.ErrUnavailable},
		{kerr.TopicAuthorizationFailed, relayer.ErrUnavailable},
		{kerr.ClusterAuthorizationFailed, relayer.ErrUnavailable},
		{kerr.NotLeaderForPartition, relayer.ErrUnavailable},
		{kerr.LeaderNotAvailable, relayer.ErrUnavailable},
		{kerr.NotEnoughReplicas, relayer.ErrUnavailable},
		{kerr.RequestTimedOut, relayer.ErrUnavailable},
		{kerr.NetworkException, relayer.ErrUnavailable},
		{kgo.ErrClientClosed, relayer.ErrUnavailable},
		{kgo.ErrRecordTimeout, relayer.ErrUnavailable},
		{kgo.ErrRecordRetries, relayer.ErrUnavailable},
		{dialRefused, relayer.ErrUnavailable},
		{reset, relayer.ErrUnavailable},
		{io.EOF, relayer.ErrUnavailable},

		{kerr.CorruptMessage, nil},
		{kerr.InvalidRequiredAcks, nil},
		{kerr.UnknownServerError, nil},
		{errors.New("something else"), nil},
	}
	ctx := context.Background()
	for _, tt := range tests {
		got := relayerkafka.Classify(ctx, "orders", tt.err)
		if !errors.Is(got, tt.err) {
			t.Errorf("%v: classified as %v, which lost the client's error", tt.err, got)
		}
		permanent, unavailable := errors.Is(got, relayer.ErrPermanent), errors.Is(got, relayer.ErrUnavailable)
		switch tt.want {
		case relayer.ErrPermanent:
			if !permanent || unavailable {
				t.Errorf("%v: %v, want only ErrPermanent", tt.err, got)
			}
		case relayer.ErrUnavailable:
			if permanent || !unavailable {
				t.Errorf("%v: %v, want only ErrUnavailable", tt.err, got)
			}
		default:
			if permanent || unavailable {
				t.Errorf("%v: %v, want unmarked", tt.err, got)
			}
		}
	}
	if err := relayerkafka.Classify(ctx, "orders", nil); err != nil {
		t.Errorf("nil: %v", err)
	}
}

func TestClassifyContextErrors(t *testing.T) {
	t.Parallel()
	canceled, cancel := context.WithCancel(context.Background())
	cancel()
	for _, err := range []error{context.Canceled, context.DeadlineExceeded} {
		// The send's own context ended: its error, as is.
		if got := relayerkafka.Classify(canceled, "orders", err); got != err {
			t.Errorf("own %v: %v, want it as is", err, got)
		}
		// The client failed the record with another send's canceled batch:
		// retryable, and not mistaken for this send's cancellation.
		got := relayerkafka.Classify(context.Background(), "orders", err)
		if got == nil || errors.Is(got, err) || errors.Is(got, relayer.ErrPermanent) || errors.Is(got, relayer.ErrUnavailable) {
			t.Errorf("another send's %v: %v, want an unmarked error that is not a context error", err, got)
		}
	}
}
