// Package cancelfold stands in for the leader's dispatch loop in tests of
// the API and the CLI, which run the API without a loop: it does with
// each stored cancel request what the loop's housekeeping does
// (hub/dispatch, where the real loop's fold is tested), so that their
// tests see a cancel take effect. It is test support, not product code:
// a hub never runs it.
package cancelfold
