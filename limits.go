package relayer

// Length limits of the text a message carries into indexed columns of the
// outbox. PostgreSQL's b-tree indexes refuse entries over 2,704 bytes, and an
// index entry is written at the moment a row's send fails, long after the
// message was published: these limits are checked when a message is
// published (and when a route is added), so that an over-long value is
// refused at once with an error naming the limit, never later by a
// statement that records a failure.
const (
	// KeyMaxBytes is the longest ordering key, in bytes of its UTF-8
	// encoding: 1,024. A failed ordered row's key is indexed with its lane.
	KeyMaxBytes = 1024
	// EndpointMaxBytes is the longest transport name and the longest
	// destination, each in bytes of UTF-8: 1,024. Failed rows and paused
	// destinations are indexed by the pair.
	EndpointMaxBytes = 1024
)
