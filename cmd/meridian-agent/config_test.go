package main

import (
	"bytes"
	"context"
	"io"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/meridian-gpu/meridian/connectors/kubernetes"
	cc "github.com/meridian-gpu/meridian/internal/componentconfig"
	agentconfig "github.com/meridian-gpu/meridian/spoke-agent/config"
)

// TestConfigFilePrecedence: the file sets what nothing else does, the
// environment wins over it, a flag wins over both.
func TestConfigFilePrecedence(t *testing.T) {
	clearNATSEnv(t)
	t.Setenv("KUBECONFIG", "")
	t.Setenv("MERIDIAN_SLURM_REST_URL", "")
	t.Setenv("MERIDIAN_SLURM_TOKEN", "")
	file := writeTemp(t, "agent.yaml", `apiVersion: meridian.io/v1alpha1
kind: AgentConfiguration
clusterID: from-file
connector: slurm
nats:
  url: nats://file:4222
  connectTimeout: 5s
heartbeatInterval: 3s
labels: {region: file}
slurm:
  restURL: http://file:6820
  jwtKeyFile: /file/jwt.key
  classes: {h100: from-file}
  gpuMemoryMiB: {h100: 81920}
`)
	t.Setenv("MERIDIAN_NATS_URL", "nats://env:4222")
	t.Setenv("MERIDIAN_SLURM_REST_URL", "http://env:6820")
	o, err := parseFlags([]string{"--config", file, "--cluster-id", "from-flag", "--slurm-rest-url", "http://flag:6820",
		"--label", "tier=gold", "--heartbeat-interval", "4s"}, io.Discard)
	if err != nil {
		t.Fatal(err)
	}
	c := o.conf
	for _, tc := range []struct {
		what      string
		got, want any
	}{
		{"connector (file)", c.Connector, "slurm"},
		{"connect timeout (file)", c.NATS.ConnectTimeout.D(), 5 * time.Second},
		{"jwt key file (file)", c.Slurm.JWTKeyFile, "/file/jwt.key"},
		{"gpu memory (file)", c.Slurm.GPUMemoryMiB["h100"], int64(81920)},
		{"nats url (env over file)", c.NATS.URL, "nats://env:4222"},
		{"slurm rest url (flag over env over file)", c.Slurm.RESTURL, "http://flag:6820"},
		{"cluster id (flag over file)", c.ClusterID, "from-flag"},
		{"heartbeat (flag over file)", c.HeartbeatInterval.D(), 4 * time.Second},
		{"labels (flag map replaces the file's)", len(c.Labels) == 1 && c.Labels["tier"] == "gold", true},
		{"launch parallelism (default)", c.LaunchParallelism, 16},
	} {
		if tc.got != tc.want {
			t.Errorf("%s: got %v, want %v", tc.what, tc.got, tc.want)
		}
	}
	// The Slurm token comes from the environment only and reaches the connector config.
	t.Setenv("MERIDIAN_SLURM_TOKEN", "tok")
	if o, err = parseFlags([]string{"--config", file}, io.Discard); err != nil || o.conf.Slurm.Token != "tok" {
		t.Fatalf("token from env: %v %+v", err, o)
	}
}

func TestConfigValidateAndPrint(t *testing.T) {
	clearNATSEnv(t)
	t.Setenv("MERIDIAN_NATS_URL", "")
	t.Setenv("MERIDIAN_SLURM_TOKEN", "slurm-s3cret")
	t.Setenv("MERIDIAN_NATS_TOKEN", "nats-s3cret")
	bad := writeTemp(t, "agent.yaml", `apiVersion: meridian.io/v1alpha1
kind: AgentConfiguration
conector: slurm
kubernetes:
  gang: volcano
launchParallelism: 0
`)
	err := run(context.Background(), []string{"config", "validate", "--config", bad}, io.Discard)
	l, ok := cc.AsErrorList(err)
	if !ok {
		t.Fatalf("err %v, want the list of problems", err)
	}
	want := []string{bad + `:3: conector: unknown field "conector"; did you mean "connector"?`, "clusterID (--cluster-id): required",
		"nats.url (--nats-url): required", "simcluster: give exactly one of", bad + ":6: launchParallelism: must be between 1 and"}
	if len(l) != len(want) {
		t.Fatalf("%d problems, want %d:\n%v", len(l), len(want), err)
	}
	for i, w := range want {
		if !strings.HasPrefix(l[i].Error(), w) {
			t.Errorf("problem %d = %q, want %q", i, l[i].Error(), w)
		}
	}
	example := filepath.Join("..", "..", "examples", "config", "agent.yaml")
	var stdout bytes.Buffer
	if err := newCommandRun(&stdout, "config", "validate", "--config", example); err != nil {
		t.Fatalf("the example: %v", err)
	}
	stdout.Reset()
	if err := newCommandRun(&stdout, "--config", example, "--print-config", "--connector", "slurm", "--sim-example", "",
		"--slurm-rest-url", "http://s:6820"); err != nil {
		t.Fatal(err)
	}
	out := stdout.String()
	if strings.Contains(out, "s3cret") || !strings.Contains(out, "token: "+cc.Redacted) || !strings.Contains(out, "connector: slurm") {
		t.Fatalf("print-config:\n%s", out)
	}
}

func newCommandRun(stdout io.Writer, args ...string) error {
	cmd := newCommand(stdout, io.Discard, nil)
	cmd.SetArgs(append([]string{}, args...)) // never nil: cobra would read os.Args
	return cmd.ExecuteContext(context.Background())
}

// TestConnectorConstantsAgree: spoke-agent/config repeats a few of the
// Kubernetes connector's constants (it may not import connectors).
func TestConnectorConstantsAgree(t *testing.T) {
	if agentconfig.DefaultK8sRackLabel != kubernetes.DefaultRackLabel {
		t.Errorf("rack label %q, connector %q", agentconfig.DefaultK8sRackLabel, kubernetes.DefaultRackLabel)
	}
	if want := []string{kubernetes.GangNone, kubernetes.GangCoscheduling, kubernetes.GangKueue}; !slices.Equal(agentconfig.GangModes, want) {
		t.Errorf("gang modes %v, connector %v", agentconfig.GangModes, want)
	}
	if want := []string{kubernetes.ModeHAMi, kubernetes.ModeKAI, kubernetes.ModeMIG, kubernetes.ModeTimeSlicing}; !slices.Equal(agentconfig.FractionalModes, want) {
		t.Errorf("fractional modes %v, connector %v", agentconfig.FractionalModes, want)
	}
	// Every mode the config accepts, the connector accepts too.
	for _, m := range agentconfig.FractionalModes {
		if err := (kubernetes.Config{FractionalModes: []string{m}}).Validate(); err != nil {
			t.Errorf("mode %s: %v", m, err)
		}
	}
}

// TestEveryFlagKept lists the flags meridian-agent had before the
// configuration file (the Helm chart passes many); each must still exist.
func TestEveryFlagKept(t *testing.T) {
	cmd := newCommand(io.Discard, io.Discard, nil)
	for _, name := range []string{"cluster-id", "nats-url", "nats-creds", "nats-nkey", "nats-user", "nats-password-file", "nats-token-file",
		"nats-tls-ca", "nats-tls-cert", "nats-tls-key", "connector", "sim-config", "sim-example", "time-scale", "sim-default-duration",
		"heartbeat-interval", "advertise-interval", "launch-parallelism", "metrics-addr", "log-level", "log-format", "connect-timeout", "label",
		"slurm-rest-url", "slurm-user", "slurm-jwt-key-file", "slurm-cli", "slurm-bin-dir", "slurm-conf", "slurm-partition",
		"slurm-poll-interval", "slurm-class", "slurm-gpu-memory", "kubeconfig", "k8s-namespace", "k8s-rack-label", "k8s-fractional-modes",
		"k8s-shared-replicas", "k8s-gang", "k8s-kueue-queue", "k8s-kai-queue", "k8s-tolerate", "k8s-class", "k8s-node-selector",
		"config", "print-config"} {
		if cmd.Flag(name) == nil {
			t.Errorf("flag --%s is gone", name)
		}
	}
}

// TestChartArgs parses the --flag=value arguments the Helm chart renders.
func TestChartArgs(t *testing.T) {
	clearNATSEnv(t)
	t.Setenv("KUBECONFIG", "") // the chart sets it empty: in-cluster
	o, err := parseFlags([]string{"--connector=kubernetes", "--cluster-id=k8s-east", "--nats-url=nats://meridian-hub.meridian:4222",
		"--k8s-namespace=ml", "--k8s-rack-label=example.com/rack", "--k8s-fractional-modes=mig,time-slicing", "--k8s-shared-replicas=4",
		"--k8s-gang=kueue", "--k8s-kueue-queue=team-a", "--k8s-kai-queue=research", "--k8s-tolerate=nvidia.com/gpu,dedicated",
		"--k8s-node-selector=pool=gpu", "--k8s-class=NVIDIA-H100-80GB-HBM3=h100", "--label=region=eu", "--metrics-addr=:9100",
		"--log-level=info", "--log-format=json", "--heartbeat-interval=3s", "--launch-parallelism=4"}, io.Discard)
	if err != nil {
		t.Fatal(err)
	}
	k := k8sConfig(o, nil)
	if k.Kubeconfig != "" || k.Namespace != "ml" || !slices.Equal(k.FractionalModes, []string{"mig", "time-slicing"}) || k.SharedReplicas != 4 ||
		k.NodeSelector["pool"] != "gpu" || k.Classes["NVIDIA-H100-80GB-HBM3"] != "h100" || k.Labels["region"] != "eu" ||
		len(k.Tolerations) != 2 || k.Tolerations[1].Key != "dedicated" || o.conf.MetricsAddr != ":9100" {
		t.Fatalf("connector config %+v from %+v", k, o.conf)
	}
}
