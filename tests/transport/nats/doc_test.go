// Package relayernats_test holds the NATS transport's tests against an embedded JetStream server (nats-server), and its goroutine-leak check (goleak).
// They live in the tests module so that a service that requires the
// published module does not inherit these test-only dependencies.
package relayernats_test
