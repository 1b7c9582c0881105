terraform {
  required_providers {
    meridian = {
      source = "meridian-gpu/meridian"
    }
  }
}

# The endpoint and the token usually come from the environment:
#   export MERIDIAN_ENDPOINT=hub.example.com:7070
#   export MERIDIAN_TOKEN=$(cat ci.token)       # an API token, mrd_<id>_<secret>
#   export MERIDIAN_CA_FILE=/etc/meridian/ca.pem
provider "meridian" {
  endpoint = "hub.example.com:7070"
  ca_file  = "/etc/meridian/ca.pem"
}
