// Package apicompat holds this release's exported API to the previous
// release's. [Check] extracts the previous release (commit
// previousRelease, from git history), type-checks the published packages
// of both trees, those of each library module of the workspace (the core,
// enlist/*, otel, transport/*), and compares each package with
// golang.org/x/exp/apidiff. The command tests/cmd/apicompat runs it, and
// the package's test runs that command, so that the test command's -race
// does not slow the type-checking.
//
// An incompatible change to a stable package, one that README's "API
// stability" section lists, fails the test unless a bullet under "##
// Unreleased", "### Changed" or "### Removed" of CHANGELOG.md announces
// it: the bullet names the package (relayernats, nats or transport/nats)
// and, in a code span, the changed name (the member's name for a method or
// a field; a group of names may be written `…Default` or `Load…`). A removed
// stable package is announced the same way, by its name in a code span.
// Incompatible changes to the other exported packages are logged, not
// failed. A checkout without the previous release's commit (a shallow
// clone) fails rather than skipping.
package apicompat
