package netsim_test

import (
	"bytes"
	"io"
	"net/http"
	"net/http/httptest"
	"sync"
	"testing"
	"time"

	"github.com/spotsafe/spotsafe/internal/netsim"
)

// BenchmarkShapedUpload measures how close the shaping gets to its cap:
// conns parallel uploads of 16 MiB each through a 100 MB/s, 20 ms shaped
// listener. The metric cap-% is the achieved aggregate rate as a
// percentage of conns × 100 MB/s.
//
//	go test -run '^$' -bench . ./internal/netsim
func BenchmarkShapedUpload(b *testing.B) {
	for _, conns := range []int{1, 8} {
		b.Run(map[int]string{1: "1conn", 8: "8conns"}[conns], func(b *testing.B) {
			const rate, size = 100e6, 16 << 20
			srv := httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				io.Copy(io.Discard, r.Body)
			}))
			srv.Listener = netsim.Listen(srv.Listener, netsim.Options{BytesPerSecond: rate, Latency: 20 * time.Millisecond})
			srv.Start()
			defer srv.Close()
			data := bytes.Repeat([]byte("d"), size)
			b.SetBytes(int64(size * conns))
			var elapsed time.Duration
			b.ResetTimer()
			for range b.N {
				start := time.Now()
				var wg sync.WaitGroup
				for range conns {
					wg.Go(func() {
						resp, err := srv.Client().Post(srv.URL, "application/octet-stream", bytes.NewReader(data))
						if err != nil {
							b.Error(err)
							return
						}
						resp.Body.Close()
					})
				}
				wg.Wait()
				elapsed += time.Since(start)
			}
			ideal := time.Duration(float64(size)/rate*float64(time.Second)) * time.Duration(b.N)
			b.ReportMetric(100*float64(ideal)/float64(elapsed), "cap-%")
		})
	}
}
