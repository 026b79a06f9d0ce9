// Package filestore is a checkpoint.Store on a local (or mounted) file
// system: key "a/b/c" is the file <root>/a/b/c.
//
// Put is atomic and durable: it writes a temporary file in the key's
// directory, fsyncs it, renames it over the key and fsyncs the directory
// (and the parents of directories it created), so that after a crash or
// power loss the key holds either the old object or the whole new one.
// PutIfAbsent links the fsynced temporary file to the key (link(2) fails if
// the key exists), so exactly one of several writers wins, even across
// processes and on NFS.
//
// Temporary files are named [TempPrefix]<random> and never appear in List;
// a process killed mid-Put leaves one behind, which [Store.Cleanup] (run by
// New for files older than Options.TempMaxAge) removes.
//
// Keys never reach outside the root: keys are validated
// (checkpoint.ValidateKey) and all access goes through an os.Root, which
// refuses paths and symbolic links that lead out of the directory.
//
// Importing the package registers the "file" URL scheme for
// checkpoint.Open: file:///abs/dir, file://./rel/dir, or a plain path.
package filestore

import (
	"context"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"log/slog"
	"math/rand/v2"
	"net/url"
	"os"
	"path"
	"path/filepath"
	"sort"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/spotsafe/spotsafe/checkpoint"
)

// Store is a checkpoint.Store rooted at a directory. It is safe for
// concurrent use, also by several processes sharing the directory.
type Store struct {
	root   *os.Root
	dir    string
	log    *slog.Logger
	noSync bool
	bufs   sync.Pool
}

var (
	_ checkpoint.Store             = (*Store)(nil)
	_ checkpoint.RangeGetter       = (*Store)(nil)
	_ checkpoint.ConditionalPutter = (*Store)(nil)
	_ io.Closer                    = (*Store)(nil)
)

// Options configures a Store. The zero value is the safe default.
type Options struct {
	// Logger receives cleanup and best-effort failure messages; nil
	// discards them.
	Logger *slog.Logger
	// NoSync skips every fsync. UNSAFE: a crash or power loss can then
	// leave a key empty or truncated, or lose a committed object. Only for
	// tests and benchmarks on throwaway directories.
	NoSync bool
	// TempMaxAge is the age beyond which New removes temporary files left
	// by interrupted Puts (a Put in progress keeps its file's modification
	// time fresh). 0 means one hour; a negative value disables the cleanup
	// at New.
	TempMaxAge time.Duration
}

// TempPrefix starts the name of every temporary file. Keys with a segment
// that starts with it are refused (checkpoint.ErrInvalidKey).
const TempPrefix = ".spotsafe-tmp-"

// ErrKeyConflict is returned when a key cannot be stored because a file
// system cannot hold it next to an existing one: "a/b" when "a/b/c" exists
// (a/b is a directory), or "a/b/c" when "a/b" is an object.
var ErrKeyConflict = errors.New("filestore: key conflicts with an existing key (an object cannot also be a directory)")

const (
	defaultTempMaxAge = time.Hour
	bufSize           = 1 << 20
	// fileChunk is how much of an *os.File source is copied (with
	// copy_file_range where possible) between checks of ctx.
	fileChunk = 8 << 20
)

func init() {
	checkpoint.Register("file", open)
}

// open serves checkpoint.Open: file:///abs, file://localhost/abs,
// file://./rel and plain paths, which checkpoint.Open turns into
// file://<path> (so a relative path's first segment arrives as the host).
func open(_ context.Context, u *url.URL) (checkpoint.Store, error) {
	if u.RawQuery != "" || u.Fragment != "" || u.User != nil || u.Opaque != "" {
		return nil, fmt.Errorf("filestore: URL %q: want file:///abs/dir, file://./rel/dir or a plain path, without user, query or fragment", u.Redacted())
	}
	var p string
	switch u.Host {
	case "", "localhost":
		p = u.Path
	case ".":
		p = "." + u.Path
	default:
		p = u.Host + u.Path
	}
	if p == "" {
		return nil, fmt.Errorf("filestore: URL %q names no directory", u.Redacted())
	}
	return New(filepath.FromSlash(p), nil)
}

// New opens the store rooted at dir, creating the directory if needed, and
// removes temporary files older than opts.TempMaxAge left by interrupted
// Puts. Close the store when done.
func New(dir string, opts *Options) (*Store, error) {
	if opts == nil {
		opts = &Options{}
	}
	if dir == "" {
		return nil, errors.New("filestore: empty root directory")
	}
	abs, err := filepath.Abs(dir)
	if err != nil {
		return nil, fmt.Errorf("filestore: root %q: %w", dir, err)
	}
	s := &Store{dir: abs, log: opts.Logger, noSync: opts.NoSync}
	if s.log == nil {
		s.log = slog.New(slog.DiscardHandler)
	}
	s.bufs.New = func() any { b := make([]byte, bufSize); return &b }
	if _, err := os.Stat(abs); errors.Is(err, fs.ErrNotExist) {
		if err := os.MkdirAll(abs, 0o777); err != nil {
			return nil, s.wrapErr("create root", abs, err)
		}
		if !s.noSync {
			// Make the new root itself durable.
			syncDir(filepath.Dir(abs))
		}
	}
	s.root, err = os.OpenRoot(abs)
	if err != nil {
		return nil, s.wrapErr("open root", abs, err)
	}
	if opts.TempMaxAge >= 0 {
		age := opts.TempMaxAge
		if age == 0 {
			age = defaultTempMaxAge
		}
		if _, err := s.Cleanup(context.Background(), age); err != nil {
			s.log.Warn("filestore: cleanup of temporary files failed", "root", abs, "error", err)
		}
	}
	return s, nil
}

// Dir returns the absolute path of the store's root directory.
func (s *Store) Dir() string { return s.dir }

// Close releases the root directory. The store must not be used after.
func (s *Store) Close() error { return s.root.Close() }

// rel validates key and returns it as a path relative to the root.
func rel(key string) (string, error) {
	if err := checkpoint.ValidateKey(key); err != nil {
		return "", err
	}
	for seg := range strings.SplitSeq(key, "/") {
		if strings.HasPrefix(seg, TempPrefix) {
			return "", fmt.Errorf("%w: %q: segments starting with %q are reserved for temporary files", checkpoint.ErrInvalidKey, key, TempPrefix)
		}
	}
	p := filepath.FromSlash(key)
	if !filepath.IsLocal(p) {
		return "", fmt.Errorf("%w: %q is not a local path", checkpoint.ErrInvalidKey, key)
	}
	return p, nil
}

// Put writes the object atomically and durably (see the package doc).
func (s *Store) Put(ctx context.Context, key string, r io.Reader, size int64) error {
	return s.put(ctx, "put", key, r, size, false)
}

// PutIfAbsent is Put that fails with an error matching fs.ErrExist, leaving
// the existing object alone, when the key exists.
func (s *Store) PutIfAbsent(ctx context.Context, key string, r io.Reader, size int64) error {
	return s.put(ctx, "put-if-absent", key, r, size, true)
}

func (s *Store) put(ctx context.Context, op, key string, r io.Reader, size int64, ifAbsent bool) (err error) {
	name, err := rel(key)
	if err != nil {
		return err
	}
	if err := ctx.Err(); err != nil {
		return fmt.Errorf("filestore: %s %s: %w", op, key, err)
	}
	dir := filepath.Dir(name)
	f, tmp, created, err := s.createTemp(dir)
	if err != nil {
		return s.wrapErr(op, key, err)
	}
	defer func() {
		if f != nil {
			f.Close()
		}
		if tmp != "" {
			if rerr := s.root.Remove(tmp); rerr != nil && !errors.Is(rerr, fs.ErrNotExist) {
				s.log.Warn("filestore: cannot remove temporary file", "root", s.dir, "file", tmp, "error", rerr)
			}
		}
		if err != nil {
			s.prune(dir)
		}
	}()
	if err := s.copy(ctx, f, r, size); err != nil {
		return s.wrapErr(op, key, err)
	}
	if !s.noSync {
		if err := f.Sync(); err != nil {
			return s.wrapErr(op, key, fmt.Errorf("fsync: %w", err))
		}
	}
	err = f.Close()
	f = nil
	if err != nil {
		return s.wrapErr(op, key, err)
	}
	// Last chance to give up without changing the key.
	if err := ctx.Err(); err != nil {
		return fmt.Errorf("filestore: %s %s: %w", op, key, err)
	}
	if ifAbsent {
		if err := s.root.Link(tmp, name); err != nil {
			if errors.Is(err, fs.ErrExist) {
				if fi, serr := s.root.Lstat(name); serr == nil && fi.IsDir() {
					return fmt.Errorf("filestore: %s %s: %w", op, key, ErrKeyConflict)
				}
				return checkpoint.Exists(key, err)
			}
			return s.wrapErr(op, key, err)
		}
		// The deferred Remove drops the temporary name; the directory
		// fsync below covers both.
	} else {
		if err := s.root.Rename(tmp, name); err != nil {
			if fi, serr := s.root.Lstat(name); serr == nil && fi.IsDir() {
				return fmt.Errorf("filestore: %s %s: %w: %w", op, key, ErrKeyConflict, err)
			}
			return s.wrapErr(op, key, err)
		}
		tmp = ""
	}
	if s.noSync {
		return nil
	}
	if ifAbsent {
		if rerr := s.root.Remove(tmp); rerr == nil || errors.Is(rerr, fs.ErrNotExist) {
			tmp = ""
		}
	}
	return s.syncDirs(op, key, dir, created)
}

// createTemp creates a temporary file in dir, creating dir (and its
// parents) if needed; created lists the directories it made, top first.
func (s *Store) createTemp(dir string) (f *os.File, name string, created []string, err error) {
	for attempt := 0; ; attempt++ {
		c, err := s.mkdirAll(dir)
		created = append(created, c...)
		if err != nil {
			return nil, "", created, err
		}
		name = filepath.Join(dir, fmt.Sprintf("%s%016x", TempPrefix, rand.Uint64()))
		f, err = s.root.OpenFile(name, os.O_RDWR|os.O_CREATE|os.O_EXCL, 0o666)
		switch {
		case err == nil:
			return f, name, created, nil
		case attempt < 10 && (errors.Is(err, fs.ErrNotExist) || errors.Is(err, fs.ErrExist)):
			// A concurrent Delete pruned the directory we just made, or a
			// name collision: try again.
			continue
		}
		return nil, "", created, err
	}
}

// mkdirAll creates dir and its missing parents under the root and returns
// those it created, top first. A file in the way is ErrKeyConflict.
func (s *Store) mkdirAll(dir string) ([]string, error) {
	if dir == "." {
		return nil, nil
	}
	if fi, err := s.root.Stat(dir); err == nil {
		if !fi.IsDir() {
			return nil, fmt.Errorf("%s: %w", filepath.ToSlash(dir), ErrKeyConflict)
		}
		return nil, nil
	}
	var created []string
	var p string
	for seg := range strings.SplitSeq(filepath.ToSlash(dir), "/") {
		p = path.Join(p, seg)
		err := s.root.Mkdir(filepath.FromSlash(p), 0o777)
		switch {
		case err == nil:
			created = append(created, filepath.FromSlash(p))
		case errors.Is(err, fs.ErrExist):
			fi, serr := s.root.Stat(filepath.FromSlash(p))
			if serr != nil {
				return created, serr
			}
			if !fi.IsDir() {
				return created, fmt.Errorf("%s: %w", p, ErrKeyConflict)
			}
		case errors.Is(err, syscall.ENOTDIR):
			return created, fmt.Errorf("%s: %w", p, ErrKeyConflict)
		default:
			return created, err
		}
	}
	return created, nil
}

// syncDirs makes a commit in dir durable: dir itself, and the parent of
// every directory the Put created.
func (s *Store) syncDirs(op, key, dir string, created []string) error {
	dirs := []string{dir}
	for i := len(created) - 1; i >= 0; i-- {
		if p := filepath.Dir(created[i]); p != dirs[len(dirs)-1] {
			dirs = append(dirs, p)
		}
	}
	for _, d := range dirs {
		if err := s.syncDir(d); err != nil {
			return s.wrapErr(op, key, fmt.Errorf("committed, but fsync of directory %s failed: %w", d, err))
		}
	}
	return nil
}

func (s *Store) syncDir(dir string) error {
	d, err := s.root.Open(dir)
	if err != nil {
		return err
	}
	defer d.Close()
	if err := d.Sync(); err != nil && !ignorableSyncErr(err) {
		return err
	}
	return nil
}

// syncDir fsyncs a directory outside any root, best effort.
func syncDir(dir string) {
	if d, err := os.Open(dir); err == nil {
		_ = d.Sync()
		d.Close()
	}
}

// ignorableSyncErr reports errors from fsync on a directory that mean "not
// supported here" (some file systems, Windows) rather than "failed".
func ignorableSyncErr(err error) bool {
	return errors.Is(err, syscall.EINVAL) || errors.Is(err, syscall.ENOTSUP) ||
		errors.Is(err, errors.ErrUnsupported) || errors.Is(err, fs.ErrPermission)
}

// copy writes r to f, checking ctx between chunks, and checks the size.
func (s *Store) copy(ctx context.Context, f *os.File, r io.Reader, size int64) error {
	var n int64
	if src, ok := r.(*os.File); ok {
		// Stay on the kernel's copy_file_range/splice path.
		for size < 0 || n < size {
			if err := ctx.Err(); err != nil {
				return err
			}
			chunk := int64(fileChunk)
			if size >= 0 {
				chunk = min(chunk, size-n)
			}
			m, err := io.CopyN(f, src, chunk)
			n += m
			if err == io.EOF {
				break
			}
			if err != nil {
				return fmt.Errorf("copy after %d bytes: %w", n, err)
			}
		}
	} else if wt, ok := r.(io.WriterTo); ok && size >= 0 {
		// In-memory readers (bytes.Reader, bytes.Buffer, strings.Reader)
		// hand over their bytes without a copy through buf.
		w := &chunkWriter{ctx: ctx, f: f, left: size}
		m, err := wt.WriteTo(w)
		n = m
		if w.err != nil {
			return w.err
		}
		if err != nil {
			return fmt.Errorf("read after %d bytes: %w", n, err)
		}
	} else {
		bp := s.bufs.Get().(*[]byte)
		defer s.bufs.Put(bp)
		buf := *bp
		for size < 0 || n < size {
			if err := ctx.Err(); err != nil {
				return err
			}
			p := buf
			if size >= 0 {
				p = p[:min(int64(len(p)), size-n)]
			}
			m, rerr := r.Read(p)
			if m > 0 {
				if _, err := f.Write(p[:m]); err != nil {
					return fmt.Errorf("write after %d bytes: %w", n, err)
				}
				n += int64(m)
			}
			if rerr == io.EOF {
				break
			}
			if rerr != nil {
				return fmt.Errorf("read after %d bytes: %w", n, rerr)
			}
		}
	}
	if size >= 0 && n != size {
		return fmt.Errorf("reader ended after %d of %d bytes: %w", n, size, io.ErrUnexpectedEOF)
	}
	if size >= 0 {
		// A reader longer than size means the caller's size is wrong:
		// refuse rather than store a truncated object.
		var extra [1]byte
		if m, err := r.Read(extra[:]); m > 0 {
			return errTooLong
		} else if err != nil && err != io.EOF {
			return fmt.Errorf("read after %d bytes: %w", n, err)
		}
	}
	return ctx.Err()
}

// chunkWriter writes to f in chunks, checking ctx between them, and refuses
// to write more than left bytes.
type chunkWriter struct {
	ctx  context.Context
	f    *os.File
	left int64
	err  error
}

func (w *chunkWriter) Write(p []byte) (int, error) {
	n := 0
	for len(p) > 0 {
		if err := w.ctx.Err(); err != nil {
			w.err = err
			return n, err
		}
		if w.left == 0 {
			w.err = errTooLong
			return n, w.err
		}
		c := int(min(int64(len(p)), fileChunk, w.left))
		m, err := w.f.Write(p[:c])
		n += m
		w.left -= int64(m)
		if err != nil {
			w.err = fmt.Errorf("write: %w", err)
			return n, w.err
		}
		p = p[c:]
	}
	return n, nil
}

var errTooLong = errors.New("reader has more bytes than the size given")

// Get opens the object for reading. Readers of an object that is then
// overwritten or deleted go on reading the old object.
func (s *Store) Get(ctx context.Context, key string) (io.ReadCloser, error) {
	f, _, err := s.open(ctx, "get", key)
	if err != nil {
		return nil, err
	}
	return f, nil
}

// GetRange reads length bytes from offset (length < 0: to the end). A range
// that runs past the end is cut there; an offset past the end is an error.
func (s *Store) GetRange(ctx context.Context, key string, offset, length int64) (io.ReadCloser, error) {
	f, size, err := s.open(ctx, "get-range", key)
	if err != nil {
		return nil, err
	}
	if offset < 0 || offset > size {
		f.Close()
		return nil, fmt.Errorf("filestore: get-range %s: offset %d outside the object (0..%d)", key, offset, size)
	}
	n := size - offset
	if length >= 0 && length < n {
		n = length
	}
	return struct {
		io.Reader
		io.Closer
	}{io.NewSectionReader(f, offset, n), f}, nil
}

// open opens key's file; a missing key or a directory is NotExist.
func (s *Store) open(ctx context.Context, op, key string) (*os.File, int64, error) {
	name, err := rel(key)
	if err != nil {
		return nil, 0, err
	}
	if err := ctx.Err(); err != nil {
		return nil, 0, fmt.Errorf("filestore: %s %s: %w", op, key, err)
	}
	f, err := s.root.Open(name)
	if err != nil {
		if missing(err) {
			return nil, 0, checkpoint.NotExist(key, err)
		}
		return nil, 0, s.wrapErr(op, key, err)
	}
	fi, err := f.Stat()
	if err != nil {
		f.Close()
		return nil, 0, s.wrapErr(op, key, err)
	}
	if !fi.Mode().IsRegular() {
		f.Close()
		return nil, 0, checkpoint.NotExist(key, fmt.Errorf("%s is not a regular file", filepath.ToSlash(name)))
	}
	return f, fi.Size(), nil
}

// missing reports errors that mean "no such object".
func missing(err error) bool {
	return errors.Is(err, fs.ErrNotExist) || errors.Is(err, syscall.ENOTDIR)
}

// List returns the objects whose keys start with prefix, sorted by key.
// Temporary files, directories and anything but regular files are skipped.
func (s *Store) List(ctx context.Context, prefix string) ([]checkpoint.ObjectInfo, error) {
	if err := ctx.Err(); err != nil {
		return nil, fmt.Errorf("filestore: list %q: %w", prefix, err)
	}
	start := "."
	if i := strings.LastIndexByte(prefix, '/'); i >= 0 {
		start = prefix[:i]
		if checkpoint.ValidateKey(start) != nil {
			return nil, nil // no key has this prefix
		}
	}
	var out []checkpoint.ObjectInfo
	seen := 0
	err := fs.WalkDir(s.root.FS(), start, func(p string, d fs.DirEntry, err error) error {
		if seen++; seen%256 == 0 {
			if err := ctx.Err(); err != nil {
				return err
			}
		}
		if err != nil {
			if missing(err) {
				if p == start {
					return fs.SkipAll
				}
				return nil // removed while we walked
			}
			return err
		}
		if d.IsDir() {
			if p != start && p != "." && !strings.HasPrefix(p+"/", prefix) && !strings.HasPrefix(prefix, p+"/") {
				return fs.SkipDir
			}
			return nil
		}
		if !d.Type().IsRegular() || strings.HasPrefix(d.Name(), TempPrefix) || !strings.HasPrefix(p, prefix) {
			return nil
		}
		if checkpoint.ValidateKey(p) != nil {
			return nil
		}
		fi, err := d.Info()
		if err != nil {
			if missing(err) {
				return nil
			}
			return err
		}
		out = append(out, checkpoint.ObjectInfo{Key: p, Size: fi.Size(), Modified: fi.ModTime()})
		return nil
	})
	if err != nil {
		return nil, s.wrapErr("list", prefix, err)
	}
	// Walk order is per directory ("a/b/c" before "a/b-1"); keys sort
	// as strings.
	sort.Slice(out, func(i, j int) bool { return out[i].Key < out[j].Key })
	return out, nil
}

// Delete removes the object and then, best effort, the directories it
// leaves empty (never the root).
func (s *Store) Delete(ctx context.Context, key string) error {
	name, err := rel(key)
	if err != nil {
		return err
	}
	if err := ctx.Err(); err != nil {
		return fmt.Errorf("filestore: delete %s: %w", key, err)
	}
	fi, err := s.root.Lstat(name)
	if err != nil {
		if missing(err) {
			return checkpoint.NotExist(key, err)
		}
		return s.wrapErr("delete", key, err)
	}
	if fi.IsDir() {
		return checkpoint.NotExist(key, fmt.Errorf("%s is a directory", key))
	}
	if err := s.root.Remove(name); err != nil {
		if missing(err) {
			return checkpoint.NotExist(key, err)
		}
		return s.wrapErr("delete", key, err)
	}
	dir := filepath.Dir(name)
	s.prune(dir)
	if !s.noSync {
		// Best effort: a lost delete only brings an old object back.
		for d := dir; ; d = filepath.Dir(d) {
			if err := s.syncDir(d); err == nil || d == "." {
				break
			}
		}
	}
	return nil
}

// prune removes dir and its parents while they are empty, never the root.
func (s *Store) prune(dir string) {
	for d := dir; d != "." && d != string(filepath.Separator); d = filepath.Dir(d) {
		fi, err := s.root.Lstat(d)
		if err != nil || !fi.IsDir() {
			return
		}
		if err := s.root.Remove(d); err != nil {
			return // not empty (or gone): stop
		}
	}
}

// Cleanup removes temporary files (left by Puts that were interrupted, for
// example by a killed process) whose modification time is older than
// olderThan, and the directories that leaves empty. It returns how many
// files it removed. olderThan 0 removes all of them, including those of
// Puts in progress: use it only when no other process writes to the store.
func (s *Store) Cleanup(ctx context.Context, olderThan time.Duration) (int, error) {
	cutoff := time.Now().Add(-olderThan)
	var stale []string
	err := fs.WalkDir(s.root.FS(), ".", func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			if missing(err) {
				return nil
			}
			return err
		}
		if err := ctx.Err(); err != nil {
			return err
		}
		if d.IsDir() || !strings.HasPrefix(d.Name(), TempPrefix) {
			return nil
		}
		fi, err := d.Info()
		if err != nil {
			if missing(err) {
				return nil
			}
			return err
		}
		if olderThan <= 0 || fi.ModTime().Before(cutoff) {
			stale = append(stale, p)
		}
		return nil
	})
	if err != nil {
		return 0, s.wrapErr("cleanup", ".", err)
	}
	removed := 0
	for _, p := range stale {
		name := filepath.FromSlash(p)
		if err := s.root.Remove(name); err != nil {
			if !missing(err) {
				s.log.Warn("filestore: cannot remove temporary file", "root", s.dir, "file", p, "error", err)
			}
			continue
		}
		removed++
		s.log.Info("filestore: removed temporary file of an interrupted write", "root", s.dir, "file", p)
		s.prune(filepath.Dir(name))
	}
	return removed, nil
}

// wrapErr adds the operation, the key and, for the errors people must act
// on (disk full, permissions, read-only), a plain explanation.
func (s *Store) wrapErr(op, key string, err error) error {
	var hint string
	switch {
	case errors.Is(err, syscall.ENOSPC):
		hint = "disk full: no space left on the device holding " + s.dir
	case errors.Is(err, syscall.EDQUOT):
		hint = "disk quota exceeded on " + s.dir
	case errors.Is(err, syscall.EROFS):
		hint = s.dir + " is on a read-only file system"
	case errors.Is(err, fs.ErrPermission):
		hint = "permission denied under " + s.dir + " (check the owner and mode of the directory)"
	}
	if hint != "" {
		return fmt.Errorf("filestore: %s %s: %s: %w", op, key, hint, err)
	}
	return fmt.Errorf("filestore: %s %s: %w", op, key, err)
}
