// Package health reports whether an outbox is keeping up, for readiness
// probes, load balancers and operators.
//
// A transactional outbox fails quietly: business transactions keep
// committing while messages pile up behind a broker outage, a crashed
// dispatcher or a poison message. The two figures that reveal it are the
// backlog (rows deliverable now) and the age of its oldest row. [Check] reads
// both with one statement ([store.Store.Stats]) and compares them with the
// thresholds of [Options]; [Handler] serves the verdict over HTTP.
//
// # Age
//
// The age of a row is measured from the moment it became deliverable: its
// creation, or its delivery time if it was scheduled. A message scheduled for
// tomorrow does not make the outbox look a day behind when it falls due.
//
// # Failures
//
// A check whose query fails is unhealthy, with the error text as its reason,
// and its report leaves the backlog and age null rather than zero: a database
// that cannot be reached must never look like an empty outbox.
//
// # Serving
//
//	mux.Handle("/healthz/outbox", health.Handler(st, health.Options{
//		MaxBacklog:   10_000,
//		MaxOldestAge: time.Minute,
//	}))
//
// The handler answers GET and HEAD with 200 or 503 and a JSON [Report]. Each
// request runs one query, bounded by Options.Timeout; the query reads the
// whole outbox table, so probe at intervals of seconds, not continuously.
package health
