//go:build !unix

package bench

import "time"

// selfCPU returns 0: this system's CPU accounting is not read.
func selfCPU() time.Duration { return 0 }
