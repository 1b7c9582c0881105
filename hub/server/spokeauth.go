package server

import (
	"context"
	"errors"
	"fmt"
	"os"

	"github.com/nats-io/nkeys"

	"github.com/meridian-gpu/meridian/hub/spokeauth"
	embednats "github.com/meridian-gpu/meridian/internal/embedded/nats"
	"github.com/meridian-gpu/meridian/transport/natsbus"
)

// SpokeAuth turns on one NATS identity per cluster (hub/spokeauth): the
// hub issues each registered cluster's agent a least-privilege credential
// and revokes it on request.
type SpokeAuth struct {
	// OperatorSigningKeyFile holds the seed (SO...) of the external NATS
	// operator's signing key, which signs the MERIDIAN account JWT. Give it
	// with SystemCredsFile when NATSURL is set; leave both empty with the
	// embedded NATS, for which the hub makes its own operator.
	OperatorSigningKeyFile string
	// SystemCredsFile is a .creds file of a user in the external NATS's
	// system account, used to push the account JWT (at start and on every
	// revocation).
	SystemCredsFile string
}

func (c *Config) validateSpokeAuth() error {
	sa := c.SpokeAuth
	if sa == nil {
		return nil
	}
	if c.NATSURL == "" {
		if sa.OperatorSigningKeyFile != "" || sa.SystemCredsFile != "" {
			return errors.New("server: Config.SpokeAuth.OperatorSigningKeyFile and SystemCredsFile are for an external NATS (NATSURL); the embedded NATS needs neither")
		}
		return nil
	}
	if sa.OperatorSigningKeyFile == "" {
		return errors.New("server: Config.SpokeAuth.OperatorSigningKeyFile is required with an external NATS (NATSURL)")
	}
	if sa.SystemCredsFile == "" {
		return errors.New("server: Config.SpokeAuth.SystemCredsFile is required with an external NATS (NATSURL)")
	}
	return nil
}

// openSpokeAuth opens the authority before NATS starts: the embedded NATS
// needs its configuration (the operator and the accounts).
func (s *Server) openSpokeAuth(ctx context.Context) (*embednats.Security, error) {
	sa := s.cfg.SpokeAuth
	cfg := spokeauth.Config{KV: s.cli, Embedded: s.cfg.NATSURL == "", SystemCredsFile: sa.SystemCredsFile,
		Logger: s.log.With("component", "spokeauth"), Clock: s.cfg.Clock}
	if !cfg.Embedded {
		b, err := os.ReadFile(sa.OperatorSigningKeyFile)
		if err != nil {
			return nil, fmt.Errorf("server: Config.SpokeAuth.OperatorSigningKeyFile: %w", err)
		}
		if cfg.OperatorSigner, err = spokeauth.ParseSeed(b, nkeys.PrefixByteOperator); err != nil {
			return nil, fmt.Errorf("server: Config.SpokeAuth.OperatorSigningKeyFile %q: %w", sa.OperatorSigningKeyFile, err)
		}
	}
	a, err := spokeauth.Open(ctx, cfg)
	if err != nil {
		return nil, fmt.Errorf("server: %w", err)
	}
	s.spoke = a
	if !cfg.Embedded {
		return nil, nil
	}
	sec, err := a.EmbeddedSecurity(ctx)
	if err != nil {
		return nil, fmt.Errorf("server: %w", err)
	}
	return sec, nil
}

// spokeHubOptions attaches the authority to NATS as a system user and
// returns the hub's own credential, a user of the MERIDIAN account.
func (s *Server) spokeHubOptions(ctx context.Context, url string) ([]natsbus.Option, error) {
	if err := s.spoke.Attach(ctx, url, s.cfg.NATSOptions...); err != nil {
		return nil, fmt.Errorf("server: %w", err)
	}
	j, seed, err := s.spoke.HubUser("meridian-hub " + s.cfg.HubID)
	if err != nil {
		return nil, fmt.Errorf("server: %w", err)
	}
	return []natsbus.Option{natsbus.WithUserJWT(j, seed)}, nil
}
