//go:build !unix

package checkpoint

// processAlive cannot tell on this platform, so a claim counts as live
// until it expires.
func processAlive(pid int) bool { return true }
