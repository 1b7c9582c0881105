resource "meridian_queue_access" "vision" {
  queue = meridian_queue.vision.path
  entry = [
    { subject = "group:acme-vision-leads", verbs = ["manage"] },
    { subject = "group:acme-vision", verbs = ["submit"] },
    { subject = "token:${meridian_api_token.vision_ci.id}", verbs = ["submit"] },
  ]
}
