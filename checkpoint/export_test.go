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
