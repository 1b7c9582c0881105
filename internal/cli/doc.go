// Package cli implements meridianctl, the command-line client of the
// Meridian hub. Every command lives here, behind Main, so that tests can run
// the exact code a user runs against an in-process gRPC server and compare
// its output with golden files; cmd/meridianctl is only a thin main.
//
// What it provides:
//
//  1. Main(ctx, args, env) runs one command line and returns its exit code.
//     Env carries stdin, stdout, stderr, the environment and the clock, so
//     nothing reads process globals.
//  2. Commands: submit, get, list, cancel, explain, watch, queues,
//     queue create|apply|get|delete, clusters, cluster drain|resume and
//     version. Each talks gRPC to the hub named by --hub or MERIDIAN_HUB,
//     every call bounded by --timeout (watch streams until interrupted).
//     queue apply changes only what the file writes (update mask, quota
//     classes merged, --prune to remove), guarded by the revision it
//     compared, and prints a per-field diff; --dry-run writes nothing.
//  3. Output as an aligned table (default), JSON or YAML (-o). Tables use
//     human units: GPUs with decimals for fractions (0.5), ages like 3m12s.
//  4. Connecting securely: TLS (--tls, --ca, --cert/--key,
//     --tls-server-name) and a bearer token sent as "authorization: Bearer"
//     per-RPC metadata (--token, --token-file, MERIDIAN_TOKEN, or an exec
//     credential plugin). Settings merge flags > environment > a named
//     context of the configuration file (config.go, strict decoding through
//     componentconfig). whoami, token create|list|revoke and audit use the
//     AdminService identity calls; config view|get-contexts|use-context|
//     set-context|delete-context edit the file (mode 0600).
//  5. Errors that say what to fix, one class per exit code (see the Exit*
//     constants): field violations one per line with their field path,
//     "cannot reach the hub at X" when nothing listens, "workload X not
//     found" for a missing workload.
//
// What it must never do:
//
//   - print a bearer token or an API token secret, in results, errors or
//     -v output (token create prints its new secret once, on stdout), or
//     echo an exec plugin's stdout;
//   - send a token in plaintext to a hub that is not on loopback;
//   - retry a call except once after UNAUTHENTICATED with a renewed token
//     (the hub did nothing, so even a submit is safe);
//   - panic on bad input or on an odd server answer: every problem is an
//     error message and a non-zero exit code;
//   - read os.Args, os.Stdout or the process environment directly (use Env);
//   - hide a failure: a command that did not do what was asked exits
//     non-zero;
//   - change on the hub what the user's file does not mention (queue
//     apply keeps omitted fields and quota classes unless --prune).
package cli
