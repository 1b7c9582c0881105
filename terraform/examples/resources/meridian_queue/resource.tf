# A tenant with a fixed budget of 32 H100s (it never borrows from other
# tenants), and a team below it that is guaranteed 16, may borrow 8 more
# while its siblings are idle, and always keeps 12 of its own.
resource "meridian_queue" "acme" {
  path        = "acme"
  description = "the acme tenant"
  quotas = {
    "nvidia-h100-80gb" = { nominal = "32", borrow_limit = "0" }
  }
  max_priority          = 1000
  allow_non_preemptible = false
}

resource "meridian_queue" "vision" {
  path   = "acme/vision"
  parent = meridian_queue.acme.path # optional; orders the two
  weight = 2
  quotas = {
    "nvidia-h100-80gb" = { nominal = "16", borrow_limit = "8", lend_limit = "4" }
    "*"                = { nominal = "0", borrow_limit = "0" } # no other class
  }
  # Destroying it cancels its queued and running work first.
  force_destroy         = true
  force_destroy_timeout = "5m"
}
