// Package e2eutil holds what the end-to-end test packages (slurmhub,
// k8shub) share: the rule that a missing real component skips a test
// unless MERIDIAN_REQUIRE_<PART>=1 makes it a failure, and a bounded log
// buffer that keeps the hub's and agents' logs for a failing test.
package e2eutil
