package relayerkafka

import (
	"errors"
	"fmt"
)

// Limits and default of [Options.MaxBatchSize].
const (
	MaxBatchSizeDefault = 1000
	MaxBatchSizeMin     = 1
	MaxBatchSizeMax     = 100_000
)

// ErrInvalidOptions is returned by [Options.Validate] and [New] for options out
// of range. The message names the field.
var ErrInvalidOptions = errors.New("relayerkafka: invalid options")

// Options configure a [Transport]. The zero value of each field means its
// default.
type Options struct {
	// MaxBatchSize is the largest number of messages [Transport.SendBatch]
	// accepts, reported to dispatchers as relayer.Capabilities.MaxBatchSize.
	// A batch is produced in one go and awaited as a whole, so it also bounds
	// how many records one call adds to the client's buffer (which blocks
	// beyond kgo.MaxBufferedRecords, 50,000 by default). 1 to 100,000.
	// Default: 1000.
	MaxBatchSize int
}

// Validate reports the first field out of range, wrapped with
// [ErrInvalidOptions].
func (o Options) Validate() error {
	if o.MaxBatchSize != 0 && (o.MaxBatchSize < MaxBatchSizeMin || o.MaxBatchSize > MaxBatchSizeMax) {
		return fmt.Errorf("%w: MaxBatchSize must be %d to %d, got %d", ErrInvalidOptions, MaxBatchSizeMin, MaxBatchSizeMax, o.MaxBatchSize)
	}
	return nil
}

func (o Options) withDefaults() Options {
	if o.MaxBatchSize == 0 {
		o.MaxBatchSize = MaxBatchSizeDefault
	}
	return o
}
