package checkpoint_test

import (
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/spotsafe/spotsafe/checkpoint"
	"github.com/spotsafe/spotsafe/checkpoint/filestore"
	"github.com/spotsafe/spotsafe/checkpoint/storetest"
)

func newFilestore(t testing.TB, dir string) *filestore.Store {
	t.Helper()
	st, err := filestore.New(dir, nil)
	require.NoError(t, err)
	t.Cleanup(func() { st.Close() })
	return st
}

func TestManagerFilestore(t *testing.T) {
	storetest.RunManagerTests(t, func(t *testing.T) checkpoint.Store { return newFilestore(t, t.TempDir()) })
}

func TestDiskFullFilestore(t *testing.T) {
	testDiskFull(t, newFilestore(t, t.TempDir()))
}
