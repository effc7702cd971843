//go:build !unix

package proccpu

import "time"

func self() time.Duration { return 0 }
