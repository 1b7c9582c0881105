package localrun

import (
	"context"

	"google.golang.org/grpc"
)

// bearer sends an API or OIDC token with every call. It allows plaintext
// transport: the programs and tests that use it talk to a hub on loopback.
type bearer string

func (b bearer) GetRequestMetadata(context.Context, ...string) (map[string]string, error) {
	return map[string]string{"authorization": "Bearer " + string(b)}, nil
}

func (bearer) RequireTransportSecurity() bool { return false }

// Bearer is the dial option that authenticates every call with token.
func Bearer(token string) grpc.DialOption {
	return grpc.WithPerRPCCredentials(bearer(token))
}
