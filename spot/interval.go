package spot

import (
	"math"
	"time"
)

// OptimalInterval returns the checkpoint interval that minimises expected
// lost work plus checkpoint overhead, after Young (1974) and Daly (2006):
// with checkpoint cost C and mean time between interruptions M,
// T = sqrt(2CM)·(1 + sqrt(C/2M)/3 + C/18M) − C for C < 2M, and T = M
// otherwise. It returns 0 if either input is not positive.
func OptimalInterval(cost, mtbi time.Duration) time.Duration {
	if cost <= 0 || mtbi <= 0 {
		return 0
	}
	c, m := cost.Seconds(), mtbi.Seconds()
	if c >= 2*m {
		return mtbi
	}
	t := math.Sqrt(2*c*m)*(1+math.Sqrt(c/(2*m))/3+c/(18*m)) - c
	return time.Duration(t * float64(time.Second))
}

// EstimateSave predicts how long saving bytes takes at throughput
// (bytes/second) plus a fixed per-save latency (first byte, commit). It
// returns -1 when throughput is unknown (not positive).
func EstimateSave(bytes int64, throughput float64, latency time.Duration) time.Duration {
	if throughput <= 0 {
		return -1
	}
	return latency + time.Duration(float64(bytes)/throughput*float64(time.Second))
}

// Fits reports whether saving bytes at throughput, plus latency, ends
// before remaining runs out. Unknown throughput fits only if remaining is
// positive (an optimistic first try is better than none).
func Fits(bytes int64, throughput float64, latency, remaining time.Duration) bool {
	est := EstimateSave(bytes, throughput, latency)
	if est < 0 {
		return remaining > 0
	}
	return est <= remaining
}
