data "meridian_queues" "acme" {
  prefix = "acme"
}

output "acme_queues" {
  value = data.meridian_queues.acme.paths
}
