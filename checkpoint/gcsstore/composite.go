package gcsstore

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"sync"
	"time"

	"cloud.google.com/go/storage"
	"github.com/cenkalti/backoff/v4"
	"golang.org/x/sync/errgroup"

	"github.com/spotsafe/spotsafe/internal/objstore"

	"github.com/spotsafe/spotsafe/internal/crc32c"
)

// uploadIDKey is the custom metadata key that names the upload which wrote
// an object. After a 412 on a retried request, it tells "our earlier
// attempt landed" apart from "someone else's object is there".
const uploadIDKey = "spotsafe-upload"

// cleanupTimeout bounds the deletion of temporaries after a parallel
// upload. It runs even when the Put's ctx was cancelled, so it must be
// short: a Put that failed (the server may be unreachable) or was
// cancelled (an emergency save ran out of time) returns at most this much
// later. What it leaves, Sweep or a lifecycle rule removes.
const cleanupTimeout = 10 * time.Second

// compositeUpload is one parallel composite upload: parts go up as
// temporary objects under base, are composed (in a tree when there are more
// than 32) into the destination, and are deleted whatever happens.
type compositeUpload struct {
	s    *Store
	id   string
	base string // tmpPrefix + id + "/"

	mu    sync.Mutex
	temps []string // every temporary name a request was sent for
}

// piece is an uploaded part or an intermediate composite.
type piece struct {
	name string
	size int64
	crc  uint32
}

func (s *Store) putComposite(ctx context.Context, key string, r io.Reader, size int64, ifAbsent bool) (err error) {
	id := newID()
	u := &compositeUpload{s: s, id: id, base: s.tmpPrefix + id + "/"}
	defer func() { u.cleanup(ctx, err == nil) }()

	pieces, err := u.uploadParts(ctx, r, size)
	if err != nil {
		return fmt.Errorf("gcsstore: put %s: parallel upload: %w", key, err)
	}
	for level := 0; len(pieces) > maxComposeSources; level++ {
		if pieces, err = u.composeLevel(ctx, pieces, level); err != nil {
			return fmt.Errorf("gcsstore: put %s: compose parts: %w", key, err)
		}
	}
	total := combined(pieces)

	name := s.prefix + key
	// Guess the generation (the one this Store last wrote, else absent):
	// the parts are up, composing again is cheap.
	var gen int64
	guessed := !ifAbsent
	if guessed {
		gen = s.gens.get(name)
	}
	for {
		attrs, err := u.compose(ctx, name, pieces, total, gen)
		if err == nil {
			if attrs.Size != total.size || attrs.CRC32C != total.crc {
				// GCS validates the CRC we send; this guards servers that
				// do not. Undo exactly the generation we made.
				derr := s.bucket.Object(name).If(storage.Conditions{GenerationMatch: attrs.Generation}).Delete(context.WithoutCancel(ctx))
				return fmt.Errorf("gcsstore: put %s: composed object has size %d crc32c %08x, want %d %08x (removed: %v)",
					key, attrs.Size, attrs.CRC32C, total.size, total.crc, derr == nil)
			}
			s.gens.set(name, attrs.Generation)
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
	}
}

// uploadParts uploads r in parts of PartSize, Concurrency at a time. An
// io.ReaderAt (that is also an io.Seeker, to know where it stands) is read
// in place; any other reader is read sequentially into pooled buffers.
func (u *compositeUpload) uploadParts(ctx context.Context, r io.Reader, size int64) ([]piece, error) {
	s := u.s
	partSize := s.partSize
	if (size+partSize-1)/partSize > maxParts {
		partSize = int64(roundUp(int((size+maxParts-1)/maxParts), chunkAlign))
	}
	n := int((size + partSize - 1) / partSize)
	pieces := make([]piece, n)

	ra, base, inPlace := readerAt(r)
	if inPlace {
		// Refuse a reader longer than size, as a sequential read would.
		var one [1]byte
		if k, _ := ra.ReadAt(one[:], base+size); k > 0 {
			return nil, fmt.Errorf("reader has more than %d bytes", size)
		}
	}
	free := make(chan []byte, s.concurrency+1)

	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	g, gctx := errgroup.WithContext(ctx)
	g.SetLimit(s.concurrency)
	var readErr error
	for i := range n {
		off := int64(i) * partSize
		p := &pieces[i]
		*p = piece{name: fmt.Sprintf("%sp%05d", u.base, i), size: min(partSize, size-off)}
		var (
			sec *io.SectionReader
			buf []byte
		)
		if inPlace {
			sec = io.NewSectionReader(ra, base+off, p.size)
		} else {
			// At most Concurrency goroutines hold a buffer while this one
			// fills the next, so the pool never exceeds Concurrency+1.
			select {
			case buf = <-free:
			default:
				buf = make([]byte, partSize)
			}
			if _, err := io.ReadFull(objstore.CtxReader(gctx, r), buf[:p.size]); err != nil {
				readErr = fmt.Errorf("read part %d: %w", i, unexpected(err))
				cancel() // stop the parts in flight
				break
			}
			sec = io.NewSectionReader(bytes.NewReader(buf[:p.size]), 0, p.size)
		}
		u.track(p.name)
		g.Go(func() error {
			if buf != nil {
				defer func() { free <- buf }()
			}
			return u.putPart(gctx, p, sec)
		})
	}
	if readErr == nil && !inPlace {
		var one [1]byte
		if k, _ := io.ReadFull(r, one[:]); k > 0 {
			readErr = fmt.Errorf("reader has more than %d bytes", size)
		}
	}
	err := g.Wait()
	if readErr != nil {
		return nil, readErr
	}
	if err != nil {
		return nil, err
	}
	return pieces, nil
}

// putPart uploads one part as a temporary object with DoesNotExist. The
// part is re-readable, so it goes up in one streaming request (no SDK
// buffer) and this function retries it as a whole. The SDK computes the
// part's CRC32C as it streams and checks it against the server's; the
// checked value goes into the CRC the final compose sends.
func (u *compositeUpload) putPart(ctx context.Context, p *piece, sec *io.SectionReader) error {
	attempt := func() error {
		if _, err := sec.Seek(0, io.SeekStart); err != nil {
			return backoff.Permanent(err)
		}
		attrs, err := u.sendPart(ctx, p, sec)
		if isPrecondition(err) {
			// An earlier attempt landed (its answer was lost)?
			if attrs, aerr := u.s.bucket.Object(p.name).Attrs(ctx); aerr == nil && attrs.Metadata[uploadIDKey] == u.id {
				return u.accept(p, attrs)
			}
			return backoff.Permanent(err)
		}
		switch {
		case err == nil:
			return u.accept(p, attrs)
		case ctx.Err() != nil, !storage.ShouldRetry(err):
			return backoff.Permanent(err)
		}
		return err
	}
	return backoff.Retry(attempt, backoff.WithContext(u.s.newBackoff(), ctx))
}

// accept records an uploaded part's checksum after checking its size.
func (u *compositeUpload) accept(p *piece, attrs *storage.ObjectAttrs) error {
	if attrs.Size != p.size {
		return backoff.Permanent(fmt.Errorf("part %s has %d bytes on the server, want %d", p.name, attrs.Size, p.size))
	}
	p.crc = attrs.CRC32C
	return nil
}

// sendPart sends one attempt and returns the part's attributes. The
// request can be aborted while its body streams (a truncated body commits
// nothing), but not once all of it was sent: aborting then would only hide
// whether the server created the part, and cleanup must know what to
// delete. So after the body, a cancelled ctx no longer aborts; the answer
// is awaited for at most RetryTimeout.
func (u *compositeUpload) sendPart(ctx context.Context, p *piece, r io.Reader) (*storage.ObjectAttrs, error) {
	wctx, cancel := context.WithCancel(context.WithoutCancel(ctx))
	defer cancel()
	var (
		mu      sync.Mutex
		sending = true
	)
	stop := context.AfterFunc(ctx, func() {
		mu.Lock()
		defer mu.Unlock()
		if sending {
			cancel()
		}
	})
	defer stop()

	w := u.s.bucket.Object(p.name).If(storage.Conditions{DoesNotExist: true}).
		Retryer(storage.WithPolicy(storage.RetryNever)).NewWriter(wctx)
	w.ChunkSize = 0
	w.ContentType = contentType
	w.Metadata = map[string]string{uploadIDKey: u.id}
	n, err := io.Copy(w, r)
	mu.Lock()
	sending = false
	if err == nil && n != p.size {
		err = backoff.Permanent(fmt.Errorf("read %s: %d bytes, want %d: %w", p.name, n, p.size, io.ErrUnexpectedEOF))
	}
	if err == nil && wctx.Err() != nil {
		err = context.Cause(ctx)
	}
	mu.Unlock()
	if err != nil {
		cancel()
		_ = w.Close()
		return nil, err
	}
	t := time.AfterFunc(u.s.retryFor, cancel)
	defer t.Stop()
	if err := w.Close(); err != nil {
		return nil, err
	}
	return w.Attrs(), nil
}

// composeLevel composes pieces in groups of 32 into intermediate
// temporaries, concurrently.
func (u *compositeUpload) composeLevel(ctx context.Context, pieces []piece, level int) ([]piece, error) {
	out := make([]piece, (len(pieces)+maxComposeSources-1)/maxComposeSources)
	g, gctx := errgroup.WithContext(ctx)
	g.SetLimit(u.s.concurrency)
	for j := range out {
		group := pieces[j*maxComposeSources : min((j+1)*maxComposeSources, len(pieces))]
		name := fmt.Sprintf("%sc%d-%05d", u.base, level, j)
		u.track(name)
		g.Go(func() error {
			want := combined(group)
			want.name = name
			_, err := u.compose(gctx, name, group, want, 0)
			if isPrecondition(err) && u.ours(gctx, name) {
				err = nil
			}
			out[j] = want
			return err
		})
	}
	if err := g.Wait(); err != nil {
		return nil, err
	}
	return out, nil
}

// compose composes srcs into name with the precondition gen (0:
// DoesNotExist), sending the expected CRC32C for the server to check.
func (u *compositeUpload) compose(ctx context.Context, name string, srcs []piece, want piece, gen int64) (*storage.ObjectAttrs, error) {
	handles := make([]*storage.ObjectHandle, len(srcs))
	for i, p := range srcs {
		handles[i] = u.s.bucket.Object(p.name)
	}
	c := u.s.writeHandle(name, gen, newRetryBudget(u.s.retryFor)).ComposerFrom(handles...)
	c.ContentType = contentType
	c.CRC32C = want.crc
	c.SendCRC32C = true
	c.Metadata = map[string]string{uploadIDKey: u.id}
	return c.Run(ctx)
}

// ours reports whether the object at name was written by this upload.
func (u *compositeUpload) ours(ctx context.Context, name string) bool {
	attrs, err := u.s.bucket.Object(name).Attrs(ctx)
	return err == nil && attrs.Metadata[uploadIDKey] == u.id
}

func (u *compositeUpload) track(name string) {
	u.mu.Lock()
	u.temps = append(u.temps, name)
	u.mu.Unlock()
}

// cleanup deletes every temporary this upload may have created, also when
// ctx was cancelled (a bounded, detached context), so that a failed Put
// leaves nothing behind unless the process dies; Sweep handles that.
func (u *compositeUpload) cleanup(ctx context.Context, healthy bool) {
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), cleanupTimeout)
	defer cancel()
	// After a success the server is reachable and a delete worth
	// retrying (a 404 on a retry means it is gone); after a failure one
	// attempt each, so as not to wait on a server that is down.
	policy := storage.RetryNever
	if healthy {
		policy = storage.RetryAlways
	}
	var g errgroup.Group
	g.SetLimit(u.s.concurrency)
	for _, name := range u.temps {
		g.Go(func() error {
			err := u.s.bucket.Object(name).Retryer(storage.WithPolicy(policy)).Delete(ctx)
			if err != nil && !errors.Is(err, storage.ErrObjectNotExist) {
				u.s.log.Warn("gcsstore: temporary part not deleted; Sweep removes it later",
					"bucket", u.s.bucketName, "object", name, "err", err)
			}
			return nil
		})
	}
	_ = g.Wait()
}

// newBackoff is the retry schedule of one part: exponential from 100 ms,
// capped at 10 s, for at most RetryTimeout.
func (s *Store) newBackoff() backoff.BackOff {
	b := backoff.NewExponentialBackOff()
	b.InitialInterval = s.backoff.Initial
	b.MaxInterval = s.backoff.Max
	b.MaxElapsedTime = s.retryFor
	return b
}

// combined is the piece that concatenating ps yields: total size and the
// CRC32C combined from the parts' CRCs without reading them again.
func combined(ps []piece) piece {
	var out piece
	for i, p := range ps {
		if i == 0 {
			out.crc = p.crc
		} else {
			out.crc = crc32c.Combine(out.crc, p.crc, p.size)
		}
		out.size += p.size
	}
	return out
}

// readerAt returns r as an io.ReaderAt and the offset it stands at, if it
// is one that can also tell its position.
func readerAt(r io.Reader) (io.ReaderAt, int64, bool) {
	ra, ok := r.(io.ReaderAt)
	if !ok {
		return nil, 0, false
	}
	sk, ok := r.(io.Seeker)
	if !ok {
		return nil, 0, false
	}
	pos, err := sk.Seek(0, io.SeekCurrent)
	if err != nil {
		return nil, 0, false
	}
	return ra, pos, true
}

// unexpected turns a premature io.EOF into io.ErrUnexpectedEOF.
func unexpected(err error) error {
	if errors.Is(err, io.EOF) {
		return io.ErrUnexpectedEOF
	}
	return err
}
