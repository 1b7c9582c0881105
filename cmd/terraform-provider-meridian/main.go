package main

import (
	"context"
	"flag"
	"log"

	"github.com/hashicorp/terraform-plugin-framework/providerserver"

	"github.com/meridian-gpu/meridian/internal/cli"
	"github.com/meridian-gpu/meridian/terraform/provider"
)

// Address is the provider's source address in the registry.
const Address = "registry.terraform.io/meridian-gpu/meridian"

func main() {
	debug := flag.Bool("debug", false, "run with support for debuggers such as delve")
	flag.Parse()
	err := providerserver.Serve(context.Background(), provider.New(cli.Version), providerserver.ServeOpts{
		Address: Address,
		Debug:   *debug,
	})
	if err != nil {
		log.Fatal(err)
	}
}
