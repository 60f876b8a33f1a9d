package listen

import (
	"crypto/tls"
	"fmt"
	"log/slog"
	"os"

	"github.com/manifoldlb/manifold/internal/secretfile"
)

// LoadTLS is the server side of TLS for an HTTP listener: the certificate chain of
// certFile and its key of keyFile (PEM), the key read as a secret (a warning when
// others may read it). The certificate's DNS names are in Certificates[0].Leaf.
func LoadTLS(certFile, keyFile string, log *slog.Logger) (*tls.Config, error) {
	certPEM, err := os.ReadFile(certFile)
	if err != nil {
		return nil, err
	}
	keyPEM, err := secretfile.Read(keyFile, log)
	if err != nil {
		return nil, err
	}
	cert, err := tls.X509KeyPair(certPEM, keyPEM)
	if err != nil {
		return nil, fmt.Errorf("%s and %s: %w", certFile, keyFile, err)
	}
	return &tls.Config{Certificates: []tls.Certificate{cert}, MinVersion: tls.VersionTLS12}, nil
}
