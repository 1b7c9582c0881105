package cli

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"regexp"
	"sort"
	"strings"

	"github.com/spf13/cobra"
	"google.golang.org/grpc"
	"google.golang.org/protobuf/encoding/protojson"
	"sigs.k8s.io/yaml"

	"github.com/meridian-gpu/meridian/hub/api/validation"
	meridianv1 "github.com/meridian-gpu/meridian/proto/meridian/v1"
)

// DecodeQueues parses one or more queues from a YAML or JSON document.
// Several queues are written as YAML documents separated by `---` lines,
// parents before children. Field names may be proto names (`nominal_milli_gpus`)
// or lowerCamelCase; unknown fields are errors. It does not validate.
func DecodeQueues(data []byte) ([]*meridianv1.Queue, error) {
	docs, err := decodeQueueDocs(data)
	if err != nil {
		return nil, err
	}
	out := make([]*meridianv1.Queue, len(docs))
	for i, d := range docs {
		out[i] = d.queue
	}
	return out, nil
}

// queueDoc is one decoded queue and the top-level fields its document
// wrote, by proto name (weight, quotas, description): apply changes only
// those.
type queueDoc struct {
	queue *meridianv1.Queue
	set   map[string]bool
}

// queueFieldNames maps the names a document may use for a queue field to
// its proto name.
var queueFieldNames = map[string]string{
	"path": "path", "weight": "weight", "description": "description", "quotas": "quotas",
	"revision": "revision", "status": "status",
	"access": "access", "submit_policy": "submit_policy", "submitPolicy": "submit_policy",
	"create_time": "create_time", "createTime": "create_time",
	"update_time": "update_time", "updateTime": "update_time",
}

func decodeQueueDocs(data []byte) ([]queueDoc, error) {
	if len(data) > validation.MaxDocumentBytes {
		return nil, fmt.Errorf("document is %d bytes; the limit is %d (1 MiB)", len(data), validation.MaxDocumentBytes)
	}
	var out []queueDoc
	for i, doc := range splitDocuments(data) {
		if len(bytes.TrimSpace(doc.text)) == 0 {
			continue
		}
		js, err := yaml.YAMLToJSONStrict(doc.text)
		if err != nil {
			return nil, fmt.Errorf("document %d (line %d): not valid YAML or JSON: %w", i+1, doc.line, err)
		}
		trimmed := bytes.TrimSpace(js)
		if len(trimmed) == 0 || bytes.Equal(trimmed, []byte("null")) {
			continue
		}
		if trimmed[0] != '{' {
			return nil, fmt.Errorf("document %d (line %d): must be a mapping (an object) of queue fields", i+1, doc.line)
		}
		q := &meridianv1.Queue{}
		if err := protojson.Unmarshal(js, q); err != nil {
			msg := protojsonPos.ReplaceAllString(cleanProtoError(err.Error()), "")
			return nil, fmt.Errorf("document %d (line %d): %s", i+1, doc.line, msg)
		}
		var fields map[string]json.RawMessage
		if err := json.Unmarshal(js, &fields); err != nil {
			return nil, fmt.Errorf("document %d (line %d): %v", i+1, doc.line, err)
		}
		set := make(map[string]bool, len(fields))
		for k := range fields {
			if name, ok := queueFieldNames[k]; ok {
				set[name] = true
			}
		}
		out = append(out, queueDoc{queue: q, set: set})
	}
	if len(out) == 0 {
		return nil, fmt.Errorf("no queue in the document")
	}
	return out, nil
}

// protojsonPos matches the position protojson puts in its messages; it
// refers to the converted JSON, not the user's file, so it is dropped.
var protojsonPos = regexp.MustCompile(`\(line \d+:\d+\): `)

type document struct {
	text []byte
	line int // 1-based line where the document starts
}

// splitDocuments splits a YAML stream on `---` separator lines.
func splitDocuments(data []byte) []document {
	var docs []document
	start, startLine := 0, 1
	line := 1
	for off := 0; off < len(data); {
		end := bytes.IndexByte(data[off:], '\n')
		next := len(data)
		if end >= 0 {
			next = off + end + 1
		}
		text := bytes.TrimRight(data[off:next], "\r\n")
		if bytes.Equal(bytes.TrimRight(text, " \t"), []byte("---")) {
			docs = append(docs, document{text: data[start:off], line: startLine})
			start, startLine = next, line+1
		}
		off = next
		line++
	}
	return append(docs, document{text: data[start:], line: startLine})
}

func (a *app) queueClient(conn *grpc.ClientConn) meridianv1.QueueServiceClient {
	return meridianv1.NewQueueServiceClient(conn)
}

func (a *app) queuesCommand() *cobra.Command {
	var prefix string
	cmd := &cobra.Command{
		Use:   "queues",
		Short: "Show the queue tree: weight, fairshare, and per accelerator class the quota and usage",
		Long: `Show the queue tree. Each queue has one row per accelerator class it has a
quota for or uses; its weight, fairshare factor and workload counts are on
its first row. A legend under the table explains the columns. Amounts are
GPUs (0.5 is half a GPU).

FAIRSHARE is the hub's Fair Tree factor of a leaf queue, from 0 to 1:
higher means the queue used less than its weight's share lately, so its
workloads are scheduled sooner.`,
		Example: `  meridianctl queues
  meridianctl queues --prefix acme/vision
  meridianctl queues -o yaml`,
		Args: noArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			var all []*meridianv1.Queue
			req := &meridianv1.ListQueuesRequest{PageSize: 1000, Prefix: prefix}
			for page := 0; ; page++ {
				var resp *meridianv1.ListQueuesResponse
				err := a.call(cmd.Context(), func(ctx context.Context, conn *grpc.ClientConn) error {
					var err error
					resp, err = a.queueClient(conn).ListQueues(ctx, req)
					return err
				})
				if err != nil {
					return a.rpcError(cmd.Context(), err, object{kind: "queue list"})
				}
				all = append(all, resp.GetQueues()...)
				if resp.GetNextPageToken() == "" {
					break
				}
				if resp.GetNextPageToken() == req.GetPageToken() || page > 100_000 {
					return &exitError{code: ExitError, msg: "the hub returned the same page token twice; stopping"}
				}
				req.PageToken = resp.GetNextPageToken()
			}
			if a.output != "table" {
				return a.writeMessage(&meridianv1.ListQueuesResponse{Queues: all})
			}
			if len(all) == 0 {
				fmt.Fprintln(a.env.Stderr, "no queues; create some with 'meridianctl queue apply -f FILE'")
				return nil
			}
			return a.printQueueTree(all)
		},
	}
	cmd.Flags().StringVar(&prefix, "prefix", "", "only this queue and those below it, for example acme")
	return cmd
}

// printQueueTree prints queues as a tree, one row per accelerator class.
func (a *app) printQueueTree(queues []*meridianv1.Queue) error {
	sorted := append([]*meridianv1.Queue(nil), queues...)
	sort.SliceStable(sorted, func(i, j int) bool { return sorted[i].GetPath() < sorted[j].GetPath() })
	byPath := make(map[string]bool, len(sorted))
	for _, q := range sorted {
		byPath[q.GetPath()] = true
	}
	parentOf := func(p string) string {
		// The nearest listed ancestor; "" when none is listed.
		for {
			i := strings.LastIndexByte(p, '/')
			if i < 0 {
				return ""
			}
			p = p[:i]
			if byPath[p] {
				return p
			}
		}
	}
	children := make(map[string][]*meridianv1.Queue)
	for _, q := range sorted {
		par := parentOf(q.GetPath())
		children[par] = append(children[par], q)
	}
	t := newTable(a.env.Stdout, "QUEUE", "WEIGHT", "FAIRSHARE", "PENDING", "RUNNING", "CLASS", "NOMINAL", "BORROW LIMIT", "LEND LIMIT", "USED", "BORROWED", "LENT")
	var walk func(parent, indent string)
	walk = func(parent, indent string) {
		kids := children[parent]
		for i, q := range kids {
			last := i == len(kids)-1
			name := q.GetPath()
			if parent != "" {
				name = strings.TrimPrefix(q.GetPath(), parent+"/")
			}
			branch, childIndent := "", ""
			if parent != "" || indent != "" {
				branch, childIndent = indent+"├─ ", indent+"│  "
				if last {
					branch, childIndent = indent+"└─ ", indent+"   "
				}
			}
			if parent == "" {
				childIndent = ""
			}
			a.queueRows(t, branch+name, q)
			walk(q.GetPath(), childIndent)
		}
	}
	walk("", "")
	if err := t.flush(); err != nil {
		return err
	}
	if err := a.printAccess(sorted); err != nil {
		return err
	}
	_, err := io.WriteString(a.env.Stdout, queueLegend)
	return err
}

// printAccess lists, after the tree, the access list and submit policy
// of each queue that has one, in a compact form:
// "group:ml-research=submit,view; user:alice=manage".
func (a *app) printAccess(queues []*meridianv1.Queue) error {
	var t *table
	for _, q := range queues {
		if len(q.GetAccess()) == 0 && policyText(q.GetSubmitPolicy()) == "" {
			continue
		}
		if t == nil {
			fmt.Fprintln(a.env.Stdout)
			t = newTable(a.env.Stdout, "QUEUE", "ACCESS", "SUBMIT POLICY")
		}
		t.row(q.GetPath(), dash(accessText(q.GetAccess())), dash(policyText(q.GetSubmitPolicy())))
	}
	if t == nil {
		return nil
	}
	return t.flush()
}

// accessText is an access list in compact form, entries sorted by
// subject, verbs sorted: "group:ml=submit,view; user:alice=manage".
func accessText(entries []*meridianv1.AccessEntry) string {
	parts := make([]string, 0, len(entries))
	for _, e := range entries {
		parts = append(parts, accessEntryText(e))
	}
	sort.Strings(parts)
	return strings.Join(parts, "; ")
}

func accessEntryText(e *meridianv1.AccessEntry) string {
	return e.GetSubject() + "=" + verbsText(e.GetVerbs())
}

// verbsText is a sorted, de-duplicated, comma-separated verb list.
func verbsText(verbs []string) string {
	vs := append([]string(nil), verbs...)
	sort.Strings(vs)
	out := vs[:0]
	for i, v := range vs {
		if i == 0 || v != vs[i-1] {
			out = append(out, v)
		}
	}
	return strings.Join(out, ",")
}

// policyText is a submit policy in words, "" when it sets nothing:
// "max priority 100; non-preemptible not allowed".
func policyText(p *meridianv1.SubmitPolicy) string {
	if p == nil {
		return ""
	}
	var parts []string
	if p.MaxPriority != nil {
		parts = append(parts, fmt.Sprintf("max priority %d", p.GetMaxPriority()))
	}
	if p.AllowNonPreemptible != nil {
		if p.GetAllowNonPreemptible() {
			parts = append(parts, "non-preemptible allowed")
		} else {
			parts = append(parts, "non-preemptible not allowed")
		}
	}
	return strings.Join(parts, "; ")
}

// queueLegend explains the queue table's columns and words. FAIRSHARE is
// hub/quota's Fair Tree factor: rank / number of leaves, so the leaf most
// owed GPU time gets 1.
const queueLegend = `
FAIRSHARE: leaf queues only, 0 to 1; higher = used less than its WEIGHT's share lately, so its
  workloads are scheduled sooner (1.000 = first in line). - for a queue with child queues.
CLASS *: every accelerator class the queue does not list on a row of its own.
NOMINAL: GPUs guaranteed to the queue and its children. - = no quota entry for the class:
  a parent then sums its children's, a leaf queue cannot use the class.
BORROW LIMIT: GPUs it may use above NOMINAL while siblings are idle (unlimited = no cap, 0 = none).
LEND LIMIT: GPUs of its idle NOMINAL that siblings may borrow (all = all of it).
USED: GPUs in use now; BORROWED: the part above NOMINAL; LENT: NOMINAL GPUs siblings are using.
PENDING, RUNNING: workloads in the queue and the queues below it.
`

// queueRows adds one row per accelerator class of q (quota or usage).
// The queue's own columns (weight, fairshare, pending, running) are on its
// first row only.
func (a *app) queueRows(t *table, name string, q *meridianv1.Queue) {
	type row struct {
		quota *meridianv1.QueueQuota
		usage *meridianv1.ClassUsage
	}
	rows := map[string]*row{}
	for _, qq := range q.GetQuotas() {
		rows[qq.GetAcceleratorClass()] = &row{quota: qq}
	}
	fair := "-"
	for _, u := range q.GetStatus().GetClasses() {
		if f := u.GetFairshareFactor(); f > 0 && fair == "-" {
			// The hub reports one factor per queue, repeated per class.
			fair = fmt.Sprintf("%.3f", f)
		}
		r, ok := rows[u.GetAcceleratorClass()]
		if !ok {
			if u.GetAcceleratorClass() == anyClass && u.GetUsageMilli() == 0 && u.GetBorrowedMilli() == 0 && u.GetLentMilli() == 0 {
				// Only there to carry the fairshare factor of a queue
				// that uses nothing.
				continue
			}
			r = &row{}
			rows[u.GetAcceleratorClass()] = r
		}
		r.usage = u
	}
	classes := make([]string, 0, len(rows))
	for c := range rows {
		classes = append(classes, c)
	}
	sort.Strings(classes)
	weight := q.GetWeight()
	if weight == 0 {
		weight = 1
	}
	own := []string{name, fmt.Sprint(weight), fair, fmt.Sprint(q.GetStatus().GetPendingWorkloads()), fmt.Sprint(q.GetStatus().GetRunningWorkloads())}
	if len(classes) == 0 {
		t.row(append(own, "-", "-", "-", "-", "0", "0", "0")...)
		return
	}
	for i, c := range classes {
		r := rows[c]
		nominal, borrow, lend := "-", "-", "-"
		if r.quota != nil {
			nominal, borrow, lend = quotaCells(r.quota)
		}
		used, borrowed, lent := "0", "0", "0"
		if r.usage != nil {
			used = gpus(r.usage.GetUsageMilli())
			borrowed = gpus(r.usage.GetBorrowedMilli())
			lent = gpus(r.usage.GetLentMilli())
		}
		cells := []string{"", "", "", "", ""}
		if i == 0 {
			cells = own
		}
		t.row(append(cells, c, nominal, borrow, lend, used, borrowed, lent)...)
	}
}

// anyClass is the class the hub reports usage under for a queue with no
// class of its own (hub/quota.AnyClass).
const anyClass = "*"

// quotaCells formats a quota's nominal, borrow limit and lend limit.
func quotaCells(q *meridianv1.QueueQuota) (nominal, borrow, lend string) {
	nominal, borrow, lend = gpus(q.GetNominalMilliGpus()), "unlimited", "all"
	if q.BorrowLimitMilli != nil {
		borrow = gpus(q.GetBorrowLimitMilli())
	}
	if q.LendLimitMilli != nil {
		lend = gpus(q.GetLendLimitMilli())
	}
	return nominal, borrow, lend
}

func (a *app) queueCommand() *cobra.Command {
	cmd := &cobra.Command{
		Use:   "queue",
		Short: "Create, update, show or delete queues",
		Args:  noArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			return usageErrorf("queue: missing subcommand (create, apply, get or delete)\nUsage: meridianctl queue create|apply -f FILE, or queue get|delete PATH")
		},
	}
	cmd.AddCommand(a.queueWriteCommand(false), a.queueWriteCommand(true), a.queueGetCommand(), a.queueDeleteCommand())
	return cmd
}

func (a *app) queueGetCommand() *cobra.Command {
	return &cobra.Command{
		Use:   "get PATH",
		Short: "Show one queue (its row of the tree, or the full object with -o)",
		Args:  exactArgs("PATH"),
		RunE: func(cmd *cobra.Command, args []string) error {
			var q *meridianv1.Queue
			err := a.call(cmd.Context(), func(ctx context.Context, conn *grpc.ClientConn) error {
				var err error
				q, err = a.queueClient(conn).GetQueue(ctx, &meridianv1.GetQueueRequest{Path: args[0]})
				return err
			})
			if err != nil {
				return a.rpcError(cmd.Context(), err, lookup("queue", args[0], "path").act("view"))
			}
			if a.output != "table" {
				return a.writeMessage(q)
			}
			return a.printQueueTree([]*meridianv1.Queue{q})
		},
	}
}

func (a *app) queueDeleteCommand() *cobra.Command {
	return &cobra.Command{
		Use:   "delete PATH",
		Short: "Delete a queue that has no children and no unfinished workloads",
		Args:  exactArgs("PATH"),
		RunE: func(cmd *cobra.Command, args []string) error {
			err := a.call(cmd.Context(), func(ctx context.Context, conn *grpc.ClientConn) error {
				_, err := a.queueClient(conn).DeleteQueue(ctx, &meridianv1.DeleteQueueRequest{Path: args[0]})
				return err
			})
			if err != nil {
				return a.rpcError(cmd.Context(), err, lookup("queue", args[0], "path").act("delete"))
			}
			if a.output == "table" {
				fmt.Fprintf(a.env.Stdout, "queue %s deleted\n", args[0])
			}
			return nil
		},
	}
}
