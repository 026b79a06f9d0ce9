package gcsstore_test

import (
	"fmt"
	"sync/atomic"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/spotsafe/spotsafe/checkpoint"
	"github.com/spotsafe/spotsafe/checkpoint/gcsstore"
	"github.com/spotsafe/spotsafe/checkpoint/storetest"
	"github.com/spotsafe/spotsafe/internal/netsim"
)

// TestConformance runs the Store suite twice against one fake-gcs-server,
// each subtest on a fresh prefix of the shared bucket: with the defaults
// (the 64 MiB large object goes up as a parallel composite upload), and
// with small thresholds, so that resumable and composite uploads also
// carry the suite's small objects. The second run sends about 1500
// requests for the large object alone (640 parts, a compose tree, the
// deletes); under -race it would take minutes, so it is skipped there (the
// package's own tests cover those paths under -race).
func TestConformance(t *testing.T) {
	f := newFake(t, netsim.Options{})
	client := f.client(t)
	var n atomic.Int64
	for _, tc := range []struct {
		name string
		opts func() *gcsstore.Options
	}{
		{"Defaults", func() *gcsstore.Options { return &gcsstore.Options{} }},
		{"SmallParts", func() *gcsstore.Options {
			return &gcsstore.Options{ChunkSize: 256 << 10, ParallelThreshold: 300_000, PartSize: 100_000, Concurrency: 4}
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if raceEnabled && tc.name == "SmallParts" {
				t.Skip("too slow under -race; run without -race")
			}
			storetest.RunConformance(t, func(t *testing.T) checkpoint.Store {
				opts := tc.opts()
				opts.Prefix = fmt.Sprintf("conformance/%04d", n.Add(1))
				s, err := gcsstore.New(client, bucket, opts)
				require.NoError(t, err)
				return s
			})
		})
	}
	f.assertNoTemporaries(t)
}
