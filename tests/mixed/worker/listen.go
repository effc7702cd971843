package main

import (
	"github.com/relayer-go/relayer/dispatch"
	"github.com/relayer-go/relayer/dispatch/pgxlisten"
)

// listen turns on the Runner's wake-up listener, on pgx's connections.
// The test writes the previous release's version of this file, whose
// listener needs no waiter (see package mixed).
func listen(o *dispatch.RunnerOptions) {
	o.Listen = true
	o.Notifications = pgxlisten.Waiter{}
}

// listening reports whether the Runner's listener is subscribed.
func listening(r *dispatch.Runner) bool { return r.Stats().Listening }
