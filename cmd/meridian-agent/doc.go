// Command meridian-agent is the spoke agent binary: it connects one cluster
// to the Meridian hub over NATS through a connector: the in-memory
// simcluster, slurm or kubernetes.
//
//	meridian-agent --cluster-id sim-a --nats-url nats://127.0.0.1:4222 \
//	    --connector simcluster --sim-example h100-nvlink \
//	    --time-scale 60 --metrics-addr 127.0.0.1:9464
//
//	meridian-agent --cluster-id slurm-west --nats-url nats://hub:4222 \
//	    --connector slurm --slurm-rest-url http://127.0.0.1:6820 \
//	    --slurm-jwt-key-file /etc/slurm/jwt.key --slurm-class h100=nvidia-h100-80gb
//
//	meridian-agent --cluster-id k8s-east --nats-url nats://hub:4222 \
//	    --connector kubernetes --kubeconfig ~/.kube/config --k8s-namespace ml \
//	    --k8s-fractional-modes mig,hami --k8s-gang coscheduling
//
// Settings may also come from a file (--config, an AgentConfiguration;
// see examples/config/agent.yaml) and the environment; flags win.
// `meridian-agent config validate` checks a configuration and
// `--print-config` prints the effective one.
//
// It must never hold logic of its own: the configuration (package
// spoke-agent/config) is loaded, validated and turned into agent.Config
// and a connector's config; everything else lives in package agent. Stopping it stops
// the agent, never the cluster's work (simulated work lives in the process
// and ends with it).
package main
