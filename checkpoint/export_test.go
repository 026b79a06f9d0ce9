package checkpoint

// Hooks for the external tests and benchmarks.

// PoolChunks returns how many idle staging chunks m keeps.
func PoolChunks(m *Manager) int {
	m.pool.mu.Lock()
	defer m.pool.mu.Unlock()
	return len(m.pool.free)
}

// ChunkSize is the staging chunk size.
const ChunkSize = chunkSize

// DisableCRC turns checksums off, for benchmarks measuring their cost.
func DisableCRC(o *ManagerOptions) { o.noCRC = true }

// PoolAllocs returns how many staging chunks m has allocated.
func PoolAllocs(m *Manager) int {
	m.pool.mu.Lock()
	defer m.pool.mu.Unlock()
	return m.pool.allocs
}

// CRC32C is the checksum the Manager computes (crc32.Update with the
// Castagnoli table, AVX-512 folding where available).
func CRC32C(crc uint32, p []byte) uint32 { return crcUpdate(crc, p) }
