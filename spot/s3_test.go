package spot_test

import (
	"net/url"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	_ "github.com/spotsafe/spotsafe/checkpoint/s3store"
	"github.com/spotsafe/spotsafe/internal/s3fake"
	"github.com/spotsafe/spotsafe/notice"
	"github.com/spotsafe/spotsafe/spot"
)

// TestS3Store runs the interruption cycle on the S3 backend (gofakes3 in
// process), opened by URL as users do.
func TestS3Store(t *testing.T) {
	t.Setenv("AWS_ACCESS_KEY_ID", "AK")
	t.Setenv("AWS_SECRET_ACCESS_KEY", "SK")
	t.Setenv("AWS_EC2_METADATA_DISABLED", "true")
	srv := s3fake.Start(t, nil)
	storeURL := "s3://ckpt/jobs/train-1?region=us-east-1&endpoint=" + url.QueryEscape(srv.URL)

	fake, src := fakeSource(t, "gcp")
	var fired atomic.Bool
	w := &worker{total: 100000, size: 3 << 20, delay: time.Millisecond}
	w.onStep = func(s int64) {
		if s == 25 && fired.CompareAndSwap(false, true) {
			fake.Interrupt(notice.KindPreempt, time.Now().Add(30*time.Second))
		}
	}
	rec := &recorder{}
	err := spot.Run(t.Context(), w.run, &spot.Options{
		StoreURL: storeURL, Sources: []notice.Source{src}, NoSignals: true, EverySteps: 10, OnEvent: rec.on,
	})
	ie := interrupted(t, err)
	require.True(t, ie.Committed, "%v", err)
	assert.Equal(t, w.reached, ie.Step, "zero steps lost")
	assert.NotEmpty(t, rec.all(spot.EventCheckpointCommitted))

	fake.Clear()
	w2 := &worker{total: ie.Step + 10, size: 3 << 20}
	require.NoError(t, spot.Run(t.Context(), w2.run, &spot.Options{StoreURL: storeURL, Provider: spot.ProviderNone, NoSignals: true}))
	require.NotNil(t, w2.restored)
	assert.Equal(t, ie.Step, w2.restored.Step)
	ref := replay(3<<20, w2.total)
	assert.Equal(t, ref.acc, w2.m.acc)
	assert.Equal(t, ref.blob, w2.m.blob)
}
