package dispatch

// InFlight bounds the messages a Runner can have handed to transports
// without having recorded them yet: the rows of its takes and batches in
// flight. A message goes out twice only when its worker sent it and could
// not commit that, so these are also the bounds on what one fault can send
// again (the consumer's inbox removes such duplicates). Each bound follows
// from the options: every take and batch reads at most its BatchSize rows
// (an ordered batch, BatchSize rows of each of up to 16 lanes) and sends
// nothing it did not read.
type InFlight struct {
	// PerSession is the most one database session carries: one direct
	// take (Direct.BatchSize rows), one recovery take (Recovery.BatchSize)
	// or one ordered batch (16 × Ordered.BatchSize), whichever is largest.
	// A killed session, a lost connection or a send that outlived its
	// batch sends at most this again.
	PerSession int
	// Total is what all the Runner's sessions carry at once:
	// Direct.Workers direct takes, Recovery.Workers recovery takes and
	// Ordered.Concurrency ordered batches per ordered worker. A crash of
	// its process (kill -9, a freeze past its leases, a server restart)
	// sends at most this again. Each lane a keeper holds (a send that
	// outlived its batch, see the package documentation) adds that send's
	// rows, at most Ordered.BatchSize.
	Total int
}

// InFlight returns the bounds of a Runner with these options, defaults
// applied; a worker the options disable counts for nothing, and ordered
// dispatch counts as one worker unless OrderedWorkers says more.
func (o RunnerOptions) InFlight() InFlight {
	direct := withDefaults(o.Direct)
	recovery := withDefaults(o.Recovery)
	ordered := o.Ordered.withDefaults()
	var l InFlight
	add := func(perSession, sessions int) {
		l.PerSession = max(l.PerSession, perSession)
		l.Total += perSession * sessions
	}
	if !o.DisableDirect {
		add(direct.BatchSize, direct.Workers)
	}
	if !o.DisableRecovery {
		add(recovery.BatchSize, recovery.Workers)
	}
	if !o.DisableOrdered {
		add(lanesPerBatch*ordered.BatchSize, max(1, o.OrderedWorkers)*ordered.Concurrency)
	}
	return l
}
