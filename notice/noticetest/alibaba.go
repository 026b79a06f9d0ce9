package noticetest

import (
	"crypto/rand"
	"encoding/hex"
	"net/http"
	"strconv"
	"sync"
	"sync/atomic"
	"time"
)

// Alibaba identity values the fake serves.
const (
	AlibabaInstanceID = "i-bp1fake0spot0instance"
	AlibabaRegionID   = "cn-hangzhou"
	AlibabaZoneID     = "cn-hangzhou-h"
)

// Alibaba is a fake Alibaba Cloud ECS metadata server (PROTOCOLS.md
// section 4): GET /latest/meta-data/instance/spot/termination-time answers
// 404 until a notice is scheduled and then the UTC deadline as
// 2006-01-02T15:04:05Z (whatever the kind: the protocol has one). It issues
// hardened-mode tokens on PUT /latest/api/token and, once
// [Alibaba.RequireTokens] is on, refuses plain GETs with 403. Identity keys:
// instance-id, region-id, zone-id, instance/instance-type, hostname.
//
// A GET with an unknown or expired token answers 401, like AWS; what the
// real server answers there is not documented [unverified], so clients
// should treat 401 and 403 alike.
type Alibaba struct {
	Base

	requireTokens atomic.Bool
	noTokenAPI    atomic.Bool
	tokenPuts     atomic.Int64

	mu     sync.Mutex
	tokens map[string]time.Time // token → expiry
}

var _ Fake = (*Alibaba)(nil)

// NewAlibaba starts an Alibaba fake. opts may be nil.
func NewAlibaba(opts *ServerOptions) (*Alibaba, error) {
	a := &Alibaba{tokens: make(map[string]time.Time)}
	if err := a.Start(opts, http.HandlerFunc(a.serve)); err != nil {
		return nil, err
	}
	return a, nil
}

// RequireTokens switches hardened-only mode: GETs without a token get 403.
func (a *Alibaba) RequireTokens(on bool) { a.requireTokens.Store(on) }

// DisableTokenAPI makes PUT /latest/api/token answer 404, like a metadata
// server from before hardened mode existed.
func (a *Alibaba) DisableTokenAPI(off bool) { a.noTokenAPI.Store(off) }

// ExpireTokens invalidates every token issued so far, as if their TTL had
// passed: the next GET carrying one answers 401.
func (a *Alibaba) ExpireTokens() {
	a.mu.Lock()
	defer a.mu.Unlock()
	clear(a.tokens)
}

// TokenRequests counts the PUTs to the token path.
func (a *Alibaba) TokenRequests() int { return int(a.tokenPuts.Load()) }

func (a *Alibaba) serve(w http.ResponseWriter, r *http.Request) {
	if r.Header.Get("X-Forwarded-For") != "" {
		http.Error(w, "Forbidden", http.StatusForbidden)
		return
	}
	if r.URL.Path == "/latest/api/token" {
		a.serveToken(w, r)
		return
	}
	if r.Method != http.MethodGet && r.Method != http.MethodHead {
		w.Header().Set("Allow", "GET, HEAD")
		http.Error(w, "Method Not Allowed", http.StatusMethodNotAllowed)
		return
	}
	if r.URL.Path == "/latest/meta-data/instance/spot/termination-time" && a.Intercept(w, r) {
		return
	}
	if tok := r.Header.Get("X-aliyun-ecs-metadata-token"); tok != "" {
		if !a.validToken(tok) {
			http.Error(w, "Unauthorized", http.StatusUnauthorized)
			return
		}
	} else if a.requireTokens.Load() {
		http.Error(w, "Forbidden", http.StatusForbidden)
		return
	}

	var body string
	switch r.URL.Path {
	case "/latest/meta-data/instance/spot/termination-time":
		cur, ok, _ := a.Current(time.Now())
		if !ok {
			serveNotFoundPage(w)
			return
		}
		body = cur.Deadline.UTC().Format("2006-01-02T15:04:05Z")
	case "/latest/meta-data/instance-id":
		body = AlibabaInstanceID
	case "/latest/meta-data/region-id":
		body = AlibabaRegionID
	case "/latest/meta-data/zone-id":
		body = AlibabaZoneID
	case "/latest/meta-data/instance/instance-type":
		body = "ecs.g7.large"
	case "/latest/meta-data/hostname":
		body = "iZbp1fake0spot0instanceZ"
	case "/latest/meta-data/", "/latest/meta-data":
		body = "hostname\ninstance-id\ninstance/\nregion-id\nzone-id\n"
	default:
		serveNotFoundPage(w)
		return
	}
	w.Header().Set("Content-Type", "text/plain")
	_, _ = w.Write([]byte(body))
}

func (a *Alibaba) serveToken(w http.ResponseWriter, r *http.Request) {
	if a.noTokenAPI.Load() {
		serveNotFoundPage(w)
		return
	}
	if r.Method != http.MethodPut {
		w.Header().Set("Allow", "PUT")
		http.Error(w, "Method Not Allowed", http.StatusMethodNotAllowed)
		return
	}
	a.tokenPuts.Add(1)
	ttl, err := strconv.Atoi(r.Header.Get("X-aliyun-ecs-metadata-token-ttl-seconds"))
	if err != nil || ttl < 1 || ttl > 21600 {
		http.Error(w, "Bad Request: X-aliyun-ecs-metadata-token-ttl-seconds must be 1..21600", http.StatusBadRequest)
		return
	}
	tok := alibabaToken()
	a.mu.Lock()
	a.tokens[tok] = time.Now().Add(time.Duration(ttl) * time.Second)
	a.mu.Unlock()
	w.Header().Set("Content-Type", "text/plain")
	w.Header().Set("X-aliyun-ecs-metadata-token-ttl-seconds", strconv.Itoa(ttl))
	_, _ = w.Write([]byte(tok))
}

func (a *Alibaba) validToken(tok string) bool {
	a.mu.Lock()
	defer a.mu.Unlock()
	exp, ok := a.tokens[tok]
	return ok && time.Now().Before(exp)
}

// alibabaToken returns an opaque token like the server's.
func alibabaToken() string {
	var b [24]byte
	_, _ = rand.Read(b[:])
	return "AQAEA" + hex.EncodeToString(b[:])
}

// serveNotFoundPage answers 404 with an HTML page, as the metadata servers do: a
// client must not try to parse it.
func serveNotFoundPage(w http.ResponseWriter) {
	w.Header().Set("Content-Type", "text/html")
	w.WriteHeader(http.StatusNotFound)
	_, _ = w.Write([]byte("<?xml version=\"1.0\" encoding=\"iso-8859-1\"?>\n<html><head><title>404 - Not Found</title></head><body><h1>404 - Not Found</h1></body></html>\n"))
}
