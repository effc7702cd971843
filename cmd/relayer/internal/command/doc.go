// Package command is the vocabulary every relayer command shares, whether
// it is built into the deployable relay or into the development command
// with its demo and benchmark: exit statuses and the errors that choose
// them, one-line messages safe for a terminal, flag sets whose -h prints an
// example, the flags and connection of an outbox, the HTTP server settings
// of the console and the relay's endpoints, the build's version, and the
// JSON the commands print.
package command
