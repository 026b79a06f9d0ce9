package checkpoint

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path"
	"sync"

	"github.com/spotsafe/spotsafe/internal/crc32c"
)

// Newest, passed as the step to [Manager.RestoreTo], restores the newest
// checkpoint that verifies.
const Newest int64 = -1

// Checkpoint is a restored checkpoint whose parts have all been read and
// verified (size and CRC-32C).
type Checkpoint struct {
	// Step is the checkpoint's step.
	Step int64
	// Manifest is its commit record.
	Manifest *Manifest
	data     map[string][]byte
}

// Metadata returns the metadata saved with the checkpoint.
func (c *Checkpoint) Metadata() map[string]string { return c.Manifest.Metadata }

// PartNames returns the names of the parts, in the order they were saved.
func (c *Checkpoint) PartNames() []string {
	names := make([]string, len(c.Manifest.Parts))
	for i, p := range c.Manifest.Parts {
		names[i] = p.Name
	}
	return names
}

// ReadPart returns the verified bytes of the named part. The slice
// belongs to the Checkpoint: every call returns the same one. A missing
// name is an error matching fs.ErrNotExist.
func (c *Checkpoint) ReadPart(ctx context.Context, name string) ([]byte, error) {
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	b, ok := c.data[name]
	if !ok {
		return nil, NotExist(name, fmt.Errorf("no part %q in step %d", name, c.Step))
	}
	return b, nil
}

// OpenPart returns a reader over the verified bytes of the named part.
func (c *Checkpoint) OpenPart(ctx context.Context, name string) (io.ReadCloser, error) {
	b, err := c.ReadPart(ctx, name)
	if err != nil {
		return nil, err
	}
	return io.NopCloser(bytes.NewReader(b)), nil
}

// Latest returns the newest committed checkpoint whose parts all verify,
// read into memory: parts are fetched in parallel (in ranges, on a
// [RangeGetter] store), and their sizes and CRC-32C are checked as the
// bytes arrive. A checkpoint that fails verification is logged and the one
// before it is tried. With no checkpoint at all the error is
// [ErrNoCheckpoint]; when every committed checkpoint is corrupt the error
// wraps both ErrNoCheckpoint and their [CorruptError]s. Store errors (after
// retries) are returned as they are, without falling back: an unreachable
// store must not make a job start over from an older state.
//
// For states larger than memory, use [Manager.RestoreTo].
func (m *Manager) Latest(ctx context.Context) (*Checkpoint, error) {
	var cp *Checkpoint
	err := m.newestValid(ctx, func(ctx context.Context, e *entry) error {
		c, err := m.load(ctx, e)
		cp = c
		return err
	})
	return cp, err
}

// Load reads and verifies one committed checkpoint, without falling back.
func (m *Manager) Load(ctx context.Context, step int64) (*Checkpoint, error) {
	e, err := m.lookup(ctx, step)
	if err != nil {
		return nil, err
	}
	if e.Err != nil {
		return nil, e.Err
	}
	return m.load(ctx, e)
}

func (m *Manager) load(ctx context.Context, e *entry) (*Checkpoint, error) {
	cp := &Checkpoint{Step: e.Step, Manifest: e.Manifest, data: make(map[string][]byte, len(e.Manifest.Parts))}
	sinks := make([]sink, len(e.Manifest.Parts))
	for i, p := range e.Manifest.Parts {
		b := make([]byte, p.Size)
		cp.data[p.Name] = b
		sinks[i] = memSink(b)
	}
	tr := m.newTracker(OpRestore, e.Step, e.Bytes)
	if err := m.fetchParts(ctx, e.Step, e.Manifest, sinks, tr); err != nil {
		return nil, err
	}
	tr.finish()
	return cp, nil
}

// newestValid calls try on committed checkpoints, newest first, until one
// succeeds; corruption moves on to the previous checkpoint, any other
// error stops.
func (m *Manager) newestValid(ctx context.Context, try func(context.Context, *entry) error) error {
	ents, err := m.scan(ctx, m.root)
	if err != nil {
		return err
	}
	var skipped []error
	for i := len(ents) - 1; i >= 0; i-- {
		e := ents[i]
		if e.manifestKey == "" {
			continue
		}
		if err := m.classify(ctx, e); err != nil {
			return err
		}
		if e.Status == StatusIncomplete {
			continue // its manifest went away since the listing
		}
		err := e.Err
		if err == nil {
			err = try(ctx, e)
		}
		if err == nil {
			if len(skipped) > 0 {
				m.log.Warn("checkpoint restored from an older step", "ckpt.step", e.Step, "skipped", len(skipped))
			}
			return nil
		}
		if !errors.Is(err, ErrCorrupt) {
			return err
		}
		m.log.Warn("checkpoint failed verification; trying the previous one", "ckpt.step", e.Step, "err", err)
		skipped = append(skipped, err)
	}
	if len(skipped) > 0 {
		return fmt.Errorf("%w: all %d committed checkpoints failed verification: %w", ErrNoCheckpoint, len(skipped), errors.Join(skipped...))
	}
	return ErrNoCheckpoint
}

// RestoreTo writes the parts of a checkpoint into files under dir (created
// if needed), verifying them as they stream; step [Newest] picks the
// newest checkpoint that verifies, falling back like [Manager.Latest].
// Files appear only once every part of the checkpoint verified: they are
// written into a temporary directory inside dir first, then renamed into
// place, replacing files of the same names. Part names are checked again
// on the way out of the store, and writes go through an os.Root, so
// nothing is ever written outside dir. It returns the restored manifest.
func (m *Manager) RestoreTo(ctx context.Context, dir string, step int64) (*Manifest, error) {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return nil, fmt.Errorf("checkpoint: restore: %w", err)
	}
	root, err := os.OpenRoot(dir)
	if err != nil {
		return nil, fmt.Errorf("checkpoint: restore: %w", err)
	}
	defer root.Close()
	if step != Newest {
		e, err := m.lookup(ctx, step)
		if err != nil {
			return nil, err
		}
		if e.Err != nil {
			return nil, e.Err
		}
		if err := m.restoreFiles(ctx, root, e); err != nil {
			return nil, err
		}
		return e.Manifest, nil
	}
	var man *Manifest
	err = m.newestValid(ctx, func(ctx context.Context, e *entry) error {
		man = e.Manifest
		return m.restoreFiles(ctx, root, e)
	})
	if err != nil {
		return nil, err
	}
	return man, nil
}

func (m *Manager) restoreFiles(ctx context.Context, root *os.Root, e *entry) (err error) {
	var rnd [6]byte
	rand.Read(rnd[:])
	tmp := ".spotsafe-restore-" + hex.EncodeToString(rnd[:])
	if err := root.Mkdir(tmp, 0o700); err != nil {
		return fmt.Errorf("checkpoint: restore: %w", err)
	}
	defer root.RemoveAll(tmp)

	parts := e.Manifest.Parts
	files := make([]*os.File, len(parts))
	defer func() {
		for _, f := range files {
			if f != nil {
				f.Close()
			}
		}
	}()
	sinks := make([]sink, len(parts))
	for i, p := range parts {
		// Names were validated by parseManifest; check again right where
		// they become paths.
		if err := ValidatePartName(p.Name); err != nil {
			return &CorruptError{Step: e.Step, Part: p.Name, Reason: "bad name", Err: err}
		}
		name := tmp + "/" + p.Name
		if err := root.MkdirAll(path.Dir(name), 0o755); err != nil {
			return fmt.Errorf("checkpoint: restore: %w", err)
		}
		f, err := root.OpenFile(name, os.O_RDWR|os.O_CREATE|os.O_EXCL, 0o644)
		if err != nil {
			return fmt.Errorf("checkpoint: restore: %w", err)
		}
		files[i] = f
		if err := f.Truncate(p.Size); err != nil {
			return fmt.Errorf("checkpoint: restore: %w", err)
		}
		sinks[i] = fileSink{f}
	}
	tr := m.newTracker(OpRestore, e.Step, e.Bytes)
	if err := m.fetchParts(ctx, e.Step, e.Manifest, sinks, tr); err != nil {
		return err
	}
	for i, f := range files {
		files[i] = nil
		if err := f.Close(); err != nil {
			return fmt.Errorf("checkpoint: restore: %w", err)
		}
	}
	for _, p := range parts {
		if d := path.Dir(p.Name); d != "." {
			if err := root.MkdirAll(d, 0o755); err != nil {
				return fmt.Errorf("checkpoint: restore: %w", err)
			}
		}
		if err := root.Rename(tmp+"/"+p.Name, p.Name); err != nil {
			return fmt.Errorf("checkpoint: restore: %w", err)
		}
	}
	tr.finish()
	m.log.Info("checkpoint restored", "ckpt.step", e.Step, "bytes", e.Bytes, "dir", root.Name())
	return nil
}

// sink receives a part's bytes.
type sink interface {
	// fill reads exactly n bytes from r into the sink at offset off and
	// returns their CRC-32C, computed as they arrive.
	fill(r io.Reader, off, n int64, crc bool) (uint32, error)
}

// hashStep is how many bytes are read before they are hashed: small
// enough that they are still in the core's L2 cache when the CRC reads
// them. 256 KiB gave the cheapest verified restore (in CPU time) of the
// sizes from 64 KiB to 1 MiB; at 1 MiB the CRC cost twice as much, because
// the bytes had left the cache.
const hashStep = 256 << 10

var scratch = sync.Pool{New: func() any { b := make([]byte, hashStep); return &b }}

type memSink []byte

func (s memSink) fill(r io.Reader, off, n int64, crc bool) (uint32, error) {
	var sum uint32
	for done := int64(0); done < n; {
		p := s[off+done : off+done+min(hashStep, n-done)]
		k, err := io.ReadFull(r, p)
		if crc {
			sum = crcUpdate(sum, p[:k])
		}
		done += int64(k)
		if err != nil {
			return 0, err
		}
	}
	return sum, nil
}

type fileSink struct{ f *os.File }

func (s fileSink) fill(r io.Reader, off, n int64, crc bool) (uint32, error) {
	bp := scratch.Get().(*[]byte)
	defer scratch.Put(bp)
	var sum uint32
	for done := int64(0); done < n; {
		p := (*bp)[:min(hashStep, n-done)]
		k, err := io.ReadFull(r, p)
		if crc {
			sum = crcUpdate(sum, p[:k])
		}
		if _, werr := s.f.WriteAt(p[:k], off+done); werr != nil {
			return 0, werr
		}
		done += int64(k)
		if err != nil {
			return 0, err
		}
	}
	return sum, nil
}

type discardSink struct{}

func (discardSink) fill(r io.Reader, _, n int64, crc bool) (uint32, error) {
	bp := scratch.Get().(*[]byte)
	defer scratch.Put(bp)
	var sum uint32
	for done := int64(0); done < n; {
		p := (*bp)[:min(hashStep, n-done)]
		k, err := io.ReadFull(r, p)
		if crc {
			sum = crcUpdate(sum, p[:k])
		}
		done += int64(k)
		if err != nil {
			return 0, err
		}
	}
	return sum, nil
}

// fetchParts reads every part of a manifest into its sink, in parallel
// ranges where the store allows, and verifies sizes and CRC-32C.
func (m *Manager) fetchParts(ctx context.Context, step int64, man *Manifest, sinks []sink, tr *tracker) error {
	type task struct {
		part   int
		off, n int64
	}
	rg, ranged := m.store.(RangeGetter)
	var tasks []task
	for i, p := range man.Parts {
		if ranged && p.Size > m.opts.RangeSize {
			for off := int64(0); off < p.Size; off += m.opts.RangeSize {
				tasks = append(tasks, task{i, off, min(m.opts.RangeSize, p.Size-off)})
			}
			continue
		}
		tasks = append(tasks, task{i, 0, p.Size})
	}
	crcs := make([]uint32, len(tasks))
	hash := !m.opts.noCRC
	err := forEach(ctx, len(tasks), m.opts.Concurrency, func(ctx context.Context, ti int) error {
		t := tasks[ti]
		p := man.Parts[t.part]
		key := m.key(step, p.Name)
		whole := t.off == 0 && t.n == p.Size
		var counted int64
		return m.retry(ctx, "get "+key, func() error {
			tr.add(-counted)
			counted = 0
			var rc io.ReadCloser
			var err error
			if whole {
				rc, err = m.store.Get(ctx, key)
			} else {
				rc, err = rg.GetRange(ctx, key, t.off, t.n)
			}
			if errors.Is(err, fs.ErrNotExist) {
				return &CorruptError{Step: step, Part: p.Name, Reason: "missing", Err: err}
			}
			if err != nil {
				return err
			}
			defer rc.Close()
			cr := &countingReader{r: rc, count: func(n int64) { counted += n; tr.add(n) }}
			crc, err := sinks[t.part].fill(cr, t.off, t.n, hash)
			if err != nil {
				return err
			}
			if whole {
				// A longer object than the manifest says is corrupt too.
				var one [1]byte
				if k, _ := io.ReadFull(rc, one[:]); k > 0 {
					return &CorruptError{Step: step, Part: p.Name, Reason: fmt.Sprintf("longer than the manifest's %d bytes", p.Size)}
				}
			}
			crcs[ti] = crc
			return nil
		})
	})
	if err != nil {
		return err
	}
	if !hash {
		return nil
	}
	sums := make([]uint32, len(man.Parts))
	for ti, t := range tasks {
		sums[t.part] = crc32c.Combine(sums[t.part], crcs[ti], t.n)
	}
	for i, p := range man.Parts {
		if sums[i] != p.CRC32C {
			return &CorruptError{Step: step, Part: p.Name, Reason: fmt.Sprintf("crc32c %08x, manifest says %08x", sums[i], p.CRC32C)}
		}
	}
	return nil
}

type countingReader struct {
	r     io.Reader
	count func(int64)
}

func (c *countingReader) Read(p []byte) (int, error) {
	n, err := c.r.Read(p)
	c.count(int64(n))
	return n, err
}
