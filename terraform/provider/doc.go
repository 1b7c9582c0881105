// Package provider is Meridian's Terraform provider, built on
// terraform-plugin-framework: queues with their quotas, queue access
// lists and API tokens as resources, and the queue tree, the fleet and
// its accelerator classes as data sources. It talks to the hub's gRPC API
// (proto/meridian/v1) with an API token as bearer.
//
// What it must never do:
//
//  1. Overwrite an edit it did not see: queue updates and deletes carry the
//     revision Terraform last read, and a mismatch is an error that says
//     to plan again.
//  2. Put a token in a log, an error or a diagnostic. Only the secret of a
//     meridian_api_token resource is kept, in state, marked sensitive.
//  3. Cancel work on destroy unless force_destroy says so.
//
// The acceptance tests (acc_test.go) start a real hub in-process with an
// agent driving a simulated cluster and drive OpenTofu against it.
package provider
