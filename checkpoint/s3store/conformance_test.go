package s3store_test

import (
	"fmt"
	"sync/atomic"
	"testing"

	"github.com/spotsafe/spotsafe/checkpoint"
	"github.com/spotsafe/spotsafe/checkpoint/storetest"
	"github.com/spotsafe/spotsafe/internal/objstoretest"
	"github.com/spotsafe/spotsafe/internal/s3fake"
)

// TestConformance runs the shared Store suite against gofakes3, each
// subtest under its own prefix of one bucket, with part sizes small enough
// that the large round trips go through multipart uploads and parallel
// ranged reads.
func TestConformance(t *testing.T) {
	srv := s3fake.Start(t, nil)
	var n atomic.Int32
	storetest.RunConformance(t, func(t *testing.T) checkpoint.Store {
		return newStore(t, srv, small(fmt.Sprintf("conf-%03d", n.Add(1))))
	})
}

// TestManager runs the checkpoint Manager's whole cycle (save, restore,
// retention, racing writers, failed saves) on the S3 store.
func TestManager(t *testing.T) {
	srv := s3fake.Start(t, nil)
	var n atomic.Int32
	storetest.RunManagerTests(t, func(t *testing.T) checkpoint.Store {
		return newStore(t, srv, small(fmt.Sprintf("mgr-%03d", n.Add(1))))
	})
}

// TestManagerServerKilledMidSave kills the server while the Manager uploads
// a checkpoint's parts: the save fails without committing, and once the
// server is back a new Manager restores the previous checkpoint.
func TestManagerServerKilledMidSave(t *testing.T) {
	srv := s3fake.Start(t, nil)
	objstoretest.KilledMidSave(t, srv, func(t *testing.T) checkpoint.Store {
		return newStore(t, srv, small("job"))
	}, 7<<20, 24<<20)
}
