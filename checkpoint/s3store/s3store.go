// Package s3store is a checkpoint.Store on Amazon S3 and S3-compatible
// servers (MinIO, Ceph RGW, ...), built on aws-sdk-go-v2.
//
// Large objects are written as multipart uploads with parts sent in
// parallel (feature/s3/transfermanager) and read back with parallel ranged
// GETs. A failed or cancelled Put aborts its multipart upload, so it leaves
// no object behind. PutIfAbsent sends If-None-Match: * (on the PutObject for
// small objects, on CompleteMultipartUpload for large ones), which S3 turns
// into 412 PreconditionFailed when the key exists.
//
// Importing the package registers the s3 URL scheme with checkpoint.Open:
//
//	s3://bucket/prefix?region=eu-west-1
//	s3://bucket/prefix?endpoint=http://minio:9000
//
// Credentials and region come from the SDK's default chain
// (config.LoadDefaultConfig: environment, shared config files, SSO, web
// identity, ECS/EC2 roles). See docs/stores-s3-oss.md.
package s3store

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/config"
	"github.com/aws/aws-sdk-go-v2/feature/s3/transfermanager"
	"github.com/aws/aws-sdk-go-v2/service/s3"
	"github.com/aws/smithy-go"
	"github.com/aws/smithy-go/logging"
	smithyhttp "github.com/aws/smithy-go/transport/http"
	"github.com/cenkalti/backoff/v4"

	"github.com/spotsafe/spotsafe/checkpoint"
	"github.com/spotsafe/spotsafe/internal/objstore"
	"github.com/spotsafe/spotsafe/internal/rangeread"
)

// Store keeps checkpoint objects in one S3 bucket under an optional prefix.
// It is safe for concurrent use.
type Store struct {
	client *s3.Client
	tm     *transfermanager.Client
	bucket string
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
	// Prefix is prepended (with a "/") to every key, so that several jobs
	// can share a bucket. Same character rules as keys.
	Prefix string
	// PartSize is the size of multipart parts and of ranged reads;
	// default 8 MiB, at least 5 MiB (S3's minimum part size).
	PartSize int64
	// Concurrency is the number of parts uploaded, or ranges fetched, in
	// parallel for one object; default 8.
	Concurrency int
	// MultipartThreshold: objects smaller than this go up in a single
	// PutObject; default 16 MiB.
	MultipartThreshold int64
	// AbortTimeout bounds the AbortMultipartUpload sent after a failed or
	// cancelled upload (it runs on a fresh context, so that cancelling a
	// Put still cleans up); default 10 s.
	AbortTimeout time.Duration
	// Logger receives debug records; nil discards them.
	Logger *slog.Logger
}

// minPartSize is S3's minimum multipart part size.
const minPartSize = 5 << 20

// New returns a store on bucket using client, which carries region,
// credentials, endpoint and retry policy (the SDK's retryer retries
// throttling, 5xx and connection errors, and gives up when the context's
// deadline comes). For S3-compatible servers set BaseEndpoint and
// UsePathStyle on the client, and RequestChecksumCalculation and
// ResponseChecksumValidation to WhenRequired if the server predates the
// SDK's default checksums (the s3:// opener does this when given an
// endpoint).
func New(client *s3.Client, bucket string, opts *Options) (*Store, error) {
	if client == nil {
		return nil, errors.New("s3store: nil client")
	}
	if bucket == "" || strings.ContainsAny(bucket, "/?#") {
		return nil, fmt.Errorf("s3store: invalid bucket name %q", bucket)
	}
	s := &Store{client: client, bucket: bucket}
	if opts != nil {
		s.opts = *opts
	}
	o := &s.opts
	t := objstore.Tuning{PartSize: o.PartSize, Concurrency: o.Concurrency, MultipartThreshold: o.MultipartThreshold, AbortTimeout: o.AbortTimeout}
	if err := t.Normalize("s3store", minPartSize, "S3's minimum of 5 MiB"); err != nil {
		return nil, err
	}
	o.PartSize, o.Concurrency, o.MultipartThreshold, o.AbortTimeout = t.PartSize, t.Concurrency, t.MultipartThreshold, t.AbortTimeout
	var err error
	if o.Prefix, s.prefix, err = objstore.KeyPrefix("s3store", o.Prefix); err != nil {
		return nil, err
	}
	s.buffers = rangeread.NewBufferPool(o.PartSize)
	s.log = o.Logger
	if s.log == nil {
		s.log = slog.New(slog.DiscardHandler)
	}
	// The transfer manager applies its own checksum setting over the
	// client's; carry the client's over so that a client configured for an
	// older S3-compatible server keeps working.
	checksums := client.Options().RequestChecksumCalculation
	s.tm = transfermanager.New(client, func(t *transfermanager.Options) {
		t.PartSizeBytes = o.PartSize
		t.Concurrency = o.Concurrency
		t.MultipartUploadThreshold = max(o.MultipartThreshold, 1)
		t.FailTimeout = o.AbortTimeout
		t.RequestChecksumCalculation = checksums
	})
	return s, nil
}

func init() {
	checkpoint.Register("s3", openURL)
}

// URL parameters understood by the s3 scheme.
const (
	paramRegion      = "region"
	paramEndpoint    = "endpoint"
	paramPartSize    = "part_size"
	paramConcurrency = "concurrency"
	paramAttempts    = "max_attempts"
)

// openURL opens s3://bucket/prefix?region=..&endpoint=..&part_size=..&concurrency=..&max_attempts=..
func openURL(ctx context.Context, u *url.URL) (checkpoint.Store, error) {
	if u.Host == "" {
		return nil, errors.New("s3store: URL has no bucket (want s3://bucket/prefix)")
	}
	q := u.Query()
	for k := range q {
		switch k {
		case paramRegion, paramEndpoint, paramPartSize, paramConcurrency, paramAttempts:
		default:
			return nil, fmt.Errorf("s3store: unknown URL parameter %q (known: region, endpoint, part_size, concurrency, max_attempts)", k)
		}
	}
	opts := &Options{Prefix: strings.Trim(u.Path, "/")}
	var err error
	if v := q.Get(paramPartSize); v != "" {
		if opts.PartSize, err = objstore.ParseSize(v); err != nil {
			return nil, fmt.Errorf("s3store: %s: %w", paramPartSize, err)
		}
	}
	if v := q.Get(paramConcurrency); v != "" {
		if opts.Concurrency, err = strconv.Atoi(v); err != nil || opts.Concurrency < 1 {
			return nil, fmt.Errorf("s3store: %s=%q: want a positive integer", paramConcurrency, v)
		}
	}
	loads := []func(*config.LoadOptions) error{
		// The SDK's default logger writes to stderr; a library must not.
		config.WithLogger(logging.Nop{}),
	}
	if v := q.Get(paramRegion); v != "" {
		loads = append(loads, config.WithRegion(v))
	}
	if v := q.Get(paramAttempts); v != "" {
		n, err := strconv.Atoi(v)
		if err != nil || n < 1 {
			return nil, fmt.Errorf("s3store: %s=%q: want a positive integer", paramAttempts, v)
		}
		loads = append(loads, config.WithRetryMaxAttempts(n))
	}
	endpoint := q.Get(paramEndpoint)
	if endpoint != "" {
		e, err := url.Parse(endpoint)
		if err != nil || (e.Scheme != "http" && e.Scheme != "https") || e.Host == "" {
			return nil, fmt.Errorf("s3store: %s=%q: want http(s)://host[:port]", paramEndpoint, endpoint)
		}
	}
	cfg, err := config.LoadDefaultConfig(ctx, loads...)
	if err != nil {
		return nil, fmt.Errorf("s3store: load AWS config: %w", err)
	}
	if cfg.Region == "" {
		if endpoint == "" {
			return nil, errors.New("s3store: no region: add ?region=... to the URL or set AWS_REGION")
		}
		cfg.Region = "us-east-1" // S3-compatible servers mostly ignore it, but signing needs one
	}
	client := s3.NewFromConfig(cfg, func(o *s3.Options) {
		o.DisableLogOutputChecksumValidationSkipped = true
		if endpoint != "" {
			o.BaseEndpoint = aws.String(endpoint)
			o.UsePathStyle = true
			// Many S3-compatible servers predate the SDK's default
			// CRC32 checksums and aws-chunked trailers.
			o.RequestChecksumCalculation = aws.RequestChecksumCalculationWhenRequired
			o.ResponseChecksumValidation = aws.ResponseChecksumValidationWhenRequired
		}
	})
	return New(client, u.Host, opts)
}

// Bucket returns the bucket name.
func (s *Store) Bucket() string { return s.bucket }

// Client returns the S3 client the store uses.
func (s *Store) Client() *s3.Client { return s.client }

// Put uploads the object: one PutObject below MultipartThreshold, else a
// multipart upload with Concurrency parts in flight. The object becomes
// visible only when the upload completes; a failure or cancellation aborts
// the multipart upload. size must be r's exact length, or -1.
func (s *Store) Put(ctx context.Context, key string, r io.Reader, size int64) error {
	return s.put(ctx, key, r, size, false)
}

// PutIfAbsent is Put that only creates: if key exists it fails with an
// error matching fs.ErrExist (and, through errors.As, the SDK's 412
// error). Small objects go up in one conditional PutObject, retried on 409
// ConditionalRequestConflict (a concurrent conditional write in progress);
// large ones send If-None-Match on CompleteMultipartUpload.
func (s *Store) PutIfAbsent(ctx context.Context, key string, r io.Reader, size int64) error {
	return s.put(ctx, key, r, size, true)
}

func (s *Store) put(ctx context.Context, key string, r io.Reader, size int64, ifAbsent bool) error {
	if err := objstore.ValidateKey(key); err != nil {
		return err
	}
	if size < -1 {
		return fmt.Errorf("s3store: put %s: invalid size %d", key, size)
	}
	body := objstore.NewExactReader("s3store", r, size)
	if ifAbsent && (size < 0 || size < s.opts.MultipartThreshold) {
		// Buffer small conditional writes: a 409 conflict needs a retry,
		// and a retry needs the bytes again.
		buf, err := io.ReadAll(io.LimitReader(body, s.opts.MultipartThreshold))
		if err != nil {
			return fmt.Errorf("s3store: put %s: %w", key, err)
		}
		if int64(len(buf)) < s.opts.MultipartThreshold {
			return s.putSmallIfAbsent(ctx, key, buf)
		}
		body = objstore.NewExactReader("s3store", io.MultiReader(bytes.NewReader(buf), body), size)
	}
	in := &transfermanager.UploadObjectInput{
		Bucket: aws.String(s.bucket),
		Key:    aws.String(s.prefix + key),
		Body:   body,
	}
	if size > 0 {
		in.ContentLength = aws.Int64(size)
	}
	if ifAbsent {
		in.IfNoneMatch = aws.String("*")
	}
	_, err := s.tm.UploadObject(ctx, in)
	if err != nil {
		if ifAbsent && isPreconditionFailed(err) {
			return checkpoint.Exists(key, err)
		}
		return fmt.Errorf("s3store: put %s: %w", key, err)
	}
	return nil
}

func (s *Store) putSmallIfAbsent(ctx context.Context, key string, buf []byte) error {
	b := backoff.NewExponentialBackOff()
	b.InitialInterval = 50 * time.Millisecond
	b.MaxElapsedTime = 0
	op := func() error {
		_, err := s.client.PutObject(ctx, &s3.PutObjectInput{
			Bucket:        aws.String(s.bucket),
			Key:           aws.String(s.prefix + key),
			Body:          bytes.NewReader(buf),
			ContentLength: aws.Int64(int64(len(buf))),
			IfNoneMatch:   aws.String("*"),
		})
		switch {
		case err == nil:
			return nil
		case isPreconditionFailed(err):
			return backoff.Permanent(checkpoint.Exists(key, err))
		case apiCode(err) == "ConditionalRequestConflict":
			s.log.DebugContext(ctx, "s3store: conditional write conflict, retrying", "key", key)
			return err
		default:
			return backoff.Permanent(fmt.Errorf("s3store: put %s: %w", key, err))
		}
	}
	err := backoff.Retry(op, backoff.WithContext(backoff.WithMaxRetries(b, 5), ctx))
	if err != nil && apiCode(err) == "ConditionalRequestConflict" {
		return fmt.Errorf("s3store: put %s: %w", key, err)
	}
	return err
}

// Get opens the object. Objects larger than PartSize are fetched as
// parallel ranged GETs (Concurrency at a time) and streamed in order; the
// ranges are pinned to the first response's ETag, so an object replaced
// mid-read fails instead of mixing versions.
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
		return nil, fmt.Errorf("s3store: get %s: negative offset %d", key, offset)
	}
	if length == 0 {
		// S3 has no empty range; check existence and bounds instead.
		head, err := s.head(ctx, key)
		if err != nil {
			return nil, err
		}
		if offset > aws.ToInt64(head.ContentLength) {
			return nil, fmt.Errorf("s3store: get %s: offset %d beyond size %d", key, offset, aws.ToInt64(head.ContentLength))
		}
		return io.NopCloser(strings.NewReader("")), nil
	}
	first := s.opts.PartSize
	if length > 0 {
		// An explicit range is one request: callers that read ranges
		// (the Manager's restore) already run them in parallel.
		first = length
	}
	out, err := s.client.GetObject(ctx, &s3.GetObjectInput{
		Bucket: aws.String(s.bucket),
		Key:    aws.String(s.prefix + key),
		Range:  aws.String(fmt.Sprintf("bytes=%d-%d", offset, offset+first-1)),
	}, s.getOpts)
	if err != nil {
		if httpStatus(err) == http.StatusRequestedRangeNotSatisfiable {
			return s.emptyRange(ctx, key, offset, err)
		}
		return nil, s.mapErr("get", key, err)
	}
	total, ok := objstore.TotalSize(aws.ToString(out.ContentRange))
	if !ok {
		// The server ignored the range and sent the whole object.
		return objstore.SliceWhole("s3store", out.Body, key, offset, length)
	}
	end := total
	if length > 0 {
		end = min(total, offset+length)
	}
	if end-offset <= first {
		return out.Body, nil
	}
	etag := out.ETag
	fetch := func(ctx context.Context, off, n int64) (io.ReadCloser, error) {
		o, err := s.client.GetObject(ctx, &s3.GetObjectInput{
			Bucket:  aws.String(s.bucket),
			Key:     aws.String(s.prefix + key),
			Range:   aws.String(fmt.Sprintf("bytes=%d-%d", offset+off, offset+off+n-1)),
			IfMatch: etag,
		}, s.getOpts)
		if err != nil {
			return nil, s.mapErr("get", key, err)
		}
		return o.Body, nil
	}
	return rangeread.New(ctx, end-offset, out.Body, fetch, &rangeread.Options{
		ChunkSize:   first,
		Concurrency: s.opts.Concurrency,
		Buffers:     s.buffers,
	}), nil
}

// getOpts silences the SDK's note that a ranged response carries no
// whole-object checksum to validate.
func (s *Store) getOpts(o *s3.Options) { o.DisableLogOutputChecksumValidationSkipped = true }

// emptyRange answers a 416: S3 refuses any range of an empty object and
// ranges starting at the end; both read as empty here, as a file would.
func (s *Store) emptyRange(ctx context.Context, key string, offset int64, cause error) (io.ReadCloser, error) {
	head, err := s.head(ctx, key)
	if err != nil {
		return nil, err
	}
	if size := aws.ToInt64(head.ContentLength); offset >= size {
		if offset == size {
			return io.NopCloser(strings.NewReader("")), nil
		}
		return nil, fmt.Errorf("s3store: get %s: offset %d beyond size %d: %w", key, offset, size, cause)
	}
	return nil, fmt.Errorf("s3store: get %s: %w", key, cause)
}

func (s *Store) head(ctx context.Context, key string) (*s3.HeadObjectOutput, error) {
	out, err := s.client.HeadObject(ctx, &s3.HeadObjectInput{
		Bucket: aws.String(s.bucket),
		Key:    aws.String(s.prefix + key),
	})
	if err != nil {
		return nil, s.mapErr("head", key, err)
	}
	return out, nil
}

// List returns the objects whose keys start with prefix, sorted, following
// ListObjectsV2 continuation tokens.
func (s *Store) List(ctx context.Context, prefix string) ([]checkpoint.ObjectInfo, error) {
	if err := objstore.ValidateListPrefix(prefix); err != nil {
		return nil, err
	}
	var out []checkpoint.ObjectInfo
	p := s3.NewListObjectsV2Paginator(s.client, &s3.ListObjectsV2Input{
		Bucket: aws.String(s.bucket),
		Prefix: aws.String(s.prefix + prefix),
	})
	for p.HasMorePages() {
		page, err := p.NextPage(ctx)
		if err != nil {
			return nil, fmt.Errorf("s3store: list %q: %w", prefix, err)
		}
		for _, o := range page.Contents {
			k, ok := strings.CutPrefix(aws.ToString(o.Key), s.prefix)
			if !ok {
				continue
			}
			out = append(out, checkpoint.ObjectInfo{Key: k, Size: aws.ToInt64(o.Size), Modified: aws.ToTime(o.LastModified)})
		}
	}
	objstore.SortByKey(out)
	return out, nil
}

// Delete removes the object. S3 answers a delete of a missing key with
// success, so Delete asks first: a missing key is an error matching
// fs.ErrNotExist. (Check and delete are two requests: of two concurrent
// Deletes of one key, both may succeed.)
func (s *Store) Delete(ctx context.Context, key string) error {
	if err := objstore.ValidateKey(key); err != nil {
		return err
	}
	if _, err := s.head(ctx, key); err != nil {
		return err
	}
	_, err := s.client.DeleteObject(ctx, &s3.DeleteObjectInput{
		Bucket: aws.String(s.bucket),
		Key:    aws.String(s.prefix + key),
	})
	if err != nil {
		return s.mapErr("delete", key, err)
	}
	return nil
}

// mapErr turns a missing object into checkpoint.NotExist and wraps the rest.
func (s *Store) mapErr(op, key string, err error) error {
	if isNotFound(err) {
		return checkpoint.NotExist(key, err)
	}
	if errors.Is(err, checkpoint.ErrInvalidKey) {
		return err
	}
	var ke *checkpoint.KeyError
	if errors.As(err, &ke) {
		return err
	}
	return fmt.Errorf("s3store: %s %s: %w", op, key, err)
}

func isNotFound(err error) bool {
	switch apiCode(err) {
	case "NoSuchKey", "NotFound":
		return true
	case "NoSuchBucket":
		return false
	}
	return httpStatus(err) == http.StatusNotFound && apiCode(err) == ""
}

func isPreconditionFailed(err error) bool {
	return apiCode(err) == "PreconditionFailed" || httpStatus(err) == http.StatusPreconditionFailed
}

func apiCode(err error) string {
	var ae smithy.APIError
	if errors.As(err, &ae) {
		return ae.ErrorCode()
	}
	return ""
}

func httpStatus(err error) int {
	var re *smithyhttp.ResponseError
	if errors.As(err, &re) {
		return re.HTTPStatusCode()
	}
	return 0
}
