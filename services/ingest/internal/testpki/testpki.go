// Package testpki makes throwaway CAs and key pairs for tests of the webhook.
package testpki

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"math/big"
	"net"
	"os"
	"path/filepath"
	"testing"
	"time"
)

// Files are the PEM files written.
type Files struct {
	CA, ServerCert, ServerKey string
	Pool                      *x509.CertPool
}

// Write creates a CA and a server certificate for localhost and 127.0.0.1 in dir.
func Write(t testing.TB, dir string) Files {
	t.Helper()
	ca, caKey := Cert(t, "testpki CA", nil, nil, true)
	srv, srvKey := Cert(t, "localhost", ca, caKey, false)
	f := Files{Pool: x509.NewCertPool()}
	f.Pool.AddCert(ca)
	f.CA, _ = WriteFiles(t, dir, "ca", ca, caKey)
	f.ServerCert, f.ServerKey = WriteFiles(t, dir, "server", srv, srvKey)
	return f
}

// Cert makes a certificate for localhost and 127.0.0.1, usable by a server and a client, signed
// by parent (self-signed when parent is nil).
func Cert(t testing.TB, cn string, parent *x509.Certificate, parentKey *ecdsa.PrivateKey, isCA bool) (*x509.Certificate, *ecdsa.PrivateKey) {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	tmpl := &x509.Certificate{
		SerialNumber: big.NewInt(time.Now().UnixNano()),
		Subject:      pkix.Name{CommonName: cn},
		NotBefore:    time.Now().Add(-time.Hour),
		NotAfter:     time.Now().Add(time.Hour),
		KeyUsage:     x509.KeyUsageDigitalSignature | x509.KeyUsageCertSign,
		ExtKeyUsage:  []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth, x509.ExtKeyUsageClientAuth},
		DNSNames:     []string{"localhost"},
		IPAddresses:  []net.IP{net.ParseIP("127.0.0.1")},
		IsCA:         isCA, BasicConstraintsValid: true,
	}
	if parent == nil {
		parent, parentKey = tmpl, key
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, parent, &key.PublicKey, parentKey)
	if err != nil {
		t.Fatal(err)
	}
	c, err := x509.ParseCertificate(der)
	if err != nil {
		t.Fatal(err)
	}
	return c, key
}

// WriteFiles writes c and k as PEM files dir/name.crt and dir/name.key and returns their paths.
func WriteFiles(t testing.TB, dir, name string, c *x509.Certificate, k *ecdsa.PrivateKey) (string, string) {
	t.Helper()
	kb, err := x509.MarshalECPrivateKey(k)
	if err != nil {
		t.Fatal(err)
	}
	cf, kf := filepath.Join(dir, name+".crt"), filepath.Join(dir, name+".key")
	if err := os.WriteFile(cf, pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: c.Raw}), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(kf, pem.EncodeToMemory(&pem.Block{Type: "EC PRIVATE KEY", Bytes: kb}), 0o600); err != nil {
		t.Fatal(err)
	}
	return cf, kf
}
