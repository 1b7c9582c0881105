package slurm

import (
	"bytes"
	"context"
	"crypto/hmac"
	"crypto/sha256"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"sync"
	"time"
)

// backend is one way of talking to Slurm. restBackend and cliBackend speak
// the same JSON (through an Adapter); only how the bytes travel differs.
type backend interface {
	name() string
	nodes(ctx context.Context) ([]NodeInfo, error)
	jobs(ctx context.Context) ([]JobInfo, error)
	submit(ctx context.Context, req SubmitRequest) (int64, error)
	cancel(ctx context.Context, jobID int64) error
}

// Error is a failure reported by Slurm or met on the way to it.
type Error struct {
	// Op is what the connector was doing: "submit", "list jobs", ...
	Op string
	// Backend is "rest" or "cli".
	Backend string
	// HTTPStatus is the REST status code, 0 for the CLI.
	HTTPStatus int
	// Slurm holds the errors Slurm returned, if any.
	Slurm []SlurmError
	// Err is the underlying error (network, exec, decode), if any.
	Err error
}

func (e *Error) Error() string {
	var b strings.Builder
	fmt.Fprintf(&b, "slurm %s %s", e.Backend, e.Op)
	if e.HTTPStatus != 0 {
		fmt.Fprintf(&b, ": HTTP %d", e.HTTPStatus)
	}
	for _, s := range e.Slurm {
		b.WriteString(": ")
		b.WriteString(s.String())
	}
	if e.Err != nil {
		b.WriteString(": ")
		b.WriteString(e.Err.Error())
	}
	return b.String()
}

func (e *Error) Unwrap() error { return e.Err }

// Slurm error numbers (slurm_errno.h) the connector acts on.
const (
	codeInvalidPartition   = 2000 // ESLURM_INVALID_PARTITION_NAME
	codeNodesNotInPart     = 2004 // ESLURM_REQUESTED_NODES_NOT_IN_PARTITION
	codeTooManyCPUs        = 2005 // ESLURM_TOO_MANY_REQUESTED_CPUS
	codeInvalidNodeCount   = 2006 // ESLURM_INVALID_NODE_COUNT
	codeNodeConfigUnavail  = 2014 // ESLURM_REQUESTED_NODE_CONFIG_UNAVAILABLE
	codePartConfigUnavail  = 2015 // ESLURM_REQUESTED_PART_CONFIG_UNAVAILABLE
	codeInvalidJobID       = 2017 // ESLURM_INVALID_JOB_ID
	codeInvalidNodeName    = 2018 // ESLURM_INVALID_NODE_NAME
	codeAlreadyDone        = 2021 // ESLURM_ALREADY_DONE
	codeInvalidFeature     = 2029 // ESLURM_INVALID_FEATURE
	codeInvalidAccount     = 2045 // ESLURM_INVALID_ACCOUNT
	codeInvalidTimeLimit   = 2051 // ESLURM_INVALID_TIME_LIMIT
	codeInvalidQOS         = 2066 // ESLURM_INVALID_QOS
	codeInvalidGres        = 2072 // ESLURM_INVALID_GRES
	codeDuplicateGres      = 2102 // ESLURM_DUPLICATE_GRES
	codeRESTParsingFailure = 9001 // slurmrestd: the request could not be parsed
)

// rejectCodes are errors about the request itself: sending it again cannot
// help, so Launch rejects the dispatch with Slurm's reason.
var rejectCodes = map[int]bool{
	codeInvalidPartition: true, codeNodesNotInPart: true, codeTooManyCPUs: true, codeInvalidNodeCount: true,
	codeNodeConfigUnavail: true, codePartConfigUnavail: true, codeInvalidNodeName: true, codeInvalidFeature: true,
	codeInvalidAccount: true, codeInvalidTimeLimit: true, codeInvalidQOS: true, codeInvalidGres: true,
	codeDuplicateGres: true, codeRESTParsingFailure: true,
}

// rejectMessages catch the same errors from sbatch's text output.
var rejectMessages = []string{
	"requested node configuration is not available",
	"invalid partition",
	"invalid feature specification",
	"invalid generic resource",
	"invalid gres",
	"invalid node name",
	"node count specification invalid",
	"requested time limit is invalid",
	"invalid account",
	"invalid qos",
	"more processors requested than permitted",
	"memory specification can not be satisfied",
	"requested partition configuration not available",
	"invalid --switches",
}

// RejectReason returns Slurm's reason when err says the request itself is
// impossible (bad gres, bad constraint, bad partition), and ok=false for
// faults worth retrying (auth, slurmctld down, network).
func RejectReason(err error) (reason string, ok bool) {
	var e *Error
	if !errors.As(err, &e) {
		return "", false
	}
	for _, s := range e.Slurm {
		if rejectCodes[s.Code] {
			return s.String(), true
		}
		low := strings.ToLower(s.Message + " " + s.Description)
		for _, m := range rejectMessages {
			if strings.Contains(low, m) {
				return s.String(), true
			}
		}
	}
	return "", false
}

// IsJobGone reports whether err says the job is unknown or already done.
func IsJobGone(err error) bool {
	var e *Error
	if !errors.As(err, &e) {
		return false
	}
	for _, s := range e.Slurm {
		if s.Code == codeInvalidJobID || s.Code == codeAlreadyDone {
			return true
		}
		low := strings.ToLower(s.Message + " " + s.Description)
		if strings.Contains(low, "invalid job id") || strings.Contains(low, "already completing or completed") {
			return true
		}
	}
	return false
}

// ---- REST (slurmrestd) ----------------------------------------------------

// tokenSource hands out the X-SLURM-USER-TOKEN: a fixed token, or an HS256
// JWT minted from slurmctld's jwt_key and renewed before it expires.
type tokenSource struct {
	user     string
	fixed    string
	key      []byte
	lifetime time.Duration
	now      func() time.Time

	mu     sync.Mutex
	cached string
	renew  time.Time
}

func (t *tokenSource) token() (string, error) {
	if t.fixed != "" {
		return t.fixed, nil
	}
	if len(t.key) == 0 {
		return "", errors.New("no token and no jwt key configured")
	}
	t.mu.Lock()
	defer t.mu.Unlock()
	now := t.now()
	if t.cached != "" && now.Before(t.renew) {
		return t.cached, nil
	}
	tok, err := MintToken(t.key, t.user, now, t.lifetime)
	if err != nil {
		return "", err
	}
	t.cached, t.renew = tok, now.Add(t.lifetime*4/5)
	return tok, nil
}

// MintToken makes the HS256 JWT slurmctld's auth/jwt accepts: claims sun
// (the Slurm user), iat and exp, signed with the jwt_key file's bytes.
func MintToken(key []byte, user string, now time.Time, lifetime time.Duration) (string, error) {
	if len(key) == 0 {
		return "", errors.New("jwt key: empty")
	}
	if user == "" {
		return "", errors.New("jwt user: empty")
	}
	if lifetime <= 0 {
		return "", errors.New("jwt lifetime: not positive")
	}
	enc := base64.RawURLEncoding
	head := enc.EncodeToString([]byte(`{"alg":"HS256","typ":"JWT"}`))
	claims, err := json.Marshal(map[string]any{"sun": user, "iat": now.Unix(), "exp": now.Add(lifetime).Unix()})
	if err != nil {
		return "", err
	}
	msg := head + "." + enc.EncodeToString(claims)
	mac := hmac.New(sha256.New, key)
	mac.Write([]byte(msg))
	return msg + "." + enc.EncodeToString(mac.Sum(nil)), nil
}

type restBackend struct {
	base string
	hc   *http.Client
	tok  *tokenSource
	ad   Adapter

	// The last job list, kept for conditional listings (see jobs).
	jobsMu      sync.Mutex
	jobsCache   []JobInfo
	jobsSince   int64     // update_time for the next listing
	jobsFullAt  time.Time // when the last unconditional listing was asked for
	notModified int64     // listings answered 304 (for tests)
}

// Conditional job listings. slurmctld answers a listing with update_time=U
// "no change" (slurmrestd: 304, no body) when no job changed since before
// second U-1, and otherwise with every job. The connector asks with U a
// few seconds before its previous listing began, so a quiet cluster costs
// neither slurmctld, slurmrestd nor the connector a full listing. The
// slack covers a slurmctld clock up to jobsSinceSlack behind the agent's;
// an unconditional listing at least every jobsFullEvery bounds how stale
// a larger skew could leave the list.
const (
	jobsSinceSlack = 2 * time.Second
	jobsFullEvery  = 30 * time.Second
)

// errNotModified is a 304 answer to a conditional request.
var errNotModified = errors.New("not modified")

func (r *restBackend) name() string { return "rest" }

func (r *restBackend) do(ctx context.Context, op, method, path string, body []byte) ([]byte, error) {
	tok, err := r.tok.token()
	if err != nil {
		return nil, &Error{Op: op, Backend: "rest", Err: err}
	}
	var rd io.Reader
	if body != nil {
		rd = bytes.NewReader(body)
	}
	req, err := http.NewRequestWithContext(ctx, method, r.base+r.ad.PathPrefix()+path, rd)
	if err != nil {
		return nil, &Error{Op: op, Backend: "rest", Err: err}
	}
	req.Header.Set("X-SLURM-USER-NAME", r.tok.user)
	req.Header.Set("X-SLURM-USER-TOKEN", tok)
	req.Header.Set("Accept", "application/json")
	if body != nil {
		req.Header.Set("Content-Type", "application/json")
	}
	resp, err := r.hc.Do(req)
	if err != nil {
		return nil, &Error{Op: op, Backend: "rest", Err: err}
	}
	defer resp.Body.Close()
	if resp.StatusCode == http.StatusNotModified {
		return nil, errNotModified
	}
	// Sized from Content-Length: a job list is megabytes, and growing a
	// buffer to it by doubling copies it several times.
	var buf bytes.Buffer
	if n := resp.ContentLength; n > 0 && n < maxResponse {
		buf.Grow(int(n) + 1)
	}
	_, err = buf.ReadFrom(io.LimitReader(resp.Body, maxResponse))
	data := buf.Bytes()
	if err != nil {
		return nil, &Error{Op: op, Backend: "rest", HTTPStatus: resp.StatusCode, Err: err}
	}
	if resp.StatusCode/100 != 2 {
		e := &Error{Op: op, Backend: "rest", HTTPStatus: resp.StatusCode}
		if errs, derr := r.ad.DecodeErrors(data); derr == nil && len(errs) > 0 {
			e.Slurm = errs
		} else {
			e.Err = fmt.Errorf("response: %.200q", data)
		}
		if resp.StatusCode == http.StatusUnauthorized || resp.StatusCode == http.StatusForbidden {
			e.Err = errors.Join(e.Err, ErrAuth)
		}
		return data, e
	}
	return data, nil
}

// maxResponse bounds a slurmrestd answer read into memory.
const maxResponse = 256 << 20

// ErrAuth marks an authentication failure (a missing or rejected token).
var ErrAuth = errors.New("slurm authentication failed")

func (r *restBackend) nodes(ctx context.Context) ([]NodeInfo, error) {
	data, err := r.do(ctx, "list nodes", http.MethodGet, "/nodes", nil)
	if err != nil {
		return nil, err
	}
	nodes, errs, err := r.ad.DecodeNodes(data)
	if err != nil || len(errs) > 0 {
		return nil, &Error{Op: "list nodes", Backend: "rest", Slurm: errs, Err: err}
	}
	return nodes, nil
}

// jobs lists every job, conditionally when it has a recent list: a 304
// answer returns that list again (shared; callers only read it).
func (r *restBackend) jobs(ctx context.Context) ([]JobInfo, error) {
	r.jobsMu.Lock()
	defer r.jobsMu.Unlock()
	// The wall clock, not Config.Now: update_time is compared with
	// slurmctld's clock.
	start := time.Now()
	path := "/jobs"
	full := r.jobsCache == nil || start.Sub(r.jobsFullAt) >= jobsFullEvery
	if !full {
		path += "?update_time=" + strconv.FormatInt(r.jobsSince, 10)
	}
	data, err := r.do(ctx, "list jobs", http.MethodGet, path, nil)
	if errors.Is(err, errNotModified) && !full {
		r.notModified++
		return r.jobsCache, nil
	}
	if err != nil {
		return nil, err
	}
	jobs, errs, err := r.ad.DecodeJobs(data)
	if err != nil || len(errs) > 0 {
		return nil, &Error{Op: "list jobs", Backend: "rest", Slurm: errs, Err: err}
	}
	if jobs == nil {
		jobs = []JobInfo{} // an empty list is still a list to reuse
	}
	r.jobsCache, r.jobsSince = jobs, start.Add(-jobsSinceSlack).Unix()
	if full {
		r.jobsFullAt = start
	}
	return jobs, nil
}

func (r *restBackend) submit(ctx context.Context, req SubmitRequest) (int64, error) {
	body, err := r.ad.EncodeSubmit(req)
	if err != nil {
		return 0, &Error{Op: "submit", Backend: "rest", Err: err}
	}
	data, err := r.do(ctx, "submit", http.MethodPost, "/job/submit", body)
	if err != nil {
		return 0, err
	}
	id, errs, err := r.ad.DecodeSubmit(data)
	if err != nil || len(errs) > 0 || id == 0 {
		if err == nil && len(errs) == 0 {
			err = errors.New("job_id: missing from the response")
		}
		return 0, &Error{Op: "submit", Backend: "rest", Slurm: errs, Err: err}
	}
	return id, nil
}

func (r *restBackend) cancel(ctx context.Context, jobID int64) error {
	_, err := r.do(ctx, "cancel", http.MethodDelete, "/job/"+strconv.FormatInt(jobID, 10), nil)
	return err
}

// ---- CLI (sbatch, scancel, sinfo/squeue --json, scontrol) ------------------

type cliBackend struct {
	binDir string
	env    []string // extra environment, e.g. SLURM_CONF=...
	ad     Adapter
}

func (c *cliBackend) name() string { return "cli" }

func (c *cliBackend) bin(name string) string {
	if c.binDir != "" {
		return filepath.Join(c.binDir, name)
	}
	return name
}

// available reports whether the Slurm client commands can be found.
func (c *cliBackend) available() bool {
	_, err := exec.LookPath(c.bin("sbatch"))
	return err == nil
}

func (c *cliBackend) run(ctx context.Context, op string, env []string, stdin string, name string, args ...string) ([]byte, error) {
	cmd := exec.CommandContext(ctx, c.bin(name), args...)
	cmd.Env = append(os.Environ(), c.env...)
	if env != nil {
		cmd.Env = append(c.env[:len(c.env):len(c.env)], env...)
	}
	if stdin != "" {
		cmd.Stdin = strings.NewReader(stdin)
	}
	var out, errb bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errb
	if err := cmd.Run(); err != nil {
		msg := strings.TrimSpace(errb.String())
		e := &Error{Op: op, Backend: "cli", Err: fmt.Errorf("%s: %w", name, err)}
		if msg != "" {
			e.Slurm = []SlurmError{{Message: cliMessage(msg)}}
		}
		return out.Bytes(), e
	}
	return out.Bytes(), nil
}

// cliMessage keeps the useful part of "sbatch: error: Batch job submission
// failed: Requested node configuration is not available".
func cliMessage(s string) string {
	lines := strings.Split(s, "\n")
	last := strings.TrimSpace(lines[len(lines)-1])
	for _, p := range []string{"Batch job submission failed: ", "error: "} {
		if i := strings.LastIndex(last, p); i >= 0 {
			return last[i+len(p):]
		}
	}
	return last
}

func (c *cliBackend) nodes(ctx context.Context) ([]NodeInfo, error) {
	data, err := c.run(ctx, "list nodes", nil, "", "sinfo", "--json")
	if err != nil {
		return nil, err
	}
	nodes, errs, err := c.ad.DecodeNodes(data)
	if err != nil || len(errs) > 0 {
		return nil, &Error{Op: "list nodes", Backend: "cli", Slurm: errs, Err: err}
	}
	return nodes, nil
}

func (c *cliBackend) jobs(ctx context.Context) ([]JobInfo, error) {
	data, err := c.run(ctx, "list jobs", nil, "", "squeue", "--json")
	if err != nil {
		return nil, err
	}
	jobs, errs, err := c.ad.DecodeJobs(data)
	if err != nil || len(errs) > 0 {
		return nil, &Error{Op: "list jobs", Backend: "cli", Slurm: errs, Err: err}
	}
	return jobs, nil
}

// SbatchArgs renders req as sbatch options. The job's environment is passed
// as sbatch's own environment with --export=ALL, so values need no quoting.
func SbatchArgs(req SubmitRequest) []string {
	args := []string{"--parsable", "--no-requeue", "--export=ALL", "--job-name=" + req.Name, "--comment=" + req.Comment}
	add := func(flag, v string) {
		if v != "" {
			args = append(args, flag+"="+v)
		}
	}
	addN := func(flag string, v int64) {
		if v > 0 {
			args = append(args, flag+"="+strconv.FormatInt(v, 10))
		}
	}
	add("--partition", req.Partition)
	addN("--nodes", int64(req.Nodes))
	addN("--ntasks-per-node", int64(req.TasksPerNode))
	addN("--cpus-per-task", int64(req.CPUsPerTask))
	if req.MemoryPerNodeMiB > 0 {
		args = append(args, "--mem="+strconv.FormatInt(req.MemoryPerNodeMiB, 10)+"M")
	}
	add("--gres", req.Gres)
	add("--constraint", req.Constraints)
	add("--chdir", req.Workdir)
	addN("--time", minutes(req.TimeLimit))
	addN("--switches", int64(req.Switches))
	if len(req.NodeList) > 0 {
		args = append(args, "--nodelist="+strings.Join(req.NodeList, ","))
	}
	add("--account", req.Account)
	add("--qos", req.QOS)
	return args
}

func (c *cliBackend) submit(ctx context.Context, req SubmitRequest) (int64, error) {
	if req.Script == "" {
		return 0, &Error{Op: "submit", Backend: "cli", Err: errors.New("script: empty")}
	}
	keys := make([]string, 0, len(req.Env))
	for k := range req.Env {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	env := make([]string, 0, len(keys))
	for _, k := range keys {
		env = append(env, k+"="+req.Env[k])
	}
	out, err := c.run(ctx, "submit", env, req.Script, "sbatch", SbatchArgs(req)...)
	if err != nil {
		return 0, err
	}
	// --parsable prints "jobid" or "jobid;cluster".
	s := strings.TrimSpace(string(out))
	s, _, _ = strings.Cut(s, ";")
	id, perr := strconv.ParseInt(s, 10, 64)
	if perr != nil || id <= 0 {
		return 0, &Error{Op: "submit", Backend: "cli", Err: fmt.Errorf("sbatch printed %q, not a job id", s)}
	}
	return id, nil
}

func (c *cliBackend) cancel(ctx context.Context, jobID int64) error {
	_, err := c.run(ctx, "cancel", nil, "", "scancel", strconv.FormatInt(jobID, 10))
	return err
}

// topology runs "scontrol show topology" and parses it (see ParseTopology).
func (c *cliBackend) topology(ctx context.Context) (map[string]string, error) {
	out, err := c.run(ctx, "show topology", nil, "", "scontrol", "show", "topology")
	if err != nil {
		return nil, err
	}
	return ParseTopology(string(out))
}

// ParseTopology reads "scontrol show topology" text and maps every node to
// its leaf switch: the level-0 switch that lists it. Switches above level 0
// (the spine) are ignored; a node under no leaf is absent from the map.
func ParseTopology(text string) (map[string]string, error) {
	leaf := map[string]string{}
	for ln, line := range strings.Split(text, "\n") {
		line = strings.TrimSpace(line)
		if line == "" {
			continue
		}
		fields := map[string]string{}
		for _, f := range strings.Fields(line) {
			k, v, ok := strings.Cut(f, "=")
			if !ok {
				continue
			}
			fields[k] = v
		}
		name := fields["SwitchName"]
		if name == "" {
			continue
		}
		if lvl := fields["Level"]; lvl != "" && lvl != "0" {
			continue
		}
		nodes, err := ExpandHostlist(fields["Nodes"])
		if err != nil {
			return nil, fmt.Errorf("topology line %d (switch %s): %w", ln+1, name, err)
		}
		for _, n := range nodes {
			if _, dup := leaf[n]; !dup {
				leaf[n] = name
			}
		}
	}
	return leaf, nil
}
