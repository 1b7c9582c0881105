package flowwindow

import "google.golang.org/grpc"

// Stream and Conn are the HTTP/2 flow-control windows per stream and per
// connection: twice the API's largest request by default (2 MiB), so no
// call waits for a window update, and no more than the ceiling of 16 MiB
// that gRPC's own estimator grows the connection's window to.
const (
	Stream = 4 << 20
	Conn   = 16 << 20
)

// ServerOptions fixes a gRPC server's windows.
func ServerOptions() []grpc.ServerOption {
	return []grpc.ServerOption{grpc.InitialWindowSize(Stream), grpc.InitialConnWindowSize(Conn)}
}

// DialOptions fixes a gRPC client's windows.
func DialOptions() []grpc.DialOption {
	return []grpc.DialOption{grpc.WithInitialWindowSize(Stream), grpc.WithInitialConnWindowSize(Conn)}
}
