// Package memstore is an in-memory checkpoint.Store, for tests and for
// programs that only need checkpoints to survive within one process.
//
// Importing it registers the "mem" URL scheme: mem://name opens the store
// called name, shared by every Open of that name in this process.
package memstore

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"net/url"
	"sort"
	"strings"
	"sync"
	"time"

	"github.com/spotsafe/spotsafe/checkpoint"
	"github.com/spotsafe/spotsafe/internal/objstore"
)

// Store keeps objects in memory. The zero value is not usable; call New.
type Store struct {
	mu      sync.RWMutex
	objects map[string]object
}

type object struct {
	data     []byte
	modified time.Time
}

var (
	_ checkpoint.Store             = (*Store)(nil)
	_ checkpoint.RangeGetter       = (*Store)(nil)
	_ checkpoint.ConditionalPutter = (*Store)(nil)
)

// New returns an empty store.
func New() *Store { return &Store{objects: make(map[string]object)} }

// named holds the stores opened by name through mem:// URLs; like the scheme
// registry it is process-wide by nature (that is what mem:// is for).
var named struct {
	sync.Mutex
	m map[string]*Store
}

func init() {
	checkpoint.Register("mem", func(_ context.Context, u *url.URL) (checkpoint.Store, error) {
		name := u.Host + u.Path
		named.Lock()
		defer named.Unlock()
		if named.m == nil {
			named.m = make(map[string]*Store)
		}
		s := named.m[name]
		if s == nil {
			s = New()
			named.m[name] = s
		}
		return s, nil
	})
}

// Put stores a copy of r's bytes. The object appears only once all of r was
// read without error.
func (s *Store) Put(ctx context.Context, key string, r io.Reader, size int64) error {
	return s.put(ctx, key, r, size, false)
}

// PutIfAbsent is Put that fails with an error matching fs.ErrExist when the
// key exists.
func (s *Store) PutIfAbsent(ctx context.Context, key string, r io.Reader, size int64) error {
	return s.put(ctx, key, r, size, true)
}

func (s *Store) put(ctx context.Context, key string, r io.Reader, size int64, ifAbsent bool) error {
	if err := checkpoint.ValidateKey(key); err != nil {
		return err
	}
	data, err := readObject(objstore.CtxReader(ctx, r), size)
	if err != nil {
		return fmt.Errorf("memstore: put %s: %w", key, err)
	}
	if err := ctx.Err(); err != nil {
		return fmt.Errorf("memstore: put %s: %w", key, err)
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if _, exists := s.objects[key]; exists && ifAbsent {
		return checkpoint.Exists(key, nil)
	}
	s.objects[key] = object{data: data, modified: time.Now()}
	return nil
}

// readObject reads all of r. With a known size it reads into one exact
// allocation (a bytes.Buffer grown to size would still reallocate, doubling,
// to find EOF) and then makes sure r has nothing more.
func readObject(r io.Reader, size int64) ([]byte, error) {
	if size < 0 {
		var buf bytes.Buffer
		if _, err := io.Copy(&buf, r); err != nil {
			return nil, err
		}
		return buf.Bytes(), nil
	}
	data := make([]byte, size)
	n, err := io.ReadFull(r, data)
	if err == io.EOF || err == io.ErrUnexpectedEOF {
		return nil, fmt.Errorf("read %d bytes, want %d: %w", n, size, io.ErrUnexpectedEOF)
	}
	if err != nil {
		return nil, err
	}
	var extra [1]byte
	if m, err := r.Read(extra[:]); m > 0 {
		return nil, fmt.Errorf("reader has more than %d bytes", size)
	} else if err != nil && err != io.EOF {
		return nil, err
	}
	return data, nil
}

// Get returns a reader over the object as it was when Get was called.
func (s *Store) Get(ctx context.Context, key string) (io.ReadCloser, error) {
	return s.GetRange(ctx, key, 0, -1)
}

// GetRange returns length bytes from offset (length < 0: to the end).
func (s *Store) GetRange(ctx context.Context, key string, offset, length int64) (io.ReadCloser, error) {
	if err := checkpoint.ValidateKey(key); err != nil {
		return nil, err
	}
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	s.mu.RLock()
	o, ok := s.objects[key]
	s.mu.RUnlock()
	if !ok {
		return nil, checkpoint.NotExist(key, nil)
	}
	if offset < 0 || offset > int64(len(o.data)) {
		return nil, fmt.Errorf("memstore: %s: offset %d outside 0..%d", key, offset, len(o.data))
	}
	end := int64(len(o.data))
	if length >= 0 && offset+length < end {
		end = offset + length
	}
	// Objects are never mutated in place (Put replaces the slice), so the
	// reader can share the bytes.
	return io.NopCloser(bytes.NewReader(o.data[offset:end])), nil
}

// List returns the objects under prefix, sorted by key.
func (s *Store) List(ctx context.Context, prefix string) ([]checkpoint.ObjectInfo, error) {
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	s.mu.RLock()
	defer s.mu.RUnlock()
	var out []checkpoint.ObjectInfo
	for k, o := range s.objects {
		if strings.HasPrefix(k, prefix) {
			out = append(out, checkpoint.ObjectInfo{Key: k, Size: int64(len(o.data)), Modified: o.modified})
		}
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Key < out[j].Key })
	return out, nil
}

// Delete removes the object; a missing key is an error matching
// fs.ErrNotExist.
func (s *Store) Delete(ctx context.Context, key string) error {
	if err := checkpoint.ValidateKey(key); err != nil {
		return err
	}
	if err := ctx.Err(); err != nil {
		return err
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if _, ok := s.objects[key]; !ok {
		return checkpoint.NotExist(key, nil)
	}
	delete(s.objects, key)
	return nil
}
