package gcsstore_test

import (
	"context"
	"io"
	"net"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"

	"cloud.google.com/go/storage"
	"github.com/fsouza/fake-gcs-server/fakestorage"
	"github.com/stretchr/testify/require"
	"google.golang.org/api/option"

	"github.com/spotsafe/spotsafe/checkpoint/gcsstore"
	"github.com/spotsafe/spotsafe/internal/netsim"
)

const bucket = "ckpt"

// fakeGCS is fake-gcs-server in process behind a real loopback listener
// that the test owns, so that it can shape the connections (netsim), inject
// faults, and kill and restart the server mid-request while its objects
// survive. fakestorage.NewServerWithOptions(Options{Scheme: "http", Port: 0})
// would give the listener to the fake; NoListener plus HTTPHandler serves
// the same handler on ours.
//
// It fills one gap of the fake: Compose ignores ifGenerationMatch (real GCS
// answers 412), so compose requests are checked here, serialized.
type fakeGCS struct {
	tb    testing.TB
	srv   *fakestorage.Server
	shape netsim.Options

	mu   sync.Mutex
	hs   *http.Server
	addr string
	done chan struct{}

	composeMu sync.Mutex
	hook      atomic.Pointer[hookFunc]
	requests  atomic.Int64
}

// hookFunc sees every request first; it returns true if it answered.
type hookFunc func(w http.ResponseWriter, r *http.Request) bool

func newFake(tb testing.TB, shape netsim.Options) *fakeGCS {
	tb.Helper()
	srv, err := fakestorage.NewServerWithOptions(fakestorage.Options{NoListener: true})
	require.NoError(tb, err)
	srv.CreateBucketWithOpts(fakestorage.CreateBucketOpts{Name: bucket})
	f := &fakeGCS{tb: tb, srv: srv, shape: shape, addr: "127.0.0.1:0"}
	f.start()
	tb.Cleanup(func() {
		f.kill()
		srv.Stop()
	})
	return f
}

// start serves on f.addr (the same port again after a kill).
func (f *fakeGCS) start() {
	f.tb.Helper()
	ln, err := net.Listen("tcp", f.addr)
	require.NoError(f.tb, err)
	if f.shape != (netsim.Options{}) {
		ln = netsim.Listen(ln, f.shape)
	}
	hs := &http.Server{Handler: f}
	done := make(chan struct{})
	go func() {
		defer close(done)
		_ = hs.Serve(ln)
	}()
	f.mu.Lock()
	f.hs, f.addr, f.done = hs, ln.Addr().String(), done
	f.mu.Unlock()
}

// kill closes the listener and every connection at once, as a crashed
// server would; requests in flight fail mid-body.
func (f *fakeGCS) kill() {
	f.mu.Lock()
	hs, done := f.hs, f.done
	f.hs = nil
	f.mu.Unlock()
	if hs == nil {
		return
	}
	_ = hs.Close()
	<-done
}

// URL is the server's base URL, as for ?endpoint=.
func (f *fakeGCS) URL() string {
	f.mu.Lock()
	defer f.mu.Unlock()
	return "http://" + f.addr
}

// setHook installs h (nil removes it).
func (f *fakeGCS) setHook(h hookFunc) {
	if h == nil {
		f.hook.Store(nil)
		return
	}
	f.hook.Store(&h)
}

func (f *fakeGCS) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	f.requests.Add(1)
	if h := f.hook.Load(); h != nil && (*h)(w, r) {
		return
	}
	f.serve(w, r)
}

// serve is ServeHTTP without the hook.
func (f *fakeGCS) serve(w http.ResponseWriter, r *http.Request) {
	if obj, ok := composeTarget(r); ok {
		f.composeMu.Lock()
		defer f.composeMu.Unlock()
		if want := r.URL.Query().Get("ifGenerationMatch"); want != "" {
			var gen int64
			if o, err := f.srv.GetObjectStreaming(bucket, obj); err == nil {
				gen = o.Generation
				o.Close()
			}
			if strconv.FormatInt(gen, 10) != want {
				writePreconditionFailed(w)
				return
			}
		}
	}
	f.srv.HTTPHandler().ServeHTTP(w, r)
}

// composeTarget returns the destination of a compose request.
func composeTarget(r *http.Request) (string, bool) {
	p := r.URL.EscapedPath()
	const pre = "/storage/v1/b/" + bucket + "/o/"
	if r.Method != http.MethodPost || !strings.HasPrefix(p, pre) || !strings.HasSuffix(p, "/compose") {
		return "", false
	}
	name, err := url.PathUnescape(strings.TrimSuffix(strings.TrimPrefix(p, pre), "/compose"))
	return name, err == nil
}

func writePreconditionFailed(w http.ResponseWriter) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(http.StatusPreconditionFailed)
	_, _ = io.WriteString(w, `{"error":{"code":412,"message":"At least one of the pre-conditions you specified did not hold.","errors":[{"domain":"global","reason":"conditionNotMet","message":"At least one of the pre-conditions you specified did not hold."}]}}`)
}

// client returns an SDK client for the fake, as TESTING.md describes.
func (f *fakeGCS) client(tb testing.TB) *storage.Client {
	tb.Helper()
	c, err := storage.NewClient(context.Background(),
		option.WithEndpoint(f.URL()+"/storage/v1/"),
		option.WithoutAuthentication(),
		storage.WithJSONReads())
	require.NoError(tb, err)
	tb.Cleanup(func() { _ = c.Close() })
	return c
}

// store returns a Store on the fake with its own client.
func (f *fakeGCS) store(tb testing.TB, opts *gcsstore.Options) *gcsstore.Store {
	tb.Helper()
	s, err := gcsstore.New(f.client(tb), bucket, opts)
	require.NoError(tb, err)
	return s
}

// names lists every object in the bucket under prefix, temporaries
// included, straight from the fake's backend.
func (f *fakeGCS) names(tb testing.TB, prefix string) []string {
	tb.Helper()
	objs, _, err := f.srv.ListObjects(bucket, prefix, "", false)
	require.NoError(tb, err)
	var out []string
	for _, o := range objs {
		out = append(out, o.Name)
	}
	return out
}

// content returns an object's bytes from the fake's backend.
func (f *fakeGCS) content(tb testing.TB, name string) ([]byte, bool) {
	tb.Helper()
	o, err := f.srv.GetObject(bucket, name)
	if err != nil {
		return nil, false
	}
	return o.Content, true
}

// isUpload reports whether r carries object data.
func isUpload(r *http.Request) bool {
	return strings.HasPrefix(r.URL.Path, "/upload/")
}

// uploadName returns the object name of an upload request, if the query
// carries it (multipart and resumable-initiation requests do).
func uploadName(r *http.Request) string { return r.URL.Query().Get("name") }

// countingBody counts the bytes a handler reads and closes reached once n
// bytes have been read.
type countingBody struct {
	io.ReadCloser
	n       *atomic.Int64
	limit   int64
	once    *sync.Once
	reached chan struct{}
}

func (c countingBody) Read(p []byte) (int, error) {
	k, err := c.ReadCloser.Read(p)
	if c.n.Add(int64(k)) >= c.limit {
		c.once.Do(func() { close(c.reached) })
	}
	return k, err
}

// unavailable answers 503 after reading the request, as a server does that
// fails after receiving a request. (Answering before the body is read lets
// net/http keep sending the body after the response, while the SDK already
// reuses that buffer for its retry: a data race inside the SDK that -race
// reports.)
func unavailable(w http.ResponseWriter, r *http.Request) {
	_, _ = io.Copy(io.Discard, r.Body)
	w.WriteHeader(http.StatusServiceUnavailable)
}
