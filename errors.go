package relayer

import (
	"errors"
	"strconv"
)

// Sentinel errors of the core vocabulary. They are wrapped with details; test for
// them with [errors.Is].
var (
	// ErrInvalidLanes is returned for a lane count outside [LanesMin, LanesMax].
	ErrInvalidLanes = errors.New("relayer: invalid lane count")
	// ErrInvalidOutbox is returned by [Outbox.Validate], and by the writers
	// and workers built from an outbox, for a field they cannot use; the
	// message names it.
	ErrInvalidOutbox = errors.New("relayer: invalid outbox")
	// ErrNoRoute is returned when no route is registered for a message type.
	ErrNoRoute = errors.New("relayer: no route for message type")
	// ErrInvalidRoute is returned when a route is registered with a missing or
	// malformed field.
	ErrInvalidRoute = errors.New("relayer: invalid route")
	// ErrNotInTransaction is returned when a message is published outside a
	// database transaction, or on a transaction that has already ended.
	ErrNotInTransaction = errors.New("relayer: publish outside a transaction")
	// ErrInvalidMessage is returned when a message cannot be published: nil,
	// without a route, without the key its ordered route needs, with a key over
	// [KeyMaxBytes], or with a header name that is not valid UTF-8. Nothing is
	// written.
	ErrInvalidMessage = errors.New("relayer: invalid message")

	// ErrPermanent marks a send failure that repeating cannot fix (a message the
	// broker will never accept, such as one too large, or a header it cannot
	// carry). Transports wrap such errors with it.
	ErrPermanent = errors.New("relayer: permanent send failure")
	// ErrUnavailable marks a send failure caused by the destination or broker
	// being unreachable; the message itself may be fine. Transports wrap such
	// errors with it. Failures with neither mark are retryable.
	ErrUnavailable = errors.New("relayer: destination unavailable")
)

// BatchError reports a batch send that failed for some messages only. Errs is
// index-aligned with the batch passed to [Transport.SendBatch]: Errs[i] is nil when
// message i was accepted by the broker. A transport returns a plain error instead
// when it cannot tell which messages were accepted; the dispatcher then treats the
// whole batch as failed.
type BatchError struct {
	Errs []error
}

// Error summarizes the failures.
func (e *BatchError) Error() string {
	failed := 0
	var first error
	for _, err := range e.Errs {
		if err != nil {
			if first == nil {
				first = err
			}
			failed++
		}
	}
	if first == nil {
		return "relayer: batch send reported no failures"
	}
	return "relayer: " + strconv.Itoa(failed) + " of " + strconv.Itoa(len(e.Errs)) + " messages failed: " + first.Error()
}

// Unwrap returns the individual failures, so that errors.Is and errors.As see each.
func (e *BatchError) Unwrap() []error {
	var errs []error
	for _, err := range e.Errs {
		if err != nil {
			errs = append(errs, err)
		}
	}
	return errs
}

// Failed reports whether message i of the batch failed.
func (e *BatchError) Failed(i int) bool {
	return i >= 0 && i < len(e.Errs) && e.Errs[i] != nil
}
