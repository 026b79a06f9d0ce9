// Package ossstore is a checkpoint.Store on Alibaba Cloud Object Storage
// Service (OSS), built on github.com/aliyun/aliyun-oss-go-sdk.
//
// Large objects are written as multipart uploads with Concurrency parts in
// flight and read back with parallel ranged GETs. A failed or cancelled Put
// aborts its multipart upload, so it leaves no object behind. PutIfAbsent
// sends x-oss-forbid-overwrite: true, which OSS answers with 409
// FileAlreadyExists when the key exists.
//
// Importing the package registers the oss URL scheme with checkpoint.Open:
//
//	oss://bucket/prefix?endpoint=https://oss-cn-hangzhou.aliyuncs.com
//	oss://bucket/prefix?region=cn-hangzhou
//
// Credentials come from OSS_ACCESS_KEY_ID / OSS_ACCESS_KEY_SECRET (and
// OSS_SESSION_TOKEN), or else ALIBABA_CLOUD_ACCESS_KEY_ID /
// ALIBABA_CLOUD_ACCESS_KEY_SECRET (and ALIBABA_CLOUD_SECURITY_TOKEN). See
// docs/stores-s3-oss.md.
package ossstore

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/url"
	"os"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/aliyun/aliyun-oss-go-sdk/oss"
	"github.com/cenkalti/backoff/v4"

	"github.com/spotsafe/spotsafe/checkpoint"
	"github.com/spotsafe/spotsafe/internal/objstore"
	"github.com/spotsafe/spotsafe/internal/rangeread"
)

// Store keeps checkpoint objects in one OSS bucket under an optional
// prefix. It is safe for concurrent use.
type Store struct {
	bucket *oss.Bucket
	prefix string // "" or ends in "/"
	opts   Options
	log    *slog.Logger
	// buffers recycles the chunk buffers of parallel reads between Gets.
	buffers *rangeread.BufferPool
}

var (
	_ checkpoint.Store             = (*Store)(nil)
	_ checkpoint.RangeGetter       = (*Store)(nil)
	_ checkpoint.ConditionalPutter = (*Store)(nil)
)

// Options tune a Store. The zero value is usable.
type Options struct {
	// Prefix is prepended (with a "/") to every key. Same character rules
	// as keys.
	Prefix string
	// PartSize is the size of multipart parts and of ranged reads;
	// default 8 MiB, at least 100 KiB (OSS's minimum part size).
	PartSize int64
	// Concurrency is the number of parts uploaded, or ranges fetched, in
	// parallel for one object; default 8.
	Concurrency int
	// MultipartThreshold: objects smaller than this (or than PartSize,
	// whichever is larger) go up in a single PutObject; default 16 MiB.
	MultipartThreshold int64
	// Attempts is how often one request is tried when it fails with a
	// transient error (5xx, 429, connection refused or reset, a cut body);
	// default 3. The OSS SDK does not retry on its own.
	Attempts int
	// Backoff paces the retries; nil means exponential from 200 ms.
	// Waiting always ends when the context does.
	Backoff func() backoff.BackOff
	// AbortTimeout bounds the AbortMultipartUpload sent after a failed or
	// cancelled upload (on a fresh context, so that cancelling a Put still
	// cleans up); default 10 s.
	AbortTimeout time.Duration
	// Logger receives debug records; nil discards them.
	Logger *slog.Logger
}

const (
	minPartSize     = 100 << 10
	defaultAttempts = 3
)

// New returns a store on the named bucket of client. Build client with
// oss.New or NewClient.
func New(client *oss.Client, bucket string, opts *Options) (*Store, error) {
	if client == nil {
		return nil, errors.New("ossstore: nil client")
	}
	if bucket == "" || strings.ContainsAny(bucket, "/?#") {
		return nil, fmt.Errorf("ossstore: invalid bucket name %q", bucket)
	}
	b, err := client.Bucket(bucket)
	if err != nil {
		return nil, fmt.Errorf("ossstore: bucket %q: %w", bucket, err)
	}
	s := &Store{bucket: b}
	if opts != nil {
		s.opts = *opts
	}
	o := &s.opts
	t := objstore.Tuning{PartSize: o.PartSize, Concurrency: o.Concurrency, MultipartThreshold: o.MultipartThreshold, AbortTimeout: o.AbortTimeout}
	if err := t.Normalize("ossstore", minPartSize, "OSS's minimum of 100 KiB"); err != nil {
		return nil, err
	}
	o.PartSize, o.Concurrency, o.MultipartThreshold, o.AbortTimeout = t.PartSize, t.Concurrency, t.MultipartThreshold, t.AbortTimeout
	switch {
	case o.Attempts == 0:
		o.Attempts = defaultAttempts
	case o.Attempts < 0:
		return nil, fmt.Errorf("ossstore: negative Attempts %d", o.Attempts)
	}
	if o.Backoff == nil {
		o.Backoff = func() backoff.BackOff {
			b := backoff.NewExponentialBackOff()
			b.InitialInterval = 200 * time.Millisecond
			b.MaxInterval = 5 * time.Second
			b.MaxElapsedTime = 0 // the context bounds it
			return b
		}
	}
	if o.Prefix, s.prefix, err = objstore.KeyPrefix("ossstore", o.Prefix); err != nil {
		return nil, err
	}
	s.buffers = rangeread.NewBufferPool(o.PartSize)
	s.log = o.Logger
	if s.log == nil {
		s.log = slog.New(slog.DiscardHandler)
	}
	return s, nil
}

// Config says where OSS is and who connects. Empty fields are taken from
// the environment (see NewClient).
type Config struct {
	// Endpoint, e.g. https://oss-cn-hangzhou.aliyuncs.com or
	// https://oss-cn-hangzhou-internal.aliyuncs.com from inside the region.
	// Default: OSS_ENDPOINT, else derived from Region.
	Endpoint string
	// Region, e.g. cn-hangzhou. When set, requests are signed with V4.
	// Default: OSS_REGION.
	Region string
	// AccessKeyID, AccessKeySecret and SecurityToken (STS). Default:
	// OSS_ACCESS_KEY_ID, OSS_ACCESS_KEY_SECRET, OSS_SESSION_TOKEN, else
	// ALIBABA_CLOUD_ACCESS_KEY_ID, ALIBABA_CLOUD_ACCESS_KEY_SECRET,
	// ALIBABA_CLOUD_SECURITY_TOKEN.
	AccessKeyID, AccessKeySecret, SecurityToken string
	// PathStyle addresses buckets as endpoint/bucket instead of
	// bucket.endpoint (OSS-compatible servers on a plain host name; IP
	// endpoints use path style anyway).
	PathStyle bool
}

// NewClient builds an OSS client from cfg, filling empty fields from the
// environment. It fails when no endpoint or no credentials are found.
func NewClient(cfg Config) (*oss.Client, error) {
	if cfg.Region == "" {
		cfg.Region = os.Getenv("OSS_REGION")
	}
	if cfg.Endpoint == "" {
		cfg.Endpoint = os.Getenv("OSS_ENDPOINT")
	}
	if cfg.Endpoint == "" && cfg.Region != "" {
		cfg.Endpoint = "https://oss-" + cfg.Region + ".aliyuncs.com"
	}
	if cfg.Endpoint == "" {
		return nil, errors.New("ossstore: no endpoint: set Config.Endpoint, ?endpoint= or OSS_ENDPOINT (or a region)")
	}
	if e, err := url.Parse(cfg.Endpoint); err != nil || (e.Scheme != "http" && e.Scheme != "https") || e.Host == "" {
		return nil, fmt.Errorf("ossstore: endpoint %q: want http(s)://host[:port]", cfg.Endpoint)
	}
	if cfg.AccessKeyID == "" && cfg.AccessKeySecret == "" {
		for _, env := range [][3]string{
			{"OSS_ACCESS_KEY_ID", "OSS_ACCESS_KEY_SECRET", "OSS_SESSION_TOKEN"},
			{"ALIBABA_CLOUD_ACCESS_KEY_ID", "ALIBABA_CLOUD_ACCESS_KEY_SECRET", "ALIBABA_CLOUD_SECURITY_TOKEN"},
		} {
			if id, secret := os.Getenv(env[0]), os.Getenv(env[1]); id != "" && secret != "" {
				cfg.AccessKeyID, cfg.AccessKeySecret = id, secret
				if cfg.SecurityToken == "" {
					cfg.SecurityToken = os.Getenv(env[2])
				}
				break
			}
		}
	}
	if cfg.AccessKeyID == "" || cfg.AccessKeySecret == "" {
		return nil, errors.New("ossstore: no credentials: set OSS_ACCESS_KEY_ID and OSS_ACCESS_KEY_SECRET (or ALIBABA_CLOUD_ACCESS_KEY_ID and ALIBABA_CLOUD_ACCESS_KEY_SECRET)")
	}
	var copts []oss.ClientOption
	if cfg.SecurityToken != "" {
		copts = append(copts, oss.SecurityToken(cfg.SecurityToken))
	}
	if cfg.Region != "" {
		copts = append(copts, oss.Region(cfg.Region), oss.AuthVersion(oss.AuthV4))
	}
	if cfg.PathStyle {
		copts = append(copts, oss.ForcePathStyle(true))
	}
	c, err := oss.New(cfg.Endpoint, cfg.AccessKeyID, cfg.AccessKeySecret, copts...)
	if err != nil {
		return nil, fmt.Errorf("ossstore: client: %w", err)
	}
	return c, nil
}

func init() {
	checkpoint.Register("oss", openURL)
}

// openURL opens oss://bucket/prefix?endpoint=..&region=..&path_style=..&part_size=..&concurrency=..
func openURL(_ context.Context, u *url.URL) (checkpoint.Store, error) {
	if u.Host == "" {
		return nil, errors.New("ossstore: URL has no bucket (want oss://bucket/prefix)")
	}
	q := u.Query()
	for k := range q {
		switch k {
		case "endpoint", "region", "path_style", "part_size", "concurrency":
		default:
			return nil, fmt.Errorf("ossstore: unknown URL parameter %q (known: endpoint, region, path_style, part_size, concurrency)", k)
		}
	}
	cfg := Config{Endpoint: q.Get("endpoint"), Region: q.Get("region")}
	if v := q.Get("path_style"); v != "" {
		b, err := strconv.ParseBool(v)
		if err != nil {
			return nil, fmt.Errorf("ossstore: path_style=%q: want true or false", v)
		}
		cfg.PathStyle = b
	}
	opts := &Options{Prefix: strings.Trim(u.Path, "/")}
	if v := q.Get("part_size"); v != "" {
		n, err := objstore.ParseSize(v)
		if err != nil {
			return nil, fmt.Errorf("ossstore: part_size: %w", err)
		}
		opts.PartSize = n
	}
	if v := q.Get("concurrency"); v != "" {
		n, err := strconv.Atoi(v)
		if err != nil || n < 1 {
			return nil, fmt.Errorf("ossstore: concurrency=%q: want a positive integer", v)
		}
		opts.Concurrency = n
	}
	client, err := NewClient(cfg)
	if err != nil {
		return nil, err
	}
	return New(client, u.Host, opts)
}

// Bucket returns the SDK's bucket handle the store uses.
func (s *Store) Bucket() *oss.Bucket { return s.bucket }

// Put uploads the object: one PutObject below MultipartThreshold, else a
// multipart upload with Concurrency parts in flight. The object becomes
// visible only when the upload completes; a failure or cancellation aborts
// the multipart upload. size must be r's exact length, or -1.
func (s *Store) Put(ctx context.Context, key string, r io.Reader, size int64) error {
	return s.put(ctx, key, r, size, false)
}

// PutIfAbsent is Put that only creates: with x-oss-forbid-overwrite: true
// on the PutObject (or on InitiateMultipartUpload and
// CompleteMultipartUpload), so that if key exists it fails with an error
// matching fs.ErrExist that also wraps the SDK's oss.ServiceError (409
// FileAlreadyExists).
func (s *Store) PutIfAbsent(ctx context.Context, key string, r io.Reader, size int64) error {
	return s.put(ctx, key, r, size, true)
}

func (s *Store) put(ctx context.Context, key string, r io.Reader, size int64, ifAbsent bool) error {
	if err := objstore.ValidateKey(key); err != nil {
		return err
	}
	if size < -1 {
		return fmt.Errorf("ossstore: put %s: invalid size %d", key, size)
	}
	body := objstore.NewExactReader("ossstore", r, size)
	// Read up to the threshold (at least one part): if the object fits, it
	// goes up in one replayable PutObject.
	limit := max(s.opts.MultipartThreshold, s.opts.PartSize)
	if size >= 0 && size < limit {
		limit = size + 1 // +1 to notice an overlong reader
	}
	first := make([]byte, limit)
	n, err := io.ReadFull(body, first)
	switch {
	case err == io.EOF || err == io.ErrUnexpectedEOF:
		return s.putSingle(ctx, key, first[:n], ifAbsent)
	case err != nil:
		return s.fail(ctx, "put", key, err)
	}
	return s.putMultipart(ctx, key, first, body, ifAbsent)
}

func (s *Store) putSingle(ctx context.Context, key string, data []byte, ifAbsent bool) error {
	opts := []oss.Option{oss.WithContext(ctx), oss.ContentType("application/octet-stream")}
	if ifAbsent {
		opts = append(opts, oss.ForbidOverWrite(true))
	}
	return s.retry(ctx, "put", key, ifAbsent, func() error {
		var body io.Reader
		if len(data) > 0 {
			body = bytes.NewReader(data)
		} // else no body at all: net/http would send an empty non-nil body chunked, without Content-Length
		return s.bucket.PutObject(s.prefix+key, body, opts...)
	})
}

// putMultipart uploads first and then the rest of body in PartSize parts,
// Concurrency at a time, and completes the upload; on any failure it
// aborts.
func (s *Store) putMultipart(ctx context.Context, key string, first []byte, body io.Reader, ifAbsent bool) error {
	full := s.prefix + key
	opts := []oss.Option{oss.WithContext(ctx), oss.ContentType("application/octet-stream")}
	if ifAbsent {
		opts = append(opts, oss.ForbidOverWrite(true))
	}
	var imur oss.InitiateMultipartUploadResult
	err := s.retry(ctx, "put", key, ifAbsent, func() error {
		var err error
		imur, err = s.bucket.InitiateMultipartUpload(full, opts...)
		return err
	})
	if err != nil {
		return err
	}
	s.log.DebugContext(ctx, "ossstore: multipart upload", "key", key, "upload", imur.UploadID)
	parts, err := s.uploadParts(ctx, key, imur, first, body)
	if err == nil {
		err = s.complete(ctx, key, imur, parts, ifAbsent)
	}
	if err != nil {
		s.abort(ctx, key, imur)
		return err
	}
	return nil
}

// uploadParts reads parts in order and uploads them with Concurrency
// workers; buffers are recycled, so memory stays at (Concurrency+1) parts.
func (s *Store) uploadParts(parent context.Context, key string, imur oss.InitiateMultipartUploadResult, first []byte, body io.Reader) ([]oss.UploadPart, error) {
	ctx, cancel := context.WithCancel(parent)
	defer cancel()
	type job struct {
		num  int
		data []byte
	}
	jobs := make(chan job)
	free := make(chan []byte, s.opts.Concurrency+1)
	var (
		mu      sync.Mutex
		parts   []oss.UploadPart
		partErr error // the first part that failed for good
		wg      sync.WaitGroup
	)
	for range s.opts.Concurrency {
		wg.Go(func() {
			for j := range jobs {
				var part oss.UploadPart
				err := s.retry(ctx, "put", key, false, func() error {
					var err error
					part, err = s.bucket.UploadPart(imur, bytes.NewReader(j.data), int64(len(j.data)), j.num, oss.WithContext(ctx))
					return err
				})
				select {
				case free <- j.data[:cap(j.data)]:
				default:
				}
				mu.Lock()
				if err == nil {
					parts = append(parts, part)
				} else if partErr == nil {
					partErr = err
					cancel()
				}
				mu.Unlock()
			}
		})
	}
	// Produce parts: first (which may be longer than PartSize), then the
	// rest of body.
	var readErr error
	send := func(j job) bool {
		select {
		case jobs <- j:
			return true
		case <-ctx.Done():
			return false
		}
	}
	num := 1
	for len(first) > 0 {
		n := min(int64(len(first)), s.opts.PartSize)
		if !send(job{num, first[:n:n]}) {
			break
		}
		first, num = first[n:], num+1
	}
	for ctx.Err() == nil {
		var buf []byte
		select {
		case buf = <-free:
		default:
			buf = make([]byte, s.opts.PartSize)
		}
		n, err := io.ReadFull(body, buf)
		if n > 0 && !send(job{num, buf[:n]}) {
			break
		}
		num++
		if err == io.EOF || err == io.ErrUnexpectedEOF {
			break
		}
		if err != nil {
			readErr = err
			cancel()
			break
		}
	}
	close(jobs)
	wg.Wait()
	switch {
	case readErr != nil:
		return nil, s.fail(parent, "put", key, readErr)
	case partErr != nil:
		return nil, partErr
	case parent.Err() != nil:
		return nil, s.fail(parent, "put", key, parent.Err())
	}
	slices.SortFunc(parts, func(a, b oss.UploadPart) int { return a.PartNumber - b.PartNumber })
	return parts, nil
}

// complete finishes the upload. A retry after a lost response may find the
// upload already completed (NoSuchUpload); then the object's existence
// decides.
func (s *Store) complete(ctx context.Context, key string, imur oss.InitiateMultipartUploadResult, parts []oss.UploadPart, ifAbsent bool) error {
	opts := []oss.Option{oss.WithContext(ctx)}
	if ifAbsent {
		opts = append(opts, oss.ForbidOverWrite(true))
	}
	tries := 0
	err := s.retry(ctx, "put", key, ifAbsent, func() error {
		tries++
		_, err := s.bucket.CompleteMultipartUpload(imur, parts, opts...)
		if tries > 1 && serviceCode(err) == "NoSuchUpload" {
			if ok, herr := s.bucket.IsObjectExist(s.prefix+key, oss.WithContext(ctx)); herr == nil && ok {
				return nil
			}
		}
		return err
	})
	return err
}

// abort cancels the upload on a fresh context, so that a cancelled Put
// still cleans up.
func (s *Store) abort(ctx context.Context, key string, imur oss.InitiateMultipartUploadResult) {
	actx, cancel := context.WithTimeout(context.WithoutCancel(ctx), s.opts.AbortTimeout)
	defer cancel()
	if err := s.bucket.AbortMultipartUpload(imur, oss.WithContext(actx)); err != nil {
		s.log.WarnContext(ctx, "ossstore: abort multipart upload failed; the bucket's lifecycle rule must remove it",
			"key", key, "upload", imur.UploadID, "err", err)
	}
}

// Get opens the object. Objects larger than PartSize are fetched as
// parallel ranged GETs (Concurrency at a time) and streamed in order,
// pinned to the first response's ETag.
func (s *Store) Get(ctx context.Context, key string) (io.ReadCloser, error) {
	return s.GetRange(ctx, key, 0, -1)
}

// GetRange opens length bytes from offset in one ranged GET. With length
// < 0 it reads to the end, in parallel like Get when that is large.
func (s *Store) GetRange(ctx context.Context, key string, offset, length int64) (io.ReadCloser, error) {
	if err := objstore.ValidateKey(key); err != nil {
		return nil, err
	}
	if offset < 0 {
		return nil, fmt.Errorf("ossstore: get %s: negative offset %d", key, offset)
	}
	if length == 0 {
		size, err := s.size(ctx, key)
		if err != nil {
			return nil, err
		}
		if offset > size {
			return nil, fmt.Errorf("ossstore: get %s: offset %d beyond size %d", key, offset, size)
		}
		return io.NopCloser(strings.NewReader("")), nil
	}
	first := s.opts.PartSize
	if length > 0 {
		// An explicit range is one request: callers that read ranges
		// (the Manager's restore) already run them in parallel.
		first = length
	}
	var hdr http.Header
	var body io.ReadCloser
	err := s.retry(ctx, "get", key, false, func() error {
		var err error
		body, err = s.bucket.GetObject(s.prefix+key, oss.WithContext(ctx),
			oss.Range(offset, offset+first-1), oss.RangeBehavior("standard"), oss.GetResponseHeader(&hdr))
		return err
	})
	if err != nil {
		if serviceStatus(err) == http.StatusRequestedRangeNotSatisfiable {
			return s.emptyRange(ctx, key, offset, err)
		}
		return nil, err
	}
	total, ok := objstore.TotalSize(hdr.Get("Content-Range"))
	if !ok {
		return objstore.SliceWhole("ossstore", body, key, offset, length)
	}
	end := total
	if length > 0 {
		end = min(total, offset+length)
	}
	if end-offset <= first {
		return body, nil
	}
	etag := hdr.Get("ETag")
	fetch := func(ctx context.Context, off, n int64) (io.ReadCloser, error) {
		var rc io.ReadCloser
		err := s.retry(ctx, "get", key, false, func() error {
			opts := []oss.Option{oss.WithContext(ctx), oss.Range(offset+off, offset+off+n-1), oss.RangeBehavior("standard")}
			if etag != "" {
				opts = append(opts, oss.IfMatch(etag))
			}
			var err error
			rc, err = s.bucket.GetObject(s.prefix+key, opts...)
			return err
		})
		return rc, err
	}
	return rangeread.New(ctx, end-offset, body, fetch, &rangeread.Options{
		ChunkSize:   first,
		Concurrency: s.opts.Concurrency,
		Buffers:     s.buffers,
		Attempts:    s.opts.Attempts,
		Backoff:     s.opts.Backoff,
	}), nil
}

// emptyRange answers a 416: a range of an empty object or one starting at
// the end reads as empty, as a file would.
func (s *Store) emptyRange(ctx context.Context, key string, offset int64, cause error) (io.ReadCloser, error) {
	size, err := s.size(ctx, key)
	if err != nil {
		return nil, err
	}
	if offset == size {
		return io.NopCloser(strings.NewReader("")), nil
	}
	if offset > size {
		return nil, fmt.Errorf("ossstore: get %s: offset %d beyond size %d: %w", key, offset, size, cause)
	}
	return nil, cause
}

func (s *Store) size(ctx context.Context, key string) (int64, error) {
	var hdr http.Header
	err := s.retry(ctx, "head", key, false, func() error {
		var err error
		hdr, err = s.bucket.GetObjectMeta(s.prefix+key, oss.WithContext(ctx))
		return err
	})
	if err != nil {
		return 0, err
	}
	return strconv.ParseInt(hdr.Get("Content-Length"), 10, 64)
}

// List returns the objects whose keys start with prefix, sorted, following
// ListObjectsV2 continuation tokens.
func (s *Store) List(ctx context.Context, prefix string) ([]checkpoint.ObjectInfo, error) {
	if err := objstore.ValidateListPrefix(prefix); err != nil {
		return nil, err
	}
	var out []checkpoint.ObjectInfo
	token := ""
	for {
		opts := []oss.Option{oss.WithContext(ctx), oss.Prefix(s.prefix + prefix), oss.MaxKeys(1000)}
		if token != "" {
			opts = append(opts, oss.ContinuationToken(token))
		}
		var page oss.ListObjectsResultV2
		err := s.retry(ctx, "list", prefix, false, func() error {
			var err error
			page, err = s.bucket.ListObjectsV2(opts...)
			return err
		})
		if err != nil {
			return nil, err
		}
		for _, o := range page.Objects {
			if k, ok := strings.CutPrefix(o.Key, s.prefix); ok {
				out = append(out, checkpoint.ObjectInfo{Key: k, Size: o.Size, Modified: o.LastModified})
			}
		}
		if !page.IsTruncated || page.NextContinuationToken == "" {
			break
		}
		token = page.NextContinuationToken
	}
	objstore.SortByKey(out)
	return out, nil
}

// Delete removes the object. OSS answers a delete of a missing key with
// success, so Delete asks first: a missing key is an error matching
// fs.ErrNotExist.
func (s *Store) Delete(ctx context.Context, key string) error {
	if err := objstore.ValidateKey(key); err != nil {
		return err
	}
	if _, err := s.size(ctx, key); err != nil {
		return err
	}
	return s.retry(ctx, "delete", key, false, func() error {
		return s.bucket.DeleteObject(s.prefix+key, oss.WithContext(ctx))
	})
}

// retry runs op until it succeeds, fails permanently, runs out of
// attempts, or ctx ends; the error it returns is mapped (NotExist, Exists
// when conditional, context errors kept matchable).
func (s *Store) retry(ctx context.Context, what, key string, conditional bool, op func() error) error {
	b := backoff.WithContext(backoff.WithMaxRetries(s.opts.Backoff(), uint64(s.opts.Attempts-1)), ctx)
	var last error
	err := backoff.RetryNotify(func() error {
		err := op()
		if err == nil {
			return nil
		}
		last = err
		if ctx.Err() != nil || !transient(err) {
			return backoff.Permanent(err)
		}
		return err
	}, b, func(err error, wait time.Duration) {
		s.log.DebugContext(ctx, "ossstore: retrying", "op", what, "key", key, "err", err, "wait", wait)
	})
	if err == nil {
		return nil
	}
	if last == nil {
		last = err
	}
	if cerr := ctx.Err(); cerr != nil && !errors.Is(last, cerr) {
		// Cancelled while waiting to retry.
		last = fmt.Errorf("%w (after: %w)", cerr, last)
	}
	return s.mapErr(ctx, what, key, last, conditional)
}

// fail wraps err for op on key, keeping a context error matchable.
func (s *Store) fail(ctx context.Context, what, key string, err error) error {
	if cerr := ctx.Err(); cerr != nil && !errors.Is(err, cerr) {
		err = fmt.Errorf("%w (%w)", cerr, err)
	}
	return fmt.Errorf("ossstore: %s %s: %w", what, key, err)
}

func (s *Store) mapErr(ctx context.Context, what, key string, err error, conditional bool) error {
	var ke *checkpoint.KeyError
	if errors.As(err, &ke) {
		return err
	}
	switch code := serviceCode(err); {
	case conditional && (code == "FileAlreadyExists" || code == "PreconditionFailed"):
		return checkpoint.Exists(key, err)
	case code == "NoSuchKey", code == "" && serviceStatus(err) == http.StatusNotFound:
		return checkpoint.NotExist(key, err)
	}
	return s.fail(ctx, what, key, err)
}

// transient tells which failures a retry may cure.
func transient(err error) bool {
	if st := serviceStatus(err); st != 0 {
		return st >= 500 || st == http.StatusTooManyRequests
	}
	if errors.Is(err, context.Canceled) || errors.Is(err, context.DeadlineExceeded) {
		return false
	}
	var ne net.Error
	return errors.Is(err, io.ErrUnexpectedEOF) || errors.Is(err, io.EOF) ||
		errors.Is(err, syscall.ECONNREFUSED) || errors.Is(err, syscall.ECONNRESET) ||
		errors.Is(err, syscall.EPIPE) || errors.As(err, &ne)
}

func serviceCode(err error) string {
	var se oss.ServiceError
	if errors.As(err, &se) {
		return se.Code
	}
	return ""
}

func serviceStatus(err error) int {
	var se oss.ServiceError
	if errors.As(err, &se) {
		return se.StatusCode
	}
	return 0
}
