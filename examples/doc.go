// Package examples embeds the example files that users read and copy, so
// that the demo builds its queue tree from queues/acme.yaml and the tests
// (internal/demo's TestExamplesRun) run every example exactly as shipped,
// the component configurations under config/ included.
//
// Each workload example says, in a comment line that starts with
// "# expect:", what it does on a `make demo` hub: the phase it reaches and,
// for a workload left waiting, the pending reason code. The test holds the
// files to that promise. The package holds data only; it must never grow
// code that the files' readers would not see.
package examples
