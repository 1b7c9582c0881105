// Command terraform-provider-meridian serves Meridian's Terraform provider
// over the plugin protocol. It holds no logic: terraform/provider does.
package main
