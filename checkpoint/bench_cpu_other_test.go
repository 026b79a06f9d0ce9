//go:build !unix

package checkpoint_test

import "time"

// cpuTime is not measured here: the CPU overhead metric is left out.
func cpuTime() time.Duration { return 0 }
