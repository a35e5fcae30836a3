package modalserver

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"io"
	"math/big"
	"net"
	"strconv"
	"sync"
	"time"
)

// selfSignedTLS makes the certificate of the encrypted tunnels: Modal serves
// encrypted ports over TLS and the SDKs hand out https URLs, so the local tunnels
// do too. RootCAs holds the certificate for clients.
func selfSignedTLS() (*tls.Config, error) {
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return nil, err
	}
	tmpl := &x509.Certificate{
		SerialNumber:          big.NewInt(time.Now().UnixNano()),
		Subject:               pkix.Name{CommonName: "local Modal tunnel"},
		NotBefore:             time.Now().Add(-time.Hour),
		NotAfter:              time.Now().Add(10 * 365 * 24 * time.Hour),
		KeyUsage:              x509.KeyUsageDigitalSignature | x509.KeyUsageCertSign,
		ExtKeyUsage:           []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth},
		BasicConstraintsValid: true,
		IsCA:                  true,
		IPAddresses:           []net.IP{net.IPv4(127, 0, 0, 1), net.IPv6loopback},
		DNSNames:              []string{"localhost"},
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		return nil, err
	}
	leaf, err := x509.ParseCertificate(der)
	if err != nil {
		return nil, err
	}
	pool := x509.NewCertPool()
	pool.AddCert(leaf)
	return &tls.Config{Certificates: []tls.Certificate{{Certificate: [][]byte{der}, PrivateKey: key, Leaf: leaf}},
		RootCAs: pool, MinVersion: tls.VersionTLS12}, nil
}

type tunnelKey struct {
	sandbox string
	port    int
}

// tunnel is a loopback listener whose connections reach a port inside a sandbox
// through the engine (TLS-terminated for encrypted ports).
type tunnel struct {
	l    net.Listener
	port int // host port

	mu    sync.Mutex
	conns map[net.Conn]struct{} // nil once closed
}

// close stops accepting and ends every connection; a connection made later (an
// upstream whose dial was under way) is refused by track.
func (t *tunnel) close() {
	t.l.Close()
	t.mu.Lock()
	for c := range t.conns {
		c.Close()
	}
	t.conns = nil
	t.mu.Unlock()
}

// track adds or removes c; adding to a closed tunnel reports false.
func (t *tunnel) track(c net.Conn, add bool) bool {
	t.mu.Lock()
	defer t.mu.Unlock()
	if add {
		if t.conns == nil {
			return false
		}
		t.conns[c] = struct{}{}
	} else {
		delete(t.conns, c)
	}
	return true
}

// openTunnel starts the tunnel of one sandbox port, or returns the running one.
func (s *Server) openTunnel(sb *sandbox, port int, encrypted bool) (*tunnel, error) {
	key := tunnelKey{sb.id, port}
	s.mu.Lock()
	if t, ok := s.tunnels[key]; ok {
		s.mu.Unlock()
		return t, nil
	}
	s.mu.Unlock()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, err
	}
	if encrypted {
		l = tls.NewListener(l, &tls.Config{Certificates: s.tls.Certificates, MinVersion: tls.VersionTLS12})
	}
	t := &tunnel{l: l, conns: map[net.Conn]struct{}{}}
	_, p, _ := net.SplitHostPort(l.Addr().String())
	t.port, _ = strconv.Atoi(p)
	s.mu.Lock()
	if old, ok := s.tunnels[key]; ok {
		s.mu.Unlock()
		l.Close()
		return old, nil
	}
	select {
	case <-s.done:
		s.mu.Unlock()
		l.Close()
		return nil, net.ErrClosed
	default:
	}
	s.tunnels[key] = t
	s.wg.Add(1)
	s.mu.Unlock()
	go func() {
		defer s.wg.Done()
		s.acceptTunnel(sb.engineID, port, t)
	}()
	return t, nil
}

func (s *Server) acceptTunnel(engineID string, port int, t *tunnel) {
	var wg sync.WaitGroup
	defer wg.Wait()
	for {
		c, err := t.l.Accept()
		if err != nil {
			return
		}
		if !t.track(c, true) {
			c.Close()
			return
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			defer t.track(c, false)
			defer c.Close()
			up, err := s.o.Engine.DialPort(s.ctx(), engineID, port)
			if err != nil {
				return
			}
			defer up.Close()
			if !t.track(up, true) {
				return
			}
			defer t.track(up, false)
			done := make(chan struct{}, 2)
			go func() { io.Copy(up, c); closeWrite(up); done <- struct{}{} }()
			go func() { io.Copy(c, up); closeWrite(c); done <- struct{}{} }()
			<-done
			<-done
		}()
	}
}

func closeWrite(c net.Conn) {
	switch c := c.(type) {
	case interface{ CloseWrite() error }:
		c.CloseWrite()
	default:
		c.Close()
	}
}

func (s *Server) closeTunnels(sandboxID string) {
	s.mu.Lock()
	var ts []*tunnel
	for k, t := range s.tunnels {
		if k.sandbox == sandboxID {
			ts = append(ts, t)
			delete(s.tunnels, k)
		}
	}
	s.mu.Unlock()
	for _, t := range ts {
		t.close()
	}
}

// CACertPEM is the tunnels' certificate in PEM, for clients configured by file
// (NODE_EXTRA_CA_CERTS, curl --cacert).
func (s *Server) CACertPEM() []byte {
	return pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: s.tls.Certificates[0].Certificate[0]})
}
