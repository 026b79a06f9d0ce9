// Package s3fake runs an in-process S3 server (gofakes3 on its in-memory
// backend) for the tests and benchmarks of the S3 and OSS stores, and fills
// the two gaps that matter for checkpoints:
//
//   - gofakes3 ignores If-None-Match on CompleteMultipartUpload (real S3
//     answers 412 PreconditionFailed): the handler checks it;
//   - OSS clients send x-oss-forbid-overwrite instead of If-None-Match and
//     expect 409 FileAlreadyExists: the OSS dialect translates both ways.
//
// A Server can be killed abruptly (listener and every connection closed, as
// a crashed server or a cut network looks to a client) and restarted on the
// same address with the same objects.
package s3fake

import (
	"encoding/xml"
	"fmt"
	"io"
	"log"
	"net"
	"net/http"
	"net/http/httptest"
	"net/url"
	"strings"
	"sync"
	"testing"

	"github.com/johannesboyne/gofakes3"
	"github.com/johannesboyne/gofakes3/backend/s3mem"

	"github.com/spotsafe/spotsafe/internal/netsim"
)

// Dialect selects the protocol variant the server speaks.
type Dialect int

const (
	// S3 is plain S3 (the default).
	S3 Dialect = iota + 1
	// OSS is Alibaba Cloud OSS: x-oss-forbid-overwrite and 409
	// FileAlreadyExists.
	OSS
)

// Options configure a Server. The zero value is an unthrottled S3 server.
type Options struct {
	Dialect Dialect
	// Netsim shapes every connection (bandwidth cap, latency).
	Netsim netsim.Options
}

// Server is a running fake. Buckets are created on first use.
type Server struct {
	// URL is the endpoint, e.g. http://127.0.0.1:41234.
	URL string

	opts    Options
	handler http.Handler
	addr    string

	mu   sync.Mutex
	srv  *httptest.Server
	hook func(*http.Request)
}

// Start runs a server until the test ends.
func Start(tb testing.TB, opts *Options) *Server {
	tb.Helper()
	s := &Server{}
	if opts != nil {
		s.opts = *opts
	}
	if s.opts.Dialect == 0 {
		s.opts.Dialect = S3
	}
	fake := gofakes3.New(s3mem.New(), gofakes3.WithAutoBucket(true))
	h := Conditional(fake.Server())
	if s.opts.Dialect == OSS {
		h = OSSDialect(h)
	}
	s.handler = http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		s.mu.Lock()
		hook := s.hook
		s.mu.Unlock()
		if hook != nil {
			hook(r)
		}
		h.ServeHTTP(w, r)
	})
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		tb.Fatalf("s3fake: listen: %v", err)
	}
	s.addr = l.Addr().String()
	s.URL = "http://" + s.addr
	s.serve(l)
	tb.Cleanup(s.Close)
	return s
}

func (s *Server) serve(l net.Listener) {
	srv := httptest.NewUnstartedServer(s.handler)
	// Killed connections make net/http log; that is expected here.
	srv.Config.ErrorLog = log.New(io.Discard, "", 0)
	srv.Listener.Close()
	srv.Listener = netsim.Listen(l, s.opts.Netsim)
	srv.Start()
	s.mu.Lock()
	s.srv = srv
	s.mu.Unlock()
}

// OnRequest sets a function called at the start of every request (nil to
// remove it); tests use it to observe traffic or to Kill the server at a
// chosen moment. It may call Kill.
func (s *Server) OnRequest(fn func(*http.Request)) {
	s.mu.Lock()
	s.hook = fn
	s.mu.Unlock()
}

// Kill closes the listener and every open connection at once, without
// waiting for requests in progress. Objects survive for Restart.
func (s *Server) Kill() {
	s.mu.Lock()
	srv := s.srv
	s.mu.Unlock()
	if srv == nil {
		return
	}
	srv.Listener.Close()
	srv.CloseClientConnections()
}

// Restart serves the same objects on the same address after Kill.
func (s *Server) Restart(tb testing.TB) {
	tb.Helper()
	s.Close()
	l, err := net.Listen("tcp", s.addr)
	if err != nil {
		tb.Fatalf("s3fake: listen again on %s: %v", s.addr, err)
	}
	s.serve(l)
}

// Close stops the server and waits for its handlers.
func (s *Server) Close() {
	s.mu.Lock()
	srv := s.srv
	s.srv = nil
	s.mu.Unlock()
	if srv != nil {
		srv.CloseClientConnections()
		srv.Close()
	}
}

// Conditional wraps a gofakes3 handler so that CompleteMultipartUpload
// honours If-None-Match: * as S3 does (412 when the key exists). Conditional
// writes are serialized so that the existence check and the write are one
// step.
func Conditional(inner http.Handler) http.Handler {
	var mu sync.Mutex
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Header.Get("If-None-Match") != "*" || (r.Method != http.MethodPut && r.Method != http.MethodPost) {
			inner.ServeHTTP(w, r)
			return
		}
		mu.Lock()
		defer mu.Unlock()
		if r.Method == http.MethodPost && r.URL.Query().Has("uploadId") && exists(inner, r.URL.Path) {
			writeError(w, http.StatusPreconditionFailed, "PreconditionFailed",
				"At least one of the pre-conditions you specified did not hold")
			return
		}
		inner.ServeHTTP(w, r)
	})
}

// exists asks inner whether the object at path exists.
func exists(inner http.Handler, path string) bool {
	req := httptest.NewRequest(http.MethodHead, "http://fake"+escapePath(path), nil)
	rec := httptest.NewRecorder()
	inner.ServeHTTP(rec, req)
	return rec.Code == http.StatusOK
}

func escapePath(p string) string {
	segs := strings.Split(p, "/")
	for i, seg := range segs {
		segs[i] = url.PathEscape(seg)
	}
	return strings.Join(segs, "/")
}

// OSSDialect translates OSS's conditional create to S3's and back:
// x-oss-forbid-overwrite: true becomes If-None-Match: *, and the resulting
// 412 becomes 409 FileAlreadyExists, the answer OSS gives. OSS also checks
// the header on InitiateMultipartUpload; so does this handler.
func OSSDialect(inner http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if !strings.EqualFold(r.Header.Get("x-oss-forbid-overwrite"), "true") {
			inner.ServeHTTP(w, r)
			return
		}
		if r.Method == http.MethodPost && r.URL.Query().Has("uploads") && exists(inner, r.URL.Path) {
			writeError(w, http.StatusConflict, "FileAlreadyExists", "The object you specified already exists and can not be overwritten.")
			return
		}
		r.Header.Set("If-None-Match", "*")
		cw := &conflictWriter{ResponseWriter: w}
		inner.ServeHTTP(cw, r)
		if cw.conflict {
			writeError(w, http.StatusConflict, "FileAlreadyExists", "The object you specified already exists and can not be overwritten.")
		}
	})
}

// conflictWriter swallows a 412 response so that a 409 can replace it.
type conflictWriter struct {
	http.ResponseWriter
	wrote, conflict bool
}

func (c *conflictWriter) WriteHeader(code int) {
	if c.wrote {
		return
	}
	c.wrote = true
	if code == http.StatusPreconditionFailed {
		c.conflict = true
		return
	}
	c.ResponseWriter.WriteHeader(code)
}

func (c *conflictWriter) Write(p []byte) (int, error) {
	if !c.wrote {
		c.WriteHeader(http.StatusOK)
	}
	if c.conflict {
		return len(p), nil
	}
	return c.ResponseWriter.Write(p)
}

type errorBody struct {
	XMLName   xml.Name `xml:"Error"`
	Code      string   `xml:"Code"`
	Message   string   `xml:"Message"`
	RequestID string   `xml:"RequestId"`
}

func writeError(w http.ResponseWriter, status int, code, msg string) {
	body, _ := xml.Marshal(errorBody{Code: code, Message: msg, RequestID: "s3fake"})
	w.Header().Set("Content-Type", "application/xml")
	w.WriteHeader(status)
	w.Write([]byte(xml.Header))
	w.Write(body)
}

// Sink is an S3 (and OSS) endpoint that accepts uploads and throws the
// bytes away: PutObject and the multipart calls (initiate, upload part,
// complete, abort) answer as S3 does, everything else 501. Benchmarks use
// it to measure an upload path where the network, not gofakes3 (which
// hashes every part under one lock and re-hashes the whole object on
// complete), is the bottleneck.
func Sink() http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		q := r.URL.Query()
		bucket, key, _ := strings.Cut(strings.TrimPrefix(r.URL.Path, "/"), "/")
		n, err := io.Copy(io.Discard, r.Body)
		if err != nil {
			return
		}
		etag := fmt.Sprintf(`"%032x"`, n)
		switch {
		case r.Method == http.MethodPost && q.Has("uploads"):
			writeXML(w, struct {
				XMLName  xml.Name `xml:"InitiateMultipartUploadResult"`
				Bucket   string
				Key      string
				UploadId string
			}{Bucket: bucket, Key: key, UploadId: "sink-upload"})
		case r.Method == http.MethodPost && q.Has("uploadId"):
			writeXML(w, struct {
				XMLName xml.Name `xml:"CompleteMultipartUploadResult"`
				Bucket  string
				Key     string
				ETag    string
			}{Bucket: bucket, Key: key, ETag: `"sink-1"`})
		case r.Method == http.MethodDelete && q.Has("uploadId"):
			w.WriteHeader(http.StatusNoContent)
		case r.Method == http.MethodPut && key != "":
			w.Header().Set("ETag", etag)
		default:
			writeError(w, http.StatusNotImplemented, "NotImplemented", "the sink only accepts uploads")
		}
	})
}

func writeXML(w http.ResponseWriter, v any) {
	body, _ := xml.Marshal(v)
	w.Header().Set("Content-Type", "application/xml")
	w.Write([]byte(xml.Header))
	w.Write(body)
}

// StartSink runs Sink behind netsim shaping until the test ends and returns
// its URL.
func StartSink(tb testing.TB, shape netsim.Options) string {
	tb.Helper()
	srv := httptest.NewUnstartedServer(Sink())
	srv.Config.ErrorLog = log.New(io.Discard, "", 0)
	srv.Listener = netsim.Listen(srv.Listener, shape)
	srv.Start()
	tb.Cleanup(srv.Close)
	return srv.URL
}
