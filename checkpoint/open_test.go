package checkpoint_test

import (
	"bytes"
	"context"
	"io"
	"os"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/spotsafe/spotsafe/checkpoint"
	_ "github.com/spotsafe/spotsafe/checkpoint/filestore"
	_ "github.com/spotsafe/spotsafe/checkpoint/memstore"
)

func TestOpenPlainPaths(t *testing.T) {
	ctx := context.Background()
	dir := t.TempDir()
	t.Chdir(dir)
	for _, p := range []string{
		filepath.Join(dir, "abs%20dir?x#y"), // absolute, with URL metacharacters
		"rel%dir?#",                         // relative
		"./dot/rel",
	} {
		s, err := checkpoint.Open(ctx, p)
		require.NoError(t, err, p)
		require.NoError(t, s.Put(ctx, "k", bytes.NewReader([]byte("v")), 1))
		want := p
		if !filepath.IsAbs(p) {
			want = filepath.Join(dir, p)
		}
		b, err := os.ReadFile(filepath.Join(want, "k"))
		require.NoError(t, err, "object not where the path says")
		require.Equal(t, "v", string(b))
		if c, ok := s.(io.Closer); ok {
			require.NoError(t, c.Close())
		}
	}
	_, err := checkpoint.Open(ctx, "nosuch://x")
	require.ErrorIs(t, err, checkpoint.ErrUnknownScheme)
}
