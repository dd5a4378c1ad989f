package vmtest

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"math/big"
	"os"
	"os/exec"
	"path/filepath"
	"testing"
	"time"
)

// pki is a throwaway certificate authority and the certificates of a
// cluster, as README.md makes them with openssl: one server certificate
// (every test server shares it, as they share the host name localhost)
// and a client certificate per NATS user.
type pki struct {
	dir string
	ca  string // ca.pem
}

// A client certificate's subject is its NATS user (verify_and_map in
// nats-server.conf).
var (
	workerSubject   = pkix.Name{Organization: []string{"ackflow"}, CommonName: "ackflow-worker"}
	operatorSubject = pkix.Name{Organization: []string{"ackflow"}, CommonName: "ackflow-operator"}
	adminSubject    = pkix.Name{Organization: []string{"ackflow"}, CommonName: "nats-admin"}
	// strangerSubject is signed by the CA but names no user.
	strangerSubject = pkix.Name{Organization: []string{"ackflow"}, CommonName: "stranger"}
)

// newPKI writes ca.pem, server.pem and server-key.pem (the file names
// nats-server.conf uses), and NAME.pem and NAME-key.pem for the clients
// worker, operator, admin and stranger into dir. With openssl installed,
// deploy/vm/make-certs.sh makes them, as README.md says; without it, Go.
func newPKI(t *testing.T, dir string) *pki {
	t.Helper()
	if _, err := exec.LookPath("openssl"); err != nil {
		t.Log("openssl is not installed: the certificates come from Go, not from deploy/vm/make-certs.sh")
		return goPKI(t, dir)
	}
	out, err := exec.Command("bash", "../vm/make-certs.sh", dir, "localhost").CombinedOutput()
	if err != nil {
		t.Fatalf("deploy/vm/make-certs.sh: %v\n%s", err, out)
	}
	for _, f := range []string{".pem", "-key.pem"} {
		if err := os.Rename(filepath.Join(dir, "localhost"+f), filepath.Join(dir, "server"+f)); err != nil {
			t.Fatal(err)
		}
	}
	p := &pki{dir: dir, ca: filepath.Join(dir, "ca.pem")}
	caCert, err := x509.ParseCertificate(readPEM(t, p.ca, "CERTIFICATE"))
	if err != nil {
		t.Fatal(err)
	}
	caKey, err := x509.ParseECPrivateKey(readPEM(t, filepath.Join(dir, "ca-key.pem"), "EC PRIVATE KEY"))
	if err != nil {
		t.Fatal(err)
	}
	// The script makes no certificate for someone who is not a user.
	p.issue(t, caCert, caKey, 100, "stranger", &x509.Certificate{Subject: strangerSubject, ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth}})
	return p
}

// goPKI makes what newPKI does with Go's crypto/x509.
func goPKI(t *testing.T, dir string) *pki {
	t.Helper()
	if err := os.MkdirAll(dir, 0o700); err != nil {
		t.Fatal(err)
	}
	p := &pki{dir: dir, ca: filepath.Join(dir, "ca.pem")}
	caKey := newKey(t)
	caTmpl := &x509.Certificate{
		SerialNumber:          big.NewInt(1),
		Subject:               pkix.Name{Organization: []string{"ackflow"}, CommonName: "ackflow NATS CA"},
		NotBefore:             time.Now().Add(-time.Hour),
		NotAfter:              time.Now().Add(24 * time.Hour),
		IsCA:                  true,
		BasicConstraintsValid: true,
		KeyUsage:              x509.KeyUsageCertSign | x509.KeyUsageCRLSign,
	}
	caDER, err := x509.CreateCertificate(rand.Reader, caTmpl, caTmpl, &caKey.PublicKey, caKey)
	if err != nil {
		t.Fatal(err)
	}
	caCert, err := x509.ParseCertificate(caDER)
	if err != nil {
		t.Fatal(err)
	}
	writePEM(t, p.ca, "CERTIFICATE", caDER)
	// Servers use their certificate both ways on routes: they accept
	// routes and dial them.
	p.issue(t, caCert, caKey, 2, "server", &x509.Certificate{
		Subject:     pkix.Name{Organization: []string{"ackflow"}, CommonName: "localhost"},
		DNSNames:    []string{"localhost"},
		ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth, x509.ExtKeyUsageClientAuth},
	})
	serial := int64(3)
	for name, subject := range map[string]pkix.Name{"worker": workerSubject, "operator": operatorSubject, "admin": adminSubject, "stranger": strangerSubject} {
		p.issue(t, caCert, caKey, serial, name, &x509.Certificate{Subject: subject, ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth}})
		serial++
	}
	return p
}

// issue writes NAME.pem, signed by the CA, and NAME-key.pem.
func (p *pki) issue(t *testing.T, caCert *x509.Certificate, caKey *ecdsa.PrivateKey, serial int64, name string, tmpl *x509.Certificate) {
	t.Helper()
	key := newKey(t)
	tmpl.SerialNumber = big.NewInt(serial)
	tmpl.NotBefore, tmpl.NotAfter = time.Now().Add(-time.Hour), time.Now().Add(24*time.Hour)
	tmpl.KeyUsage = x509.KeyUsageDigitalSignature
	der, err := x509.CreateCertificate(rand.Reader, tmpl, caCert, &key.PublicKey, caKey)
	if err != nil {
		t.Fatal(err)
	}
	keyDER, err := x509.MarshalPKCS8PrivateKey(key)
	if err != nil {
		t.Fatal(err)
	}
	writePEM(t, filepath.Join(p.dir, name+".pem"), "CERTIFICATE", der)
	writePEM(t, filepath.Join(p.dir, name+"-key.pem"), "PRIVATE KEY", keyDER)
}

func readPEM(t *testing.T, path, kind string) []byte {
	t.Helper()
	raw, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	for {
		var b *pem.Block
		if b, raw = pem.Decode(raw); b == nil {
			t.Fatalf("%s holds no %s block", path, kind)
		}
		if b.Type == kind {
			return b.Bytes
		}
	}
}

// cert and key are the files of a client or the server.
func (p *pki) cert(name string) string { return filepath.Join(p.dir, name+".pem") }
func (p *pki) key(name string) string  { return filepath.Join(p.dir, name+"-key.pem") }

func newKey(t *testing.T) *ecdsa.PrivateKey {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	return key
}

func writePEM(t *testing.T, path, kind string, der []byte) {
	t.Helper()
	if err := os.WriteFile(path, pem.EncodeToMemory(&pem.Block{Type: kind, Bytes: der}), 0o600); err != nil {
		t.Fatal(err)
	}
}
