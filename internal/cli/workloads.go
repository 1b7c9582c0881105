package cli

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"sort"
	"strings"

	"github.com/spf13/cobra"
	"google.golang.org/grpc"
	"google.golang.org/protobuf/proto"

	"github.com/meridian-gpu/meridian/hub/api/validation"
	meridianv1 "github.com/meridian-gpu/meridian/proto/meridian/v1"
)

// readInput reads the file named by -f, or stdin for "-". It reads at most
// one byte more than the decoders accept, so they can report the size.
func (a *app) readInput(name string) ([]byte, error) {
	if name == "" {
		return nil, usageErrorf("-f/--filename is required (a YAML or JSON file, or - for stdin)")
	}
	var r io.Reader
	if name == "-" {
		r = a.env.Stdin
	} else {
		f, err := os.Open(name)
		if err != nil {
			return nil, &exitError{code: ExitUsage, msg: fmt.Sprintf("-f: cannot read %s: %v", name, errors.Unwrap(err)), err: err}
		}
		defer f.Close()
		r = f
	}
	data, err := io.ReadAll(io.LimitReader(r, validation.MaxDocumentBytes+1))
	if err != nil {
		return nil, &exitError{code: ExitUsage, msg: fmt.Sprintf("-f: cannot read %s: %v", displayName(name), err), err: err}
	}
	return data, nil
}

func displayName(name string) string {
	if name == "-" {
		return "stdin"
	}
	return name
}

func (a *app) submitCommand() *cobra.Command {
	var file, key string
	var dryRun, rejectNeverFits, storeQueued bool
	var count int
	cmd := &cobra.Command{
		Use:   "submit -f FILE",
		Short: "Submit a workload described in a YAML or JSON file (- for stdin)",
		Long: `Submit a workload described in a YAML or JSON file (- reads stdin).

The file is decoded and validated here first, so mistakes are reported
before anything is sent. With --idempotency-key, submitting the same file
again returns the first workload instead of creating a second one.

The queue must exist ('meridianctl queues' lists them). A workload that no
registered cluster or quota could ever hold is stored and waits with
reason code NeverFits; --reject-if-never-fits refuses it instead.

The answer says where the workload stands: the hub's scheduler stores a
new workload with its first decision, so it is often DISPATCHED already.
That takes up to one scheduling cycle (50 ms by default); a script that
submits one workload at a time can pass --store-queued to be answered as
soon as the workload is stored, QUEUED.

--count N submits an array: N copies of the workload in as few calls as
possible (up to 1000 workloads each, every call stored whole or not at
all). Copy i is labelled array-index=i, its name (when the file gives one)
and idempotency key get the suffix -i, so 'meridianctl list -l
array-index=3' finds one copy and repeating the command submits nothing
twice.`,
		Example: `  meridianctl submit -f examples/workloads/gang.yaml
  meridianctl submit -f job.yaml --idempotency-key nightly-2026-12-01
  meridianctl submit -f sweep.yaml --count 200 --idempotency-key sweep-7
  cat job.yaml | meridianctl submit -f - -o json`,
		Args: noArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			data, err := a.readInput(file)
			if err != nil {
				return err
			}
			w, err := validation.DecodeWorkload(data)
			if err != nil {
				return invalidErrorf("%s: %s", displayName(file), cleanProtoError(err.Error()))
			}
			if key != "" {
				w.IdempotencyKey = key
			}
			if err := validation.ValidateWorkload(w); err != nil {
				if text, ok := violationsText("invalid workload in "+displayName(file), err); ok {
					return invalidErrorf("%s", text)
				}
				return invalidErrorf("invalid workload in %s: %v", displayName(file), err)
			}
			if count < 1 || count > maxArray {
				return usageErrorf("--count: must be between 1 and %d (got %d)", maxArray, count)
			}
			if count > 1 {
				ws, err := arrayOf(w, count)
				if err != nil {
					return err
				}
				if dryRun {
					fmt.Fprintf(a.env.Stdout, "%s: %d valid workloads for queue %s (%s GPUs requested each); not submitted (--dry-run)\n", displayName(file), count, w.GetQueue(), gpus(requestedMilli(w)))
					return nil
				}
				return a.submitArray(cmd, ws, rejectNeverFits, storeQueued)
			}
			if dryRun {
				fmt.Fprintf(a.env.Stdout, "%s: valid workload for queue %s (%s GPUs requested); not submitted (--dry-run)\n", displayName(file), w.GetQueue(), gpus(requestedMilli(w)))
				return nil
			}
			var resp *meridianv1.SubmitWorkloadResponse
			err = a.call(cmd.Context(), func(ctx context.Context, conn *grpc.ClientConn) error {
				var err error
				resp, err = a.workloads(conn).SubmitWorkload(ctx, &meridianv1.SubmitWorkloadRequest{Workload: w, RejectIfNeverFits: rejectNeverFits, StoreQueued: storeQueued})
				return err
			})
			if err != nil {
				return a.submitError(cmd.Context(), err, w.GetQueue())
			}
			if a.output != "table" {
				return a.writeMessage(resp)
			}
			got := resp.GetWorkload()
			if resp.GetReplayed() {
				fmt.Fprintf(a.env.Stdout, "workload %s already submitted with idempotency key %q (phase %s)\n", got.GetId(), got.GetIdempotencyKey(), phaseName(got.GetStatus().GetPhase()))
				return nil
			}
			fmt.Fprintf(a.env.Stdout, "workload %s submitted to queue %s (phase %s)\n", got.GetId(), got.GetQueue(), phaseName(got.GetStatus().GetPhase()))
			return nil
		},
	}
	cmd.Flags().StringVarP(&file, "filename", "f", "", "workload file, YAML or JSON (- for stdin)")
	cmd.Flags().StringVar(&key, "idempotency-key", "", "make the submission idempotent (overrides idempotency_key in the file)")
	cmd.Flags().BoolVar(&dryRun, "dry-run", false, "decode and validate the file only; send nothing")
	cmd.Flags().IntVar(&count, "count", 1, "submit an array of this many copies (labelled array-index=i; name and idempotency key get the suffix -i)")
	cmd.Flags().BoolVar(&rejectNeverFits, "reject-if-never-fits", false, "refuse the workload, storing nothing, when no registered cluster or quota could ever hold it (default: store it; it waits with reason NeverFits)")
	cmd.Flags().BoolVar(&storeQueued, "store-queued", false, "have the hub store the workload QUEUED and answer at once, instead of answering after the scheduler's next decision (for scripts that submit one at a time)")
	return cmd
}

// maxArray bounds --count; arrayChunk is how many workloads one
// SubmitWorkloads call carries (the API's limit).
const (
	maxArray   = 100000
	arrayChunk = 1000
)

// arrayOf makes the n copies of an array submit, each checked as the
// hub will check it.
func arrayOf(w *meridianv1.Workload, n int) ([]*meridianv1.Workload, error) {
	ws := make([]*meridianv1.Workload, n)
	for i := range ws {
		c := proto.Clone(w).(*meridianv1.Workload)
		suffix := fmt.Sprintf("-%d", i)
		if c.GetName() != "" {
			c.Name += suffix
		}
		if c.GetIdempotencyKey() != "" {
			c.IdempotencyKey += suffix
		}
		if c.Labels == nil {
			c.Labels = map[string]string{}
		}
		c.Labels["array-index"] = fmt.Sprint(i)
		if err := validation.ValidateWorkload(c); err != nil {
			if text, ok := violationsText(fmt.Sprintf("invalid array copy %d", i), err); ok {
				return nil, invalidErrorf("%s", text)
			}
			return nil, invalidErrorf("invalid array copy %d: %v", i, err)
		}
		ws[i] = c
	}
	return ws, nil
}

// submitArray sends an array in chunks, each stored whole by the hub, and
// reports progress on stderr when it takes more than one call.
func (a *app) submitArray(cmd *cobra.Command, ws []*meridianv1.Workload, rejectNeverFits, storeQueued bool) error {
	all := &meridianv1.SubmitWorkloadsResponse{}
	replayed := 0
	// The table says only ids and the queue: the hub answers with each
	// workload's basic view, a fraction of the bytes for a large array.
	view := meridianv1.WorkloadView_WORKLOAD_VIEW_FULL
	if a.output == "table" {
		view = meridianv1.WorkloadView_WORKLOAD_VIEW_BASIC
	}
	for start := 0; start < len(ws); start += arrayChunk {
		chunk := ws[start:min(start+arrayChunk, len(ws))]
		var resp *meridianv1.SubmitWorkloadsResponse
		err := a.call(cmd.Context(), func(ctx context.Context, conn *grpc.ClientConn) error {
			var err error
			resp, err = a.workloads(conn).SubmitWorkloads(ctx, &meridianv1.SubmitWorkloadsRequest{Workloads: chunk, RejectIfNeverFits: rejectNeverFits, View: view, StoreQueued: storeQueued})
			return err
		})
		if err != nil {
			if start > 0 {
				fmt.Fprintf(a.env.Stderr, "%d of %d workloads were submitted before this error; submit again with the same --idempotency-key to send the rest without repeating them\n", start, len(ws))
			}
			return a.submitError(cmd.Context(), err, ws[0].GetQueue())
		}
		for _, r := range resp.GetResults() {
			if r.GetReplayed() {
				replayed++
			}
		}
		all.Results = append(all.Results, resp.GetResults()...)
		if len(ws) > arrayChunk {
			fmt.Fprintf(a.env.Stderr, "submitted %d/%d\n", len(all.Results), len(ws))
		}
	}
	if a.output != "table" {
		return a.writeMessage(all)
	}
	first, last := all.Results[0].GetWorkload(), all.Results[len(all.Results)-1].GetWorkload()
	fmt.Fprintf(a.env.Stdout, "%d workloads submitted to queue %s (%s … %s)", len(ws)-replayed, first.GetQueue(), first.GetId(), last.GetId())
	if replayed > 0 {
		fmt.Fprintf(a.env.Stdout, "; %d already submitted with their idempotency keys", replayed)
	}
	fmt.Fprintln(a.env.Stdout)
	return nil
}

// submitError is rpcError for a submit, with the CLI's own advice when
// the queue does not exist.
func (a *app) submitError(ctx context.Context, err error, queue string) error {
	out := a.rpcError(ctx, err, object{kind: "workload", action: "submit to queue " + queue})
	missingQueue := false
	for _, v := range validation.FieldViolations(err) {
		if (v.GetField() == "queue" || strings.HasSuffix(v.GetField(), "].queue")) && strings.Contains(v.GetDescription(), "does not exist") {
			missingQueue = true
		}
	}
	var ee *exitError
	if !missingQueue || !errors.As(out, &ee) {
		return out
	}
	msg := ee.msg + "\nhint: 'meridianctl queues' lists the queues that exist; 'meridianctl queue create -f FILE' or 'meridianctl queue apply -f FILE' creates one"
	return &exitError{code: ee.code, msg: msg, err: ee.err}
}

func (a *app) getWorkload(ctx context.Context, id string) (*meridianv1.Workload, error) {
	var w *meridianv1.Workload
	err := a.call(ctx, func(ctx context.Context, conn *grpc.ClientConn) error {
		var err error
		w, err = a.workloads(conn).GetWorkload(ctx, &meridianv1.GetWorkloadRequest{Id: id})
		return err
	})
	if err != nil {
		return nil, a.rpcError(ctx, err, lookup("workload", id, "id").act("view"))
	}
	return w, nil
}

func (a *app) getCommand() *cobra.Command {
	return &cobra.Command{
		Use:   "get ID",
		Short: "Show one workload in detail",
		Long: `Show one workload: phase, pending reason and its code (for a queued
workload), the cluster it was dispatched to, pod sets and conditions.
-o json or -o yaml prints the whole object.`,
		Example: `  meridianctl get wl-01JD3M6Q7ZK4X9V2B8N5T0RCWE
  meridianctl get wl-01JD3M6Q7ZK4X9V2B8N5T0RCWE -o yaml`,
		Args: exactArgs("ID"),
		RunE: func(cmd *cobra.Command, args []string) error {
			w, err := a.getWorkload(cmd.Context(), args[0])
			if err != nil {
				return err
			}
			if a.output != "table" {
				return a.writeMessage(w)
			}
			return a.describeWorkload(w)
		},
	}
}

// describeWorkload prints one workload as labelled fields, its pod sets
// and its conditions.
func (a *app) describeWorkload(w *meridianv1.Workload) error {
	now := a.env.Now()
	st := w.GetStatus()
	kv := newTable(a.env.Stdout)
	kv.row("ID:", w.GetId())
	kv.row("Name:", dash(w.GetName()))
	kv.row("Queue:", w.GetQueue())
	kv.row("Phase:", phaseName(st.GetPhase()))
	if st.GetPendingReason() != "" {
		kv.row("Pending reason:", st.GetPendingReason())
	}
	if st.GetPendingReasonCode() != "" {
		kv.row("Reason code:", st.GetPendingReasonCode())
	}
	kv.row("Cluster:", dash(st.GetCluster()))
	kv.row("Dispatch:", dash(st.GetDispatchId()))
	if len(st.GetAssignment()) > 0 {
		kv.row("Planned on:", assignmentString(st.GetAssignment()))
	}
	if len(st.GetQuotaCharge()) > 0 {
		kv.row("Quota charged:", chargeString(st.GetQuotaCharge()))
	}
	kv.row("Priority:", fmt.Sprint(w.GetPriority()))
	kv.row("Preemptible:", yesNo(w.GetPreemptible()))
	kv.row("GPUs:", gpus(requestedMilli(w)))
	kv.row("Attempts:", fmt.Sprint(st.GetAttempts()))
	kv.row("Created:", timestamp(w.GetCreateTime())+" ("+age(now, w.GetCreateTime())+" ago)")
	if st.GetAcceptTime() != nil {
		kv.row("Accepted:", timestamp(st.GetAcceptTime())+" ("+age(now, st.GetAcceptTime())+" ago)")
	}
	if st.GetStartTime() != nil {
		kv.row("Started:", timestamp(st.GetStartTime())+" ("+age(now, st.GetStartTime())+" ago)")
	}
	if st.GetEndTime() != nil {
		kv.row("Ended:", timestamp(st.GetEndTime())+" ("+age(now, st.GetEndTime())+" ago)")
	}
	if st.ExitCode != nil {
		kv.row("Exit code:", fmt.Sprint(st.GetExitCode()))
	}
	if st.GetMessage() != "" {
		kv.row("Message:", st.GetMessage())
	}
	if len(w.GetLabels()) > 0 {
		kv.row("Labels:", mapString(w.GetLabels()))
	}
	if len(w.GetClusterSelector()) > 0 {
		kv.row("Cluster selector:", mapString(w.GetClusterSelector()))
	}
	if w.GetIdempotencyKey() != "" {
		kv.row("Idempotency key:", w.GetIdempotencyKey())
	}
	if err := kv.flush(); err != nil {
		return err
	}
	fmt.Fprintln(a.env.Stdout, "\nPod sets:")
	ps := newTable(a.env.Stdout, "  NAME", "REPLICAS", "MIN", "GPU/REPLICA", "GPU MEM", "CLASS", "MODE", "TOPOLOGY")
	for _, p := range w.GetPodSets() {
		r := p.GetResources()
		minR := "-"
		if p.GetMinReplicas() > 0 {
			minR = fmt.Sprint(p.GetMinReplicas())
		}
		mode := "-"
		if g := r.GetGpuMilli(); (g > 0 && g < 1000) || (g == 0 && r.GetGpuMemoryMib() > 0) {
			mode = modeName(r.GetFractionalMode())
		}
		ps.row("  "+p.GetName(), fmt.Sprint(p.GetReplicas()), minR, gpus(int64(r.GetGpuMilli())), mib(int64(r.GetGpuMemoryMib())), dash(r.GetAcceleratorClass()), mode, topologyName(p.GetTopology()))
	}
	if err := ps.flush(); err != nil {
		return err
	}
	if len(st.GetConditions()) > 0 {
		fmt.Fprintln(a.env.Stdout, "\nConditions:")
		ct := newTable(a.env.Stdout, "  TYPE", "STATUS", "REASON", "AGE", "MESSAGE")
		for _, c := range st.GetConditions() {
			ct.row("  "+c.GetType(), conditionStatus(c.GetStatus()), dash(c.GetReason()), age(now, c.GetLastTransitionTime()), dash(c.GetMessage()))
		}
		return ct.flush()
	}
	return nil
}

func conditionStatus(s meridianv1.ConditionStatus) string {
	switch s {
	case meridianv1.ConditionStatus_CONDITION_STATUS_TRUE:
		return "True"
	case meridianv1.ConditionStatus_CONDITION_STATUS_FALSE:
		return "False"
	case meridianv1.ConditionStatus_CONDITION_STATUS_UNKNOWN:
		return "Unknown"
	}
	return "-"
}

func yesNo(b bool) string {
	if b {
		return "yes"
	}
	return "no"
}

// mapString formats a map as sorted k=v pairs.
func mapString(m map[string]string) string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	parts := make([]string, len(keys))
	for i, k := range keys {
		parts[i] = k + "=" + m[k]
	}
	return strings.Join(parts, ",")
}

// parsePhases turns --phase values (comma-separated, any case, with or
// without the WORKLOAD_PHASE_ prefix) into phases.
func parsePhases(values []string) ([]meridianv1.WorkloadPhase, error) {
	var out []meridianv1.WorkloadPhase
	for _, v := range values {
		for _, p := range strings.Split(v, ",") {
			p = strings.TrimSpace(p)
			if p == "" {
				continue
			}
			name := strings.ToUpper(p)
			if !strings.HasPrefix(name, "WORKLOAD_PHASE_") {
				name = "WORKLOAD_PHASE_" + name
			}
			n, ok := meridianv1.WorkloadPhase_value[name]
			if !ok || n == 0 {
				return nil, usageErrorf("--phase: unknown phase %q (use queued, dispatched, accepted, running, succeeded, failed, cancelled or preempted)", p)
			}
			out = append(out, meridianv1.WorkloadPhase(n))
		}
	}
	return out, nil
}

// listPageSize is how many workloads list asks for per page.
const listPageSize = 500

func (a *app) listCommand() *cobra.Command {
	var queue, cluster string
	var phases, labels []string
	var limit int
	cmd := &cobra.Command{
		Use:   "list",
		Short: "List workloads, newest first (all pages unless --limit)",
		Example: `  meridianctl list --queue acme/vision --phase queued,running
  meridianctl list -l team=vision -l tier!=prod --limit 20
  meridianctl list --cluster east-h100 -o json`,
		Args: noArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if limit < 0 {
				return usageErrorf("--limit: must not be negative (got %d); 0 means no limit", limit)
			}
			ph, err := parsePhases(phases)
			if err != nil {
				return err
			}
			for _, l := range labels {
				if !strings.Contains(l, "=") {
					return usageErrorf("-l/--selector: %q is not key=value (or key!=value)", l)
				}
			}
			req := &meridianv1.ListWorkloadsRequest{
				Queue:         queue,
				Phase:         ph,
				Cluster:       cluster,
				LabelSelector: strings.Join(labels, ","),
			}
			var all []*meridianv1.Workload
			more := false
			// pageSize shrinks when a page is too large to receive (large
			// labels); listing is a read, so asking again is safe.
			pageSize := listPageSize
			for page := 0; ; page++ {
				size := pageSize
				if limit > 0 && limit-len(all) < size {
					size = limit - len(all)
				}
				req.PageSize = int32(size)
				var resp *meridianv1.ListWorkloadsResponse
				err := a.call(cmd.Context(), func(ctx context.Context, conn *grpc.ClientConn) error {
					var err error
					resp, err = a.workloads(conn).ListWorkloads(ctx, req)
					return err
				})
				if err != nil && isTooLarge(err) && size > 1 {
					pageSize = size / 2
					continue
				}
				if err != nil {
					return a.rpcError(cmd.Context(), err, object{kind: "workload list",
						tooBig: "it was too large even at one workload per page; narrow the list with --queue, --phase, --cluster or -l"})
				}
				all = append(all, resp.GetWorkloads()...)
				if limit > 0 && len(all) >= limit {
					more = resp.GetNextPageToken() != ""
					all = all[:limit]
					break
				}
				if resp.GetNextPageToken() == "" {
					break
				}
				if resp.GetNextPageToken() == req.GetPageToken() || page > 1_000_000 {
					return &exitError{code: ExitError, msg: "the hub returned the same page token twice; stopping"}
				}
				req.PageToken = resp.GetNextPageToken()
			}
			if more {
				what := fmt.Sprintf("the first %d workloads", limit)
				if limit == 1 {
					what = "the first workload"
				}
				fmt.Fprintf(a.env.Stderr, "note: showing %s; more match (raise --limit, or 0 for all)\n", what)
			}
			if a.output != "table" {
				return a.writeMessage(&meridianv1.ListWorkloadsResponse{Workloads: all})
			}
			if len(all) == 0 {
				fmt.Fprintln(a.env.Stderr, "no workloads match")
				return nil
			}
			now := a.env.Now()
			t := newTable(a.env.Stdout, "ID", "NAME", "QUEUE", "PHASE", "CLUSTER", "GPUS", "PRIO", "AGE", "REASON")
			for _, w := range all {
				st := w.GetStatus()
				reason := st.GetPendingReason()
				if reason == "" {
					reason = st.GetMessage()
				}
				t.row(w.GetId(), dash(w.GetName()), w.GetQueue(), phaseName(st.GetPhase()), dash(st.GetCluster()),
					gpus(requestedMilli(w)), fmt.Sprint(w.GetPriority()), age(now, w.GetCreateTime()), dash(reason))
			}
			return t.flush()
		},
	}
	f := cmd.Flags()
	f.StringVar(&queue, "queue", "", "only this queue, or queues below a prefix such as tenant/team")
	f.StringSliceVar(&phases, "phase", nil, "only these phases, comma-separated (queued, running, ...)")
	f.StringVar(&cluster, "cluster", "", "only workloads dispatched to this cluster")
	f.StringArrayVarP(&labels, "selector", "l", nil, "label selector key=value or key!=value (repeatable)")
	f.IntVar(&limit, "limit", 0, "show at most this many workloads (0: all)")
	return cmd
}

func (a *app) cancelCommand() *cobra.Command {
	var reason string
	cmd := &cobra.Command{
		Use:   "cancel ID",
		Short: "Cancel a workload (running work is stopped by its cluster)",
		Args:  exactArgs("ID"),
		RunE: func(cmd *cobra.Command, args []string) error {
			id := args[0]
			var w *meridianv1.Workload
			err := a.call(cmd.Context(), func(ctx context.Context, conn *grpc.ClientConn) error {
				var err error
				w, err = a.workloads(conn).CancelWorkload(ctx, &meridianv1.CancelWorkloadRequest{Id: id, Reason: reason})
				return err
			})
			if err != nil {
				return a.rpcError(cmd.Context(), err, lookup("workload", id, "id").act("cancel"))
			}
			if a.output != "table" {
				return a.writeMessage(w)
			}
			st := w.GetStatus()
			switch phase := st.GetPhase(); {
			case phase == meridianv1.WorkloadPhase_WORKLOAD_PHASE_CANCELLED:
				fmt.Fprintf(a.env.Stdout, "workload %s cancelled\n", w.GetId())
			case phase == meridianv1.WorkloadPhase_WORKLOAD_PHASE_SUCCEEDED || phase == meridianv1.WorkloadPhase_WORKLOAD_PHASE_FAILED:
				fmt.Fprintf(a.env.Stdout, "workload %s already finished (%s); nothing to cancel\n", w.GetId(), phaseName(phase))
			case phase == meridianv1.WorkloadPhase_WORKLOAD_PHASE_QUEUED:
				// The hub took the request, but no leader acted on it
				// within the API's wait.
				fmt.Fprintf(a.env.Stdout, "workload %s: cancel requested; it takes effect once a hub leads (phase %s)\n", w.GetId(), phaseName(phase))
			default:
				fmt.Fprintf(a.env.Stdout, "workload %s: cancel requested; cluster %s will stop it (phase %s)\n", w.GetId(), dash(st.GetCluster()), phaseName(phase))
			}
			return nil
		},
	}
	cmd.Flags().StringVar(&reason, "reason", "", "why, recorded in the workload's status message")
	return cmd
}

func (a *app) explainCommand() *cobra.Command {
	return &cobra.Command{
		Use:   "explain ID",
		Short: "Explain why a workload is pending (quota and fit per cluster), or where it runs",
		Long: `Explain a workload. For a QUEUED workload: the pending reason and its
code (NeverFits, QuotaExceeded, ...), the queue position, the quota check per
accelerator class, and the fit on each cluster, best first. For any other
phase: the phase, and the cluster it runs or ran on.`,
		Args: exactArgs("ID"),
		RunE: func(cmd *cobra.Command, args []string) error {
			id := args[0]
			var resp *meridianv1.ExplainWorkloadResponse
			err := a.call(cmd.Context(), func(ctx context.Context, conn *grpc.ClientConn) error {
				var err error
				resp, err = a.workloads(conn).ExplainWorkload(ctx, &meridianv1.ExplainWorkloadRequest{Id: id})
				return err
			})
			if err != nil {
				return a.rpcError(cmd.Context(), err, lookup("workload", id, "id").act("explain"))
			}
			if a.output != "table" {
				return a.writeMessage(resp)
			}
			return a.printExplain(cmd.Context(), resp)
		},
	}
}

func (a *app) printExplain(ctx context.Context, r *meridianv1.ExplainWorkloadResponse) error {
	out := a.env.Stdout
	// An older hub leaves phase unset; it only explained queued workloads.
	queued := r.GetPhase() == meridianv1.WorkloadPhase_WORKLOAD_PHASE_QUEUED || r.GetPhase() == meridianv1.WorkloadPhase_WORKLOAD_PHASE_UNSPECIFIED
	kv := newTable(out)
	kv.row("Workload:", r.GetWorkloadId())
	kv.row("Phase:", phaseName(r.GetPhase()))
	if r.GetPendingReason() != "" {
		kv.row("Pending reason:", r.GetPendingReason())
	}
	if r.GetPendingReasonCode() != "" {
		kv.row("Reason code:", r.GetPendingReasonCode())
	}
	if r.GetQueuePosition() > 0 {
		kv.row("Queue position:", fmt.Sprint(r.GetQueuePosition()))
	}
	if r.GetEvaluateTime() != nil {
		kv.row("Evaluated:", timestamp(r.GetEvaluateTime())+" ("+age(a.env.Now(), r.GetEvaluateTime())+" ago)")
	}
	if err := kv.flush(); err != nil {
		return err
	}
	if len(r.GetQuota()) > 0 {
		fmt.Fprintln(out, "\nQuota:")
		t := newTable(out, "  CLASS", "REQUESTED", "AVAILABLE", "FITS", "REASON")
		for _, q := range r.GetQuota() {
			t.row("  "+dash(q.GetAcceleratorClass()), gpus(q.GetRequestedMilli()), gpus(q.GetAvailableMilli()), yesNo(q.GetFits()), dash(q.GetReason()))
		}
		if err := t.flush(); err != nil {
			return err
		}
	}
	if !queued && r.GetPlacementRule() != "" {
		// Why its cluster was chosen, as stored with the dispatch.
		fmt.Fprintln(out, "\nPlacement: "+r.GetPlacementRule())
		t := newTable(out, "  CLUSTER", "FREE AFTER", "DETAILS")
		for _, c := range r.GetPlacement() {
			t.row("  "+dash(c.GetCluster()), gpus(int64(c.GetScore()*1000+0.5)), dash(c.GetDetail()))
		}
		if err := t.flush(); err != nil {
			return err
		}
	}
	if !queued {
		// Not waiting: at most one entry, the cluster it runs or ran on.
		fmt.Fprintln(out, "\nCluster:")
		if len(r.GetClusters()) == 0 {
			fmt.Fprintln(out, "  no per-cluster detail")
			return nil
		}
		t := newTable(out, "  CLUSTER", "DETAILS")
		for _, c := range r.GetClusters() {
			lines := c.GetLines()
			if len(lines) == 0 {
				lines = []string{"-"}
			}
			t.row("  "+dash(c.GetCluster()), lines[0])
			for _, l := range lines[1:] {
				t.row("", l)
			}
		}
		return t.flush()
	}
	fmt.Fprintln(out, "\nClusters (best first):")
	if len(r.GetClusters()) == 0 {
		fmt.Fprintln(out, "  "+a.noClusterDetail(ctx))
		return nil
	}
	t := newTable(out, "  CLUSTER", "FITS", "DETAILS")
	for _, c := range r.GetClusters() {
		lines := c.GetLines()
		if len(lines) == 0 {
			lines = []string{"-"}
		}
		t.row("  "+dash(c.GetCluster()), yesNo(c.GetFits()), lines[0])
		for _, l := range lines[1:] {
			t.row("", "", l)
		}
	}
	return t.flush()
}

// noClusterDetail says why a queued workload's explanation lists no
// cluster. Only an empty fleet is "no cluster is registered"; the extra
// call is made only in that case, and its failure is not the command's.
func (a *app) noClusterDetail(ctx context.Context) string {
	var resp *meridianv1.ListClustersResponse
	err := a.call(ctx, func(ctx context.Context, conn *grpc.ClientConn) error {
		var err error
		resp, err = meridianv1.NewClusterServiceClient(conn).ListClusters(ctx, &meridianv1.ListClustersRequest{})
		return err
	})
	if err == nil && len(resp.GetClusters()) == 0 {
		return "none: no cluster is registered with the hub (start a meridian-agent in each cluster)"
	}
	return "no per-cluster detail"
}

func (a *app) watchCommand() *cobra.Command {
	var queue, viewName string
	var labels, phaseNames []string
	var initial bool
	var since int64
	cmd := &cobra.Command{
		Use:   "watch",
		Short: "Stream workload changes until interrupted (Ctrl-C)",
		Long: `Stream workload changes until interrupted (Ctrl-C) or the hub ends the
stream. Table output prints one line per change; -o json prints one JSON
object per line; -o yaml prints one YAML document per change.`,
		Args: noArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if since < 0 {
				return usageErrorf("--since-revision: must not be negative (got %d)", since)
			}
			phases, err := parsePhases(phaseNames)
			if err != nil {
				return err
			}
			view, err := a.watchView(viewName)
			if err != nil {
				return err
			}
			conn, err := a.dial()
			if err != nil {
				return err
			}
			ctx := cmd.Context()
			header, retried := false, false
			for {
				sctx, err := a.prepareToken(ctx)
				if err != nil {
					return err
				}
				// The stream is not bounded by --timeout; it runs until the
				// user stops it.
				stream, err := a.workloads(conn).WatchWorkloads(sctx, &meridianv1.WatchWorkloadsRequest{
					Queue:         queue,
					LabelSelector: strings.Join(labels, ","),
					SinceRevision: since,
					SendInitial:   initial,
					Phase:         phases,
					View:          view,
				})
				if err != nil {
					return a.watchError(ctx, err)
				}
				got := 0
				for {
					ev, err := stream.Recv()
					if errors.Is(err, io.EOF) {
						return nil
					}
					if err != nil {
						if got == 0 && !retried && a.refreshable(err) {
							// Refused before any event: once more with a
							// fresh token.
							retried = true
							break
						}
						return a.watchError(ctx, err)
					}
					got++
					if err := a.printEvent(ev, &header); err != nil {
						return err
					}
				}
			}
		},
	}
	f := cmd.Flags()
	f.StringVar(&queue, "queue", "", "only this queue, or queues below a prefix")
	f.StringArrayVarP(&labels, "selector", "l", nil, "label selector key=value or key!=value (repeatable)")
	f.StringSliceVar(&phaseNames, "phase", nil, "only changes into these phases, comma-separated (accepted, running, ...); deletions are then not shown")
	f.BoolVar(&initial, "initial", false, "first list the current workloads (as ADDED events)")
	f.Int64Var(&since, "since-revision", 0, "resume after this revision (from an earlier event)")
	f.StringVar(&viewName, "view", "", "how much of each workload: basic (ids, phases, clusters, times) or full; default basic for the table, full for -o json and -o yaml")
	return cmd
}

// watchView is the view --view names; by default the table's (basic: it
// shows nothing more) or, for -o json and -o yaml, the whole workload.
func (a *app) watchView(name string) (meridianv1.WorkloadView, error) {
	switch strings.ToLower(name) {
	case "":
		if a.output == "table" {
			return meridianv1.WorkloadView_WORKLOAD_VIEW_BASIC, nil
		}
		return meridianv1.WorkloadView_WORKLOAD_VIEW_FULL, nil
	case "basic":
		return meridianv1.WorkloadView_WORKLOAD_VIEW_BASIC, nil
	case "full":
		return meridianv1.WorkloadView_WORKLOAD_VIEW_FULL, nil
	}
	return 0, usageErrorf("--view: %q is not basic or full", name)
}

// watchError reports a stream error; the user stopping the watch is not
// an error.
func (a *app) watchError(ctx context.Context, err error) error {
	if ctx.Err() != nil {
		return nil
	}
	return a.rpcError(ctx, err, object{kind: "workload watch"})
}

const watchFormat = "%-20s  %-8s  %-30s  %-10s  %-12s  %s\n"

func (a *app) printEvent(ev *meridianv1.WorkloadEvent, header *bool) error {
	switch a.output {
	case "json":
		js, err := marshalJSON(ev, false)
		if err != nil {
			return err
		}
		_, err = fmt.Fprintf(a.env.Stdout, "%s\n", js)
		return err
	case "yaml":
		if _, err := fmt.Fprintln(a.env.Stdout, "---"); err != nil {
			return err
		}
		return a.writeMessage(ev)
	}
	if !*header {
		*header = true
		fmt.Fprintf(a.env.Stdout, watchFormat, "TIME", "EVENT", "ID", "PHASE", "CLUSTER", "REASON")
	}
	w := ev.GetWorkload()
	st := w.GetStatus()
	reason := st.GetPendingReason()
	if reason == "" {
		reason = st.GetMessage()
	}
	evType := enumName(ev.GetType().String(), "WORKLOAD_EVENT_TYPE_")
	if ev.GetType() == meridianv1.WorkloadEventType_WORKLOAD_EVENT_TYPE_BOOKMARK {
		_, err := fmt.Fprintf(a.env.Stdout, watchFormat, timestamp(ev.GetTime()), evType, "-", "-", "-", fmt.Sprintf("revision %d", ev.GetRevision()))
		return err
	}
	_, err := fmt.Fprintf(a.env.Stdout, watchFormat, timestamp(ev.GetTime()), evType, w.GetId(), phaseName(st.GetPhase()), dash(st.GetCluster()), dash(cellReplacer.Replace(reason)))
	return err
}

// assignmentString shows where the scheduler planned each replica, as
// "workers: n1[0-3] n2[7]; ps: n3[2] (3g.40gb)".
func assignmentString(as []*meridianv1.PodSetAssignment) string {
	parts := make([]string, 0, len(as))
	for _, a := range as {
		var b strings.Builder
		b.WriteString(a.GetPodSet())
		b.WriteString(":")
		for _, r := range a.GetReplicas() {
			b.WriteString(" ")
			b.WriteString(r.GetNode())
			if len(r.GetGpus()) > 0 {
				b.WriteString("[" + indexRanges(r.GetGpus()) + "]")
			}
		}
		if a.GetMigProfile() != "" {
			b.WriteString(" (" + a.GetMigProfile() + ")")
		}
		parts = append(parts, b.String())
	}
	return strings.Join(parts, "; ")
}

// chargeString shows the quota an attempt is charged, in GPUs per class,
// as "2 a100, 0.5 h100".
func chargeString(cs []*meridianv1.ClassCharge) string {
	parts := make([]string, 0, len(cs))
	for _, c := range cs {
		parts = append(parts, gpus(c.GetMilliGpus())+" "+c.GetAcceleratorClass())
	}
	return strings.Join(parts, ", ")
}

// indexRanges writes GPU indexes with runs folded: 0,1,2,3,6 -> "0-3,6".
func indexRanges(idx []int32) string {
	var parts []string
	for i := 0; i < len(idx); {
		j := i
		for j+1 < len(idx) && idx[j+1] == idx[j]+1 {
			j++
		}
		if j > i {
			parts = append(parts, fmt.Sprintf("%d-%d", idx[i], idx[j]))
		} else {
			parts = append(parts, fmt.Sprint(idx[i]))
		}
		i = j + 1
	}
	return strings.Join(parts, ",")
}
