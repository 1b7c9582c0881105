package kubernetes

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sort"
	"strconv"
	"sync"
	"time"

	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/selection"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/kubernetes"
	batchlisters "k8s.io/client-go/listers/batch/v1"
	corelisters "k8s.io/client-go/listers/core/v1"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/cache"
	"k8s.io/client-go/tools/clientcmd"

	agentv1 "github.com/meridian-gpu/meridian/proto/meridian/agent/v1"
	agent "github.com/meridian-gpu/meridian/spoke-agent"
)

// Connector drives one Kubernetes cluster; it implements agent.Connector.
type Connector struct {
	cfg  Config
	log  *slog.Logger
	kube kubernetes.Interface
	dyn  dynamic.Interface

	nodes  corelisters.NodeLister
	pods   corelisters.PodLister
	podIdx cache.Indexer
	jobIdx cache.Indexer
	jobs   batchlisters.JobLister
	ours   labels.Selector

	// mu guards recs and closed. Launch, Cancel, List and the event worker
	// run concurrently (the agent launches and cancels different dispatches
	// at once); the informers' listers, the clients and the event queue are
	// safe for concurrent use on their own.
	mu     sync.Mutex
	recs   map[string]*record // by dispatch label value
	closed bool

	keys   chan string
	events *agent.EventQueue
	stop   chan struct{}
	wg     sync.WaitGroup
}

type record struct {
	dispatchID, workloadID string
	seen                   bool // its Jobs were once in the cache
	seenAll                bool // all its Jobs were once in the cache
	cancelling             bool // Cancel is deleting its Jobs
	emittedRunning         bool
	emittedTerminal        bool
	final                  agent.WorkStatus // set once terminal
	cancelled              bool
}

var _ agent.Connector = (*Connector)(nil)

const byDispatch = "meridian-dispatch"

// New connects to the cluster, starts the node, pod and Job informers and
// waits (up to cfg.SyncTimeout) for their first sync. Close it when done.
func New(ctx context.Context, cfg Config) (*Connector, error) {
	cfg, err := cfg.withDefaults()
	if err != nil {
		return nil, err
	}
	rc := cfg.REST
	if rc == nil {
		if cfg.Kubeconfig != "" {
			rc, err = clientcmd.BuildConfigFromFlags("", cfg.Kubeconfig)
		} else {
			rc, err = rest.InClusterConfig()
		}
		if err != nil {
			return nil, fmt.Errorf("kubernetes: client config (kubeconfig %q): %w", cfg.Kubeconfig, err)
		}
	}
	rc = rest.CopyConfig(rc)
	if rc.UserAgent == "" {
		rc.UserAgent = "meridian-agent"
	}
	kube, err := kubernetes.NewForConfig(rc)
	if err != nil {
		return nil, fmt.Errorf("kubernetes: clientset: %w", err)
	}
	dyn, err := dynamic.NewForConfig(rc)
	if err != nil {
		return nil, fmt.Errorf("kubernetes: dynamic client: %w", err)
	}
	return newWithClients(ctx, cfg, kube, dyn)
}

// ownerSelector selects the objects this connector created.
func ownerSelector(cfg Config) labels.Selector {
	s := labels.SelectorFromSet(labels.Set{LabelManagedBy: ManagedByValue})
	var r *labels.Requirement
	if cfg.ClusterID != "" {
		r, _ = labels.NewRequirement(LabelCluster, selection.Equals, []string{cfg.ClusterID})
	} else {
		r, _ = labels.NewRequirement(LabelCluster, selection.DoesNotExist, nil)
	}
	return s.Add(*r)
}

func newWithClients(ctx context.Context, cfg Config, kube kubernetes.Interface, dyn dynamic.Interface) (*Connector, error) {
	c := &Connector{
		cfg: cfg, log: cfg.Logger, kube: kube, dyn: dyn, ours: ownerSelector(cfg),
		recs: map[string]*record{},
		keys: make(chan string, 1024), stop: make(chan struct{}),
	}
	all := informers.NewSharedInformerFactory(kube, 0)
	mine := informers.NewSharedInformerFactoryWithOptions(kube, 0, informers.WithNamespace(cfg.Namespace),
		informers.WithTweakListOptions(func(o *metav1.ListOptions) { o.LabelSelector = c.ours.String() }))
	nodeInf := all.Core().V1().Nodes()
	podInf := all.Core().V1().Pods()
	jobInf := mine.Batch().V1().Jobs()
	index := func(obj any) ([]string, error) {
		m, ok := obj.(metav1.Object)
		if !ok || !c.ours.Matches(labels.Set(m.GetLabels())) || m.GetNamespace() != cfg.Namespace {
			return nil, nil
		}
		return []string{m.GetLabels()[LabelDispatch]}, nil
	}
	if err := podInf.Informer().AddIndexers(cache.Indexers{byDispatch: index}); err != nil {
		return nil, fmt.Errorf("kubernetes: pod index: %w", err)
	}
	if err := jobInf.Informer().AddIndexers(cache.Indexers{byDispatch: index}); err != nil {
		return nil, fmt.Errorf("kubernetes: job index: %w", err)
	}
	handler := cache.ResourceEventHandlerFuncs{
		AddFunc:    c.enqueue,
		UpdateFunc: func(_, n any) { c.enqueue(n) },
		DeleteFunc: c.enqueue,
	}
	if _, err := podInf.Informer().AddEventHandler(handler); err != nil {
		return nil, fmt.Errorf("kubernetes: pod handler: %w", err)
	}
	if _, err := jobInf.Informer().AddEventHandler(handler); err != nil {
		return nil, fmt.Errorf("kubernetes: job handler: %w", err)
	}
	c.nodes, c.pods, c.jobs = nodeInf.Lister(), podInf.Lister(), jobInf.Lister()
	c.podIdx, c.jobIdx = podInf.Informer().GetIndexer(), jobInf.Informer().GetIndexer()
	_ = nodeInf.Informer()
	c.events = agent.NewEventQueue() // handlers emit only once the informers run
	all.Start(c.stop)
	mine.Start(c.stop)
	sctx, cancel := context.WithTimeout(ctx, cfg.SyncTimeout)
	defer cancel()
	for typ, ok := range all.WaitForCacheSync(sctx.Done()) {
		if !ok {
			close(c.stop)
			c.events.Close()
			return nil, fmt.Errorf("kubernetes: %v informer did not sync within %s (apiserver unreachable or RBAC too narrow?)", typ, cfg.SyncTimeout)
		}
	}
	for typ, ok := range mine.WaitForCacheSync(sctx.Done()) {
		if !ok {
			close(c.stop)
			c.events.Close()
			return nil, fmt.Errorf("kubernetes: %v informer did not sync within %s", typ, cfg.SyncTimeout)
		}
	}
	c.wg.Add(1)
	go func() { defer c.wg.Done(); c.worker() }()
	c.log.Info("kubernetes connector ready", "namespace", cfg.Namespace, "gang", cfg.Gang, "fractional_modes", cfg.FractionalModes)
	return c, nil
}

// Close stops the informers and the event loop. The Events channel is not
// closed.
func (c *Connector) Close() {
	c.mu.Lock()
	if c.closed {
		c.mu.Unlock()
		return
	}
	c.closed = true
	c.mu.Unlock()
	close(c.stop)
	c.wg.Wait()
	c.events.Close()
}

// Kind returns "kubernetes".
func (c *Connector) Kind() string { return Kind }

// Events delivers state changes in order; see agent.Connector.
func (c *Connector) Events() <-chan agent.WorkEvent { return c.events.Events() }

// Inventory builds the capacity from the informer caches (no API call).
func (c *Connector) Inventory(ctx context.Context) (*agent.Inventory, error) {
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	nodes, err := c.nodes.List(labels.Everything())
	if err != nil {
		return nil, fmt.Errorf("kubernetes: list nodes from cache: %w", err)
	}
	pods, err := c.pods.List(labels.Everything())
	if err != nil {
		return nil, fmt.Errorf("kubernetes: list pods from cache: %w", err)
	}
	return BuildInventory(c.cfg, nodes, pods), nil
}

// Launch creates the dispatch's PodGroup (coscheduling gang) and one
// Indexed Job per pod set. It is idempotent: a dispatch whose Jobs exist
// (in memory or in the cluster) is not created again, and AlreadyExists
// counts as success. Launches of different dispatches run in parallel,
// with each other and with Cancel: they share only recs (under mu), and
// the kube-scheduler, not Launch, decides whether capacity is free, so two
// launches can never both take the same GPUs.
func (c *Connector) Launch(ctx context.Context, d *agentv1.Dispatch) error {
	key := labelSafe(d.GetDispatchId())
	c.mu.Lock()
	_, known := c.recs[key]
	c.mu.Unlock()
	if known {
		return nil
	}
	nodes, err := c.nodes.List(labels.Everything())
	if err != nil {
		return fmt.Errorf("kubernetes: list nodes from cache: %w", err)
	}
	r, err := Render(c.cfg, d, viewOf(c.cfg, nodes))
	if err != nil {
		return err
	}
	if err := c.checkGang(ctx); err != nil {
		return err
	}
	for _, pg := range r.PodGroups {
		_, err := c.dyn.Resource(PodGroupGVR).Namespace(c.cfg.Namespace).Create(ctx, pg, metav1.CreateOptions{})
		if err != nil && !apierrors.IsAlreadyExists(err) {
			return c.createErr("podgroup "+pg.GetName(), err)
		}
	}
	for _, j := range r.Jobs {
		err := c.createJob(ctx, d.GetDispatchId(), j)
		if err != nil && !apierrors.IsAlreadyExists(err) {
			return c.createErr("job "+j.Name, err)
		}
	}
	c.mu.Lock()
	if _, ok := c.recs[key]; !ok {
		c.recs[key] = &record{dispatchID: d.GetDispatchId(), workloadID: r.Jobs[0].Annotations[AnnWorkloadID]}
	}
	c.mu.Unlock()
	c.log.Info("launched", "dispatch", d.GetDispatchId(), "jobs", len(r.Jobs), "modes", r.Modes)
	c.enqueueKey(key)
	return nil
}

// createErr maps an API error: an object the apiserver finds invalid is a
// rejection (retrying cannot help); anything else is a fault to retry.
func (c *Connector) createErr(what string, err error) error {
	if apierrors.IsInvalid(err) || apierrors.IsBadRequest(err) {
		return agent.Reject("kubernetes refused %s: %v", what, err)
	}
	return fmt.Errorf("kubernetes: create %s: %w", what, err)
}

// checkGang verifies that the configured gang mechanism's CRD exists.
func (c *Connector) checkGang(ctx context.Context) error {
	var gvs []string
	var res, crd string
	switch c.cfg.Gang {
	case GangCoscheduling:
		gvs, res, crd = []string{PodGroupGVR.GroupVersion().String()}, "podgroups", "podgroups.scheduling.x-k8s.io (scheduler-plugins coscheduling)"
	case GangKueue:
		gvs, res, crd = []string{"kueue.x-k8s.io/v1beta2", "kueue.x-k8s.io/v1beta1"}, "localqueues", "localqueues.kueue.x-k8s.io (Kueue)"
	default:
		return nil
	}
	if err := ctx.Err(); err != nil {
		return err
	}
	for _, gv := range gvs {
		rl, err := c.kube.Discovery().ServerResourcesForGroupVersion(gv)
		if err != nil {
			if apierrors.IsNotFound(err) {
				continue
			}
			return fmt.Errorf("kubernetes: discover %s: %w", gv, err)
		}
		for _, r := range rl.APIResources {
			if r.Name == res {
				return nil
			}
		}
	}
	return agent.Reject("gang mechanism %q: the CRD %s is not installed on this cluster", c.cfg.Gang, crd)
}

// Cancel deletes the dispatch's Jobs (background propagation, so the Job
// controller removes the pods) and its PodGroup. Only objects carrying the
// connector's labels are deleted; a dispatch with none is done.
func (c *Connector) Cancel(ctx context.Context, dispatchID string, preempt bool) error {
	key := labelSafe(dispatchID)
	sel := labels.SelectorFromSet(labels.Set{LabelDispatch: key})
	reqs, _ := c.ours.Requirements()
	sel = sel.Add(reqs...)
	list, err := c.kube.BatchV1().Jobs(c.cfg.Namespace).List(ctx, metav1.ListOptions{LabelSelector: sel.String()})
	if err != nil {
		return fmt.Errorf("kubernetes: list jobs of %s: %w", dispatchID, err)
	}
	c.mu.Lock()
	r := c.recs[key]
	for i := range list.Items {
		if a := list.Items[i].Annotations; r == nil && a[AnnDispatchID] == dispatchID {
			r = &record{dispatchID: dispatchID, workloadID: a[AnnWorkloadID]}
			c.recs[key] = r
		}
	}
	if r != nil {
		r.cancelling = true
	}
	c.mu.Unlock()
	undo := func() {
		c.mu.Lock()
		if r := c.recs[key]; r != nil && !r.cancelled {
			r.cancelling = false
		}
		c.mu.Unlock()
	}
	bg := metav1.DeletePropagationBackground
	for i := range list.Items {
		j := &list.Items[i]
		if j.Annotations[AnnDispatchID] != dispatchID {
			continue // a hash collision on the label; not ours to delete
		}
		err := c.kube.BatchV1().Jobs(c.cfg.Namespace).Delete(ctx, j.Name, metav1.DeleteOptions{PropagationPolicy: &bg})
		if err != nil && !apierrors.IsNotFound(err) {
			undo()
			return fmt.Errorf("kubernetes: delete job %s: %w", j.Name, err)
		}
	}
	if c.cfg.Gang == GangCoscheduling {
		err := c.dyn.Resource(PodGroupGVR).Namespace(c.cfg.Namespace).Delete(ctx, JobName(dispatchID, "gang"), metav1.DeleteOptions{})
		if err != nil && !apierrors.IsNotFound(err) {
			c.log.Warn("delete podgroup", "dispatch", dispatchID, "err", err)
		}
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if r == nil {
		return nil // unknown here and nothing in the cluster
	}
	if r.emittedTerminal {
		return nil
	}
	now := c.cfg.Now()
	st := agent.StateCancelled
	reason := "cancelled by the hub"
	if preempt {
		st, reason = agent.StatePreempted, "preempted by the hub"
	}
	r.cancelled = true
	r.final = agent.WorkStatus{DispatchID: r.dispatchID, WorkloadID: r.workloadID, State: st, Reason: reason, FinishedAt: now}
	if prev := c.statusLocked(key); !prev.StartedAt.IsZero() {
		r.final.StartedAt, r.final.Nodes, r.final.GPUMilliSeconds = prev.StartedAt, prev.Nodes, prev.GPUMilliSeconds
	}
	c.emitLocked(r, r.final)
	return nil
}

// List rebuilds every dispatch from the Jobs in the cache (their labels
// and annotations), plus cancelled dispatches whose Jobs are gone.
func (c *Connector) List(ctx context.Context) ([]agent.WorkStatus, error) {
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	now := c.cfg.Now()
	var out []agent.WorkStatus
	seen := map[string]bool{}
	for _, key := range c.jobIdx.ListIndexFuncValues(byDispatch) {
		if r := c.recs[key]; r != nil && r.cancelled {
			continue
		}
		if st := c.statusLocked(key); st.DispatchID != "" {
			seen[key] = true
			out = append(out, st)
		}
	}
	for key, r := range c.recs {
		if seen[key] {
			continue
		}
		if r.emittedTerminal {
			if now.Sub(r.final.FinishedAt) > c.cfg.RetainFinished {
				delete(c.recs, key)
				continue
			}
			out = append(out, r.final)
		}
	}
	sort.Slice(out, func(i, j int) bool { return out[i].DispatchID < out[j].DispatchID })
	return out, nil
}

// statusLocked computes a dispatch's status from the caches.
func (c *Connector) statusLocked(key string) agent.WorkStatus {
	st, _, _ := c.statusCountLocked(key)
	return st
}

// statusCountLocked also returns how many of the dispatch's Jobs are in the
// cache and how many it has.
func (c *Connector) statusCountLocked(key string) (agent.WorkStatus, int, int) {
	jobObjs, _ := c.jobIdx.ByIndex(byDispatch, key)
	podObjs, _ := c.podIdx.ByIndex(byDispatch, key)
	jobs := make([]*batchv1.Job, 0, len(jobObjs))
	for _, o := range jobObjs {
		if j, ok := o.(*batchv1.Job); ok && j.DeletionTimestamp == nil {
			jobs = append(jobs, j)
		}
	}
	pods := make([]*corev1.Pod, 0, len(podObjs))
	for _, o := range podObjs {
		if p, ok := o.(*corev1.Pod); ok {
			pods = append(pods, p)
		}
	}
	want := 0
	if len(jobs) > 0 {
		want, _ = strconv.Atoi(jobs[0].Annotations[AnnPodSets])
	}
	return Status(jobs, pods, c.cfg.Now()), len(jobs), want
}

func (c *Connector) enqueue(obj any) {
	if t, ok := obj.(cache.DeletedFinalStateUnknown); ok {
		obj = t.Obj
	}
	m, ok := obj.(metav1.Object)
	if !ok || !c.ours.Matches(labels.Set(m.GetLabels())) {
		return
	}
	c.enqueueKey(m.GetLabels()[LabelDispatch])
}

func (c *Connector) enqueueKey(key string) {
	select {
	case c.keys <- key:
	case <-c.stop:
	}
}

// worker turns cache changes into events, one dispatch at a time.
func (c *Connector) worker() {
	for {
		select {
		case <-c.stop:
			return
		case key := <-c.keys:
			c.reconcile(key)
		}
	}
}

func (c *Connector) reconcile(key string) {
	c.mu.Lock()
	st, have, want := c.statusCountLocked(key)
	r := c.recs[key]
	if r != nil && (r.cancelling || r.cancelled) {
		c.mu.Unlock()
		return // Cancel reports the final state
	}
	if st.DispatchID == "" || (r != nil && r.seenAll && have < want) { // Jobs gone
		gone := r != nil && r.seen && !r.emittedTerminal
		if gone {
			// Jobs gone without Cancel and without a final state seen.
			r.final = agent.WorkStatus{DispatchID: r.dispatchID, WorkloadID: r.workloadID, State: agent.StateFailed,
				Reason: fmt.Sprintf("jobs deleted outside meridian (%d of %d left)", have, want), FinishedAt: c.cfg.Now()}
			c.emitLocked(r, r.final)
		}
		c.mu.Unlock()
		if gone && have > 0 {
			c.stopGang(key, r.dispatchID)
		}
		return
	}
	if r == nil { // adopted from an earlier agent
		r = &record{dispatchID: st.DispatchID, workloadID: st.WorkloadID}
		c.recs[key] = r
	}
	r.seen = true
	if have >= want {
		r.seenAll = true
	}
	if r.emittedTerminal {
		c.mu.Unlock()
		return
	}
	if st.State == agent.StateRunning && !r.emittedRunning {
		r.emittedRunning = true
		c.emitLocked(r, st)
	}
	gangFailed := false
	if st.State.Terminal() {
		r.final = st
		c.emitLocked(r, st)
		gangFailed = st.State != agent.StateSucceeded
	}
	c.mu.Unlock()
	if gangFailed {
		c.stopGang(key, st.DispatchID)
	}
}

// stopGang deletes the rest of a failed gang: all or nothing.
func (c *Connector) stopGang(key, dispatchID string) {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if err := c.deleteJobs(ctx, key, dispatchID); err != nil {
		c.log.Warn("stop the rest of a failed gang", "dispatch", dispatchID, "err", err)
	}
}

// deleteJobs deletes the dispatch's Jobs that are still active.
func (c *Connector) deleteJobs(ctx context.Context, key, dispatchID string) error {
	objs, _ := c.jobIdx.ByIndex(byDispatch, key)
	bg := metav1.DeletePropagationBackground
	var errs []error
	for _, o := range objs {
		j, ok := o.(*batchv1.Job)
		if !ok || j.Annotations[AnnDispatchID] != dispatchID || cond(j, batchv1.JobComplete) != nil || cond(j, batchv1.JobFailed) != nil {
			continue
		}
		err := c.kube.BatchV1().Jobs(j.Namespace).Delete(ctx, j.Name, metav1.DeleteOptions{PropagationPolicy: &bg})
		if err != nil && !apierrors.IsNotFound(err) {
			errs = append(errs, err)
		}
	}
	return errors.Join(errs...)
}

// emitLocked queues an event for st; terminal states are emitted once.
func (c *Connector) emitLocked(r *record, st agent.WorkStatus) {
	at := c.cfg.Now()
	if st.State.Terminal() {
		r.emittedTerminal = true
		if !st.FinishedAt.IsZero() {
			at = st.FinishedAt
		}
	} else if !st.StartedAt.IsZero() {
		at = st.StartedAt
	}
	ev := agent.WorkEvent{DispatchID: r.dispatchID, WorkloadID: r.workloadID, State: st.State, Time: at,
		ExitCode: st.ExitCode, Reason: st.Reason, GPUMilliSeconds: st.GPUMilliSeconds}
	if !st.StartedAt.IsZero() && at.After(st.StartedAt) {
		ev.WallTime = at.Sub(st.StartedAt)
	}
	c.events.Push(ev)
	c.log.Info("state", "dispatch", r.dispatchID, "state", st.State.String(), "reason", st.Reason)
}
