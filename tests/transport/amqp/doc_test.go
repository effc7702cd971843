// Package relayeramqp_test holds the AMQP transport's tests against RabbitMQ, and its goroutine-leak check (goleak).
// They live in the tests module so that a service that requires the
// published module does not inherit these test-only dependencies.
package relayeramqp_test
