# Close the cluster iad-1 to new dispatches for maintenance; its running
# work continues. Set draining = false (or destroy this) to reopen it.
resource "meridian_cluster" "iad1" {
  id           = "iad-1"
  draining     = true
  drain_reason = "NVLink switch firmware upgrade, ticket OPS-1234"
}
