package slurmhub

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/meridian-gpu/meridian/connectors/slurm"
	"github.com/meridian-gpu/meridian/internal/repo"
)

// ErrNotRoot is returned by Up when the process is not root: the local
// Slurm daemons (munge, slurmctld, slurmd) need it.
var ErrNotRoot = errors.New("the local Slurm cluster needs root: scripts/slurm-up.sh installs the Debian packages and starts munge, slurmctld and four slurmd as root (run as root, e.g. sudo)")

// Local is the local Slurm cluster that scripts/slurm-up.sh started.
type Local struct {
	// Root is the repository root (where scripts/ lives).
	Root string
	// Vars are the variables of "$MERIDIAN_SLURM_DIR/env".
	Vars map[string]string
}

// StateDir is where scripts/slurm-up.sh keeps the cluster: MERIDIAN_SLURM_DIR,
// else ~/.cache/meridian/slurm.
func StateDir() string {
	if d := os.Getenv("MERIDIAN_SLURM_DIR"); d != "" {
		return d
	}
	home, _ := os.UserHomeDir()
	return filepath.Join(home, ".cache", "meridian", "slurm")
}

// Up starts the local Slurm cluster (idempotent: a running cluster is left
// as it is, dead daemons are restarted, nodes left down are resumed) and
// reads its env file. It returns ErrNotRoot when not root.
func Up(ctx context.Context) (*Local, error) {
	if os.Geteuid() != 0 {
		return nil, ErrNotRoot
	}
	root, err := repo.Root()
	if err != nil {
		return nil, err
	}
	l := &Local{Root: root}
	if err := l.runUp(ctx); err != nil {
		return nil, err
	}
	vars, err := slurm.LoadEnvFile(filepath.Join(StateDir(), "env"))
	if err != nil {
		return nil, err
	}
	l.Vars = vars
	return l, nil
}

func (l *Local) runUp(ctx context.Context) error {
	ctx, cancel := context.WithTimeout(ctx, 5*time.Minute)
	defer cancel()
	out, err := exec.CommandContext(ctx, filepath.Join(l.Root, "scripts", "slurm-up.sh")).CombinedOutput()
	if err != nil {
		return fmt.Errorf("scripts/slurm-up.sh: %w\n%s", err, out)
	}
	return nil
}

// Config is a connector configuration for this cluster; the cluster id is
// written into every job's comment, so connectors with different ids never
// see each other's jobs.
func (l *Local) Config(clusterID string) slurm.Config {
	return slurm.Config{
		RESTURL:    l.Vars[slurm.EnvRESTURL],
		User:       l.Vars[slurm.EnvUser],
		JWTKeyFile: l.Vars[slurm.EnvJWTKey],
		SlurmConf:  l.Vars[slurm.EnvSlurmConf],
		Partition:  l.Vars[slurm.EnvPartition],
		ClusterID:  clusterID,
	}
}

// Command is a Slurm command (sbatch, squeue, scontrol...) aimed at this
// cluster through SLURM_CONF.
func (l *Local) Command(ctx context.Context, name string, args ...string) *exec.Cmd {
	cmd := exec.CommandContext(ctx, name, args...)
	cmd.Env = append(os.Environ(), "SLURM_CONF="+l.Vars[slurm.EnvSlurmConf])
	return cmd
}

// Jobs lists the jobs Slurm still knows (squeue --json) whose comment
// carries Meridian's tag for clusterID; other jobs are left out.
func (l *Local) Jobs(ctx context.Context, clusterID string) ([]slurm.JobInfo, error) {
	out, err := l.Command(ctx, "squeue", "--json").Output()
	if err != nil {
		return nil, fmt.Errorf("squeue --json: %w", err)
	}
	ad, err := slurm.DetectAdapter(out)
	if err != nil {
		return nil, fmt.Errorf("squeue --json: %w", err)
	}
	jobs, _, err := ad.DecodeJobs(out)
	if err != nil {
		return nil, fmt.Errorf("squeue --json: %w", err)
	}
	var mine []slurm.JobInfo
	for _, j := range jobs {
		if t, ok := slurm.ParseComment(j.Comment); ok && t.ClusterID == clusterID {
			mine = append(mine, j)
		}
	}
	return mine, nil
}

// ActiveJobs counts clusterID's jobs that are pending, configuring,
// running or completing. It asks squeue for those states and the comment
// only, as text: cheap for slurmctld, and none of the decoding runs in the
// calling process (a benchmark that waits with it does not count the wait
// as Meridian's CPU).
func (l *Local) ActiveJobs(ctx context.Context, clusterID string) (int, error) {
	out, err := l.Command(ctx, "squeue", "-h", "-t", "PENDING,CONFIGURING,RUNNING,COMPLETING", "-o", "%k").Output()
	if err != nil {
		return 0, fmt.Errorf("squeue -t: %w", err)
	}
	n := 0
	for _, line := range strings.Split(string(out), "\n") {
		if t, ok := slurm.ParseComment(strings.TrimSpace(line)); ok && t.ClusterID == clusterID {
			n++
		}
	}
	return n, nil
}

// NodeState is the state sinfo prints for one node (e.g. "idle",
// "idle*" when not responding, "down*", "alloc").
func (l *Local) NodeState(ctx context.Context, node string) (string, error) {
	out, err := l.Command(ctx, "sinfo", "-h", "-N", "-n", node, "-o", "%t").Output()
	if err != nil {
		return "", fmt.Errorf("sinfo -n %s: %w", node, err)
	}
	return strings.TrimSpace(string(out)), nil
}

// KillSlurmd kills node's slurmd with SIGKILL (the pid from its pid file),
// as a crashed node would vanish. Slurm notices on its next ping.
func (l *Local) KillSlurmd(node string) error {
	pidFile := filepath.Join(StateDir(), "run", "slurmd-"+node+".pid")
	b, err := os.ReadFile(pidFile)
	if err != nil {
		return fmt.Errorf("slurmd %s: %w", node, err)
	}
	pid, err := strconv.Atoi(strings.TrimSpace(string(b)))
	if err != nil || pid <= 1 {
		return fmt.Errorf("slurmd %s: pid file %s holds %q", node, pidFile, b)
	}
	if err := syscall.Kill(pid, syscall.SIGKILL); err != nil {
		return fmt.Errorf("slurmd %s: kill %d: %w", node, pid, err)
	}
	return nil
}

// Restore runs scripts/slurm-up.sh again, which restarts dead daemons and
// resumes nodes left down, and waits (bounded by ctx) until node is idle.
func (l *Local) Restore(ctx context.Context, node string) error {
	if err := l.runUp(ctx); err != nil {
		return err
	}
	for {
		st, err := l.NodeState(ctx, node)
		if err == nil && (st == "idle" || st == "mix" || st == "alloc") {
			return nil
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("node %s not back after slurm-up (state %q, err %v): %w", node, st, err, ctx.Err())
		case <-time.After(300 * time.Millisecond):
		}
	}
}

// LockFile is the file whose exclusive flock every package's real-Slurm
// tests hold while they use the local cluster, so that `go test ./...`,
// which runs packages in parallel, never runs two of them against the one
// slurmctld at once (one counts free GPUs while the other fills them or
// kills a slurmd). The lock goes with the process.
func LockFile() string { return filepath.Join(StateDir(), "tests.lock") }

// Lock takes the lock of LockFile, waiting at most limit; the returned
// file holds it until closed or the process ends. Keep a reference to it:
// a collected *os.File is closed, and the lock with it.
func Lock(ctx context.Context, limit time.Duration) (*os.File, error) {
	if err := os.MkdirAll(StateDir(), 0o755); err != nil {
		return nil, fmt.Errorf("slurm test lock: %w", err)
	}
	f, err := os.OpenFile(LockFile(), os.O_CREATE|os.O_RDWR, 0o644)
	if err != nil {
		return nil, fmt.Errorf("slurm test lock: %w", err)
	}
	deadline := time.Now().Add(limit)
	for {
		err := syscall.Flock(int(f.Fd()), syscall.LOCK_EX|syscall.LOCK_NB)
		if err == nil {
			return f, nil
		}
		if !errors.Is(err, syscall.EWOULDBLOCK) || time.Now().After(deadline) {
			f.Close()
			return nil, fmt.Errorf("slurm test lock %s: another package's Slurm tests held it for %s: %w", LockFile(), limit, err)
		}
		select {
		case <-ctx.Done():
			f.Close()
			return nil, ctx.Err()
		case <-time.After(200 * time.Millisecond):
		}
	}
}
