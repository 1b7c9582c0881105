// Command docgen renders the Terraform provider's registry docs
// (terraform/docs) with tfplugindocs, and with -check verifies that the
// checked-in docs are what it would render (make verify).
//
// tfplugindocs normally asks the Terraform CLI for the provider's schema
// (`terraform providers schema -json`), which would need Terraform or
// OpenTofu installed, and make verify runs where neither is. So docgen
// writes that JSON itself, straight from the provider's plugin server
// (GetProviderSchema, converted to the CLI's format), and passes it with
// --providers-schema. tfplugindocs runs from its own module,
// tools/tfplugindocs, through `go tool`, so its dependencies stay out of
// the main go.mod.
//
// It must never touch anything outside terraform/docs (and a temporary
// directory), and never needs a network beyond the Go module proxy.
package main
