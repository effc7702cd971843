// Package headers encodes and decodes the message headers that the relayer
// keeps next to each outbox message, in a PostgreSQL bytea column.
//
// Headers are stored as one opaque blob rather than as rows or JSON because
// the relayer never queries them: it only writes them inside the producer's
// transaction and hands them back, byte for byte, to the broker. A compact
// length-prefixed layout keeps that round trip exact (JSON could not carry
// arbitrary value bytes) and cheap to parse on the hot publishing path.
//
// # Wire format
//
// Every integer is an unsigned 32-bit little-endian number. The layout is:
//
//	offset  size      field
//	0       4         version, always 1 (see [Version])
//	4       4         count, the number of entries that follow
//	8       4         nameLen of entry 0
//	12      nameLen   name of entry 0, valid UTF-8
//	...     4         valueLen of entry 0
//	...     valueLen  value of entry 0, any bytes
//	...               entries 1 .. count-1, laid out the same way
//
// The version word comes first so that a future layout can be introduced
// without a table rewrite: old rows keep decoding under version 1 while a new
// decoder branches on the number it finds.
//
// An empty header set still encodes as the 8-byte prefix
// 01 00 00 00 00 00 00 00. A zero-length column value is therefore never
// produced by this package, and [Decode] treats it as [ErrTruncated]: an empty
// bytea almost always means the row was written by something other than this
// codec, and silently reading it as "no headers" would hide that bug.
//
// # Guarantees
//
// Encoding is lossless and canonical. Names and values keep their exact
// bytes; no case folding, trimming or normalisation takes place. Duplicate
// names are allowed and their relative order is preserved, because brokers
// such as Kafka give meaning to repeated headers. Values may be empty or
// hold bytes that are not UTF-8. Names must be valid UTF-8, since most
// brokers and tracing libraries treat them as text; [Append] refuses an
// invalid name instead of writing something a consumer could not read.
//
// Each byte string has exactly one valid encoding and [Decode] accepts only
// that encoding (no trailing bytes, no slack in the count), so re-encoding
// whatever Decode accepted reproduces the original bytes exactly.
//
// # Aliasing and allocation
//
// [Decode] does not copy values: each Value is a subslice of the input. This
// keeps decoding of large payload-like headers free, but it means a caller
// that reuses or modifies the input buffer must first copy any value it wants
// to keep. Names, by contrast, are strings and therefore immutable copies;
// all names of one call share a single allocation. With a destination slice
// of sufficient capacity, Decode allocates at most once, and not at all when
// there are no headers or every name is empty. [Append] into a slice with
// enough spare capacity does not allocate.
//
// # Errors
//
// Decoding failures wrap one of the sentinel errors [ErrUnsupportedVersion],
// [ErrTruncated], [ErrCountTooLarge], [ErrTrailingBytes] or [ErrInvalidName],
// adding the entry index and byte offset where the problem was found. Test
// for them with [errors.Is]. Encoding fails with [ErrInvalidName] or
// [ErrLengthOverflow]. No input, however malformed, makes the package panic.
//
// The count field is checked against the input size before anything is
// allocated: every entry occupies at least 8 bytes, so a count larger than
// (len(data)-8)/8 is rejected with [ErrCountTooLarge]. A corrupt or hostile
// row therefore cannot make the decoder reserve memory out of proportion to
// the row itself.
package headers
