// Package proccpu reads the CPU time the running process has spent, for
// benchmarks that report CPU per operation rather than wall time.
package proccpu

import "time"

// Self returns the user and system CPU time this process has spent so far,
// or 0 on a system whose accounting this package does not read.
func Self() time.Duration { return self() }
