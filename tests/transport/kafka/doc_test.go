// Package relayerkafka_test holds the Kafka transport's tests against an in-process fake cluster (kfake), and its goroutine-leak check (goleak).
// They live in the tests module so that a service that requires the
// published module does not inherit these test-only dependencies.
package relayerkafka_test
