// Package procs supervises the child processes of a soak run: etcd
// members, NATS nodes, hub replicas and agents, each a separate process as
// in production, so that faults are real process faults.
//
// A Group starts children (Start) and keeps, for each, its command line
// and log file, so that the fault injector can act on it by name:
//
//  1. Kill sends SIGKILL and waits for the exit: a crash.
//  2. Pause and Resume send SIGSTOP and SIGCONT: a process that stops
//     answering (a long GC pause, a frozen VM) and then wakes up.
//  3. Stop sends SIGTERM and, after a grace period, SIGKILL: a clean
//     shutdown.
//  4. Restart starts the same command line again, appending to the same
//     log, after the process exited (or kills it first).
//
// Every child runs in a process group of its own, and every signal goes to
// the whole group, so that nothing a child started outlives it. On Linux a
// child also gets SIGKILL when the supervising process dies (Pdeathsig).
// Close stops every child; callers must call it (a test, in Cleanup).
//
// This package must never decide what to break or when (that is the fault
// schedule's job), never parse a child's output beyond waiting for it to be
// ready, and never leave a child running after Close.
package procs
