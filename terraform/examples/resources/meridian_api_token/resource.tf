# The secret lands in the state: keep the state encrypted and private.
resource "meridian_api_token" "vision_ci" {
  description = "CI of the vision team"
  ttl         = "720h"
}

output "vision_ci_token" {
  value     = meridian_api_token.vision_ci.secret
  sensitive = true
}
