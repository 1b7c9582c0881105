package natsbus

import (
	"crypto/tls"
	"errors"
	"fmt"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nkeys"
)

// Credentials and client certificates held in memory and fetched again at
// every (re)connect, for sources that are not files (a secrets manager
// such as Vault: internal/vaultsecrets).

// WithCredsFunc authenticates with the NATS credentials (a user JWT and
// its nkey seed, decorated as `nsc generate creds` writes them) that get
// returns. get is called at every (re)connect, so rotated credentials are
// picked up the way WithCredsFile re-reads its file; it must be safe for
// concurrent use and should not block (serve the last fetched value). The
// option calls get once to check the credentials before dialling.
func WithCredsFunc(get func() ([]byte, error)) Option {
	return func(o *options) error {
		if get == nil {
			return errors.New("natsbus: creds func is nil")
		}
		b, err := get()
		if err != nil {
			return fmt.Errorf("natsbus: creds: %w", err)
		}
		if err := checkCredsBytes(b, time.Now()); err != nil {
			return fmt.Errorf("natsbus: creds: %w", err)
		}
		userCB := func() (string, error) {
			b, err := get()
			if err != nil {
				return "", err
			}
			return nkeys.ParseDecoratedJWT(b)
		}
		sigCB := func(nonce []byte) ([]byte, error) {
			b, err := get()
			if err != nil {
				return nil, err
			}
			kp, err := nkeys.ParseDecoratedNKey(b)
			if err != nil {
				return nil, err
			}
			defer kp.Wipe()
			return kp.Sign(nonce)
		}
		o.natsOpts = append(o.natsOpts, nats.UserJWT(userCB, sigCB))
		return nil
	}
}

// checkCredsBytes checks decorated credentials as checkCredsFile checks a
// file; errors never quote the content.
func checkCredsBytes(b []byte, now time.Time) error {
	blocks := credsBlockRE.FindAllSubmatch(b, -1)
	if len(blocks) < 2 {
		return fmt.Errorf("not NATS credentials: want a user JWT block and a user nkey seed block (as `nsc generate creds` writes), found %d block(s)", len(blocks))
	}
	if err := checkUserJWT(string(blocks[0][1]), now); err != nil {
		return err
	}
	kp, err := nkeys.ParseDecoratedNKey(b)
	if err != nil {
		return fmt.Errorf("nkey seed: %w", err)
	}
	defer kp.Wipe()
	if seed, err := kp.Seed(); err != nil || len(seed) < 2 || string(seed[:2]) != "SU" {
		return errors.New("the second block is not a user nkey seed (want SU...)")
	}
	return nil
}

// WithClientCertificateFunc requires TLS with a client certificate that
// get returns at each TLS handshake (every (re)connect), so a renewed
// certificate is presented at the next connection. caFile is a PEM bundle
// of the CAs that sign the server's certificate (empty: the system's
// roots). Do not combine it with WithTLS: the last TLS option wins.
func WithClientCertificateFunc(caFile string, get func(*tls.CertificateRequestInfo) (*tls.Certificate, error)) Option {
	return func(o *options) error {
		if get == nil {
			return errors.New("natsbus: client certificate func is nil")
		}
		cfg, err := tlsConfig(caFile, "", "", tlsNames{"CA file", "certificate file", "key file"})
		if err != nil {
			return fmt.Errorf("natsbus: TLS: %w", err)
		}
		cfg.GetClientCertificate = get
		o.natsOpts = append(o.natsOpts, nats.Secure(cfg))
		return nil
	}
}
