package relayer

import "fmt"

// Lane count limits. Every writer and worker of one outbox must use the same count,
// since it decides which lane, and therefore which worker, carries a key.
const (
	LanesMin     = 1
	LanesMax     = 65536
	LanesDefault = 32
)

// Lane returns the lane of an ordering key for the given lane count: the 32-bit
// FNV-1a hash of the key's UTF-8 bytes modulo lanes. It returns an error wrapping
// [ErrInvalidLanes] when lanes is outside [LanesMin, LanesMax].
func Lane(key string, lanes int) (int, error) {
	if lanes < LanesMin || lanes > LanesMax {
		return 0, fmt.Errorf("%w: got %d, want %d to %d", ErrInvalidLanes, lanes, LanesMin, LanesMax)
	}
	return int(fnv1a32(key) % uint32(lanes)), nil
}

// fnv1a32 hashes s without converting it to a byte slice, which hash/fnv would
// require and which costs an allocation per call.
func fnv1a32(s string) uint32 {
	const (
		offset32 = 2166136261
		prime32  = 16777619
	)
	h := uint32(offset32)
	for i := 0; i < len(s); i++ {
		h ^= uint32(s[i])
		h *= prime32
	}
	return h
}
