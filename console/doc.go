// Package console is an operator's web console for one outbox: what is
// waiting, for which destination, since when and why; who holds which lane;
// the parked keys and dead letters, with the actions that redrive them;
// and, on a consumer's database, the keys its consumers hold (package
// consume/heldkeys), with retry and skip.
//
// [New] returns an [http.Handler] that a service can mount (under any path
// prefix, with [http.StripPrefix]); the "relayer console" command serves the
// same handler. Pages are rendered on the server from embedded templates,
// with a little script that refreshes them; nothing is fetched from
// elsewhere.
//
// Actions (retry or skip a parked key, requeue or purge dead letters, retry
// or skip a held key) go through the store's redrive operations and
// package heldkeys: each is one idempotent statement,
// reports how many rows it touched, and is logged with who asked and when.
// They are POST requests carrying a CSRF token, refused from other origins;
// [Options.ReadOnly] hides and refuses them all. With [Options.Token] set,
// every request must carry the token. Message bodies, which may hold
// personal data, are shown only with [Options.ShowBodies].
//
// What a page shows of a failure is the console's own words: a read or an
// action the database refused says that it failed, and the database's
// error, which may name tables and values, goes to [Options.Logger] only.
// A filter that is not text PostgreSQL can hold (a NUL byte, invalid
// UTF-8) gets 400. Under assets/ the console serves its stylesheet and
// script, and 404 to anything else, directories included.
//
// # Host names
//
// The console answers only to requests whose Host header names it:
// localhost and the loopback addresses, and the names in
// [Options.AllowedHosts]. Any other request gets 421 Misdirected Request
// before anything is read or served. This is what defeats DNS rebinding: a
// page of another site, whose name its owner makes resolve to 127.0.0.1,
// could otherwise read a console that needs no token, CSRF token included,
// and post its actions; the browser sends that site's name as Host.
//
// # Load
//
// The console shares the application's database and bounds what it takes
// there. At most [Options.MaxConcurrent] requests (4 by default) use the
// database at once, each in one transaction on one connection, so that
// the console holds no more of the pool's connections than that however
// many pages are open; the *sql.DB itself is the caller's to size ("relayer
// console" opens a pool of exactly --max-conns). The database work of a
// request ends [Options.QueryTimeout] (5 s) after it arrives, its wait for
// a slot included: PostgreSQL cancels a statement still running then
// (statement_timeout, set for the request's transaction alone), and the
// page answers 503 saying that the database did not answer in time. A
// filter field over [FilterMaxBytes] (1 KiB) or a request body over
// [BodyMaxBytes] (64 KiB) gets 400 before the database is asked anything.
package console
