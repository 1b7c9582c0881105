package cli

import (
	"context"
	"fmt"
	"strings"

	"github.com/spf13/cobra"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/fieldmaskpb"

	"github.com/meridian-gpu/meridian/hub/api/validation"
	meridianv1 "github.com/meridian-gpu/meridian/proto/meridian/v1"
)

// What applying a document does to one queue.
const (
	verbCreated    = "created"
	verbConfigured = "configured"
	verbUnchanged  = "unchanged"
)

// queueChange is the plan for one queue: what to send and the diff to
// show.
type queueChange struct {
	verb string
	// send is the queue to create, or the update (with the revision it
	// was computed from, so a concurrent change fails instead of being
	// overwritten); nil when unchanged.
	send *meridianv1.Queue
	// mask lists the fields an update changes, in the order weight,
	// description, quotas.
	mask []string
	// lines is the diff, one change per line: "~ weight: 3 -> 1",
	// "+ quota ..." added, "- quota ..." removed, "= quota ..." kept
	// although the file does not list it.
	lines []string
	// result is the queue as it will be: send, or the stored queue.
	result *meridianv1.Queue
}

// planCreate is the change that creates q.
func planCreate(doc queueDoc) queueChange {
	q := doc.queue
	c := queueChange{verb: verbCreated, send: q, result: q}
	if doc.set["weight"] {
		c.lines = append(c.lines, fmt.Sprintf("+ weight: %d", normWeight(q.GetWeight())))
	}
	if q.GetDescription() != "" {
		c.lines = append(c.lines, fmt.Sprintf("+ description: %q", q.GetDescription()))
	}
	for _, qq := range q.GetQuotas() {
		c.lines = append(c.lines, "+ "+quotaText(qq))
	}
	for _, e := range q.GetAccess() {
		c.lines = append(c.lines, "+ access "+accessEntryText(e))
	}
	if p := policyText(q.GetSubmitPolicy()); p != "" {
		c.lines = append(c.lines, "+ submit policy: "+p)
	}
	return c
}

// planUpdate compares the stored queue cur with the document and returns
// the update that makes cur match it. Fields the document does not write
// are kept. Quotas merge by accelerator class: a class the document lists
// is set exactly as written (an omitted limit means unlimited / all); a
// class it does not list is kept, unless prune.
func planUpdate(cur *meridianv1.Queue, doc queueDoc, prune bool) queueChange {
	in := doc.queue
	want := &meridianv1.Queue{
		Path:         cur.GetPath(),
		Weight:       cur.GetWeight(),
		Description:  cur.GetDescription(),
		Quotas:       cur.GetQuotas(),
		Revision:     cur.GetRevision(),
		Access:       cur.GetAccess(),
		SubmitPolicy: cur.GetSubmitPolicy(),
	}
	var c queueChange
	if doc.set["weight"] && normWeight(in.GetWeight()) != normWeight(cur.GetWeight()) {
		c.lines = append(c.lines, fmt.Sprintf("~ weight: %d -> %d", normWeight(cur.GetWeight()), normWeight(in.GetWeight())))
		c.mask = append(c.mask, "weight")
		want.Weight = in.GetWeight()
	}
	if doc.set["description"] && in.GetDescription() != cur.GetDescription() {
		c.lines = append(c.lines, fmt.Sprintf("~ description: %q -> %q", cur.GetDescription(), in.GetDescription()))
		c.mask = append(c.mask, "description")
		want.Description = in.GetDescription()
	}
	if doc.set["quotas"] || prune {
		lines, quotas, kept := diffQuotas(cur.GetQuotas(), in.GetQuotas(), prune)
		if len(lines) > 0 {
			c.lines = append(c.lines, lines...)
			c.mask = append(c.mask, "quotas")
			want.Quotas = quotas
		}
		for _, k := range kept {
			c.lines = append(c.lines, fmt.Sprintf("= quota %s: kept, not in the file (--prune removes it)", k))
		}
	}
	if doc.set["access"] {
		// Unlike quotas, --prune never empties an access list the file
		// does not write: that would lock people out by omission.
		lines, access, kept := diffAccess(cur.GetAccess(), in.GetAccess(), prune)
		if len(lines) > 0 {
			c.lines = append(c.lines, lines...)
			c.mask = append(c.mask, "access")
			want.Access = access
		}
		for _, k := range kept {
			c.lines = append(c.lines, fmt.Sprintf("= access %s: kept, not in the file (--prune removes it)", k))
		}
	}
	if doc.set["submit_policy"] {
		if lines := diffPolicy(cur.GetSubmitPolicy(), in.GetSubmitPolicy()); len(lines) > 0 {
			c.lines = append(c.lines, lines...)
			c.mask = append(c.mask, "submit_policy")
			want.SubmitPolicy = in.GetSubmitPolicy()
		}
	}
	if len(c.mask) == 0 {
		c.verb, c.result = verbUnchanged, cur
		return c
	}
	c.verb, c.send, c.result = verbConfigured, want, want
	return c
}

// diffQuotas merges the file's quotas into the stored ones. It returns
// the diff lines, the merged list (the file's classes in file order, then
// the kept ones) and the classes kept because the file does not list
// them.
func diffQuotas(cur, file []*meridianv1.QueueQuota, prune bool) (lines []string, merged []*meridianv1.QueueQuota, kept []string) {
	old := make(map[string]*meridianv1.QueueQuota, len(cur))
	for _, q := range cur {
		old[q.GetAcceleratorClass()] = q
	}
	inFile := make(map[string]bool, len(file))
	for _, q := range file {
		inFile[q.GetAcceleratorClass()] = true
		merged = append(merged, q)
		o, ok := old[q.GetAcceleratorClass()]
		if !ok {
			lines = append(lines, "+ "+quotaText(q))
			continue
		}
		if d := quotaDiff(o, q); d != "" {
			lines = append(lines, fmt.Sprintf("~ quota %s: %s", q.GetAcceleratorClass(), d))
		}
	}
	for _, q := range cur {
		if inFile[q.GetAcceleratorClass()] {
			continue
		}
		if prune {
			lines = append(lines, "- "+quotaText(q))
			continue
		}
		kept = append(kept, q.GetAcceleratorClass())
		merged = append(merged, q)
	}
	return lines, merged, kept
}

// diffAccess merges the file's access entries into the stored ones,
// matched by subject: an entry the file lists is set to exactly its verbs;
// one it does not list is kept unless prune. It returns the diff lines,
// the merged list (the file's entries in file order, then the kept ones)
// and the subjects kept.
func diffAccess(cur, file []*meridianv1.AccessEntry, prune bool) (lines []string, merged []*meridianv1.AccessEntry, kept []string) {
	old := make(map[string]*meridianv1.AccessEntry, len(cur))
	for _, e := range cur {
		old[e.GetSubject()] = e
	}
	inFile := make(map[string]bool, len(file))
	for _, e := range file {
		inFile[e.GetSubject()] = true
		merged = append(merged, e)
		o, ok := old[e.GetSubject()]
		switch {
		case !ok:
			lines = append(lines, "+ access "+accessEntryText(e))
		case verbsText(o.GetVerbs()) != verbsText(e.GetVerbs()):
			lines = append(lines, fmt.Sprintf("~ access %s: %s -> %s", e.GetSubject(), verbsText(o.GetVerbs()), verbsText(e.GetVerbs())))
		}
	}
	for _, e := range cur {
		if inFile[e.GetSubject()] {
			continue
		}
		if prune {
			lines = append(lines, "- access "+accessEntryText(e))
			continue
		}
		kept = append(kept, e.GetSubject())
		merged = append(merged, e)
	}
	return lines, merged, kept
}

// diffPolicy compares submit policies; the file's replaces the stored one
// whole (a field it omits means no ceiling, or allowed).
func diffPolicy(cur, file *meridianv1.SubmitPolicy) []string {
	prio := func(p *meridianv1.SubmitPolicy) string {
		if p == nil || p.MaxPriority == nil {
			return "none"
		}
		return fmt.Sprint(p.GetMaxPriority())
	}
	nonPre := func(p *meridianv1.SubmitPolicy) string {
		if p == nil || p.AllowNonPreemptible == nil || p.GetAllowNonPreemptible() {
			return "allowed"
		}
		return "not allowed"
	}
	var lines []string
	if a, b := prio(cur), prio(file); a != b {
		lines = append(lines, fmt.Sprintf("~ submit policy max priority: %s -> %s", a, b))
	}
	if a, b := nonPre(cur), nonPre(file); a != b {
		lines = append(lines, fmt.Sprintf("~ submit policy non-preemptible: %s -> %s", a, b))
	}
	return lines
}

// quotaText describes one quota: "quota nvidia-l4: nominal 8, borrow
// limit unlimited, lend limit 4".
func quotaText(q *meridianv1.QueueQuota) string {
	nominal, borrow, lend := quotaCells(q)
	return fmt.Sprintf("quota %s: nominal %s, borrow limit %s, lend limit %s", q.GetAcceleratorClass(), nominal, borrow, lend)
}

// quotaDiff lists what differs between two quotas of one class, or "".
func quotaDiff(a, b *meridianv1.QueueQuota) string {
	an, ab, al := quotaCells(a)
	bn, bb, bl := quotaCells(b)
	var parts []string
	for _, f := range []struct{ name, from, to string }{
		{"nominal", an, bn}, {"borrow limit", ab, bb}, {"lend limit", al, bl},
	} {
		if f.from != f.to {
			parts = append(parts, fmt.Sprintf("%s %s -> %s", f.name, f.from, f.to))
		}
	}
	return strings.Join(parts, ", ")
}

// normWeight is the weight the hub uses: 0 means the default, 1.
func normWeight(w int32) int32 {
	if w == 0 {
		return 1
	}
	return w
}

// queueWriteCommand builds `queue create` (apply=false) or `queue apply`
// (create missing queues, update existing ones).
func (a *app) queueWriteCommand(apply bool) *cobra.Command {
	var file string
	var dryRun, prune bool
	cmd := &cobra.Command{
		Use:   "create -f FILE",
		Short: "Create queues (parents before children); fails if one exists",
		Long: `Create the queues in a file, in order (parents before children). It fails,
at the first queue that already exists, with exit code 5; use 'queue apply'
to update existing queues. --dry-run checks the file and the hub and
changes nothing.`,
		Example: `  meridianctl queue create -f examples/queues/acme.yaml
  meridianctl queue create --dry-run -f team.yaml`,
		Args: noArgs,
	}
	if apply {
		cmd.Use = "apply -f FILE"
		cmd.Short = "Create missing queues and update existing ones to match the file (shows a diff)"
		cmd.Long = `Create the queues in a file that do not exist and update the others, then
print per queue what changed: created, configured or unchanged, with one
line per change (~ changed, + added, - removed).

Apply changes only what the file writes. A field the file leaves out
(weight, description) keeps its value on the hub. Quotas are matched by
accelerator class: a class the file lists is set exactly as written (an
omitted borrow or lend limit means unlimited / all); a class the file does
not list is kept and reported as kept. With --prune the file's quota list
is the whole list: classes it does not list are removed (with --prune and
no quotas in the file, all are removed). Apply never deletes queues.

Access lists are matched by subject (user:NAME, group:NAME, token:ID) the
same way: a subject the file lists gets exactly the verbs written; one it
does not list is kept, or removed with --prune, but only when the file has
an access list (--prune never empties a list the file leaves out). A
submit_policy in the file replaces the queue's whole policy (an omitted
max_priority means no ceiling; an omitted allow_non_preemptible, allowed).

--dry-run prints the same diff and changes nothing. An update carries the
revision it was computed from: if someone changes the queue meanwhile, the
update fails with exit code 5 and nothing is overwritten; run it again.`
		cmd.Example = `  meridianctl queue apply --dry-run -f examples/queues/acme.yaml
  meridianctl queue apply -f examples/queues/acme.yaml
  meridianctl queue apply --prune -f acme.yaml     # also remove quotas the file does not list`
	}
	cmd.RunE = func(cmd *cobra.Command, _ []string) error {
		docs, err := a.readQueueDocs(file)
		if err != nil {
			return err
		}
		counts := map[string]int{}
		var results []*meridianv1.Queue
		planned := map[string]bool{} // queues this run creates, for the dry-run parent check
		for _, doc := range docs {
			c, err := a.writeQueue(cmd.Context(), doc, apply, prune, dryRun, planned)
			if err != nil {
				return err
			}
			counts[c.verb]++
			results = append(results, c.result)
			if a.output == "table" {
				a.printQueueChange(doc.queue.GetPath(), c, dryRun)
			}
		}
		if a.output != "table" {
			return a.writeMessage(&meridianv1.ListQueuesResponse{Queues: results})
		}
		if len(docs) > 1 || dryRun {
			var parts []string
			for _, v := range []string{verbCreated, verbConfigured, verbUnchanged} {
				if counts[v] > 0 || apply {
					parts = append(parts, fmt.Sprintf("%d %s", counts[v], v))
				}
			}
			summary := strings.Join(parts, ", ")
			if dryRun {
				summary += " (dry run: nothing was changed)"
			}
			fmt.Fprintf(a.env.Stdout, "%s\n", summary)
		}
		return nil
	}
	cmd.Flags().StringVarP(&file, "filename", "f", "", "queue file, YAML or JSON (- for stdin); several queues as YAML documents separated by ---")
	cmd.Flags().BoolVar(&dryRun, "dry-run", false, "show what would change; change nothing")
	if apply {
		cmd.Flags().BoolVar(&prune, "prune", false, "remove quota classes and access entries the file does not list (by default they are kept)")
	}
	return cmd
}

// readQueueDocs reads, decodes and validates the queue file named by -f.
func (a *app) readQueueDocs(file string) ([]queueDoc, error) {
	data, err := a.readInput(file)
	if err != nil {
		return nil, err
	}
	docs, err := decodeQueueDocs(data)
	if err != nil {
		return nil, invalidErrorf("%s: decode queues: %v", displayName(file), err)
	}
	for i, d := range docs {
		if err := validation.ValidateQueue(d.queue); err != nil {
			head := fmt.Sprintf("invalid queue %q in %s", d.queue.GetPath(), displayName(file))
			if len(docs) > 1 {
				head = fmt.Sprintf("invalid queue %q (document %d) in %s", d.queue.GetPath(), i+1, displayName(file))
			}
			if text, ok := violationsText(head, err); ok {
				return nil, invalidErrorf("%s", text)
			}
			return nil, invalidErrorf("%s: %v", head, err)
		}
	}
	return docs, nil
}

func (a *app) printQueueChange(path string, c queueChange, dryRun bool) {
	suffix := ""
	if dryRun {
		suffix = " (dry run)"
	}
	fmt.Fprintf(a.env.Stdout, "queue %s %s%s\n", path, c.verb, suffix)
	for _, l := range c.lines {
		fmt.Fprintf(a.env.Stdout, "  %s\n", cellReplacer.Replace(l))
	}
}

// getQueue returns the stored queue at path, or nil when there is none.
func (a *app) getQueue(ctx context.Context, path string) (*meridianv1.Queue, error) {
	var q *meridianv1.Queue
	err := a.call(ctx, func(ctx context.Context, conn *grpc.ClientConn) error {
		var err error
		q, err = a.queueClient(conn).GetQueue(ctx, &meridianv1.GetQueueRequest{Path: path})
		return err
	})
	if status.Code(err) == codes.NotFound {
		return nil, nil
	}
	if err != nil {
		return nil, a.rpcError(ctx, err, object{kind: "queue", id: path})
	}
	return q, nil
}

// writeQueue plans and, unless dryRun, makes the change for one document:
// create it, or with apply update it when it exists.
func (a *app) writeQueue(ctx context.Context, doc queueDoc, apply, prune, dryRun bool, planned map[string]bool) (queueChange, error) {
	q := doc.queue
	about := object{kind: "queue", id: q.GetPath()}
	var existing *meridianv1.Queue
	if apply || dryRun {
		var err error
		if existing, err = a.getQueue(ctx, q.GetPath()); err != nil {
			return queueChange{}, err
		}
	}
	if existing != nil && !apply {
		return queueChange{}, queueExists(q.GetPath(), nil)
	}
	if existing == nil {
		c := planCreate(doc)
		if dryRun {
			if err := a.checkParent(ctx, q.GetPath(), planned); err != nil {
				return queueChange{}, err
			}
			planned[q.GetPath()] = true
			return c, nil
		}
		var got *meridianv1.Queue
		err := a.call(ctx, func(ctx context.Context, conn *grpc.ClientConn) error {
			var err error
			got, err = a.queueClient(conn).CreateQueue(ctx, &meridianv1.CreateQueueRequest{Queue: q})
			return err
		})
		if err != nil {
			if status.Code(err) == codes.AlreadyExists && !apply {
				return queueChange{}, queueExists(q.GetPath(), err)
			}
			return queueChange{}, a.rpcError(ctx, err, about.act("create"))
		}
		c.result = got
		return c, nil
	}
	c := planUpdate(existing, doc, prune)
	if c.send == nil || dryRun {
		return c, nil
	}
	var got *meridianv1.Queue
	err := a.call(ctx, func(ctx context.Context, conn *grpc.ClientConn) error {
		var err error
		got, err = a.queueClient(conn).UpdateQueue(ctx, &meridianv1.UpdateQueueRequest{Queue: c.send, UpdateMask: &fieldmaskpb.FieldMask{Paths: c.mask}})
		return err
	})
	if err != nil {
		if status.Code(err) == codes.FailedPrecondition && violatesField(err, "revision") {
			return queueChange{}, &exitError{code: ExitConflict, err: err, msg: fmt.Sprintf("queue %s changed on the hub while apply was comparing it; nothing was written; run the command again to see the new diff", q.GetPath())}
		}
		return queueChange{}, a.rpcError(ctx, err, about.act("update"))
	}
	c.result = got
	return c, nil
}

func queueExists(path string, err error) error {
	return &exitError{code: ExitConflict, msg: fmt.Sprintf("queue %s already exists (use 'meridianctl queue apply' to update it)", path), err: err}
}

// checkParent fails, as the hub would, when the parent of path neither
// exists nor is created earlier in the same file.
func (a *app) checkParent(ctx context.Context, path string, planned map[string]bool) error {
	i := strings.LastIndexByte(path, '/')
	if i < 0 || planned[path[:i]] {
		return nil
	}
	parent, err := a.getQueue(ctx, path[:i])
	if err != nil {
		return err
	}
	if parent == nil {
		return invalidErrorf("queue %s: parent queue %q does not exist; create it first (put it before %s in the file)", path, path[:i], path)
	}
	return nil
}

// violatesField reports whether err carries a field violation on field.
func violatesField(err error, field string) bool {
	for _, v := range validation.FieldViolations(err) {
		if v.GetField() == field {
			return true
		}
	}
	return false
}
