package main

import (
	"fmt"
	"io"
	"path/filepath"
	"runtime"
	"strings"
	"sync"
	"time"

	"github.com/meridian-gpu/meridian/hub/sim/openb"
)

// traceInput is what the OpenB subcommands read: the node list, the pod
// lists --pods names (in order, stress variants derived), and the paper's
// published curves when the shared data has them (nil otherwise).
type traceInput struct {
	nodes     []openb.NodeSpec
	lists     []string
	pods      map[string][]openb.Pod
	published *openb.Published
}

// loadTrace reads --nodes (default: the shared data's node list) and
// --pods: variant names, CSV paths or LIST+kindLEVEL[@seed] stress
// variants. Errors name the flag.
func loadTrace(nodesFlag, podsFlag string) (*traceInput, error) {
	dataDir, dataErr := openb.DataDir()
	inData := func(flagName, file string) (string, error) {
		if dataErr != nil {
			return "", fmt.Errorf("%s: %w", flagName, dataErr)
		}
		return filepath.Join(dataDir, openb.TraceSubdir, file), nil
	}
	var err error
	nodesPath := nodesFlag
	if nodesPath == "" {
		if nodesPath, err = inData("--nodes", openb.NodesFile); err != nil {
			return nil, err
		}
	}
	in := &traceInput{pods: map[string][]openb.Pod{}}
	if in.nodes, err = openb.LoadNodesFile(nodesPath); err != nil {
		return nil, fmt.Errorf("--nodes: %w", err)
	}
	for _, v := range splitList(podsFlag) {
		base, kind, level, stressSeed, stressed, err := openb.ParseStress(v)
		if err != nil {
			return nil, fmt.Errorf("--pods: %w", err)
		}
		path := base
		if !strings.ContainsAny(base, `/\\`) && !strings.HasSuffix(base, ".csv") {
			if path, err = inData("--pods", fmt.Sprintf(openb.PodsFilePattern, base)); err != nil {
				return nil, err
			}
		}
		pods, err := openb.LoadPodsFile(path)
		if err != nil {
			return nil, fmt.Errorf("--pods: %w", err)
		}
		name := openb.PodListName(path)
		if stressed {
			if pods, err = openb.Stress(pods, in.nodes, kind, level, stressSeed); err != nil {
				return nil, fmt.Errorf("--pods: %w", err)
			}
			name = v
		}
		in.lists = append(in.lists, name)
		in.pods[name] = pods
	}
	if dataErr == nil {
		if p, err := openb.LoadPublishedFile(filepath.Join(dataDir, openb.TraceSubdir, openb.PublishedFile)); err == nil {
			in.published = p
		}
	}
	return in, nil
}

// runParallel runs run on every job with up to parallel workers (bounded
// by GOMAXPROCS) and, for each finished job whose run returned a non-empty
// line, prints "[k/n] <line>, elapsed <t>" to stderr. Results and errors
// stay in the jobs.
func runParallel[J any](jobs []J, parallel int, stderr io.Writer, run func(J) string) {
	workers := max(1, min(parallel, runtime.GOMAXPROCS(0), len(jobs)))
	start := time.Now()
	var (
		mu   sync.Mutex
		done int
		wg   sync.WaitGroup
		next = make(chan J)
	)
	for w := 0; w < workers; w++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for j := range next {
				line := run(j)
				mu.Lock()
				done++
				if line != "" {
					fmt.Fprintf(stderr, "[%d/%d] %s, elapsed %s\n", done, len(jobs), line, time.Since(start).Round(time.Millisecond))
				}
				mu.Unlock()
			}
		}()
	}
	for _, j := range jobs {
		next <- j
	}
	close(next)
	wg.Wait()
}
