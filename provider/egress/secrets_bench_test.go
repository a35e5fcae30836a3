package egress

import (
	"crypto/tls"
	"crypto/x509"
	"io"
	"net/http"
	"net/url"
	"slices"
	"testing"
	"time"
)

// benchGet times b.N GETs of u through c and reports their median.
func benchGet(b *testing.B, c func() *http.Client, u string, header http.Header) {
	b.Helper()
	times := make([]time.Duration, 0, b.N)
	b.ResetTimer()
	for b.Loop() {
		req, _ := http.NewRequest("GET", u, nil)
		req.Header = header.Clone()
		start := time.Now()
		resp, err := c().Do(req)
		if err != nil {
			b.Fatal(err)
		}
		_, _ = io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
		times = append(times, time.Since(start))
		if resp.StatusCode != 200 {
			b.Fatalf("GET %s = %d", u, resp.StatusCode)
		}
	}
	b.StopTimer()
	slices.Sort(times)
	b.ReportMetric(float64(times[len(times)/2].Microseconds()), "p50-µs")
}

// BenchmarkProxyPlainSwap compares a plain forward of a request that carries a
// placeholder (swapped, the echo scrubbed) with the same request through a proxy
// without secrets.
func BenchmarkProxyPlainSwap(b *testing.B) {
	s := testSecrets(b)
	up := newUpstream(b, nil)
	header := http.Header{"Authorization": {"Bearer " + s.list[0].placeholder}}
	for _, bc := range []struct {
		name    string
		secrets *Secrets
	}{{"without-secrets", nil}, {"with-swap", s}} {
		b.Run(bc.name, func(b *testing.B) {
			_, proxy := startProxy(b, bc.secrets, nil, nil)
			c := &http.Client{Transport: &http.Transport{Proxy: http.ProxyURL(proxy)}}
			defer c.CloseIdleConnections()
			benchGet(b, func() *http.Client { return c }, "http://"+testHost+":"+up.port()+"/v1", header)
		})
	}
}

// BenchmarkProxyTLS compares a request through a terminated CONNECT (a secret's host)
// with one through a CONNECT pass-through, on a new connection each time ("first")
// and on a kept-alive one ("after").
func BenchmarkProxyTLS(b *testing.B) {
	s := testSecrets(b)
	ca := newTestCA(b)
	up := newUpstream(b, ca, testHost, "other.test")
	own := x509.NewCertPool()
	own.AppendCertsFromPEM(s.TrustPEM())
	header := http.Header{"Authorization": {"Bearer " + s.list[0].placeholder}}
	for _, bc := range []struct {
		name  string
		host  string
		roots *x509.CertPool
	}{{"passthrough", "other.test", ca.pool}, {"terminated", testHost, own}} {
		for _, first := range []bool{true, false} {
			name := bc.name + "/after"
			if first {
				name = bc.name + "/first"
			}
			b.Run(name, func(b *testing.B) {
				_, proxy := startProxy(b, s, ca.pool, nil)
				newClient := func() *http.Client {
					return &http.Client{Transport: &http.Transport{Proxy: http.ProxyURL(proxy),
						TLSClientConfig: &tls.Config{RootCAs: bc.roots}, DisableKeepAlives: first}}
				}
				kept := newClient()
				defer kept.CloseIdleConnections()
				u := (&url.URL{Scheme: "https", Host: bc.host + ":" + up.port(), Path: "/v1"}).String()
				// Warm up: the leaf and the proxy's upstream connection exist before timing.
				resp, err := kept.Get(u)
				if err != nil {
					b.Fatal(err)
				}
				resp.Body.Close()
				c := func() *http.Client { return kept }
				if first {
					c = newClient
				}
				benchGet(b, c, u, header)
			})
		}
	}
}
