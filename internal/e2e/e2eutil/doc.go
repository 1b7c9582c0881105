// Package e2eutil holds what the end-to-end test packages (slurmhub,
// k8shub) share: the rule that a missing real component skips a test
// unless MERIDIAN_REQUIRE_<PART>=1 makes it a failure, a bounded log
// buffer that keeps the hub's and agents' logs for a failing test, and
// the hub they run: with authentication on, as meridian-hub runs, its
// clients (gRPC, REST and meridianctl) presenting an admin API token.
package e2eutil
