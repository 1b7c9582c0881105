package credfile

import (
	"crypto/x509"
	"encoding/pem"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"strings"
)

// Read reads path, turning the usual failures into short messages that
// carry the path once.
func Read(path string) ([]byte, error) {
	if strings.TrimSpace(path) == "" {
		return nil, errors.New("file name is empty")
	}
	st, err := os.Stat(path)
	switch {
	case errors.Is(err, fs.ErrNotExist):
		return nil, fmt.Errorf("%q does not exist", path)
	case err != nil:
		return nil, fmt.Errorf("%q: %w", path, err)
	case st.IsDir():
		return nil, fmt.Errorf("%q is a directory, want a file", path)
	}
	b, err := os.ReadFile(path)
	if errors.Is(err, fs.ErrPermission) {
		return nil, fmt.Errorf("%q is not readable (permission denied)", path)
	}
	if err != nil {
		return nil, fmt.Errorf("%q: %w", path, err)
	}
	return b, nil
}

// ReadSecret reads a one-line secret; what names it in the error for a
// file of several lines ("password", "secret").
func ReadSecret(path, what string) (string, error) {
	b, err := Read(path)
	if err != nil {
		return "", err
	}
	s := strings.TrimSpace(string(b))
	if s == "" {
		return "", fmt.Errorf("%q is empty", path)
	}
	if strings.ContainsAny(s, "\r\n") {
		return "", fmt.Errorf("%q has more than one line; want the %s alone", path, what)
	}
	return s, nil
}

// Certificates parses every CERTIFICATE block of b; it fails when there
// is none or one is damaged.
func Certificates(b []byte) ([]*x509.Certificate, error) {
	var out []*x509.Certificate
	for {
		var blk *pem.Block
		blk, b = pem.Decode(b)
		if blk == nil {
			break
		}
		if blk.Type != "CERTIFICATE" {
			continue
		}
		c, err := x509.ParseCertificate(blk.Bytes)
		if err != nil {
			return nil, fmt.Errorf("certificate %d: %w", len(out)+1, err)
		}
		out = append(out, c)
	}
	if len(out) == 0 {
		return nil, errors.New("no PEM certificate in it")
	}
	return out, nil
}
