package checkpoint

import (
	"context"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"net/url"
	"sort"
	"strings"
	"sync"
	"time"
)

// Store is the driver interface for checkpoint storage: a flat namespace of
// keys ("a/b/c", '/'-separated, no leading slash) holding immutable-once-written
// objects. Implementations: checkpoint/filestore (local disk, the default),
// checkpoint/memstore, checkpoint/s3store, checkpoint/gcsstore,
// checkpoint/ossstore. Every implementation passes checkpoint/storetest.
//
// Errors: a missing key matches fs.ErrNotExist (Get, GetRange, Delete); a
// conditional create that loses matches fs.ErrExist; errors.As still reaches
// the SDK's own error. All methods honour ctx.
type Store interface {
	// Put stores the object atomically: readers see the old object (or
	// none) until Put returns nil, then the whole new one. A failed or
	// cancelled Put leaves no trace. size is the exact length of r, or -1
	// when unknown.
	Put(ctx context.Context, key string, r io.Reader, size int64) error
	// Get opens the object for reading.
	Get(ctx context.Context, key string) (io.ReadCloser, error)
	// List returns the objects whose keys start with prefix (a plain string
	// prefix: "a/b" matches "a/bc"), sorted by key.
	List(ctx context.Context, prefix string) ([]ObjectInfo, error)
	// Delete removes the object.
	Delete(ctx context.Context, key string) error
}

// ObjectInfo describes a stored object.
type ObjectInfo struct {
	Key      string
	Size     int64
	Modified time.Time
}

// RangeGetter is an optional capability: read length bytes from offset
// (length < 0: to the end). Restore uses it to fetch large parts in parallel.
type RangeGetter interface {
	GetRange(ctx context.Context, key string, offset, length int64) (io.ReadCloser, error)
}

// ConditionalPutter is an optional capability: create the object only if no
// object exists at key, atomically (S3 If-None-Match, GCS DoesNotExist, OSS
// x-oss-forbid-overwrite, O_EXCL/link on disk). The loser gets an error
// matching fs.ErrExist. The Manager writes MANIFEST.json with it, so that of
// two writers committing the same step exactly one wins.
type ConditionalPutter interface {
	PutIfAbsent(ctx context.Context, key string, r io.Reader, size int64) error
}

// ErrInvalidKey is returned for keys a Store refuses: empty, absolute, with
// "." or ".." segments, NUL, or characters outside the store's safe set.
var ErrInvalidKey = errors.New("checkpoint: invalid key")

// ValidateKey checks the rules every store shares: a non-empty relative
// '/'-separated path without empty, "." or ".." segments, NUL bytes, or
// backslashes. Stores may restrict further.
func ValidateKey(key string) error {
	if key == "" {
		return fmt.Errorf("%w: empty", ErrInvalidKey)
	}
	if strings.ContainsRune(key, 0) || strings.ContainsRune(key, '\\') {
		return fmt.Errorf("%w: %q contains NUL or backslash", ErrInvalidKey, key)
	}
	if strings.HasPrefix(key, "/") {
		return fmt.Errorf("%w: %q is absolute", ErrInvalidKey, key)
	}
	for seg := range strings.SplitSeq(key, "/") {
		if seg == "" || seg == "." || seg == ".." {
			return fmt.Errorf("%w: %q has an empty, '.' or '..' segment", ErrInvalidKey, key)
		}
	}
	return nil
}

// NotExist returns an error for a missing key that matches fs.ErrNotExist
// and, if cause is not nil, also wraps cause (the SDK's error).
func NotExist(key string, cause error) error {
	return &KeyError{Key: key, Kind: fs.ErrNotExist, Err: cause}
}

// Exists returns an error for a lost conditional create: it matches
// fs.ErrExist and wraps cause.
func Exists(key string, cause error) error {
	return &KeyError{Key: key, Kind: fs.ErrExist, Err: cause}
}

// KeyError is an error about one key that matches a kind (fs.ErrNotExist,
// fs.ErrExist) with errors.Is while keeping the underlying error for
// errors.As.
type KeyError struct {
	Key  string
	Kind error
	Err  error
}

// Error describes the key and what is wrong with it.
func (e *KeyError) Error() string {
	msg := fmt.Sprintf("checkpoint: %s: %v", e.Key, e.Kind)
	if e.Err != nil {
		msg += ": " + e.Err.Error()
	}
	return msg
}

// Unwrap returns both the kind and the cause.
func (e *KeyError) Unwrap() []error {
	if e.Err == nil {
		return []error{e.Kind}
	}
	return []error{e.Kind, e.Err}
}

// OpenFunc opens a store from a parsed URL.
type OpenFunc func(ctx context.Context, u *url.URL) (Store, error)

// The scheme registry is the one piece of package-level state in spotsafe:
// like database/sql drivers, a store package registers its scheme when it is
// imported (so a program links only the stores it imports), and Open finds it.
// It is guarded by a mutex and only ever added to.
var registry struct {
	sync.RWMutex
	m map[string]OpenFunc
}

// Register makes a scheme available to [Open]. Store packages call it from
// init; registering a scheme twice panics, as database/sql does.
func Register(scheme string, open OpenFunc) {
	registry.Lock()
	defer registry.Unlock()
	if registry.m == nil {
		registry.m = make(map[string]OpenFunc)
	}
	if _, dup := registry.m[scheme]; dup {
		panic("checkpoint: Register called twice for scheme " + scheme)
	}
	registry.m[scheme] = open
}

// Schemes lists the registered URL schemes, sorted.
func Schemes() []string {
	registry.RLock()
	defer registry.RUnlock()
	var out []string
	for s := range registry.m {
		out = append(out, s)
	}
	sort.Strings(out)
	return out
}

// ErrUnknownScheme is returned by Open for a scheme no imported store
// registered.
var ErrUnknownScheme = errors.New("checkpoint: unknown store URL scheme")

// Open opens the store a URL names: file:///abs/dir, file://./rel/dir,
// mem://name, s3://bucket/prefix, gs://bucket/prefix, oss://bucket/prefix.
// A plain path without a scheme means file. The store package must be
// imported (for its side effect) for its scheme to be known. If the
// returned Store implements io.Closer, close it when done.
func Open(ctx context.Context, rawURL string) (Store, error) {
	var u *url.URL
	if !strings.Contains(rawURL, "://") {
		// A plain path: build the URL instead of parsing, so that '%', '?'
		// and '#' in a file name stay part of the path.
		u = &url.URL{Scheme: "file", Path: rawURL}
		if !strings.HasPrefix(rawURL, "/") {
			u.Host, u.Path = ".", "/"+strings.TrimPrefix(rawURL, "./")
		}
	} else {
		var err error
		if u, err = url.Parse(rawURL); err != nil {
			return nil, fmt.Errorf("checkpoint: parse store URL %q: %w", rawURL, err)
		}
	}
	registry.RLock()
	open := registry.m[u.Scheme]
	registry.RUnlock()
	if open == nil {
		return nil, fmt.Errorf("%w %q (known: %s; import the store package, e.g. _ \"github.com/spotsafe/spotsafe/checkpoint/%sstore\")",
			ErrUnknownScheme, u.Scheme, strings.Join(Schemes(), ", "), u.Scheme)
	}
	s, err := open(ctx, u)
	if err != nil {
		return nil, fmt.Errorf("checkpoint: open %s: %w", rawURL, err)
	}
	return s, nil
}
