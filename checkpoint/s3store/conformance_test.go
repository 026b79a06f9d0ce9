package s3store_test

import (
	"fmt"
	"sync/atomic"
	"testing"

	"github.com/spotsafe/spotsafe/checkpoint"
	"github.com/spotsafe/spotsafe/checkpoint/storetest"
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
