package dispatch

import (
	"fmt"

	"github.com/relayer-go/relayer"
)

// What every worker takes from the outbox it serves.

// checkOutbox snapshots the named transports, refusing nil ones, and the
// retry policies, refusing one out of range. A route naming an unregistered
// transport is not an error here: its rows are skipped and logged, and
// recovery sends them once the transport is registered.
func checkOutbox(outbox relayer.Outbox) (map[string]relayer.Transport, *retries, error) {
	transports := make(map[string]relayer.Transport, len(outbox.Transports))
	for name, tr := range outbox.Transports {
		if tr == nil {
			return nil, nil, fmt.Errorf("%w: Outbox.Transports[%q] is nil", ErrInvalidOptions, name)
		}
		transports[name] = tr
	}
	retries, err := newRetries(outbox)
	if err != nil {
		return nil, nil, err
	}
	return transports, retries, nil
}
