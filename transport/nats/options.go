package relayernats

import (
	"fmt"
	"strings"
)

// Limits and defaults of [Options].
const (
	// MaxBatchSizeDefault is the batch size reported when Options.MaxBatchSize
	// is zero.
	MaxBatchSizeDefault = 256
	// MaxBatchSizeMin and MaxBatchSizeMax bound Options.MaxBatchSize.
	MaxBatchSizeMin = 1
	MaxBatchSizeMax = 10000
)

// Options configure a [Transport]. The zero value of every field means its
// default.
type Options struct {
	// MaxBatchSize is the largest number of messages one SendBatch call
	// publishes, reported to dispatchers through Capabilities. All of a batch's
	// acknowledgements are awaited together, so larger batches save round
	// trips but hold more unacknowledged publishes in flight; above the
	// JetStream context's PublishAsyncMaxPending (4,000 unless configured),
	// publishing waits for earlier acknowledgements. MaxBatchSizeMin to
	// MaxBatchSizeMax. Default: MaxBatchSizeDefault (256).
	MaxBatchSize int

	// Stream, when set, names the stream every destination must belong to.
	// Each publish then carries the Nats-Expected-Stream header, so the
	// server refuses a message whose subject is captured by another stream (or
	// by none) instead of storing it elsewhere, and Capabilities checks that
	// the destination subject is bound to this stream, which costs one
	// JetStream API request per destination and needs permission to list
	// streams. Default: "" (no check; any stream capturing the subject
	// stores the message).
	Stream string
}

// Validate reports the first invalid field, naming it and its allowed range.
// The error wraps [ErrInvalidOptions].
func (o Options) Validate() error {
	if o.MaxBatchSize != 0 && (o.MaxBatchSize < MaxBatchSizeMin || o.MaxBatchSize > MaxBatchSizeMax) {
		return fmt.Errorf("%w: MaxBatchSize %d: must be %d to %d (0 means %d)",
			ErrInvalidOptions, o.MaxBatchSize, MaxBatchSizeMin, MaxBatchSizeMax, MaxBatchSizeDefault)
	}
	// The server's own rule for stream names: no whitespace, no subject
	// wildcards or separators, no path separators.
	if o.Stream != "" && strings.ContainsAny(o.Stream, " \t\r\n\f.*>/\\") {
		return fmt.Errorf("%w: Stream %q: must not contain whitespace, '.', '*', '>', '/' or '\\'",
			ErrInvalidOptions, o.Stream)
	}
	return nil
}

// withDefaults returns o with every zero field replaced by its default; o must
// be valid.
func (o Options) withDefaults() Options {
	if o.MaxBatchSize == 0 {
		o.MaxBatchSize = MaxBatchSizeDefault
	}
	return o
}
