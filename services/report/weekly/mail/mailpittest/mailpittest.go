// Package mailpittest starts a real mailpit SMTP server for tests and reads what arrived
// through its HTTP API.
package mailpittest

import (
	"bytes"
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/json"
	"encoding/pem"
	"errors"
	"fmt"
	"io"
	"math/big"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"time"

	"github.com/auditlens/auditlens/lib/enginetest"
)

// Options choose how the server is started.
type Options struct {
	// STARTTLS makes the server require STARTTLS (with a fresh self-signed certificate for
	// localhost and 127.0.0.1, see Server.CAFile) and authentication as User/Password.
	STARTTLS bool
	User     string
	Password string
}

// Server is one running mailpit.
type Server struct {
	SMTPAddr string
	APIURL   string
	// CAFile is the PEM certificate to trust for STARTTLS ("" without STARTTLS).
	CAFile string
	cmd    *exec.Cmd
	done   chan struct{}
	log    *bytes.Buffer
}

// Start runs mailpit from PATH (or $MAILPIT) on free loopback ports in dir and waits until
// its API answers.
func Start(dir string, o Options) (*Server, error) {
	bin := os.Getenv("MAILPIT")
	if bin == "" {
		var err error
		if bin, err = exec.LookPath("mailpit"); err != nil {
			return nil, fmt.Errorf("find mailpit: %w", err)
		}
	}
	smtpPort, err := freePort()
	if err != nil {
		return nil, err
	}
	httpPort, err := freePort()
	if err != nil {
		return nil, err
	}
	s := &Server{
		SMTPAddr: net.JoinHostPort("127.0.0.1", strconv.Itoa(smtpPort)),
		APIURL:   "http://" + net.JoinHostPort("127.0.0.1", strconv.Itoa(httpPort)),
		done:     make(chan struct{}),
		log:      &bytes.Buffer{},
	}
	args := []string{"-s", s.SMTPAddr, "-l", "127.0.0.1:" + strconv.Itoa(httpPort), "--disable-version-check",
		"--database", filepath.Join(dir, "mailpit.db")}
	if o.STARTTLS {
		cert, key, err := selfSigned(dir)
		if err != nil {
			return nil, err
		}
		auth := filepath.Join(dir, "smtp-auth")
		if err := os.WriteFile(auth, []byte(o.User+":"+o.Password+"\n"), 0o600); err != nil {
			return nil, err
		}
		s.CAFile = cert
		args = append(args, "--smtp-tls-cert", cert, "--smtp-tls-key", key, "--smtp-require-starttls", "--smtp-auth-file", auth)
	}
	s.cmd = exec.Command(bin, args...)
	s.cmd.Stdout, s.cmd.Stderr = s.log, s.log
	if err := s.cmd.Start(); err != nil {
		return nil, fmt.Errorf("start mailpit: %w", err)
	}
	go func() { _ = s.cmd.Wait(); close(s.done) }()
	deadline := time.Now().Add(20 * time.Second)
	for {
		select {
		case <-s.done:
			return nil, fmt.Errorf("mailpit exited: %s", s.log.String())
		default:
		}
		if _, err := s.Messages(context.Background()); err == nil {
			if c, err := net.Dial("tcp", s.SMTPAddr); err == nil {
				c.Close()
				return s, nil
			}
		}
		if time.Now().After(deadline) {
			s.Close()
			return nil, fmt.Errorf("mailpit not ready after 20s: %s", s.log.String())
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// Close stops the server and waits for it to exit.
func (s *Server) Close() {
	if s.cmd.Process != nil {
		_ = s.cmd.Process.Kill()
	}
	<-s.done
}

// Address is a mail address as mailpit reports it.
type Address struct {
	Name    string `json:"Name"`
	Address string `json:"Address"`
}

// Summary is one message in the list.
type Summary struct {
	ID      string    `json:"ID"`
	Subject string    `json:"Subject"`
	From    Address   `json:"From"`
	To      []Address `json:"To"`
}

// Part is an inline part or an attachment.
type Part struct {
	PartID      string `json:"PartID"`
	FileName    string `json:"FileName"`
	ContentType string `json:"ContentType"`
	ContentID   string `json:"ContentID"`
	Size        int    `json:"Size"`
}

// Message is one message with its bodies and parts.
type Message struct {
	ID          string    `json:"ID"`
	Subject     string    `json:"Subject"`
	From        Address   `json:"From"`
	To          []Address `json:"To"`
	Cc          []Address `json:"Cc"`
	Text        string    `json:"Text"`
	HTML        string    `json:"HTML"`
	Inline      []Part    `json:"Inline"`
	Attachments []Part    `json:"Attachments"`
}

// Messages lists what arrived, newest first.
func (s *Server) Messages(ctx context.Context) ([]Summary, error) {
	var out struct {
		Messages []Summary `json:"messages"`
	}
	if err := s.get(ctx, "/api/v1/messages", &out); err != nil {
		return nil, err
	}
	return out.Messages, nil
}

// WaitMessages polls until at least n messages arrived or ctx ends.
func (s *Server) WaitMessages(ctx context.Context, n int) ([]Summary, error) {
	for {
		ms, err := s.Messages(ctx)
		if err == nil && len(ms) >= n {
			return ms, nil
		}
		select {
		case <-ctx.Done():
			return ms, fmt.Errorf("waiting for %d messages, have %d: %w", n, len(ms), errors.Join(ctx.Err(), err))
		case <-time.After(50 * time.Millisecond):
		}
	}
}

// Message reads one message.
func (s *Server) Message(ctx context.Context, id string) (*Message, error) {
	var m Message
	if err := s.get(ctx, "/api/v1/message/"+id, &m); err != nil {
		return nil, err
	}
	return &m, nil
}

// Part reads the content of one part of a message.
func (s *Server) Part(ctx context.Context, id, partID string) ([]byte, error) {
	return s.raw(ctx, http.MethodGet, "/api/v1/message/"+id+"/part/"+partID)
}

// DeleteAll deletes every message.
func (s *Server) DeleteAll(ctx context.Context) error {
	_, err := s.raw(ctx, http.MethodDelete, "/api/v1/messages")
	return err
}

func (s *Server) get(ctx context.Context, path string, v any) error {
	b, err := s.raw(ctx, http.MethodGet, path)
	if err != nil {
		return err
	}
	return json.Unmarshal(b, v)
}

func (s *Server) raw(ctx context.Context, method, path string) ([]byte, error) {
	req, err := http.NewRequestWithContext(ctx, method, s.APIURL+path, nil)
	if err != nil {
		return nil, err
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		return nil, err
	}
	if resp.StatusCode != http.StatusOK {
		return nil, fmt.Errorf("%s %s: %s: %s", method, path, resp.Status, b)
	}
	return b, nil
}

func freePort() (int, error) { return enginetest.FreePort() }

// selfSigned writes a self-signed certificate for localhost and 127.0.0.1 and its key.
func selfSigned(dir string) (certFile, keyFile string, err error) {
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return "", "", err
	}
	tmpl := &x509.Certificate{
		SerialNumber:          big.NewInt(1),
		Subject:               pkix.Name{CommonName: "localhost"},
		NotBefore:             time.Now().Add(-time.Hour),
		NotAfter:              time.Now().Add(24 * time.Hour),
		KeyUsage:              x509.KeyUsageDigitalSignature | x509.KeyUsageCertSign,
		ExtKeyUsage:           []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth},
		BasicConstraintsValid: true,
		IsCA:                  true,
		DNSNames:              []string{"localhost"},
		IPAddresses:           []net.IP{net.IPv4(127, 0, 0, 1)},
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		return "", "", err
	}
	kb, err := x509.MarshalECPrivateKey(key)
	if err != nil {
		return "", "", err
	}
	certFile, keyFile = filepath.Join(dir, "tls.crt"), filepath.Join(dir, "tls.key")
	if err := os.WriteFile(certFile, pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}), 0o600); err != nil {
		return "", "", err
	}
	if err := os.WriteFile(keyFile, pem.EncodeToMemory(&pem.Block{Type: "EC PRIVATE KEY", Bytes: kb}), 0o600); err != nil {
		return "", "", err
	}
	return certFile, keyFile, nil
}
