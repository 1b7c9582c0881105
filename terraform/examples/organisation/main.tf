# A three-team organisation as code: the tenant initech with a fixed
# budget, three teams that borrow from each other within it, one project
# queue, access lists for the teams' groups, and a CI token for the vision
# team. `make tf-demo` applies it to the demo hub (make demo-forever),
# whose fleet has the classes used here; see terraform/README.md.
terraform {
  required_providers {
    meridian = {
      source = "meridian-gpu/meridian"
    }
  }
}

# Endpoint and token come from MERIDIAN_ENDPOINT and MERIDIAN_TOKEN.
provider "meridian" {}

locals {
  h100 = "nvidia-h100-80gb"
  a100 = "nvidia-a100-40gb"
}

# The tenant: 32 H100s and 16 A100s, and no borrowing from other tenants.
resource "meridian_queue" "initech" {
  path        = "initech"
  description = "initech, managed by Terraform"
  quotas = {
    (local.h100) = { nominal = "32", borrow_limit = "0" }
    (local.a100) = { nominal = "16", borrow_limit = "0" }
  }
  max_priority = 1000
}

# Vision is guaranteed 16 H100s, may borrow 8 more from idle siblings, and
# always keeps 12 for itself (lends at most 4).
resource "meridian_queue" "vision" {
  path        = "initech/vision"
  parent      = meridian_queue.initech.path
  weight      = 3
  description = "computer vision"
  quotas = {
    (local.h100) = { nominal = "16", borrow_limit = "8", lend_limit = "4" }
  }
}

# NLP is guaranteed 12 H100s and 8 A100s and may double its H100s by
# borrowing.
resource "meridian_queue" "nlp" {
  path        = "initech/nlp"
  parent      = meridian_queue.initech.path
  weight      = 2
  description = "language models"
  quotas = {
    (local.h100) = { nominal = "12", borrow_limit = "12" }
    (local.a100) = { nominal = "8", borrow_limit = "4" }
  }
}

# Platform has a small hard cap: what it has, it never exceeds; and its
# work must always be preemptible.
resource "meridian_queue" "platform" {
  path                  = "initech/platform"
  parent                = meridian_queue.initech.path
  weight                = 1
  description           = "platform team: evaluation and CI"
  allow_non_preemptible = false
  quotas = {
    (local.h100) = { nominal = "4", borrow_limit = "0" }
    (local.a100) = { nominal = "8", borrow_limit = "0" }
  }
}

# A project queue below vision: 8 of vision's H100s, and up to 4 more.
resource "meridian_queue" "vision_train" {
  path   = "initech/vision/train"
  parent = meridian_queue.vision.path
  quotas = {
    (local.h100) = { nominal = "8", borrow_limit = "4" }
  }
  max_priority = 100
}

resource "meridian_api_token" "vision_ci" {
  description = "CI of the initech vision team (Terraform)"
  ttl         = "720h"
}

resource "meridian_queue_access" "initech" {
  queue = meridian_queue.initech.path
  entry = [
    { subject = "group:initech-leads", verbs = ["manage"] },
    { subject = "group:initech", verbs = ["view"] },
  ]
}

resource "meridian_queue_access" "vision" {
  queue = meridian_queue.vision.path
  entry = [
    { subject = "group:initech-vision", verbs = ["submit", "cancel"] },
    { subject = "token:${meridian_api_token.vision_ci.id}", verbs = ["submit"] },
  ]
}

resource "meridian_queue_access" "nlp" {
  queue = meridian_queue.nlp.path
  entry = [
    { subject = "group:initech-nlp", verbs = ["submit", "cancel"] },
  ]
}

resource "meridian_queue_access" "platform" {
  queue = meridian_queue.platform.path
  entry = [
    { subject = "group:initech-platform", verbs = ["submit", "cancel", "update"] },
  ]
}

data "meridian_accelerator_classes" "fleet" {}

output "fleet_classes" {
  value = data.meridian_accelerator_classes.fleet.names
}

output "vision_ci_token_id" {
  value = meridian_api_token.vision_ci.id
}
