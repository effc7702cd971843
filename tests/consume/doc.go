// Package consume holds the tests of package consume's adapters as whole
// processes: consumers killed between a commit and its acknowledgement, on
// every broker, commit each message's effects exactly once.
package consume
