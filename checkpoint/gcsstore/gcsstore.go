// Package gcsstore is a checkpoint.Store on Google Cloud Storage, built on
// cloud.google.com/go/storage.
//
// Importing it registers the "gs" URL scheme with checkpoint.Open:
//
//	gs://bucket/prefix                   Application Default Credentials
//	gs://bucket/prefix?endpoint=URL      an emulator (fake-gcs-server), no auth
//
// STORAGE_EMULATOR_HOST is honoured as the SDK documents. Only programs that
// import this package link the GCS client (about 50 MB of grpc and otel);
// nothing else in spotsafe imports it.
//
// Every write carries a precondition: a fresh key is created with
// DoesNotExist (ifGenerationMatch=0), an overwrite names the generation it
// replaces. That is what makes PutIfAbsent atomic, and it makes every upload
// idempotent, so the client retries uploads on transient errors (the store
// sets the RetryAlways policy on its write handles). Uploads send the
// object's CRC32C, so the server refuses bytes that do not match. Objects of
// at least Options.ParallelThreshold bytes go up as a parallel composite
// upload: parts are uploaded concurrently as temporary objects under a
// reserved prefix, composed into the key with the same precondition, and
// deleted.
package gcsstore

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"sort"
	"strings"
	"sync"
	"time"

	"cloud.google.com/go/storage"
	"github.com/googleapis/gax-go/v2"
	"google.golang.org/api/googleapi"
	"google.golang.org/api/iterator"

	"github.com/spotsafe/spotsafe/checkpoint"
)

// Store keeps checkpoint objects in one GCS bucket, under an optional
// prefix. It is safe for concurrent use. Create it with New or through
// checkpoint.Open("gs://...").
type Store struct {
	client      *storage.Client
	ownsClient  bool
	bucket      *storage.BucketHandle
	bucketName  string
	prefix      string // "" or ends with "/"
	tmpPrefix   string // prefix + TempDir + "/"
	chunkSize   int
	threshold   int64
	partSize    int64
	concurrency int
	retryFor    time.Duration
	backoff     gax.Backoff
	log         *slog.Logger
	gens        genCache
}

var (
	_ checkpoint.Store             = (*Store)(nil)
	_ checkpoint.RangeGetter       = (*Store)(nil)
	_ checkpoint.ConditionalPutter = (*Store)(nil)
	_ io.Closer                    = (*Store)(nil)
)

// Options configure a Store. The zero value (or nil) is ready to use.
type Options struct {
	// Prefix is prepended to every key ("runs/a" stores "x" as "runs/a/x").
	// A trailing slash is added if missing; empty means the bucket root.
	Prefix string

	// ChunkSize is the resumable-upload chunk size, rounded up to a multiple
	// of 256 KiB; default 16 MiB (the SDK's). Each upload holds one chunk in
	// memory so that a failed chunk can be resent; larger chunks mean fewer
	// round trips (one per chunk) and fewer retries to finalize, smaller ones
	// less memory and less to resend. 16 MiB keeps one round trip per 16 MiB,
	// which at 20 ms and 100 MB/s costs about 10 % of a chunk's transfer time.
	// Objects smaller than a chunk go up in one request with a buffer only as
	// large as the object. A negative value disables chunking: one streaming
	// request per object, no buffer, and no resumption after an error.
	ChunkSize int

	// ParallelThreshold is the object size from which Put uses a parallel
	// composite upload; default 64 MiB. Negative disables them. Objects of
	// unknown size (-1) always go up through one resumable upload.
	ParallelThreshold int64

	// PartSize is the size of the parts of a parallel composite upload;
	// default 16 MiB. It grows if an object would need more than 1024 parts.
	PartSize int64

	// Concurrency bounds the part uploads in flight for one Put; default 8.
	// When the reader is not an io.ReaderAt, each part in flight is buffered
	// in memory (Concurrency+1 buffers of PartSize).
	Concurrency int

	// RetryTimeout bounds the retries of one request (or one upload chunk or
	// part) on transient errors; default 2 minutes. ctx bounds everything.
	RetryTimeout time.Duration

	// Logger receives warnings, such as temporaries that could not be
	// deleted. Nil discards.
	Logger *slog.Logger
}

// TempDir is the reserved first key segment under which parallel composite
// uploads keep their temporary parts. Keys inside it are refused, List never
// returns them, and Sweep removes leftovers. A bucket lifecycle rule
// deleting objects under <prefix>/.spotsafe-tmp/ after a day is a good idea.
const TempDir = ".spotsafe-tmp"

const (
	defaultChunkSize   = 16 << 20
	defaultThreshold   = 64 << 20
	defaultPartSize    = 16 << 20
	defaultConcurrency = 8
	defaultRetry       = 2 * time.Minute
	chunkAlign         = 256 << 10
	maxParts           = 1024
	maxComposeSources  = 32
	maxNameLen         = 1024
	contentType        = "application/octet-stream"
)

// ErrInvalidBucket is returned by New for a bucket name GCS would refuse.
var ErrInvalidBucket = errors.New("gcsstore: invalid bucket name")

// New returns a Store on bucket using client. The Store does not close
// client. Reads through a client made for an emulator need
// storage.WithJSONReads().
func New(client *storage.Client, bucket string, opts *Options) (*Store, error) {
	if client == nil {
		return nil, errors.New("gcsstore: nil client")
	}
	if err := validateBucket(bucket); err != nil {
		return nil, err
	}
	var o Options
	if opts != nil {
		o = *opts
	}
	prefix := strings.Trim(o.Prefix, "/")
	if prefix != "" {
		if err := validateKey(prefix); err != nil {
			return nil, fmt.Errorf("gcsstore: prefix: %w", err)
		}
		prefix += "/"
	}
	s := &Store{
		client:      client,
		bucketName:  bucket,
		prefix:      prefix,
		tmpPrefix:   prefix + TempDir + "/",
		chunkSize:   o.ChunkSize,
		threshold:   o.ParallelThreshold,
		partSize:    o.PartSize,
		concurrency: o.Concurrency,
		retryFor:    o.RetryTimeout,
		log:         o.Logger,
	}
	switch {
	case s.chunkSize == 0:
		s.chunkSize = defaultChunkSize
	case s.chunkSize < 0:
		s.chunkSize = 0
	default:
		s.chunkSize = roundUp(s.chunkSize, chunkAlign)
	}
	if s.threshold == 0 {
		s.threshold = defaultThreshold
	}
	if s.partSize <= 0 {
		s.partSize = defaultPartSize
	}
	if s.concurrency <= 0 {
		s.concurrency = defaultConcurrency
	}
	if s.retryFor <= 0 {
		s.retryFor = defaultRetry
	}
	if s.log == nil {
		s.log = slog.New(slog.DiscardHandler)
	}
	s.backoff = gax.Backoff{Initial: 100 * time.Millisecond, Max: 10 * time.Second, Multiplier: 2}
	// Reads, listings, metadata and composes: the client's default policy
	// (idempotent calls only), our backoff, bounded by RetryTimeout.
	s.bucket = client.Bucket(bucket).Retryer(storage.WithBackoff(s.backoff), storage.WithMaxRetryDuration(s.retryFor))
	return s, nil
}

// Bucket returns the bucket name.
func (s *Store) Bucket() string { return s.bucketName }

// Prefix returns the key prefix ("" or ending in "/").
func (s *Store) Prefix() string { return s.prefix }

// Close closes the client if the Store created it (checkpoint.Open does);
// a client passed to New is left open.
func (s *Store) Close() error {
	if s.ownsClient {
		return s.client.Close()
	}
	return nil
}

// Put stores the object at key, replacing any object there. It is atomic:
// readers see the old object (or none) until Put returns nil. If ctx is
// cancelled or r fails, nothing is finalized. size is r's exact length or
// -1 when unknown; a reader that yields a different number of bytes fails
// the Put.
//
// A fresh key is written with a DoesNotExist precondition; an existing one
// with GenerationMatch on the generation read just before. When another
// writer replaces (or deletes) the object in between, GCS refuses this
// write with 412 and Put returns nil: it is ordered just before that other
// write, which replaced it (last writer wins, as with unconditional writes,
// but no reader ever sees a version that was already superseded).
func (s *Store) Put(ctx context.Context, key string, r io.Reader, size int64) error {
	return s.put(ctx, key, r, size, false)
}

// PutIfAbsent creates the object only if nothing exists at key (a
// DoesNotExist precondition, HTTP 412 otherwise); the loser gets an error
// matching fs.ErrExist that also wraps the *googleapi.Error.
func (s *Store) PutIfAbsent(ctx context.Context, key string, r io.Reader, size int64) error {
	return s.put(ctx, key, r, size, true)
}

// Get opens the object for reading, as one streaming request: GCS keeps
// serving the generation it started with even if the object is replaced
// meanwhile, and the SDK verifies the object's CRC32C at the end of the
// read. For parallel reads of a large object use GetRange, as the
// Manager's restore does. (Parallel ranged reads inside Get would have to
// pin a generation, and a read would then fail when the object is
// replaced mid-read, instead of returning the old version whole.)
func (s *Store) Get(ctx context.Context, key string) (io.ReadCloser, error) {
	if err := s.checkKey(key); err != nil {
		return nil, err
	}
	rd, err := s.bucket.Object(s.prefix + key).NewReader(ctx)
	if err != nil {
		return nil, s.mapErr("get", key, err)
	}
	return rd, nil
}

// GetRange reads length bytes from offset (length < 0: to the end) with one
// ranged request.
func (s *Store) GetRange(ctx context.Context, key string, offset, length int64) (io.ReadCloser, error) {
	if err := s.checkKey(key); err != nil {
		return nil, err
	}
	if offset < 0 {
		return nil, fmt.Errorf("gcsstore: get %s: negative offset %d", key, offset)
	}
	obj := s.bucket.Object(s.prefix + key)
	if length == 0 {
		// The SDK would fetch the whole object and drop it.
		attrs, err := obj.Attrs(ctx)
		if err != nil {
			return nil, s.mapErr("get", key, err)
		}
		if offset > attrs.Size {
			return nil, fmt.Errorf("gcsstore: get %s: offset %d beyond size %d", key, offset, attrs.Size)
		}
		return io.NopCloser(bytes.NewReader(nil)), nil
	}
	rd, err := obj.NewRangeReader(ctx, offset, length)
	if err == nil {
		return rd, nil
	}
	var ge *googleapi.Error
	if errors.As(err, &ge) && ge.Code == http.StatusRequestedRangeNotSatisfiable {
		// GCS answers 416 for a range starting at the end; that is an
		// empty read, not an error. Beyond the end it is one.
		attrs, aerr := obj.Attrs(ctx)
		if aerr != nil {
			return nil, s.mapErr("get", key, aerr)
		}
		if offset == attrs.Size {
			return io.NopCloser(bytes.NewReader(nil)), nil
		}
		return nil, fmt.Errorf("gcsstore: get %s: offset %d beyond size %d: %w", key, offset, attrs.Size, err)
	}
	return nil, s.mapErr("get", key, err)
}

// List returns the objects whose keys start with prefix, sorted by key.
// Temporaries of parallel uploads are never listed.
func (s *Store) List(ctx context.Context, prefix string) ([]checkpoint.ObjectInfo, error) {
	if strings.ContainsRune(prefix, 0) {
		return nil, fmt.Errorf("%w: list prefix %q contains NUL", checkpoint.ErrInvalidKey, prefix)
	}
	q := &storage.Query{Prefix: s.prefix + prefix}
	if err := q.SetAttrSelection([]string{"Name", "Size", "Updated"}); err != nil {
		return nil, fmt.Errorf("gcsstore: list %q: %w", prefix, err)
	}
	it := s.bucket.Objects(ctx, q)
	var out []checkpoint.ObjectInfo
	for {
		attrs, err := it.Next()
		if errors.Is(err, iterator.Done) {
			break
		}
		if err != nil {
			return nil, fmt.Errorf("gcsstore: list %q: %w", prefix, err)
		}
		if strings.HasPrefix(attrs.Name, s.tmpPrefix) || !strings.HasPrefix(attrs.Name, s.prefix) {
			continue
		}
		out = append(out, checkpoint.ObjectInfo{
			Key:      strings.TrimPrefix(attrs.Name, s.prefix),
			Size:     attrs.Size,
			Modified: attrs.Updated,
		})
	}
	// GCS lists in lexicographic byte order already; sort to make the
	// contract independent of that.
	sort.Slice(out, func(i, j int) bool { return out[i].Key < out[j].Key })
	return out, nil
}

// Delete removes the object; a missing key is an error matching
// fs.ErrNotExist. The delete is not retried (a retried delete that already
// succeeded would report a missing key).
func (s *Store) Delete(ctx context.Context, key string) error {
	if err := s.checkKey(key); err != nil {
		return err
	}
	err := s.bucket.Object(s.prefix + key).Delete(ctx)
	if err == nil || errors.Is(err, storage.ErrObjectNotExist) {
		s.gens.drop(s.prefix + key)
	}
	if err != nil {
		return s.mapErr("delete", key, err)
	}
	return nil
}

// Sweep deletes temporaries of parallel uploads (under TempDir) older than
// age, left behind by processes that died mid-upload, and returns how many
// it deleted. Uploads in progress are younger than age if age exceeds the
// longest upload; an hour is a safe choice.
func (s *Store) Sweep(ctx context.Context, age time.Duration) (int, error) {
	q := &storage.Query{Prefix: s.tmpPrefix}
	if err := q.SetAttrSelection([]string{"Name", "Updated", "Generation"}); err != nil {
		return 0, fmt.Errorf("gcsstore: sweep: %w", err)
	}
	it := s.bucket.Objects(ctx, q)
	cutoff := time.Now().Add(-age)
	n := 0
	for {
		attrs, err := it.Next()
		if errors.Is(err, iterator.Done) {
			return n, nil
		}
		if err != nil {
			return n, fmt.Errorf("gcsstore: sweep: %w", err)
		}
		if attrs.Updated.After(cutoff) {
			continue
		}
		err = s.bucket.Object(attrs.Name).If(storage.Conditions{GenerationMatch: attrs.Generation}).Delete(ctx)
		if err != nil && !errors.Is(err, storage.ErrObjectNotExist) && !isPrecondition(err) {
			return n, fmt.Errorf("gcsstore: sweep %s: %w", attrs.Name, err)
		}
		if err == nil {
			n++
		}
	}
}

func (s *Store) put(ctx context.Context, key string, r io.Reader, size int64, ifAbsent bool) error {
	if err := s.checkKey(key); err != nil {
		return err
	}
	if r == nil {
		return fmt.Errorf("gcsstore: put %s: nil reader", key)
	}
	if size < -1 {
		return fmt.Errorf("gcsstore: put %s: invalid size %d", key, size)
	}
	if err := ctx.Err(); err != nil {
		return fmt.Errorf("gcsstore: put %s: %w", key, err)
	}
	if s.threshold > 0 && size >= s.threshold {
		return s.putComposite(ctx, key, r, size, ifAbsent)
	}
	return s.putSingle(ctx, key, r, size, ifAbsent)
}

// putSingle uploads through one Writer: a single request for objects below
// ChunkSize, a resumable upload above.
func (s *Store) putSingle(ctx context.Context, key string, r io.Reader, size int64, ifAbsent bool) error {
	name := s.prefix + key
	rw := newRewinder(r)
	// gen 0 means DoesNotExist. An overwrite needs the current generation.
	// When resending is cheap (rewindable and small), guess it: the
	// generation this Store last wrote, else "absent" (checkpoint keys are
	// fresh); a wrong guess costs one refused attempt. Otherwise read it
	// first, so that a big or one-shot upload is sent once.
	var gen int64
	guessed := false
	switch {
	case ifAbsent:
	case rw != nil && size >= 0 && size <= int64(s.chunkSize):
		gen, guessed = s.gens.get(name), true
	default:
		g, err := s.generation(ctx, name)
		if err != nil {
			return s.mapErr("put", key, err)
		}
		gen = g
	}
	id := newID()
	for {
		g, err := s.upload(ctx, name, r, size, gen, id)
		if err == nil {
			s.gens.set(name, g)
			return nil
		}
		if !isPrecondition(err) {
			return s.mapErr("put", key, err)
		}
		done, g, err := s.settle412(ctx, key, id, ifAbsent, guessed, err)
		if done || err != nil {
			return err
		}
		gen, guessed = g, false
		if err := rw.rewind(); err != nil { // guessed implies rw != nil
			return fmt.Errorf("gcsstore: put %s: %w", key, err)
		}
	}
}

// settle412 decides what a failed precondition on key means for a Put
// whose requests carry the upload id. done is true when the Put is
// complete: an earlier attempt of ours landed (a retried request whose
// response was lost), or a concurrent writer replaced or deleted the object
// after this Put read its generation, which orders this Put just before
// that change (last writer wins, as with unconditional writes; nobody can
// have seen our version). A loser of PutIfAbsent gets an error matching
// fs.ErrExist. Otherwise, after a guessed "absent" precondition, gen is the
// generation to retry with.
func (s *Store) settle412(ctx context.Context, key, id string, ifAbsent, guessed bool, cause error) (done bool, gen int64, err error) {
	name := s.prefix + key
	cur, aerr := s.bucket.Object(name).Attrs(ctx)
	switch {
	case aerr == nil && cur.Metadata[uploadIDKey] == id:
		s.gens.set(name, cur.Generation)
		return true, 0, nil
	case ifAbsent:
		return false, 0, checkpoint.Exists(key, cause)
	case !guessed:
		s.gens.drop(name)
		s.log.Debug("gcsstore: put superseded by a concurrent writer", "bucket", s.bucketName, "key", key)
		return true, 0, nil
	case errors.Is(aerr, storage.ErrObjectNotExist):
		return false, 0, nil
	case aerr != nil:
		return false, 0, s.mapErr("put", key, aerr)
	}
	return false, cur.Generation, nil
}

// upload sends r through one Writer with the precondition gen (0:
// DoesNotExist) and the upload id in the object's metadata. On a read error, a size mismatch or a cancelled ctx, the
// writer's context is cancelled before Close, so nothing is finalized.
func (s *Store) upload(ctx context.Context, name string, r io.Reader, size int64, gen int64, id string) (int64, error) {
	wctx, cancel := context.WithCancel(ctx)
	defer cancel()
	budget := newRetryBudget(s.retryFor)
	w := s.writeHandle(name, gen, budget).NewWriter(wctx)
	w.ProgressFunc = func(int64) { budget.progress() }
	w.ContentType = contentType
	w.Metadata = map[string]string{uploadIDKey: id}
	w.ChunkSize = s.chunkSize
	if size >= 0 && s.chunkSize > 0 && size < int64(s.chunkSize) {
		// One request; size the SDK's retry buffer to the object, not to
		// a whole chunk (+1 so the buffer sees EOF and sends it at once).
		w.ChunkSize = roundUp(int(size)+1, chunkAlign)
	}
	w.ChunkRetryDeadline = s.retryFor
	// The SDK computes the CRC32C of the bytes as it reads them (one pass)
	// and sends it with the finalizing request: in the object's metadata
	// for a single request, as X-Goog-Hash on the last chunk of a resumable
	// upload. GCS refuses to create the object if the bytes differ.
	src := r
	if size >= 0 {
		src = io.LimitReader(r, size+1)
	}
	n, err := io.Copy(w, src)
	if err == nil && size >= 0 && n != size {
		err = fmt.Errorf("read %d bytes, want %d: %w", n, size, io.ErrUnexpectedEOF)
	}
	if err == nil {
		err = ctx.Err()
	}
	if err != nil {
		cancel()
		_ = w.Close() // reports the cancellation; nothing was finalized
		return 0, err
	}
	if err := w.Close(); err != nil {
		return 0, err
	}
	return w.Attrs().Generation, nil
}

// writeHandle returns a handle for a conditional write: DoesNotExist for gen
// 0, GenerationMatch otherwise. The precondition makes the write idempotent,
// so the RetryAlways policy is safe: transient errors are retried while the
// budget lasts.
func (s *Store) writeHandle(name string, gen int64, budget *retryBudget) *storage.ObjectHandle {
	cond := storage.Conditions{DoesNotExist: true}
	if gen != 0 {
		cond = storage.Conditions{GenerationMatch: gen}
	}
	return s.bucket.Object(name).If(cond).Retryer(
		storage.WithPolicy(storage.RetryAlways),
		storage.WithErrorFunc(budget.shouldRetry),
	)
}

// retryBudget stops retries once RetryTimeout has passed without progress.
// The SDK bounds the retries of one resumable chunk (ChunkRetryDeadline)
// but not those of a single-request upload, and WithMaxRetryDuration does
// not apply to Writers; this covers both.
type retryBudget struct {
	mu    sync.Mutex
	since time.Time
	limit time.Duration
}

func newRetryBudget(limit time.Duration) *retryBudget {
	return &retryBudget{since: time.Now(), limit: limit}
}

func (b *retryBudget) progress() {
	b.mu.Lock()
	b.since = time.Now()
	b.mu.Unlock()
}

func (b *retryBudget) shouldRetry(err error) bool {
	b.mu.Lock()
	expired := time.Since(b.since) > b.limit
	b.mu.Unlock()
	return !expired && storage.ShouldRetry(err)
}

// generation returns the object's current generation, 0 if absent.
func (s *Store) generation(ctx context.Context, name string) (int64, error) {
	attrs, err := s.bucket.Object(name).Attrs(ctx)
	if errors.Is(err, storage.ErrObjectNotExist) {
		return 0, nil
	}
	if err != nil {
		return 0, err
	}
	return attrs.Generation, nil
}

// mapErr turns a missing object into checkpoint.NotExist and wraps the rest.
func (s *Store) mapErr(op, key string, err error) error {
	if errors.Is(err, storage.ErrObjectNotExist) {
		return checkpoint.NotExist(key, err)
	}
	return fmt.Errorf("gcsstore: %s %s: %w", op, key, err)
}

// isPrecondition reports a failed precondition (HTTP 412).
func isPrecondition(err error) bool {
	var ge *googleapi.Error
	return errors.As(err, &ge) && ge.Code == http.StatusPreconditionFailed
}

// genCache remembers the generation of the objects this Store wrote, so
// that rewriting one needs no metadata request first. It is bounded; a
// stale entry (another writer changed the object) costs one refused
// attempt.
type genCache struct {
	mu sync.Mutex
	m  map[string]int64
}

const maxCachedGens = 4096

func (c *genCache) get(name string) int64 {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.m[name]
}

func (c *genCache) set(name string, gen int64) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.m == nil {
		c.m = make(map[string]int64)
	}
	if _, ok := c.m[name]; !ok && len(c.m) >= maxCachedGens {
		for k := range c.m { // evict an arbitrary entry
			delete(c.m, k)
			break
		}
	}
	c.m[name] = gen
}

func (c *genCache) drop(name string) {
	c.mu.Lock()
	defer c.mu.Unlock()
	delete(c.m, name)
}

// rewinder re-reads a seekable reader from where it started.
type rewinder struct {
	s     io.Seeker
	r     io.Reader
	start int64
}

func newRewinder(r io.Reader) *rewinder {
	s, ok := r.(io.Seeker)
	if !ok {
		return nil
	}
	start, err := s.Seek(0, io.SeekCurrent)
	if err != nil {
		return nil // e.g. a pipe behind *os.File
	}
	return &rewinder{s: s, r: r, start: start}
}

func (rw *rewinder) rewind() error {
	if _, err := rw.s.Seek(rw.start, io.SeekStart); err != nil {
		return fmt.Errorf("rewind reader: %w", err)
	}
	return nil
}

// checkKey validates key and that the object name stays within GCS's
// 1024-byte limit.
func (s *Store) checkKey(key string) error {
	if err := validateKey(key); err != nil {
		return err
	}
	if len(s.prefix)+len(key) > maxNameLen {
		return fmt.Errorf("%w: %q: object name longer than GCS's %d bytes", checkpoint.ErrInvalidKey, key, maxNameLen)
	}
	return nil
}

// validateKey applies checkpoint.ValidateKey and the store's own rules: a
// conservative character set that needs no escaping anywhere in GCS
// (A-Z a-z 0-9 and / . _ - = + , @ ~), and nothing under the reserved
// TempDir.
func validateKey(key string) error {
	if err := checkpoint.ValidateKey(key); err != nil {
		return err
	}
	for i := 0; i < len(key); i++ {
		c := key[i]
		switch {
		case 'a' <= c && c <= 'z', 'A' <= c && c <= 'Z', '0' <= c && c <= '9':
		case strings.IndexByte("/._-=+,@~", c) >= 0:
		default:
			return fmt.Errorf("%w: %q has %q; gcsstore allows A-Z a-z 0-9 and / . _ - = + , @ ~", checkpoint.ErrInvalidKey, key, c)
		}
	}
	if key == TempDir || strings.HasPrefix(key, TempDir+"/") {
		return fmt.Errorf("%w: %q is under the reserved %s/", checkpoint.ErrInvalidKey, key, TempDir)
	}
	return nil
}

// validateBucket checks GCS's bucket naming rules (the parts a client can
// check): 3-63 characters (222 with dots, 63 per dot-separated part),
// lowercase letters, digits, '-', '_' and '.', starting and ending with a
// letter or digit.
func validateBucket(b string) error {
	maxLen := 63
	if strings.Contains(b, ".") {
		maxLen = 222
	}
	if len(b) < 3 || len(b) > maxLen {
		return fmt.Errorf("%w: %q must have 3 to %d characters", ErrInvalidBucket, b, maxLen)
	}
	alnum := func(c byte) bool { return 'a' <= c && c <= 'z' || '0' <= c && c <= '9' }
	for i := 0; i < len(b); i++ {
		c := b[i]
		if !alnum(c) && c != '-' && c != '_' && c != '.' {
			return fmt.Errorf("%w: %q has %q (lowercase letters, digits, - _ . only)", ErrInvalidBucket, b, c)
		}
	}
	if !alnum(b[0]) || !alnum(b[len(b)-1]) {
		return fmt.Errorf("%w: %q must start and end with a letter or digit", ErrInvalidBucket, b)
	}
	for part := range strings.SplitSeq(b, ".") {
		if len(part) == 0 || len(part) > 63 {
			return fmt.Errorf("%w: %q has an empty or over-long dot-separated part", ErrInvalidBucket, b)
		}
	}
	return nil
}

func roundUp(n, to int) int { return (n + to - 1) / to * to }

// newID returns a random hex identifier for one parallel upload.
func newID() string {
	var b [8]byte
	_, _ = rand.Read(b[:]) // crypto/rand.Read never fails (Go 1.24+)
	return hex.EncodeToString(b[:])
}
