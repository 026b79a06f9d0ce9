package objstore

import (
	"context"
	"errors"
	"io"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/spotsafe/spotsafe/checkpoint"
)

func TestValidateKey(t *testing.T) {
	for _, k := range []string{"a", "step-1/model.bin", "A_Z.0-9/x"} {
		assert.NoError(t, ValidateKey(k), k)
	}
	for _, k := range []string{"", "a b", "a%2F", "a+b", "ä", "a?b"} {
		err := ValidateKey(k)
		require.Error(t, err, k)
		assert.ErrorIs(t, err, checkpoint.ErrInvalidKey, k)
	}
	err := ValidateKey("ok/a+b")
	require.Error(t, err)
	assert.Contains(t, err.Error(), `"+"`)
}

func TestValidateListPrefix(t *testing.T) {
	for _, p := range []string{"", "step-", "dir/"} {
		assert.NoError(t, ValidateListPrefix(p), p)
	}
	for _, p := range []string{"a b", "x%", "ü/"} {
		assert.ErrorIs(t, ValidateListPrefix(p), checkpoint.ErrInvalidKey, p)
	}
}

func TestParseSize(t *testing.T) {
	for in, want := range map[string]int64{"1": 1, "5MiB": 5 << 20, "5M": 5 << 20, "3k": 3 << 10, "3K": 3 << 10, "2KiB": 2 << 10, "1G": 1 << 30, "1GiB": 1 << 30} {
		got, err := ParseSize(in)
		require.NoError(t, err, in)
		assert.Equal(t, want, got, in)
	}
	for _, in := range []string{"", "0", "-1", "MiB", "1.5M", "1T", "x"} {
		_, err := ParseSize(in)
		assert.Error(t, err, in)
	}
}

func TestTotalSize(t *testing.T) {
	n, ok := TotalSize("bytes 0-9/100")
	assert.True(t, ok)
	assert.Equal(t, int64(100), n)
	for _, cr := range []string{"", "bytes */*", "bytes 0-9/*", "bytes 0-9/x"} {
		_, ok := TotalSize(cr)
		assert.False(t, ok, cr)
	}
}

func TestExactReader(t *testing.T) {
	b, err := io.ReadAll(NewExactReader("st", strings.NewReader("hello"), 5))
	require.NoError(t, err)
	assert.Equal(t, "hello", string(b))

	b, err = io.ReadAll(NewExactReader("st", strings.NewReader("hello"), -1))
	require.NoError(t, err)
	assert.Equal(t, "hello", string(b))

	_, err = io.ReadAll(NewExactReader("st", strings.NewReader("hello"), 4))
	require.Error(t, err)
	assert.Contains(t, err.Error(), "st: reader has more than the 4 bytes announced")

	_, err = io.ReadAll(NewExactReader("st", strings.NewReader("hello"), 6))
	assert.ErrorIs(t, err, io.ErrUnexpectedEOF)
	assert.Contains(t, err.Error(), "st: reader ended after 5 of 6 bytes")
}

type closeCounter struct {
	io.Reader
	closed int
}

func (c *closeCounter) Close() error { c.closed++; return nil }

func TestSliceWhole(t *testing.T) {
	body := &closeCounter{Reader: strings.NewReader("0123456789")}
	rc, err := SliceWhole("st", body, "k", 3, 4)
	require.NoError(t, err)
	b, err := io.ReadAll(rc)
	require.NoError(t, err)
	assert.Equal(t, "3456", string(b))
	require.NoError(t, rc.Close())
	assert.Equal(t, 1, body.closed)

	rc, err = SliceWhole("st", &closeCounter{Reader: strings.NewReader("0123456789")}, "k", 8, -1)
	require.NoError(t, err)
	b, _ = io.ReadAll(rc)
	assert.Equal(t, "89", string(b))

	body = &closeCounter{Reader: strings.NewReader("012")}
	_, err = SliceWhole("st", body, "k", 5, 1)
	require.Error(t, err)
	assert.True(t, errors.Is(err, io.EOF))
	assert.Contains(t, err.Error(), "st: get k: skip to 5")
	assert.Equal(t, 1, body.closed, "body closed after a failed skip")
}

func TestSortByKey(t *testing.T) {
	infos := []checkpoint.ObjectInfo{{Key: "b"}, {Key: "a/2"}, {Key: "a/10"}, {Key: "a"}}
	SortByKey(infos)
	var keys []string
	for _, i := range infos {
		keys = append(keys, i.Key)
	}
	assert.Equal(t, []string{"a", "a/10", "a/2", "b"}, keys)
}

func TestCtxReader(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	r := CtxReader(ctx, strings.NewReader("abcdef"))
	buf := make([]byte, 3)
	n, err := r.Read(buf)
	require.NoError(t, err)
	assert.Equal(t, "abc", string(buf[:n]))
	cancel()
	n, err = r.Read(buf)
	assert.Zero(t, n)
	assert.ErrorIs(t, err, context.Canceled)
}

func TestTuningNormalize(t *testing.T) {
	var tu Tuning
	require.NoError(t, tu.Normalize("st", 5<<20, "the minimum of 5 MiB"))
	assert.Equal(t, Tuning{PartSize: 8 << 20, Concurrency: 8, MultipartThreshold: 16 << 20, AbortTimeout: 10 * time.Second}, tu)

	tu = Tuning{PartSize: 6 << 20, Concurrency: 3, MultipartThreshold: 1, AbortTimeout: -time.Second}
	require.NoError(t, tu.Normalize("st", 5<<20, "the minimum of 5 MiB"))
	assert.Equal(t, Tuning{PartSize: 6 << 20, Concurrency: 3, MultipartThreshold: 1, AbortTimeout: 10 * time.Second}, tu, "set fields are kept")

	for _, c := range []struct {
		tu   Tuning
		want string
	}{
		{Tuning{PartSize: 1 << 20}, "st: PartSize 1048576 is below the minimum of 5 MiB"},
		{Tuning{PartSize: -1}, "st: PartSize -1 is below the minimum of 5 MiB"},
		{Tuning{Concurrency: -2}, "st: negative Concurrency -2"},
		{Tuning{MultipartThreshold: -3}, "st: negative MultipartThreshold -3"},
	} {
		tu := c.tu
		assert.EqualError(t, tu.Normalize("st", 5<<20, "the minimum of 5 MiB"), c.want)
	}
}

func TestKeyPrefix(t *testing.T) {
	for in, want := range map[string][2]string{"": {"", ""}, "/": {"", ""}, "/jobs/a/": {"jobs/a", "jobs/a/"}, "x": {"x", "x/"}} {
		trimmed, kp, err := KeyPrefix("st", in)
		require.NoError(t, err, in)
		assert.Equal(t, want, [2]string{trimmed, kp}, in)
	}
	_, _, err := KeyPrefix("st", "bad prefix")
	assert.ErrorIs(t, err, checkpoint.ErrInvalidKey)
	assert.Contains(t, err.Error(), "st: prefix: ")
}
