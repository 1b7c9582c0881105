package e2eutil

import (
	"context"
	"io"
	"log/slog"
	"net/http"
	"os"
	"strings"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/status"

	"github.com/meridian-gpu/meridian/internal/cli"
	meridianv1 "github.com/meridian-gpu/meridian/proto/meridian/v1"
)

// The fixture's hub runs with authentication on: a client without the
// token is refused, and the fixture's gRPC connection, REST requests and
// meridianctl arguments all carry it.
func TestStartHubRunsWithAuthentication(t *testing.T) {
	if testing.Short() {
		t.Skip("-short: not starting a hub")
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	h, err := StartHub(ctx, "e2eutil-auth", slog.New(slog.DiscardHandler))
	if err != nil {
		t.Fatal(err)
	}
	defer h.Stop()
	if h.Token == "" {
		t.Fatal("no admin token")
	}
	if fi, err := os.Stat(h.TokenFile); err != nil || fi.Mode().Perm() != 0o600 {
		t.Fatalf("token file %s: %v %v", h.TokenFile, fi, err)
	}

	anon, err := grpc.NewClient(h.GRPC, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	defer anon.Close()
	_, err = meridianv1.NewQueueServiceClient(anon).ListQueues(ctx, &meridianv1.ListQueuesRequest{})
	if status.Code(err) != codes.Unauthenticated {
		t.Fatalf("call without a token: %v, want Unauthenticated", err)
	}
	if _, err := h.Q.CreateQueue(ctx, &meridianv1.CreateQueueRequest{Queue: &meridianv1.Queue{Path: "e2eutil", Weight: 1}}); err != nil {
		t.Fatalf("call with the fixture's connection: %v", err)
	}

	for _, authorize := range []bool{false, true} {
		req, _ := http.NewRequestWithContext(ctx, http.MethodGet, h.REST+"/v1/queues", nil)
		if authorize {
			h.Authorize(req)
		}
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		body, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		want := http.StatusUnauthorized
		if authorize {
			want = http.StatusOK
		}
		if resp.StatusCode != want {
			t.Errorf("GET /v1/queues (token %v): %d %s, want %d", authorize, resp.StatusCode, body, want)
		}
	}

	var out, errb strings.Builder
	if code := cli.Main(ctx, append(h.CtlArgs(), "queue", "get", "e2eutil"), cli.Env{Stdout: &out, Stderr: &errb}); code != cli.ExitOK {
		t.Fatalf("meridianctl queue get: exit %d\n%s%s", code, out.String(), errb.String())
	}
}
