package relayer

import (
	"context"
	"fmt"
)

// Outbox describes one outbox: where its tables live, where each message type
// goes and how message values become bodies. Writers and dispatchers of one
// outbox are built from the same Outbox; they snapshot it at construction.
type Outbox struct {
	// Schema and TablePrefix name the outbox tables; see the store package for
	// the rules. Defaults: "public" and "".
	Schema      string
	TablePrefix string
	// Routes maps message types to transports and destinations. Required.
	Routes *Routes
	// Transports are the named transports routes refer to. Writers do not need
	// them; dispatchers look transports up here by name.
	Transports map[string]Transport
	// Serializer encodes message values. Default: [JSON].
	Serializer Serializer
	// Lanes is the number of ordered lanes, [LanesMin] to [LanesMax]. Every writer
	// and worker of the outbox must use the same count. Default: [LanesDefault].
	Lanes int
	// Retry is how dispatchers retry failed sends and when they give up on a
	// message, for every route whose own Retry leaves a field zero. Default:
	// 10 attempts, waiting 1s after the first failure, doubling up to 5m.
	Retry Retry
	// TraceContext returns the W3C trace context (traceparent and tracestate) to
	// store with each message enlisted under ctx. Default: none is stored.
	TraceContext func(ctx context.Context) (traceParent, traceState string)
}

// Validate reports the first field of the outbox that its writers and
// workers cannot use, wrapping [ErrInvalidOutbox]: a lane count out of
// range (also [ErrInvalidLanes]), a nil transport, or a retry policy out of
// range (also [ErrInvalidRetry]). Writers and workers call it at
// construction. Schema and TablePrefix are checked by the store
// (store.Tables.Validate); Routes by writers, which need at least one.
func (o Outbox) Validate() error {
	if _, err := o.LaneCount(); err != nil {
		return fmt.Errorf("%w: %w", ErrInvalidOutbox, err)
	}
	for name, tr := range o.Transports {
		if tr == nil {
			return fmt.Errorf("%w: Outbox.Transports[%q] is nil", ErrInvalidOutbox, name)
		}
	}
	if err := o.Retry.Validate(); err != nil {
		return fmt.Errorf("%w: Outbox.Retry: %w", ErrInvalidOutbox, err)
	}
	return nil
}

// WithDefaults returns the outbox with each zero field that has a default
// set to it: Serializer [JSON], Lanes [LanesDefault], and Retry's defaults
// (see [Retry.WithDefaults]). Schema's default is the store's.
func (o Outbox) WithDefaults() Outbox {
	if o.Serializer == nil {
		o.Serializer = JSON{}
	}
	if o.Lanes == 0 {
		o.Lanes = LanesDefault
	}
	o.Retry = o.Retry.WithDefaults()
	return o
}

// LaneCount returns the outbox's lane count: Lanes, or [LanesDefault] when it
// is zero. It returns an error wrapping [ErrInvalidLanes] when the count is
// outside [LanesMin, LanesMax]. Writers and workers take the count from here,
// so that they cannot disagree on it.
func (o Outbox) LaneCount() (int, error) {
	lanes := o.Lanes
	if lanes == 0 {
		lanes = LanesDefault
	}
	if lanes < LanesMin || lanes > LanesMax {
		return 0, fmt.Errorf("%w: Outbox.Lanes is %d, want %d to %d", ErrInvalidLanes, o.Lanes, LanesMin, LanesMax)
	}
	return lanes, nil
}
