package relayerkafka

// Classify exposes the error classification to the external tests, for the
// errors a fake cluster cannot be made to produce.
var Classify = classify
