// Package objstore holds the small helpers that the S3 and OSS checkpoint
// stores share: their key character set, byte-size parsing for URL
// parameters, Content-Range parsing, the exact-size reader that guards
// uploads, serving a range from a whole-object response, list sorting,
// and the defaulting of their common Options; and a context-aware reader
// that gcsstore and memstore use as well.
//
// Error messages that name the store take the store's name (e.g.
// "s3store") as an argument, so each store keeps its own wording.
package objstore

import (
	"context"
	"fmt"
	"io"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/spotsafe/spotsafe/checkpoint"
)

// ValidateKey applies checkpoint.ValidateKey and restricts keys to
// [A-Za-z0-9/._-], which every S3-compatible server, signer and proxy
// passes through unchanged and which survives the OSS SDK's URL-decoding
// of listed keys.
func ValidateKey(key string) error {
	if err := checkpoint.ValidateKey(key); err != nil {
		return err
	}
	if i := strings.IndexFunc(key, unsafeRune); i >= 0 {
		return fmt.Errorf("%w: %q has %q outside [A-Za-z0-9/._-]", checkpoint.ErrInvalidKey, key, key[i:i+1])
	}
	return nil
}

// ValidateListPrefix checks a List prefix against the key character set;
// unlike a key it may be empty or end in "/".
func ValidateListPrefix(prefix string) error {
	if strings.ContainsFunc(prefix, unsafeRune) {
		return fmt.Errorf("%w: list prefix %q has characters outside [A-Za-z0-9/._-]", checkpoint.ErrInvalidKey, prefix)
	}
	return nil
}

func unsafeRune(r rune) bool {
	return !(r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z' || r >= '0' && r <= '9' || r == '/' || r == '.' || r == '_' || r == '-')
}

// ParseSize reads a positive byte count with an optional KiB/MiB/GiB
// suffix (or k/K/M/G).
func ParseSize(v string) (int64, error) {
	mult := int64(1)
	for _, suf := range []struct {
		s string
		m int64
	}{{"KiB", 1 << 10}, {"MiB", 1 << 20}, {"GiB", 1 << 30}, {"k", 1 << 10}, {"K", 1 << 10}, {"M", 1 << 20}, {"G", 1 << 30}} {
		if strings.HasSuffix(v, suf.s) {
			v, mult = strings.TrimSuffix(v, suf.s), suf.m
			break
		}
	}
	n, err := strconv.ParseInt(v, 10, 64)
	if err != nil || n <= 0 {
		return 0, fmt.Errorf("%q is not a positive size", v)
	}
	return n * mult, nil
}

// TotalSize reads the total from a Content-Range header ("bytes 0-9/100");
// ok is false when the header is absent, malformed or has an unknown
// total ("*").
func TotalSize(contentRange string) (total int64, ok bool) {
	_, t, found := strings.Cut(contentRange, "/")
	if !found || t == "*" {
		return 0, false
	}
	n, err := strconv.ParseInt(t, 10, 64)
	return n, err == nil
}

// ExactReader checks that a reader yields exactly the announced number of
// bytes: it fails on the read that goes past it, and turns an early EOF
// into io.ErrUnexpectedEOF.
type ExactReader struct {
	name string
	r    io.Reader
	want int64
	got  int64
}

// NewExactReader wraps r, which must yield exactly want bytes (want < 0:
// any number). name prefixes the error messages.
func NewExactReader(name string, r io.Reader, want int64) *ExactReader {
	return &ExactReader{name: name, r: r, want: want}
}

// Read implements io.Reader.
func (e *ExactReader) Read(p []byte) (int, error) {
	if e.want >= 0 && int64(len(p)) > e.want-e.got+1 {
		p = p[:e.want-e.got+1] // read at most one byte too many, to notice it
	}
	n, err := e.r.Read(p)
	e.got += int64(n)
	if e.want >= 0 && e.got > e.want {
		return n, fmt.Errorf("%s: reader has more than the %d bytes announced", e.name, e.want)
	}
	if err == io.EOF && e.want >= 0 && e.got < e.want {
		return n, fmt.Errorf("%s: reader ended after %d of %d bytes: %w", e.name, e.got, e.want, io.ErrUnexpectedEOF)
	}
	return n, err
}

// SliceWhole serves length bytes from offset (length < 0: to the end) out
// of a response that carries the whole object, for servers that ignore a
// Range header. It closes body when skipping to offset fails. name
// prefixes the error message.
func SliceWhole(name string, body io.ReadCloser, key string, offset, length int64) (io.ReadCloser, error) {
	if _, err := io.CopyN(io.Discard, body, offset); err != nil {
		body.Close()
		return nil, fmt.Errorf("%s: get %s: skip to %d: %w", name, key, offset, err)
	}
	if length < 0 {
		return body, nil
	}
	return struct {
		io.Reader
		io.Closer
	}{io.LimitReader(body, length), body}, nil
}

// SortByKey sorts a listing by key, as checkpoint.Store.List returns it.
func SortByKey(infos []checkpoint.ObjectInfo) {
	slices.SortFunc(infos, func(a, b checkpoint.ObjectInfo) int { return strings.Compare(a.Key, b.Key) })
}

// CtxReader returns a reader that reads from r until ctx ends, then fails
// with ctx's error: it stops a sequential copy that would otherwise not
// notice cancellation.
func CtxReader(ctx context.Context, r io.Reader) io.Reader { return ctxReader{ctx, r} }

type ctxReader struct {
	ctx context.Context
	r   io.Reader
}

func (c ctxReader) Read(p []byte) (int, error) {
	if err := c.ctx.Err(); err != nil {
		return 0, err
	}
	return c.r.Read(p)
}

// Tuning is the part of the S3 and OSS stores' Options that they default
// and check alike.
type Tuning struct {
	PartSize           int64
	Concurrency        int
	MultipartThreshold int64
	AbortTimeout       time.Duration
}

// Defaults for the zero fields of a Tuning.
const (
	DefaultPartSize     = 8 << 20
	DefaultConcurrency  = 8
	DefaultThreshold    = 16 << 20
	DefaultAbortTimeout = 10 * time.Second
)

// Normalize fills zero fields with the defaults (a non-positive
// AbortTimeout too) and rejects a PartSize below minPart (described by
// minText, e.g. "S3's minimum of 5 MiB") and negative counts. name
// prefixes the error messages.
func (t *Tuning) Normalize(name string, minPart int64, minText string) error {
	switch {
	case t.PartSize == 0:
		t.PartSize = DefaultPartSize
	case t.PartSize < minPart:
		return fmt.Errorf("%s: PartSize %d is below %s", name, t.PartSize, minText)
	}
	switch {
	case t.Concurrency == 0:
		t.Concurrency = DefaultConcurrency
	case t.Concurrency < 0:
		return fmt.Errorf("%s: negative Concurrency %d", name, t.Concurrency)
	}
	switch {
	case t.MultipartThreshold == 0:
		t.MultipartThreshold = DefaultThreshold
	case t.MultipartThreshold < 0:
		return fmt.Errorf("%s: negative MultipartThreshold %d", name, t.MultipartThreshold)
	}
	if t.AbortTimeout <= 0 {
		t.AbortTimeout = DefaultAbortTimeout
	}
	return nil
}

// KeyPrefix trims slashes from an Options.Prefix, checks it like a key and
// returns it trimmed together with the prefix to put before keys ("" or
// ending in "/"). name prefixes the error message.
func KeyPrefix(name, prefix string) (trimmed, keyPrefix string, err error) {
	trimmed = strings.Trim(prefix, "/")
	if trimmed == "" {
		return "", "", nil
	}
	if err := ValidateKey(trimmed); err != nil {
		return "", "", fmt.Errorf("%s: prefix: %w", name, err)
	}
	return trimmed, trimmed + "/", nil
}
