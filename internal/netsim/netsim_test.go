package netsim_test

import (
	"bytes"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/spotsafe/spotsafe/internal/netsim"
)

// pipe returns both ends of a loopback TCP connection whose server end is
// shaped by opts.
func pipe(t *testing.T, opts netsim.Options) (client, server net.Conn) {
	t.Helper()
	inner, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	l := netsim.Listen(inner, opts)
	t.Cleanup(func() { l.Close() })
	accepted := make(chan net.Conn, 1)
	go func() {
		c, err := l.Accept()
		if err != nil {
			close(accepted)
			return
		}
		accepted <- c
	}()
	client, err = net.Dial("tcp", l.Addr().String())
	require.NoError(t, err)
	server, ok := <-accepted
	require.True(t, ok, "accept failed")
	t.Cleanup(func() { client.Close(); server.Close() })
	return client, server
}

func TestWriteIsCapped(t *testing.T) {
	const rate, size = 8 << 20, 1 << 20 // 1 MiB at 8 MiB/s: at least 125 ms
	client, server := pipe(t, netsim.Options{BytesPerSecond: rate})
	data := bytes.Repeat([]byte("x"), size)
	start := time.Now()
	errc := make(chan error, 1)
	go func() { _, err := server.Write(data); server.Close(); errc <- err }()
	got, err := io.ReadAll(client)
	require.NoError(t, err)
	require.NoError(t, <-errc)
	elapsed := time.Since(start)
	assert.Equal(t, data, got)
	want := time.Duration(float64(size) / rate * float64(time.Second))
	assert.GreaterOrEqual(t, elapsed, want*9/10, "1 MiB went out faster than the cap allows")
	assert.Less(t, elapsed, 20*want, "pacing far slower than the cap")
}

func TestReadIsCapped(t *testing.T) {
	const rate, size = 8 << 20, 1 << 20
	client, server := pipe(t, netsim.Options{BytesPerSecond: rate})
	data := bytes.Repeat([]byte("y"), size)
	start := time.Now()
	go func() { client.Write(data); client.Close() }()
	got, err := io.ReadAll(server)
	require.NoError(t, err)
	elapsed := time.Since(start)
	assert.Equal(t, data, got)
	want := time.Duration(float64(size) / rate * float64(time.Second))
	assert.GreaterOrEqual(t, elapsed, want*9/10, "1 MiB came in faster than the cap allows")
}

func TestLatencyOncePerTurn(t *testing.T) {
	const latency = 30 * time.Millisecond
	client, server := pipe(t, netsim.Options{Latency: latency})
	buf := make([]byte, 1)

	// Request, then response: the response is delayed.
	start := time.Now()
	_, err := client.Write([]byte("q"))
	require.NoError(t, err)
	_, err = io.ReadFull(server, buf)
	require.NoError(t, err)
	_, err = server.Write([]byte("a"))
	require.NoError(t, err)
	_, err = io.ReadFull(client, buf)
	require.NoError(t, err)
	assert.GreaterOrEqual(t, time.Since(start), latency)

	// A second write in the same turn is not delayed again: a response
	// streamed in many writes pays the latency once. Measured against the
	// latency itself, with a wide margin, since the machine may be busy.
	start = time.Now()
	_, err = server.Write([]byte("b"))
	require.NoError(t, err)
	assert.Less(t, time.Since(start), latency, "second write of the same turn was delayed")
}

func TestZeroOptionsIsPassThrough(t *testing.T) {
	c, s := net.Pipe()
	defer c.Close()
	defer s.Close()
	assert.Equal(t, c, netsim.Shape(c, netsim.Options{}))
}

func TestHTTPServerBehindNetsim(t *testing.T) {
	const rate, size = 16 << 20, 2 << 20
	const latency = 20 * time.Millisecond
	body := bytes.Repeat([]byte("z"), size)
	srv := httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		io.Copy(io.Discard, r.Body)
		w.Write(body)
	}))
	srv.Listener = netsim.Listen(srv.Listener, netsim.Options{BytesPerSecond: rate, Latency: latency})
	srv.Start()
	defer srv.Close()

	start := time.Now()
	resp, err := srv.Client().Get(srv.URL)
	require.NoError(t, err)
	got, err := io.ReadAll(resp.Body)
	resp.Body.Close()
	require.NoError(t, err)
	assert.Equal(t, size, len(got))
	want := latency + time.Duration(float64(size)/rate*float64(time.Second))
	assert.GreaterOrEqual(t, time.Since(start), want*9/10)
}
