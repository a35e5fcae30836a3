package modalserver

import (
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"math/big"
	"net"
	"strconv"
	"time"

	"github.com/proliferate-ai/sandbox-mcp/provider/engine/portfwd"
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
	*portfwd.Forwarder
	port int // host port
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
	_, p, _ := net.SplitHostPort(l.Addr().String())
	hostPort, _ := strconv.Atoi(p)
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
	eid := sb.engineID
	t := &tunnel{portfwd.Start(l, func(ctx context.Context) (net.Conn, error) { return s.o.Engine.DialPort(ctx, eid, port) }, &s.wg), hostPort}
	s.tunnels[key] = t
	s.mu.Unlock()
	return t, nil
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
		t.Close()
	}
}

// CACertPEM is the tunnels' certificate in PEM, for clients configured by file
// (NODE_EXTRA_CA_CERTS, curl --cacert).
func (s *Server) CACertPEM() []byte {
	return pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: s.tls.Certificates[0].Certificate[0]})
}
