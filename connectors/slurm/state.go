package slurm

import (
	"fmt"
	"slices"
	"strings"

	agent "github.com/meridian-gpu/meridian/spoke-agent"
)

// DecodeExit decodes a raw wait status as Slurm reports it in exit_code:
// a normal exit gives its code (768 is exit 3); death by signal N gives
// 128+N, the shell's convention, with signal set to N.
func DecodeExit(raw int64) (code int32, signal int) {
	if raw < 0 || raw > 0xffff {
		// Not a wait status; report it as it is, clipped to int32.
		if raw > 1<<31-1 || raw < -(1<<31) {
			return -1, 0
		}
		return int32(raw), 0
	}
	if sig := int(raw & 0x7f); sig != 0 && sig != 0x7f {
		return int32(128 + sig), sig
	}
	return int32((raw >> 8) & 0xff), 0
}

// JobOutcome is what a Slurm job state means to Meridian.
type JobOutcome struct {
	State agent.WorkState
	// ExitCode is set for terminal states with a meaningful wait status.
	ExitCode *int32
	Reason   string
}

// MapJobState maps a Slurm job state and raw exit code to a Meridian work
// state. preempted says the connector cancelled the job to preempt it, so
// CANCELLED reads as Preempted.
//
//	PENDING, CONFIGURING, REQUEUED, REQUEUE_HOLD, REQUEUE_FED, RESV_DEL_HOLD -> Pending
//	RUNNING, COMPLETING, SUSPENDED, STOPPED, SIGNALING, STAGE_OUT, RESIZING -> Running
//	COMPLETED                                   -> Succeeded (exit 0)
//	FAILED                                      -> Failed (exit code decoded)
//	TIMEOUT, DEADLINE                           -> Failed (time limit)
//	NODE_FAIL, BOOT_FAIL                        -> Failed (node failure)
//	OUT_OF_MEMORY                               -> Failed (out of memory)
//	PREEMPTED                                   -> Preempted
//	CANCELLED                                   -> Cancelled, or Preempted
//	anything else                               -> Unknown
func MapJobState(state string, rawExit int64, reason string, preempted bool) JobOutcome {
	st := strings.ToUpper(strings.TrimSpace(state))
	if base, _, ok := strings.Cut(st, "+"); ok { // "CANCELLED+" style suffixes
		st = base
	}
	exit := func() *int32 {
		c, _ := DecodeExit(rawExit)
		return &c
	}
	why := func(s string) string {
		if reason != "" && reason != "None" {
			return fmt.Sprintf("%s (slurm %s, reason %s)", s, st, reason)
		}
		return fmt.Sprintf("%s (slurm %s)", s, st)
	}
	switch st {
	case "PENDING", "CONFIGURING", "REQUEUED", "REQUEUE_HOLD", "REQUEUE_FED", "RESV_DEL_HOLD", "POWER_UP_NODE":
		return JobOutcome{State: agent.StatePending, Reason: reason}
	case "RUNNING", "COMPLETING", "SUSPENDED", "STOPPED", "SIGNALING", "STAGE_OUT", "RESIZING", "UPDATE_DB":
		return JobOutcome{State: agent.StateRunning}
	case "COMPLETED":
		return JobOutcome{State: agent.StateSucceeded, ExitCode: exit()}
	case "FAILED":
		e := exit()
		c, sig := DecodeExit(rawExit)
		if sig != 0 {
			return JobOutcome{State: agent.StateFailed, ExitCode: e, Reason: why(fmt.Sprintf("killed by signal %d", sig))}
		}
		return JobOutcome{State: agent.StateFailed, ExitCode: e, Reason: why(fmt.Sprintf("exit code %d", c))}
	case "TIMEOUT", "DEADLINE":
		return JobOutcome{State: agent.StateFailed, ExitCode: exit(), Reason: why("time limit reached")}
	case "NODE_FAIL", "BOOT_FAIL":
		return JobOutcome{State: agent.StateFailed, ExitCode: exit(), Reason: why("node failure")}
	case "OUT_OF_MEMORY":
		return JobOutcome{State: agent.StateFailed, ExitCode: exit(), Reason: why("out of memory")}
	case "PREEMPTED":
		return JobOutcome{State: agent.StatePreempted, ExitCode: exit(), Reason: why("preempted by Slurm")}
	case "CANCELLED":
		if preempted {
			return JobOutcome{State: agent.StatePreempted, Reason: "preempted by the hub (slurm CANCELLED)"}
		}
		return JobOutcome{State: agent.StateCancelled, Reason: why("cancelled")}
	}
	return JobOutcome{State: agent.StateUnknown, Reason: fmt.Sprintf("unknown slurm job state %q", state)}
}

// NodeSchedulable reports whether a node with this base state and these
// flags may take new work: its base state must be idle, mixed or allocated,
// with none of the flags that close it (drain, fail, maintenance, not
// responding, power saving, reboot).
func NodeSchedulable(state string, flags []string) bool {
	switch strings.ToLower(state) {
	case "idle", "mixed", "allocated", "completing":
	default:
		return false
	}
	for _, f := range flags {
		f = strings.ToUpper(f)
		if slices.Contains(closingFlags, f) || strings.HasPrefix(f, "DRAIN") || strings.HasPrefix(f, "POWER") {
			return false
		}
	}
	return true
}

// NodeHealthy reports whether the node's devices can be counted at all: a
// down, failed or unresponsive node offers no capacity, a drained one does
// (it only takes no new work).
func NodeHealthy(state string, flags []string) bool {
	switch strings.ToLower(state) {
	case "down", "error", "future", "unknown", "invalid", "invalid_reg":
		return false
	}
	for _, f := range flags {
		switch strings.ToUpper(f) {
		case "FAIL", "NOT_RESPONDING", "POWERED_DOWN":
			return false
		}
	}
	return true
}

var closingFlags = []string{"FAIL", "FAILING", "MAINTENANCE", "NOT_RESPONDING", "REBOOT_REQUESTED", "REBOOT_ISSUED", "PLANNED", "RESERVED", "INVALID_REG"}
