data "meridian_accelerator_classes" "fleet" {}

# Give a tenant every H100 the fleet has.
resource "meridian_queue" "acme" {
  path = "acme"
  quotas = {
    for c in data.meridian_accelerator_classes.fleet.classes :
    c.name => { nominal = c.total } if c.name == "nvidia-h100-80gb"
  }
}
