package security

import (
	"context"
	"testing"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"

	"github.com/meridian-gpu/meridian/hub/auth"
	meridianv1 "github.com/meridian-gpu/meridian/proto/meridian/v1"
)

// FuzzGuardCredentials sends random Authorization values through the real
// guard of a running hub (gRPC on loopback, in this process) and checks
// that nothing panics and that only a valid credential is ever let in.
func FuzzGuardCredentials(f *testing.F) {
	fx := startHub(f)
	oidc := fx.oidcToken(f, "fuzz", "a-admins")
	valid := map[string]bool{fx.adminToken: true, oidc: true}
	for _, s := range []string{
		"", "Bearer", "Bearer ", "bearer " + fx.adminToken, "Bearer " + fx.adminToken, "Bearer " + oidc,
		"Bearer " + fx.adminToken + "=", "Bearer " + fx.adminToken[:len(fx.adminToken)-1], "Basic YWRtaW46YWRtaW4=",
		"Bearer " + oidc[:len(oidc)-2], "Bearer a.b.c", "Bearer mrd_", "Bearer mrd_aaaaaaaaaaaaaaaa_", "Bearer \x00",
		fx.adminToken, "Bearer  " + fx.adminToken, "Bearer eyJhbGciOiJub25lIn0.eyJpc3MiOiJ4In0.",
	} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, header string) {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		if header != "" {
			ctx = metadata.AppendToOutgoingContext(ctx, "authorization", header)
		}
		resp := &meridianv1.WhoAmIResponse{}
		err := fx.conn.Invoke(ctx, admSvc+"WhoAmI", &meridianv1.WhoAmIRequest{}, resp)
		code := status.Code(err)
		tok, perr := auth.ParseAuthorization(header)
		switch {
		case code == codes.OK:
			if perr != nil || !valid[tok] {
				t.Fatalf("Authorization %q was let in as %v", header, resp.GetPrincipal())
			}
		case code == codes.Unauthenticated:
			if perr == nil && valid[tok] {
				t.Fatalf("a valid credential was refused: %v", err)
			}
		case code == codes.Internal && !printableASCII(header):
			// The gRPC client itself refuses such metadata.
		default:
			t.Fatalf("Authorization %q: %v; want OK or Unauthenticated", header, err)
		}
	})
}

func printableASCII(s string) bool {
	for i := 0; i < len(s); i++ {
		if s[i] < 0x20 || s[i] > 0x7e {
			return false
		}
	}
	return true
}
