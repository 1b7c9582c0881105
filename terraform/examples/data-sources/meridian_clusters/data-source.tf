data "meridian_clusters" "ready" {
  state = "READY"
}

output "free_h100_by_cluster" {
  value = { for c in data.meridian_clusters.ready.clusters : c.id => try(c.capacity["nvidia-h100-80gb"].free, "0") }
}
