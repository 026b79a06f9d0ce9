package checkpoint

import (
	"context"
	"fmt"
	"io"
	"os"
	"sync"
)

// chunkSize is the unit of staging memory. Chunks are kept by the Manager
// between saves, so a training loop saving the same state size again and
// again allocates staging memory only once.
const chunkSize = 4 << 20

// chunkPool is the Manager's free list of staging chunks. Unlike a
// sync.Pool it survives garbage collections: the point is that the second
// and later saves allocate nothing.
type chunkPool struct {
	mu     sync.Mutex
	free   [][]byte
	retain int64 // bytes of idle chunks to keep; < 0 keeps all
	allocs int   // chunks allocated so far
}

func (p *chunkPool) get() []byte {
	p.mu.Lock()
	if n := len(p.free); n > 0 {
		c := p.free[n-1]
		p.free[n-1] = nil
		p.free = p.free[:n-1]
		p.mu.Unlock()
		return c
	}
	p.allocs++
	p.mu.Unlock()
	return make([]byte, chunkSize)
}

func (p *chunkPool) put(chunks [][]byte) {
	p.mu.Lock()
	defer p.mu.Unlock()
	for _, c := range chunks {
		if p.retain >= 0 && int64(len(p.free)+1)*chunkSize > p.retain {
			return
		}
		p.free = append(p.free, c)
	}
}

// drain empties the pool for good (Close): chunks put back later are
// dropped.
func (p *chunkPool) drain() {
	p.mu.Lock()
	p.free = nil
	p.retain = 0
	p.mu.Unlock()
}

// source is a captured part's content.
type source interface {
	io.ReaderAt
	Size() int64
	release()
}

// buffer is staging memory: a list of pooled chunks.
type buffer struct {
	pool   *chunkPool
	chunks [][]byte
	size   int64
}

func (b *buffer) Write(p []byte) (int, error) {
	n := len(p)
	for len(p) > 0 {
		i, off := int(b.size/chunkSize), int(b.size%chunkSize)
		if i == len(b.chunks) {
			b.chunks = append(b.chunks, b.pool.get())
		}
		k := copy(b.chunks[i][off:], p)
		p = p[k:]
		b.size += int64(k)
	}
	return n, nil
}

// fill copies p into an empty buffer, with up to workers goroutines for
// large p: the caller is blocked during the capture anyway, and on most
// machines one core cannot use the whole memory bandwidth.
func (b *buffer) fill(p []byte, workers int) {
	n := (len(p) + chunkSize - 1) / chunkSize
	workers = min(workers, n/2) // at least two chunks per goroutine
	if workers < 2 {
		b.Write(p)
		return
	}
	for range n {
		b.chunks = append(b.chunks, b.pool.get())
	}
	var wg sync.WaitGroup
	per := (n + workers - 1) / workers
	for first := 0; first < n; first += per {
		wg.Go(func() {
			for i := first; i < min(first+per, n); i++ {
				copy(b.chunks[i], p[i*chunkSize:])
			}
		})
	}
	wg.Wait()
	b.size = int64(len(p))
}

func (b *buffer) Size() int64 { return b.size }

func (b *buffer) ReadAt(p []byte, off int64) (int, error) {
	if off < 0 {
		return 0, fmt.Errorf("checkpoint: negative offset %d", off)
	}
	n := 0
	for len(p) > 0 && off < b.size {
		c := b.chunks[off/chunkSize][off%chunkSize:]
		if rest := b.size - off; int64(len(c)) > rest {
			c = c[:rest]
		}
		k := copy(p, c)
		p = p[k:]
		n += k
		off += int64(k)
	}
	if len(p) > 0 {
		return n, io.EOF
	}
	return n, nil
}

// slices calls fn with the staged bytes from off on, one chunk at a time.
func (b *buffer) slices(off int64, fn func([]byte) error) error {
	for off < b.size {
		c := b.chunks[off/chunkSize][off%chunkSize:]
		if rest := b.size - off; int64(len(c)) > rest {
			c = c[:rest]
		}
		if err := fn(c); err != nil {
			return err
		}
		off += int64(len(c))
	}
	return nil
}

func (b *buffer) release() {
	b.pool.put(b.chunks)
	b.chunks = nil
}

// stagedFile is a File part copied into the staging directory.
type stagedFile struct {
	f    *os.File
	size int64
}

func (s *stagedFile) ReadAt(p []byte, off int64) (int, error) { return s.f.ReadAt(p, off) }
func (s *stagedFile) Size() int64                             { return s.size }
func (s *stagedFile) release() {
	name := s.f.Name()
	s.f.Close()
	os.Remove(name)
}

func stageFile(ctx context.Context, dir, path string) (*stagedFile, error) {
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	src, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer src.Close()
	dst, err := os.CreateTemp(dir, "part-*")
	if err != nil {
		return nil, fmt.Errorf("create staging file: %w", err)
	}
	// *os.File to *os.File: copy_file_range on Linux, a reflink on file
	// systems that share extents.
	n, err := io.Copy(dst, src)
	if err != nil {
		dst.Close()
		os.Remove(dst.Name())
		return nil, fmt.Errorf("stage %s: %w", path, err)
	}
	return &stagedFile{f: dst, size: n}, nil
}

// partReader is what a Store's Put reads: a part's staged bytes. Besides
// Read it offers ReadAt and Seek, for stores that upload ranges in
// parallel, and WriteTo, which hands staged memory to the writer without a
// copy. It counts progress.
type partReader struct {
	src   source
	size  int64
	off   int64
	count func(int64)
}

var (
	_ io.ReadSeeker = (*partReader)(nil)
	_ io.ReaderAt   = (*partReader)(nil)
	_ io.WriterTo   = (*partReader)(nil)
)

func (r *partReader) Read(p []byte) (int, error) {
	if r.off >= r.size {
		return 0, io.EOF
	}
	if rest := r.size - r.off; int64(len(p)) > rest {
		p = p[:rest]
	}
	n, err := r.src.ReadAt(p, r.off)
	r.off += int64(n)
	r.count(int64(n))
	if err == io.EOF && r.off < r.size {
		err = io.ErrUnexpectedEOF
	} else if err == io.EOF {
		err = nil
	}
	return n, err
}

func (r *partReader) ReadAt(p []byte, off int64) (int, error) {
	n, err := r.src.ReadAt(p, off)
	r.count(int64(n))
	return n, err
}

func (r *partReader) Seek(offset int64, whence int) (int64, error) {
	switch whence {
	case io.SeekStart:
	case io.SeekCurrent:
		offset += r.off
	case io.SeekEnd:
		offset += r.size
	default:
		return 0, fmt.Errorf("checkpoint: bad whence %d", whence)
	}
	if offset < 0 {
		return 0, fmt.Errorf("checkpoint: negative seek offset %d", offset)
	}
	r.off = offset
	return offset, nil
}

func (r *partReader) WriteTo(w io.Writer) (int64, error) {
	var total int64
	write := func(p []byte) error {
		n, err := w.Write(p)
		r.off += int64(n)
		total += int64(n)
		r.count(int64(n))
		if err == nil && n < len(p) {
			err = io.ErrShortWrite
		}
		return err
	}
	if b, ok := r.src.(*buffer); ok {
		return total, b.slices(r.off, write)
	}
	buf := make([]byte, min(1<<20, max(r.size-r.off, 1)))
	for r.off < r.size {
		n, err := r.src.ReadAt(buf[:min(int64(len(buf)), r.size-r.off)], r.off)
		if n > 0 {
			if werr := write(buf[:n]); werr != nil {
				return total, werr
			}
		}
		if err == io.EOF && r.off < r.size {
			return total, io.ErrUnexpectedEOF
		}
		if err != nil && err != io.EOF {
			return total, err
		}
	}
	return total, nil
}

// sourceCRC returns the CRC-32C of a staged part. The upload runs it
// alongside the store's Put, so that it costs no time while the store is
// busy with I/O.
func sourceCRC(ctx context.Context, src source) (uint32, error) {
	var crc uint32
	if b, ok := src.(*buffer); ok {
		err := b.slices(0, func(p []byte) error {
			crc = crcUpdate(crc, p)
			return ctx.Err()
		})
		return crc, err
	}
	size := src.Size()
	buf := make([]byte, 1<<20)
	for off := int64(0); off < size; {
		if err := ctx.Err(); err != nil {
			return 0, err
		}
		n, err := src.ReadAt(buf[:min(int64(len(buf)), size-off)], off)
		crc = crcUpdate(crc, buf[:n])
		off += int64(n)
		if err != nil && !(err == io.EOF && off == size) {
			return 0, err
		}
	}
	return crc, nil
}
