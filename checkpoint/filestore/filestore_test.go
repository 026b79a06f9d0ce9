package filestore_test

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/spotsafe/spotsafe/checkpoint"
	"github.com/spotsafe/spotsafe/checkpoint/filestore"
	"github.com/spotsafe/spotsafe/checkpoint/storetest"
)

func newStore(t testing.TB, opts *filestore.Options) *filestore.Store {
	t.Helper()
	s, err := filestore.New(t.TempDir(), opts)
	require.NoError(t, err)
	t.Cleanup(func() { s.Close() })
	return s
}

func TestConformance(t *testing.T) {
	storetest.RunConformance(t, func(t *testing.T) checkpoint.Store { return newStore(t, nil) })
}

// The suite through the fault wrapper, which forwards the optional
// interfaces.
func TestConformanceNoSync(t *testing.T) {
	if testing.Short() {
		t.Skip("the fsync run covers the same paths")
	}
	storetest.RunConformance(t, func(t *testing.T) checkpoint.Store {
		return newStore(t, &filestore.Options{NoSync: true})
	})
}

func ctxT(t *testing.T) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	t.Cleanup(cancel)
	return ctx
}

func put(ctx context.Context, s checkpoint.Store, key, data string) error {
	return s.Put(ctx, key, strings.NewReader(data), int64(len(data)))
}

func keys(t *testing.T, ctx context.Context, s checkpoint.Store, prefix string) []string {
	t.Helper()
	objs, err := s.List(ctx, prefix)
	require.NoError(t, err)
	var out []string
	for _, o := range objs {
		out = append(out, o.Key)
	}
	return out
}

// files lists every regular file under dir, relative, with '/'.
func files(t *testing.T, dir string) []string {
	t.Helper()
	var out []string
	err := filepath.WalkDir(dir, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if !d.IsDir() {
			r, _ := filepath.Rel(dir, p)
			out = append(out, filepath.ToSlash(r))
		}
		return nil
	})
	require.NoError(t, err)
	return out
}

func TestLayout(t *testing.T) {
	ctx := ctxT(t)
	s := newStore(t, nil)
	require.NoError(t, put(ctx, s, "ckpt/000000000100/model.bin", "weights"))
	b, err := os.ReadFile(filepath.Join(s.Dir(), "ckpt", "000000000100", "model.bin"))
	require.NoError(t, err)
	assert.Equal(t, "weights", string(b), "key a/b/c should be the file <root>/a/b/c")
	assert.Equal(t, []string{"ckpt/000000000100/model.bin"}, files(t, s.Dir()), "a Put left extra files")

	// Delete prunes the directories it empties, never the root.
	require.NoError(t, put(ctx, s, "ckpt/000000000200/a", "x"))
	require.NoError(t, s.Delete(ctx, "ckpt/000000000100/model.bin"))
	_, err = os.Stat(filepath.Join(s.Dir(), "ckpt", "000000000100"))
	assert.ErrorIs(t, err, fs.ErrNotExist, "empty step directory not pruned")
	require.NoError(t, s.Delete(ctx, "ckpt/000000000200/a"))
	entries, err := os.ReadDir(s.Dir())
	require.NoError(t, err, "the root itself must survive")
	assert.Empty(t, entries)
}

func TestTempFilesReserved(t *testing.T) {
	ctx := ctxT(t)
	s := newStore(t, nil)
	for _, key := range []string{filestore.TempPrefix + "x", "a/" + filestore.TempPrefix + "1/b"} {
		err := put(ctx, s, key, "x")
		assert.ErrorIs(t, err, checkpoint.ErrInvalidKey, key)
		_, err = s.Get(ctx, key)
		assert.ErrorIs(t, err, checkpoint.ErrInvalidKey, key)
	}
	// A key that merely contains the prefix is fine.
	require.NoError(t, put(ctx, s, "a"+filestore.TempPrefix, "x"))
	assert.Equal(t, []string{"a" + filestore.TempPrefix}, keys(t, ctx, s, ""))
}

// leaveTemp simulates a Put killed mid-write: a temporary file next to an
// object, aged by age.
func leaveTemp(t *testing.T, dir, rel string, age time.Duration) string {
	t.Helper()
	p := filepath.Join(dir, filepath.FromSlash(rel))
	require.NoError(t, os.MkdirAll(filepath.Dir(p), 0o777))
	require.NoError(t, os.WriteFile(p, []byte("half a checkpo"), 0o666))
	old := time.Now().Add(-age)
	require.NoError(t, os.Chtimes(p, old, old))
	return p
}

func TestInterruptedPutInvisibleAndCleaned(t *testing.T) {
	ctx := ctxT(t)
	dir := t.TempDir()
	s, err := filestore.New(dir, nil)
	require.NoError(t, err)
	defer s.Close()
	require.NoError(t, put(ctx, s, "ckpt/1/part", "whole"))
	old := leaveTemp(t, dir, "ckpt/1/"+filestore.TempPrefix+"0123456789abcdef", 2*time.Hour)
	fresh := leaveTemp(t, dir, "ckpt/2/"+filestore.TempPrefix+"fedcba9876543210", time.Minute)

	assert.Equal(t, []string{"ckpt/1/part"}, keys(t, ctx, s, ""), "List shows a temporary file")
	assert.Empty(t, keys(t, ctx, s, "ckpt/2"))
	_, err = s.Get(ctx, "ckpt/1/"+filestore.TempPrefix+"0123456789abcdef")
	assert.ErrorIs(t, err, checkpoint.ErrInvalidKey)

	// Reopening removes the old temporary file only (the fresh one may
	// belong to a Put in progress in another process).
	s2, err := filestore.New(dir, nil)
	require.NoError(t, err)
	defer s2.Close()
	_, err = os.Stat(old)
	assert.ErrorIs(t, err, fs.ErrNotExist, "New did not remove an old temporary file")
	_, err = os.Stat(fresh)
	assert.NoError(t, err, "New removed a fresh temporary file")

	n, err := s2.Cleanup(ctx, 0)
	require.NoError(t, err)
	assert.Equal(t, 1, n)
	assert.Equal(t, []string{"ckpt/1/part"}, files(t, dir))
	_, err = os.Stat(filepath.Join(dir, "ckpt", "2"))
	assert.ErrorIs(t, err, fs.ErrNotExist, "Cleanup left the emptied directory")

	// TempMaxAge < 0 disables the cleanup at New.
	leaveTemp(t, dir, "x/"+filestore.TempPrefix+"1", 48*time.Hour)
	s3, err := filestore.New(dir, &filestore.Options{TempMaxAge: -1})
	require.NoError(t, err)
	defer s3.Close()
	assert.Len(t, files(t, dir), 2)
	assert.Equal(t, []string{"ckpt/1/part"}, keys(t, ctx, s3, ""))
}

// TestKilledMidPut kills a process in the middle of a Put: the key keeps
// its old content, and the temporary file is invisible and cleaned up.
func TestKilledMidPut(t *testing.T) {
	if dir := os.Getenv("FILESTORE_CHILD_DIR"); dir != "" {
		childPut(dir)
		return
	}
	ctx := ctxT(t)
	dir := t.TempDir()
	s := func() *filestore.Store {
		s, err := filestore.New(dir, nil)
		require.NoError(t, err)
		return s
	}()
	require.NoError(t, put(ctx, s, "ckpt/obj", "old content"))
	s.Close()

	cmd := exec.CommandContext(ctx, os.Args[0], "-test.run=^TestKilledMidPut$", "-test.count=1")
	cmd.Env = append(os.Environ(), "FILESTORE_CHILD_DIR="+dir)
	stdout, err := cmd.StdoutPipe()
	require.NoError(t, err)
	require.NoError(t, cmd.Start())
	// The child says "writing" once half of the object is in its
	// temporary file.
	line := make([]byte, 8)
	_, err = io.ReadFull(stdout, line)
	require.NoError(t, err, "child did not report progress")
	require.Equal(t, "writing\n", string(line))
	require.NoError(t, cmd.Process.Signal(syscall.SIGKILL))
	_ = cmd.Wait()

	var temps []string
	for _, f := range files(t, dir) {
		if strings.Contains(f, filestore.TempPrefix) {
			temps = append(temps, f)
		}
	}
	require.Len(t, temps, 1, "the killed Put should have left its temporary file")
	fi, err := os.Stat(filepath.Join(dir, temps[0]))
	require.NoError(t, err)
	assert.Positive(t, fi.Size())

	s, err = filestore.New(dir, &filestore.Options{TempMaxAge: -1})
	require.NoError(t, err)
	defer s.Close()
	assert.Equal(t, []string{"ckpt/obj"}, keys(t, ctx, s, ""))
	rc, err := s.Get(ctx, "ckpt/obj")
	require.NoError(t, err)
	b, _ := io.ReadAll(rc)
	rc.Close()
	assert.Equal(t, "old content", string(b))
	n, err := s.Cleanup(ctx, 0)
	require.NoError(t, err)
	assert.Equal(t, 1, n)
	assert.Equal(t, []string{"ckpt/obj"}, files(t, dir))
}

// childPut overwrites ckpt/obj with a reader that stops halfway forever.
func childPut(dir string) {
	s, err := filestore.New(dir, nil)
	if err != nil {
		fmt.Println("error:", err)
		os.Exit(2)
	}
	half := bytes.Repeat([]byte("n"), 3<<20)
	r := io.MultiReader(bytes.NewReader(half), blockReader{})
	_ = s.Put(context.Background(), "ckpt/obj", r, 2*int64(len(half)))
	os.Exit(3) // not reached: the parent kills us
}

// blockReader announces that the first half was handed over, then blocks.
type blockReader struct{}

func (blockReader) Read([]byte) (int, error) {
	os.Stdout.WriteString("writing\n")
	select {}
}

func TestKeyConflict(t *testing.T) {
	ctx := ctxT(t)
	s := newStore(t, nil)
	require.NoError(t, put(ctx, s, "a/b", "file"))
	err := put(ctx, s, "a/b/c", "below a file")
	require.ErrorIs(t, err, filestore.ErrKeyConflict)
	require.NoError(t, put(ctx, s, "d/e/f", "deep"))
	err = put(ctx, s, "d/e", "over a directory")
	require.ErrorIs(t, err, filestore.ErrKeyConflict)
	err = s.PutIfAbsent(ctx, "d/e", strings.NewReader("x"), 1)
	require.ErrorIs(t, err, filestore.ErrKeyConflict)
	assert.NotErrorIs(t, err, fs.ErrExist, "a conflict must not read as a lost race")
	assert.Equal(t, []string{"a/b", "d/e/f"}, files(t, s.Dir()), "a refused Put left files behind")
}

func TestSymlinksStayInside(t *testing.T) {
	ctx := ctxT(t)
	s := newStore(t, nil)
	outside := t.TempDir()
	secret := filepath.Join(outside, "secret")
	require.NoError(t, os.WriteFile(secret, []byte("outside"), 0o666))
	require.NoError(t, os.Symlink(outside, filepath.Join(s.Dir(), "escape")))
	require.NoError(t, os.Symlink(secret, filepath.Join(s.Dir(), "file-link")))

	err := put(ctx, s, "escape/new", "x")
	require.Error(t, err, "Put through a symlink to outside the root succeeded")
	_, err = os.Stat(filepath.Join(outside, "new"))
	assert.ErrorIs(t, err, fs.ErrNotExist, "Put wrote outside the root")
	for _, key := range []string{"escape/secret", "file-link"} {
		rc, err := s.Get(ctx, key)
		if err == nil {
			b, _ := io.ReadAll(rc)
			rc.Close()
			t.Fatalf("Get(%q) read %q from outside the root", key, b)
		}
	}
	assert.Error(t, s.Delete(ctx, "escape/secret"))
	b, err := os.ReadFile(secret)
	require.NoError(t, err)
	assert.Equal(t, "outside", string(b))
	assert.Empty(t, keys(t, ctx, s, ""), "List followed a symlink")

	// A symlink within the root is followed for reads.
	require.NoError(t, put(ctx, s, "real/obj", "inside"))
	require.NoError(t, os.Symlink("real", filepath.Join(s.Dir(), "alias")))
	rc, err := s.Get(ctx, "alias/obj")
	require.NoError(t, err)
	b, _ = io.ReadAll(rc)
	rc.Close()
	assert.Equal(t, "inside", string(b))
}

func TestNew(t *testing.T) {
	_, err := filestore.New("", nil)
	assert.Error(t, err)

	file := filepath.Join(t.TempDir(), "file")
	require.NoError(t, os.WriteFile(file, nil, 0o666))
	_, err = filestore.New(file, nil)
	assert.Error(t, err, "New on a regular file")
	_, err = filestore.New(filepath.Join(file, "below"), nil)
	assert.Error(t, err, "New below a regular file")

	nested := filepath.Join(t.TempDir(), "x", "y", "z")
	s, err := filestore.New(nested, nil)
	require.NoError(t, err)
	defer s.Close()
	fi, err := os.Stat(nested)
	require.NoError(t, err)
	assert.True(t, fi.IsDir())
	assert.Equal(t, nested, s.Dir())
}

func TestPermissionDenied(t *testing.T) {
	if os.Geteuid() == 0 {
		t.Skip("root ignores file modes")
	}
	ctx := ctxT(t)
	s := newStore(t, nil)
	require.NoError(t, os.Chmod(s.Dir(), 0o555))
	t.Cleanup(func() { os.Chmod(s.Dir(), 0o755) })
	err := put(ctx, s, "k", "x")
	require.ErrorIs(t, err, fs.ErrPermission)
	assert.Contains(t, err.Error(), "permission denied under "+s.Dir())
}

func TestOpenURL(t *testing.T) {
	ctx := ctxT(t)
	base := t.TempDir()
	t.Chdir(base)
	for _, tc := range []struct{ url, dir string }{
		{"file://" + filepath.ToSlash(filepath.Join(base, "abs")), filepath.Join(base, "abs")},
		{"file://localhost" + filepath.ToSlash(filepath.Join(base, "local")), filepath.Join(base, "local")},
		{"file://./rel/dir", filepath.Join(base, "rel", "dir")},
		{filepath.Join(base, "plain-abs"), filepath.Join(base, "plain-abs")},
		{"plain/rel", filepath.Join(base, "plain", "rel")},
		{"./dot-rel", filepath.Join(base, "dot-rel")},
	} {
		s, err := checkpoint.Open(ctx, tc.url)
		require.NoError(t, err, tc.url)
		require.NoError(t, put(ctx, s, "k/v", tc.url), tc.url)
		b, err := os.ReadFile(filepath.Join(tc.dir, "k", "v"))
		require.NoError(t, err, "%s: object not under %s", tc.url, tc.dir)
		assert.Equal(t, tc.url, string(b))
		require.NoError(t, s.(io.Closer).Close())
	}
	for _, bad := range []string{"file:///tmp/x?nosync=1", "file://user@/tmp/x", "file://"} {
		_, err := checkpoint.Open(ctx, bad)
		assert.Error(t, err, bad)
	}
}

func TestClosed(t *testing.T) {
	ctx := ctxT(t)
	s, err := filestore.New(t.TempDir(), nil)
	require.NoError(t, err)
	require.NoError(t, put(ctx, s, "k", "v"))
	require.NoError(t, s.Close())
	assert.Error(t, put(ctx, s, "k2", "v"))
	_, err = s.Get(ctx, "k")
	assert.Error(t, err)
	assert.False(t, errors.Is(err, fs.ErrNotExist), "a closed store should not claim the key is missing: %v", err)
}

func ExampleNew() {
	dir, _ := os.MkdirTemp("", "ckpt")
	defer os.RemoveAll(dir)
	s, err := filestore.New(dir, nil)
	if err != nil {
		fmt.Println(err)
		return
	}
	defer s.Close()
	ctx := context.Background()
	data := []byte("model weights")
	if err := s.Put(ctx, "run-1/000000000100/model.bin", bytes.NewReader(data), int64(len(data))); err != nil {
		fmt.Println(err)
		return
	}
	err = s.PutIfAbsent(ctx, "run-1/000000000100/MANIFEST.json", strings.NewReader("{}"), 2)
	fmt.Println("commit:", err)
	err = s.PutIfAbsent(ctx, "run-1/000000000100/MANIFEST.json", strings.NewReader("{}"), 2)
	fmt.Println("second commit lost:", errors.Is(err, fs.ErrExist))
	objs, _ := s.List(ctx, "run-1/")
	for _, o := range objs {
		fmt.Println(o.Key, o.Size)
	}
	// Output:
	// commit: <nil>
	// second commit lost: true
	// run-1/000000000100/MANIFEST.json 2
	// run-1/000000000100/model.bin 13
}

// In-memory readers take a path of their own (io.WriterTo, no copy through
// a buffer); sizes are still enforced there.
func TestWriterToSizes(t *testing.T) {
	ctx := ctxT(t)
	s := newStore(t, nil)
	data := bytes.Repeat([]byte("0123456789"), 1000)
	require.NoError(t, put(ctx, s, "k", "old"))
	err := s.Put(ctx, "k", bytes.NewReader(data), 1000)
	assert.Error(t, err, "a reader longer than size")
	err = s.Put(ctx, "k", io.LimitReader(bytes.NewReader(data), 5000), 1000)
	assert.Error(t, err, "a plain reader longer than size")
	err = s.Put(ctx, "k", io.LimitReader(bytes.NewReader(data), 5000), 0)
	assert.Error(t, err, "a plain reader longer than size 0")
	err = s.Put(ctx, "k", bytes.NewReader(data), int64(len(data))+1)
	assert.ErrorIs(t, err, io.ErrUnexpectedEOF, "a reader shorter than size")
	err = s.Put(ctx, "k", bytes.NewBuffer(data), int64(len(data)))
	require.NoError(t, err)
	rc, err := s.Get(ctx, "k")
	require.NoError(t, err)
	got, _ := io.ReadAll(rc)
	rc.Close()
	assert.Equal(t, data, got)
	assert.Equal(t, []string{"k"}, files(t, s.Dir()))
}

// Staged files are copied in the kernel where it can (copy_file_range), in
// chunks, with the same size rules.
func TestFileSource(t *testing.T) {
	ctx := ctxT(t)
	s := newStore(t, nil)
	data := make([]byte, 20<<20+5)
	for i := range data {
		data[i] = byte(i ^ i>>9)
	}
	src := filepath.Join(t.TempDir(), "staged")
	require.NoError(t, os.WriteFile(src, data, 0o666))
	for _, size := range []int64{int64(len(data)), -1} {
		f, err := os.Open(src)
		require.NoError(t, err)
		require.NoError(t, s.Put(ctx, "k", f, size))
		f.Close()
		b, err := os.ReadFile(filepath.Join(s.Dir(), "k"))
		require.NoError(t, err)
		require.True(t, bytes.Equal(data, b), "size %d: stored bytes differ", size)
	}
	f, err := os.Open(src)
	require.NoError(t, err)
	defer f.Close()
	err = s.Put(ctx, "short", f, int64(len(data))+1)
	assert.ErrorIs(t, err, io.ErrUnexpectedEOF)
	_, _ = f.Seek(0, io.SeekStart)
	err = s.Put(ctx, "long", f, int64(len(data))-1)
	assert.Error(t, err, "a file longer than size")
	canceled, cancel := context.WithCancel(ctx)
	cancel()
	_, _ = f.Seek(0, io.SeekStart)
	assert.ErrorIs(t, s.Put(canceled, "canceled", f, int64(len(data))), context.Canceled)
	assert.Equal(t, []string{"k"}, files(t, s.Dir()))
}

// Stores are usually opened by URL; importing filestore registers file://.
func Example_open() {
	dir, _ := os.MkdirTemp("", "ckpt")
	defer os.RemoveAll(dir)
	ctx := context.Background()
	s, err := checkpoint.Open(ctx, "file://"+filepath.ToSlash(dir))
	if err != nil {
		fmt.Println(err)
		return
	}
	defer s.(io.Closer).Close()
	fmt.Println(s.Put(ctx, "step/000001/weights", strings.NewReader("w"), 1))
	_, err = s.Get(ctx, "step/000002/weights")
	fmt.Println("missing:", errors.Is(err, fs.ErrNotExist))
	// Output:
	// <nil>
	// missing: true
}
