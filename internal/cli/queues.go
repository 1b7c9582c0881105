package cli

import (
	"bytes"
	"context"
	"fmt"
	"regexp"
	"sort"
	"strings"

	"github.com/spf13/cobra"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/encoding/protojson"
	"google.golang.org/protobuf/proto"
	"sigs.k8s.io/yaml"

	"github.com/meridian-gpu/meridian/hub/api/validation"
	meridianv1 "github.com/meridian-gpu/meridian/proto/meridian/v1"
)

// DecodeQueues parses one or more queues from a YAML or JSON document.
// Several queues are written as YAML documents separated by `---` lines,
// parents before children. Field names may be proto names (`nominal_milli_gpus`)
// or lowerCamelCase; unknown fields are errors. It does not validate.
func DecodeQueues(data []byte) ([]*meridianv1.Queue, error) {
	if len(data) > validation.MaxDocumentBytes {
		return nil, fmt.Errorf("document is %d bytes; the limit is %d (1 MiB)", len(data), validation.MaxDocumentBytes)
	}
	var out []*meridianv1.Queue
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
		out = append(out, q)
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
		Short: "Show the queue tree: quota, usage, borrowed and fairshare per accelerator class",
		Args:  noArgs,
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
	t := newTable(a.env.Stdout, "QUEUE", "WEIGHT", "CLASS", "QUOTA", "BORROW LIMIT", "LEND LIMIT", "USAGE", "BORROWED", "LENT", "FAIRSHARE", "PENDING", "RUNNING")
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
	return t.flush()
}

// queueRows adds one row per accelerator class of q (quota or usage).
func (a *app) queueRows(t *table, name string, q *meridianv1.Queue) {
	type row struct {
		quota *meridianv1.QueueQuota
		usage *meridianv1.ClassUsage
	}
	rows := map[string]*row{}
	for _, qq := range q.GetQuotas() {
		rows[qq.GetAcceleratorClass()] = &row{quota: qq}
	}
	for _, u := range q.GetStatus().GetClasses() {
		r, ok := rows[u.GetAcceleratorClass()]
		if !ok {
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
	pending := fmt.Sprint(q.GetStatus().GetPendingWorkloads())
	running := fmt.Sprint(q.GetStatus().GetRunningWorkloads())
	if len(classes) == 0 {
		t.row(name, fmt.Sprint(weight), "-", "-", "-", "-", "-", "-", "-", "-", pending, running)
		return
	}
	for i, c := range classes {
		r := rows[c]
		quota, borrow, lend := "-", "-", "-"
		if r.quota != nil {
			quota = gpus(r.quota.GetNominalMilliGpus())
			borrow, lend = "unlimited", "all"
			if r.quota.BorrowLimitMilli != nil {
				borrow = gpus(r.quota.GetBorrowLimitMilli())
			}
			if r.quota.LendLimitMilli != nil {
				lend = gpus(r.quota.GetLendLimitMilli())
			}
		}
		usage, borrowed, lent, fair := "0", "0", "0", "-"
		if r.usage != nil {
			usage = gpus(r.usage.GetUsageMilli())
			borrowed = gpus(r.usage.GetBorrowedMilli())
			lent = gpus(r.usage.GetLentMilli())
			fair = fmt.Sprintf("%.3f", r.usage.GetFairshareFactor())
		}
		if i == 0 {
			t.row(name, fmt.Sprint(weight), c, quota, borrow, lend, usage, borrowed, lent, fair, pending, running)
		} else {
			t.row("", "", c, quota, borrow, lend, usage, borrowed, lent, fair, "", "")
		}
	}
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
				return a.rpcError(cmd.Context(), err, object{kind: "queue", id: args[0]})
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
				return a.rpcError(cmd.Context(), err, object{kind: "queue", id: args[0]})
			}
			if a.output == "table" {
				fmt.Fprintf(a.env.Stdout, "queue %s deleted\n", args[0])
			}
			return nil
		},
	}
}

// queueWriteCommand builds `queue create` (apply=false) or `queue apply`
// (create missing queues, update existing ones).
func (a *app) queueWriteCommand(apply bool) *cobra.Command {
	var file string
	use, short := "create -f FILE", "Create queues (parents before children); fails if one exists"
	if apply {
		use, short = "apply -f FILE", "Create missing queues and update existing ones to match the file"
	}
	cmd := &cobra.Command{
		Use:   use,
		Short: short,
		Args:  noArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			data, err := a.readInput(file)
			if err != nil {
				return err
			}
			queues, err := DecodeQueues(data)
			if err != nil {
				return invalidErrorf("%s: decode queues: %v", displayName(file), err)
			}
			for i, q := range queues {
				if err := validation.ValidateQueue(q); err != nil {
					head := fmt.Sprintf("invalid queue %q in %s", q.GetPath(), displayName(file))
					if len(queues) > 1 {
						head = fmt.Sprintf("invalid queue %q (document %d) in %s", q.GetPath(), i+1, displayName(file))
					}
					if text, ok := violationsText(head, err); ok {
						return invalidErrorf("%s", text)
					}
					return invalidErrorf("%s: %v", head, err)
				}
			}
			var results []*meridianv1.Queue
			for _, q := range queues {
				got, verb, err := a.writeQueue(cmd.Context(), q, apply)
				if err != nil {
					return err
				}
				results = append(results, got)
				if a.output == "table" {
					fmt.Fprintf(a.env.Stdout, "queue %s %s\n", q.GetPath(), verb)
				}
			}
			if a.output != "table" {
				return a.writeMessage(&meridianv1.ListQueuesResponse{Queues: results})
			}
			return nil
		},
	}
	cmd.Flags().StringVarP(&file, "filename", "f", "", "queue file, YAML or JSON (- for stdin); several queues as YAML documents separated by ---")
	return cmd
}

// writeQueue creates q, or with apply updates it when it exists. It
// returns the stored queue and what happened: created, configured or
// unchanged.
func (a *app) writeQueue(ctx context.Context, q *meridianv1.Queue, apply bool) (*meridianv1.Queue, string, error) {
	about := object{kind: "queue", id: q.GetPath()}
	var existing *meridianv1.Queue
	if apply {
		err := a.call(ctx, func(ctx context.Context, conn *grpc.ClientConn) error {
			var err error
			existing, err = a.queueClient(conn).GetQueue(ctx, &meridianv1.GetQueueRequest{Path: q.GetPath()})
			return err
		})
		if status.Code(err) == codes.NotFound {
			existing = nil
		} else if err != nil {
			return nil, "", a.rpcError(ctx, err, about)
		}
	}
	if existing == nil {
		var got *meridianv1.Queue
		err := a.call(ctx, func(ctx context.Context, conn *grpc.ClientConn) error {
			var err error
			got, err = a.queueClient(conn).CreateQueue(ctx, &meridianv1.CreateQueueRequest{Queue: q})
			return err
		})
		if err != nil {
			if status.Code(err) == codes.AlreadyExists && !apply {
				return nil, "", &exitError{code: ExitConflict, msg: fmt.Sprintf("queue %s already exists (use 'meridianctl queue apply' to update it)", q.GetPath()), err: err}
			}
			return nil, "", a.rpcError(ctx, err, about)
		}
		return got, "created", nil
	}
	if sameQueueSpec(existing, q) {
		return existing, "unchanged", nil
	}
	var got *meridianv1.Queue
	err := a.call(ctx, func(ctx context.Context, conn *grpc.ClientConn) error {
		var err error
		got, err = a.queueClient(conn).UpdateQueue(ctx, &meridianv1.UpdateQueueRequest{Queue: q})
		return err
	})
	if err != nil {
		return nil, "", a.rpcError(ctx, err, about)
	}
	return got, "configured", nil
}

// sameQueueSpec compares the user-settable fields of two queues.
func sameQueueSpec(a, b *meridianv1.Queue) bool {
	spec := func(q *meridianv1.Queue) *meridianv1.Queue {
		w := q.GetWeight()
		if w == 0 {
			w = 1
		}
		return &meridianv1.Queue{Path: q.GetPath(), Weight: w, Quotas: q.GetQuotas(), Description: q.GetDescription()}
	}
	return proto.Equal(spec(a), spec(b))
}
