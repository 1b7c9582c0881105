// Command meridian-demo runs the whole of Meridian in one process: a hub on
// embedded etcd and NATS, three simulated GPU clusters behind real spoke
// agents, and a mixed workload. `make demo` runs it; `make demo-forever`
// keeps it running for exploring with meridianctl. All of its logic lives in
// internal/demo; this main only parses flags.
//
// With --slurm (`make demo-slurm`, as root) one of the three clusters is a
// real Slurm cluster: scripts/slurm-up.sh starts slurmctld, four slurmd and
// slurmrestd on loopback, and a spoke agent with the Slurm connector takes
// the place of the simulated us-east (slurm.go builds that spoke). Without
// root it says what it needs and exits with code 3. It never touches Slurm
// jobs other than the ones its connector submits.
package main
