package natsbus

import (
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/meridian-gpu/meridian/internal/credfile"
)

// CredsFileExpiry returns when the user JWT in a NATS credentials file
// expires, and false when it never does. It reads the file each call, so
// a rotated file is seen.
func CredsFileExpiry(path string) (time.Time, bool, error) {
	b, err := credfile.Read(path)
	if err != nil {
		return time.Time{}, false, err
	}
	blocks := credsBlockRE.FindAllSubmatch(b, -1)
	if len(blocks) < 1 {
		return time.Time{}, false, fmt.Errorf("%q is not a NATS .creds file: no JWT block", path)
	}
	exp, err := jwtExpiry(string(blocks[0][1]))
	if err != nil {
		return time.Time{}, false, fmt.Errorf("%q: %w", path, err)
	}
	if exp == 0 {
		return time.Time{}, false, nil
	}
	return time.Unix(exp, 0), true, nil
}

// CertFileExpiry returns the NotAfter of the first certificate in a PEM
// file (the leaf of a chain). It reads the file each call.
func CertFileExpiry(path string) (time.Time, error) {
	b, err := credfile.Read(path)
	if err != nil {
		return time.Time{}, err
	}
	certs, err := credfile.Certificates(b)
	if err != nil {
		return time.Time{}, fmt.Errorf("%q: %w", path, err)
	}
	return certs[0].NotAfter, nil
}

// jwtExpiry is a JWT's exp claim (0: none); the signature is not checked.
func jwtExpiry(tok string) (int64, error) {
	parts := strings.Split(strings.TrimSpace(tok), ".")
	if len(parts) != 3 {
		return 0, errors.New("the first block is not a JWT (want header.claims.signature)")
	}
	raw, err := base64.RawURLEncoding.DecodeString(parts[1])
	if err != nil {
		return 0, fmt.Errorf("the JWT's claims are not base64url: %w", err)
	}
	var claims struct {
		Expires int64 `json:"exp"`
	}
	if err := json.Unmarshal(raw, &claims); err != nil {
		return 0, fmt.Errorf("the JWT's claims are not JSON: %w", err)
	}
	return claims.Expires, nil
}
