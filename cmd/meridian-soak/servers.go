package main

import (
	"errors"
	"fmt"
	"io"
	"net/url"
	"strconv"
	"strings"
	"time"

	"github.com/spf13/cobra"

	embedetcd "github.com/meridian-gpu/meridian/internal/embedded/etcd"
	embednats "github.com/meridian-gpu/meridian/internal/embedded/nats"
)

// etcdMemberCommand runs one member of an etcd cluster until the context
// ends.
func etcdMemberCommand(stderr io.Writer) *cobra.Command {
	var name, dataDir, clientURL, peerURL, initial, state string
	var compact time.Duration
	cmd := &cobra.Command{
		Use:   "etcd-member --name m1 --data-dir D --client-url http://127.0.0.1:P --peer-url http://127.0.0.1:Q --initial-cluster m1=http://127.0.0.1:Q,...",
		Short: "Run one member of a loopback etcd cluster until SIGTERM",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			cp, err := loopbackPort("--client-url", clientURL, "http")
			if err != nil {
				return err
			}
			pp, err := loopbackPort("--peer-url", peerURL, "http")
			if err != nil {
				return err
			}
			log := logger(stderr, name)
			s, err := embedetcd.Start(cmd.Context(), embedetcd.Config{
				DataDir: dataDir, Name: name, ClientPort: cp, PeerPort: pp, Logger: log,
				// A member of a cluster that is just forming waits for
				// its peers, which may start later.
				StartTimeout: 5 * embedetcd.DefaultStartTimeout,
				CompactEvery: compact,
				Cluster:      &embedetcd.Cluster{InitialCluster: initial, State: state, Token: "meridian-soak"},
			})
			if err != nil {
				return err
			}
			defer s.Close()
			log.Info("etcd member ready", "client_url", clientURL, "peer_url", peerURL, "startup", s.StartupTime())
			<-cmd.Context().Done()
			log.Info("etcd member stopping")
			return nil
		},
	}
	f := cmd.Flags()
	f.StringVar(&name, "name", "", "member name, as in --initial-cluster (required)")
	f.StringVar(&dataDir, "data-dir", "", "the member's data directory (required)")
	f.StringVar(&clientURL, "client-url", "", "client URL, http://127.0.0.1:PORT (required)")
	f.StringVar(&peerURL, "peer-url", "", "peer URL, http://127.0.0.1:PORT (required)")
	f.StringVar(&initial, "initial-cluster", "", "every member as name=peer-url, comma-separated (required)")
	f.StringVar(&state, "initial-cluster-state", "new", "new: the cluster is forming; existing: join a running one")
	f.DurationVar(&compact, "compact-every", 0, "drop history older than this, periodically; 0: the embedded default, negative: keep all history")
	for _, n := range []string{"name", "data-dir", "client-url", "peer-url", "initial-cluster"} {
		_ = cmd.MarkFlagRequired(n)
	}
	return cmd
}

// natsNodeCommand runs one node of a NATS cluster with JetStream until the
// context ends.
func natsNodeCommand(stderr io.Writer) *cobra.Command {
	var name, storeDir, routes, clusterName string
	var port, clusterPort int
	var noAdvertise bool
	cmd := &cobra.Command{
		Use:   "nats-node --name n1 --port P --cluster-port C --routes nats://127.0.0.1:C2,nats://127.0.0.1:C3 --store-dir D",
		Short: "Run one node of a loopback NATS cluster with JetStream until SIGTERM",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if port <= 0 {
				return errors.New("--port: required, a loopback port")
			}
			var rs []string
			for _, r := range strings.Split(routes, ",") {
				if r = strings.TrimSpace(r); r != "" {
					rs = append(rs, r)
				}
			}
			log := logger(stderr, name)
			s, err := embednats.Start(embednats.Config{StoreDir: storeDir, Port: port, ServerName: name, Logger: log,
				Cluster: &embednats.Cluster{Name: clusterName, Port: clusterPort, Routes: rs, NoAdvertise: noAdvertise}})
			if err != nil {
				return err
			}
			defer s.Close()
			log.Info("nats node ready", "url", s.ClientURL(), "cluster_port", clusterPort, "routes", rs, "startup", s.StartupTime())
			<-cmd.Context().Done()
			log.Info("nats node stopping")
			return nil
		},
	}
	f := cmd.Flags()
	f.StringVar(&name, "name", "", "server name, unique in the cluster (required)")
	f.IntVar(&port, "port", 0, "loopback client port (required)")
	f.IntVar(&clusterPort, "cluster-port", 0, "loopback route port (required)")
	f.StringVar(&routes, "routes", "", "the other nodes' route URLs, nats://127.0.0.1:PORT, comma-separated (required)")
	f.StringVar(&storeDir, "store-dir", "", "JetStream's store directory (required)")
	f.StringVar(&clusterName, "cluster-name", "meridian-soak", "the cluster's name, the same on every node")
	f.BoolVar(&noAdvertise, "no-advertise", false, "do not tell clients the other nodes' URLs (clients behind proxies)")
	for _, n := range []string{"name", "port", "cluster-port", "routes", "store-dir"} {
		_ = cmd.MarkFlagRequired(n)
	}
	return cmd
}

// loopbackPort checks that raw is scheme://127.0.0.1:PORT and returns the
// port.
func loopbackPort(flag, raw, scheme string) (int, error) {
	u, err := url.Parse(raw)
	if err != nil || u.Scheme != scheme || u.Hostname() != "127.0.0.1" || (u.Path != "" && u.Path != "/") {
		return 0, fmt.Errorf("%s: want %s://127.0.0.1:PORT, loopback only (got %q)", flag, scheme, raw)
	}
	p, err := strconv.Atoi(u.Port())
	if err != nil || p <= 0 || p > 65535 {
		return 0, fmt.Errorf("%s: want %s://127.0.0.1:PORT with a port in 1..65535 (got %q)", flag, scheme, raw)
	}
	return p, nil
}
