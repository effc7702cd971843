// Package relayerotel_test holds the OpenTelemetry wrapper's tests, which read spans and metrics back through the OpenTelemetry SDK.
// They live in the tests module so that a service that requires the
// published module does not inherit these test-only dependencies.
package relayerotel_test
