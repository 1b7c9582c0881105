package k8slocal

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"

	"github.com/meridian-gpu/meridian/internal/repo"
)

// Errors of Up for a control plane that cannot run here; callers skip (a
// test, unless MERIDIAN_REQUIRE_K8S=1) or say so loudly (the demo).
var (
	// ErrNotRoot: scripts/k8s-up.sh runs the control plane as root.
	ErrNotRoot = errors.New("the local Kubernetes control plane needs root: scripts/k8s-up.sh starts etcd, kube-apiserver, " +
		"kube-controller-manager, kube-scheduler and KWOK as root on loopback (run as root, e.g. sudo)")
	// ErrNotBuilt: the binaries are not cached and the build was not
	// allowed.
	ErrNotBuilt = errors.New("the kube binaries are not built: run scripts/k8s-up.sh once (cold build 15-20 min)")
	// ErrBuildImpossible: the one-time build failed (no Go module proxy,
	// compile error, time-out).
	ErrBuildImpossible = errors.New("the kube binaries could not be built (tools/k8s/build.sh failed)")
)

// Exit codes of scripts/k8s-up.sh.
const (
	exitNotRoot  = 3
	exitBuild    = 4
	exitNotBuilt = 5
)

// KWOKToleration tolerates the taint scripts/k8s-up.sh puts on its fake
// nodes; pods without it are never scheduled there.
var KWOKToleration = corev1.Toleration{Key: "kwok.x-k8s.io/node", Operator: corev1.TolerationOpExists, Effect: corev1.TaintEffectNoSchedule}

// Local is the control plane scripts/k8s-up.sh started.
type Local struct {
	// Root is the repository root (where scripts/ lives).
	Root string
	// Vars are the variables of "$MERIDIAN_K8S_DIR/env".
	Vars map[string]string
	// Kubeconfig is the admin kubeconfig's path.
	Kubeconfig string
	// REST is the client configuration built from it.
	REST *rest.Config
}

// StateDir is where scripts/k8s-up.sh keeps the control plane's state:
// MERIDIAN_K8S_DIR, else ~/.cache/meridian/k8s.
func StateDir() string {
	if d := os.Getenv("MERIDIAN_K8S_DIR"); d != "" {
		return d
	}
	home, _ := os.UserHomeDir()
	return filepath.Join(home, ".cache", "meridian", "k8s")
}

// Up starts the local control plane with scripts/k8s-up.sh (idempotent: a
// running one is only checked and its nodes uncordoned) and reads its env
// file. With build false the script never starts the cold build and Up
// returns ErrNotBuilt instead; with build true the script's progress goes
// to progress (nil discards it). It returns ErrNotRoot when not root and
// ErrBuildImpossible when the build failed, each wrapped with the script's
// output.
func Up(ctx context.Context, build bool, progress io.Writer) (*Local, error) {
	if os.Geteuid() != 0 {
		return nil, ErrNotRoot
	}
	root, err := repo.Root()
	if err != nil {
		return nil, err
	}
	limit := 3 * time.Minute
	if build {
		limit = 45 * time.Minute // the cold build is bounded by the script itself (40 min)
	}
	ctx, cancel := context.WithTimeout(ctx, limit)
	defer cancel()
	var out bytes.Buffer
	cmd := exec.CommandContext(ctx, filepath.Join(root, "scripts", "k8s-up.sh"))
	cmd.Env = os.Environ()
	if !build {
		cmd.Env = append(cmd.Env, "MERIDIAN_K8S_NO_BUILD=1")
	}
	cmd.Stdout, cmd.Stderr = &out, &out
	if build && progress != nil {
		cmd.Stdout, cmd.Stderr = io.MultiWriter(&out, progress), io.MultiWriter(&out, progress)
	}
	err = cmd.Run()
	var ee *exec.ExitError
	if errors.As(err, &ee) {
		switch ee.ExitCode() {
		case exitNotRoot:
			return nil, ErrNotRoot
		case exitNotBuilt:
			return nil, ErrNotBuilt
		case exitBuild:
			return nil, fmt.Errorf("%w\n%s", ErrBuildImpossible, tail(out.String(), 4000))
		}
	}
	if err != nil {
		return nil, fmt.Errorf("scripts/k8s-up.sh: %w\n%s", err, tail(out.String(), 4000))
	}
	vars, err := envFile(filepath.Join(StateDir(), "env"))
	if err != nil {
		return nil, fmt.Errorf("k8s env file: %w", err)
	}
	kc := vars["MERIDIAN_KUBECONFIG"]
	if kc == "" {
		return nil, fmt.Errorf("k8s env file %s: no MERIDIAN_KUBECONFIG", filepath.Join(StateDir(), "env"))
	}
	rc, err := clientcmd.BuildConfigFromFlags("", kc)
	if err != nil {
		return nil, fmt.Errorf("kubeconfig %s: %w", kc, err)
	}
	return &Local{Root: root, Vars: vars, Kubeconfig: kc, REST: rc}, nil
}

// envFile reads the KEY=value lines ("export " optional) of k8s-up's env
// file.
func envFile(path string) (map[string]string, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	out := map[string]string{}
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		line := strings.TrimPrefix(strings.TrimSpace(sc.Text()), "export ")
		if k, v, ok := strings.Cut(line, "="); ok && !strings.HasPrefix(k, "#") {
			out[k] = strings.Trim(v, `"`)
		}
	}
	return out, sc.Err()
}

func tail(s string, n int) string {
	if len(s) > n {
		return s[len(s)-n:]
	}
	return s
}
