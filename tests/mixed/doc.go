// Package mixed runs this release beside the previous one, as a rolling
// deploy does: the previous release's relayer command and a worker program
// are built from its source (git history, commit previousRelease), this
// release's from the workspace, and both run against one PostgreSQL.
//
// Its test checks that this release refuses the previous release's schema
// until it is migrated, naming the command; and, on this release's schema,
// with workers of both releases sharing the lanes while this release's
// writers publish, keys parked and released by both releases' commands and
// workers of both killed with SIGKILL, that every committed message arrives,
// each key's first arrivals in commit order, and that the outbox empties.
// It also runs each release's writer against the other release's worker
// with a poll of a minute, so that the wake-up across processes (this
// release's NOTIFY carries a payload, the previous release's none) must
// bring every message. The worker program's listen.go differs between the
// releases (this release's listener needs pgxlisten's waiter); the test
// writes the previous release's.
package mixed
